"""Every method of the client against a real server."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Dict, List

import pytest

import writ_client
from writ_client import Session, Target, Task, shared, tree

from conftest import Server, holds_of, wait_until, waiters_of


def test_connect_reads_the_discovery_file(server: Server) -> None:
    with Session.connect(root=server.root) as s:
        assert s.url.rstrip("/") == server.url.rstrip("/")
        assert s.token == server.token
        info = s.info()
        assert info, "session.info returned nothing"


def test_connect_searches_the_current_folder_and_its_parents(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = server.root / "a" / "b"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    with Session.connect() as s:
        assert s.token == server.token


def test_connect_without_a_server_says_how_to_start_one(tmp_path: Path) -> None:
    with pytest.raises(writ_client.Unavailable) as err:
        Session.connect(root=tmp_path)
    assert "writ serve" in str(err.value)


def test_actor_kinds_and_tokens(session: Session, server: Server) -> None:
    lead = session.actor("lead")
    fenced = session.actor("parser", fenced=["src/parser/"])
    reader = session.actor("reviewer", read_only=True)
    for actor in (lead, fenced, reader):
        assert isinstance(actor.token, str) and actor.token
        assert actor.token != server.token
        assert actor.lease is not None
    assert len({lead.token, fenced.token, reader.token}) == 3
    names = {a["name"] for a in session.dump()["actors"]}
    assert {"lead", "parser", "reviewer"} <= names
    # The grant fence is a hold of the fenced actor.
    assert [h["kind"] for h in holds_of(session, "parser")] == ["fence"]
    # Root actors each get a lease the session keeps alive.
    assert len(session.leases) == 3


def test_child_shares_its_parents_lease(session: Session) -> None:
    lead = session.actor("lead")
    kid = lead.child("kid", fenced=["src/"])
    assert kid.lease == lead.lease or kid.lease is None
    grandkid = kid.child("grandkid", fenced=["src/a.py"])
    reader = lead.child("reader", read_only=True)
    names = [a["name"] for a in session.dump()["actors"]]
    assert {"kid", "grandkid", "reader"} <= set(names)
    grandkid.drop()
    assert "grandkid" not in [a["name"] for a in session.dump()["actors"]]
    # Dropping twice is harmless.
    grandkid.drop()
    with reader:
        pass
    assert "reader" not in [a["name"] for a in session.dump()["actors"]]


def test_child_wait_waits_for_its_fence(session: Session) -> None:
    lead = session.actor("lead")
    blocker = session.actor("blocker", fenced=["src/"])
    result: Dict[str, Any] = {}

    def make() -> None:
        try:
            result["kid"] = lead.child("kid", fenced=["src/a.py"], wait=True, timeout=20)
        except writ_client.WritError as err:
            result["err"] = err

    t = threading.Thread(target=make)
    t.start()
    wait_until("the child_wait to queue", lambda: waiters_of(session, "lead"))
    blocker.drop()
    t.join(20)
    assert "err" not in result, result.get("err")
    assert result["kid"].name == "kid"


def test_try_admit_and_release(session: Session) -> None:
    a = session.actor("a")
    b = session.actor("b")
    hold = a.try_admit(["x.txt", "docs/"], label="edit x")
    held = holds_of(session, "a")
    assert len(held) == 1 and held[0]["label"] == "edit x"
    assert {p["tree"] for p in held[0]["paths"]} == {False, True}
    with pytest.raises(writ_client.Busy):
        b.try_admit("docs/readme.md")
    hold.release()
    hold.release()  # idempotent
    assert hold.released
    b.try_admit("docs/readme.md").release()
    assert holds_of(session, "a") == []


def test_holds_are_context_managers(session: Session) -> None:
    a = session.actor("a")
    with a.try_admit(["x.txt"]) as hold:
        assert holds_of(session, "a")
        assert hold.id is not None
    assert holds_of(session, "a") == []
    with a.admit(["x.txt"], timeout=5):
        assert holds_of(session, "a")
    assert holds_of(session, "a") == []
    with a.fence(["src/"]) as fence:
        assert [h["kind"] for h in holds_of(session, "a")] == ["fence"]
        assert isinstance(fence, writ_client.Fence)
    assert holds_of(session, "a") == []


def test_admit_waits_until_the_path_is_free(session: Session) -> None:
    a = session.actor("a")
    b = session.actor("b")
    first = a.try_admit(["x.txt"])
    got: List[writ_client.Hold] = []
    t = threading.Thread(target=lambda: got.append(b.admit(["x.txt"], timeout=20)))
    t.start()
    wait_until("b to wait", lambda: waiters_of(session, "b"))
    assert not got
    first.release()
    t.join(20)
    assert got and holds_of(session, "b")
    got[0].release()


def test_shared_targets_pass_through_fences(session: Session) -> None:
    owner = session.actor("owner", fenced=["src/"])
    reader = session.actor("reader")
    with reader.try_admit([shared("src/a.py")]):
        pass
    with reader.try_admit([Target("src", tree=True, shared=True)]):
        pass
    with pytest.raises(writ_client.Busy):
        reader.try_admit([tree("src")])
    owner.drop()


def test_priority_is_accepted(session: Session) -> None:
    a = session.actor("a")
    with a.try_admit(["p.txt"], priority=5, label="urgent"):
        assert holds_of(session, "a")[0]["label"] == "urgent"


def test_workspace_target(session: Session) -> None:
    shell = session.actor("shell")
    other = session.actor("other")
    with shell.try_admit("*"):
        with pytest.raises(writ_client.Busy):
            other.try_admit(["anything.txt"])


def test_fence_extend_and_narrow(session: Session) -> None:
    a = session.actor("a")
    b = session.actor("b")
    fence = a.fence(["src/"])
    fence.extend(["docs/"])
    with pytest.raises(writ_client.Busy):
        b.try_admit(["docs/x.md"])
    fence.narrow(["src/lib.py"])
    b.try_admit(["docs/x.md"]).release()
    b.try_admit(["src/other.py"]).release()
    with pytest.raises(writ_client.Busy):
        b.try_admit(["src/lib.py"])
    fence.release()
    b.try_admit(["src/lib.py"]).release()


def test_fence_wait(session: Session) -> None:
    a = session.actor("a")
    b = session.actor("b")
    call = a.try_admit(["src/a.py"])
    got: List[writ_client.Fence] = []
    t = threading.Thread(target=lambda: got.append(b.fence(["src/"], wait=True, timeout=20)))
    t.start()
    wait_until("the fence to wait", lambda: waiters_of(session, "b"))
    call.release()
    t.join(20)
    assert got
    got[0].release()


def test_file_operations(session: Session, server: Server) -> None:
    a = session.actor("a")
    a.write("notes/a.txt", "one\n")  # creating needs no read
    assert (server.root / "notes" / "a.txt").read_text() == "one\n"
    assert a.read("notes/a.txt") == "one\n"
    receipt = a.append("notes/a.txt", "two\n")
    assert isinstance(receipt, dict)
    assert (server.root / "notes" / "a.txt").read_text() == "one\ntwo\n"
    result = a.read_with_mark("notes/a.txt")
    assert result.content == "one\ntwo\n"
    assert result.mark, "files.read returned no mark"
    a.edit("notes/a.txt", "two", "TWO")
    assert (server.root / "notes" / "a.txt").read_text() == "one\nTWO\n"
    a.read("notes/a.txt")
    a.write("notes/a.txt", "three\n")
    a.read("notes/a.txt")
    a.rename("notes/a.txt", "notes/b.txt")
    assert not (server.root / "notes" / "a.txt").exists()
    assert (server.root / "notes" / "b.txt").read_text() == "three\n"
    a.read("notes/b.txt")
    a.delete("notes/b.txt")
    assert not (server.root / "notes" / "b.txt").exists()


def test_an_edit_on_a_stale_read_that_overwrites_nothing_unseen_is_anchored(
    session: Session, server: Server
) -> None:
    """SPEC §6: the receipt carries ``anchored`` with the changes since the read."""
    (server.root / "r.py").write_text("A = 0\n\nB = 0\n")
    a, b = session.actor("a"), session.actor("b")
    a.read("r.py")
    b.read("r.py")
    a.edit("r.py", "A = 0", "A = 1")
    receipt = b.edit("r.py", "B = 0", "B = 2")
    anchored = receipt["anchored"]
    assert anchored["writer"] == "a"
    assert "-A = 0\n+A = 1\n" in anchored["diff"]
    assert "anchored" in b.append("r.py", "C = 3\n")
    assert (server.root / "r.py").read_text() == "A = 1\n\nB = 2\nC = 3\n"
    # A replace of a line that changed since the read is still refused.
    with pytest.raises(writ_client.Stale):
        b.edit("r.py", "A = 0", "A = 4")
    with pytest.raises(writ_client.Stale):
        b.write("r.py", "gone\n")


def test_file_operations_wait_with_a_timeout(session: Session, server: Server) -> None:
    """With ``timeout=`` the server waits for the path instead of refusing."""
    a = session.actor("a")
    b = session.actor("b")
    held = a.try_admit(["x.txt", "y.txt"])
    with pytest.raises(writ_client.Busy):
        b.write("x.txt", "b\n")  # no timeout: refused at once
    done: List[Dict[str, Any]] = []
    t = threading.Thread(target=lambda: done.append(b.write("x.txt", "b\n", timeout=20)))
    t.start()
    wait_until("b's write to wait", lambda: waiters_of(session, "b"))
    assert not done and not (server.root / "x.txt").exists()
    held.release()
    t.join(20)
    assert done and (server.root / "x.txt").read_text() == "b\n"
    assert not waiters_of(session, "b"), "nothing is left waiting"
    # Still contested when the timeout runs out: Busy, naming the holder.
    again = a.try_admit(["y.txt"])
    with pytest.raises(writ_client.Busy) as busy:
        b.write("y.txt", "b\n", timeout=0.2)
    assert busy.value.holder == "a"
    assert not holds_of(session, "b"), "a timed-out write leaves nothing"
    again.release()
    b.read("x.txt", timeout=1)
    b.edit("x.txt", "b", "B", timeout=1)
    assert (server.root / "x.txt").read_text() == "B\n"


def test_line_ranges_and_bytes(session: Session, server: Server) -> None:
    (server.root / "lines.txt").write_text("l1\nl2\nl3\nl4\n")
    a = session.actor("a")
    assert a.read("lines.txt", lines=(1, 3)) == "l2\nl3\n"
    assert a.read("lines.txt", lines=(3, None)) == "l4\n"
    # The mark of a range covers the whole file: an append may follow.
    a.append("lines.txt", "l5\n")
    assert (server.root / "lines.txt").read_text() == "l1\nl2\nl3\nl4\nl5\n"
    blob = bytes(range(256))
    a.write("blob.bin", blob)
    assert (server.root / "blob.bin").read_bytes() == blob
    assert a.read_bytes("blob.bin") == blob
    assert a.read_with_mark("blob.bin").content == blob


def test_plan_returns_waves(session: Session) -> None:
    waves = session.plan(
        [
            Task("a", ["src/a.py"]),
            Task("b", ["src/"], depends_on=["a"]),
            {"name": "c", "writes": ["docs/"]},
        ]
    )
    assert waves == [["a", "c"], ["b"]]


def test_turns_rewind_and_redo(session: Session, server: Server) -> None:
    a = session.actor("a")
    a.set_turn("turn-1")
    a.write("r.txt", "v1\n")
    a.read("r.txt")
    a.write("r.txt", "v2\n")
    report = session.rewind("turn-1")
    assert isinstance(report, dict)
    assert not (server.root / "r.txt").exists()
    session.redo("turn-1")
    assert (server.root / "r.txt").read_text() == "v2\n"


def test_dump_is_a_dict_and_a_table(session: Session) -> None:
    a = session.actor("dumper")
    with a.try_admit(["d.txt"], label="dump me"):
        dump = session.dump()
        assert set(dump) >= {"actors", "holds", "waiters", "counters"}
        (hold,) = [h for h in dump["holds"] if h["actor"] == "dumper"]
        assert hold["kind"] == "call" and hold["label"] == "dump me"
        assert hold["paths"][0]["path"].endswith("d.txt")
        table = session.dump_table()
        assert "dumper" in table and "d.txt" in table


def test_attach_with_an_actor_token_acts_as_that_actor(session: Session, server: Server) -> None:
    lead = session.actor("lead")
    assert lead.token is not None
    worker_session = Session.connect(server.url, lead.token)
    try:
        me = worker_session.me("lead")
        assert me.id == lead.id
        me = worker_session.attach(lead.id, lead.token, name="lead")
        me.write("w.txt", "hi\n")
        with me.try_admit(["w.txt"]):
            assert holds_of(session, "lead")
        kid = me.child("kid")
        kid.write("k.txt", "k\n")
    finally:
        worker_session.close()
    with pytest.raises(writ_client.Forbidden):
        session.me()  # the session token is no actor
    # The worker's session owns no lease, so closing it leaves the lead alive.
    assert "lead" in [a["name"] for a in session.dump()["actors"]]


def test_close_revokes_the_leases(server: Server) -> None:
    s = server.connect()
    observer = server.connect()
    try:
        a = s.actor("closer", fenced=["f/"])
        a.try_admit(["f/x.txt"])
        assert holds_of(observer, "closer")
        s.close()
        assert s.closed
        s.close()  # idempotent
        assert holds_of(observer, "closer") == []
        assert "closer" not in [x["name"] for x in observer.dump()["actors"]]
    finally:
        observer.close()


def test_keepalive_outlives_the_ttl(server: Server) -> None:
    import time

    from conftest import LEASE_TTL

    s = server.connect()
    observer = server.connect()
    try:
        s.actor("alive", fenced=["k/"])
        end = time.monotonic() + 3 * LEASE_TTL
        # Time passing is the point here, not synchronization: the fence must
        # survive three TTLs of silence from the caller.
        while time.monotonic() < end:
            assert holds_of(observer, "alive"), "the lease expired despite the keepalive thread"
            time.sleep(LEASE_TTL / 4)
    finally:
        s.close()
        observer.close()


def test_the_token_never_goes_through_a_proxy(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy that would receive the bearer token: nothing listens on port 9,
    # so a client that honoured it would fail to connect.
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    with server.connect() as s:
        assert s.dump()["actors"] is not None


def test_cancel_abandons_a_wait_from_another_thread(session: Session) -> None:
    holder = session.actor("holder")
    waiter = session.actor("waiter")
    held = holder.try_admit(["c.txt"])
    cancel = writ_client.Cancel()
    outcome: List[BaseException] = []

    def wait() -> None:
        try:
            waiter.admit(["c.txt"], cancel=cancel)
        except writ_client.WritError as err:
            outcome.append(err)

    t = threading.Thread(target=wait)
    t.start()
    wait_until("the admit to wait", lambda: waiters_of(session, "waiter"))
    cancel.cancel()
    t.join(20)
    assert outcome and isinstance(outcome[0], writ_client.Unavailable)
    wait_until("the wait to leave the queue", lambda: not waiters_of(session, "waiter"))
    held.release()
    assert holds_of(session, "waiter") == []
    # A cancelled Cancel fails the next call at once, before it reaches the server.
    with pytest.raises(writ_client.Unavailable):
        waiter.admit(["c.txt"], cancel=cancel)
    assert holds_of(session, "waiter") == []


def test_run_commits_a_commands_writes_and_refuses_over_unseen_work(session: Session, server: Server) -> None:
    (server.root / "list.txt").write_text("one\ntwo\nthree\n")
    shell = session.actor("shell")
    other = session.actor("other")
    other.read("list.txt")
    other.edit("list.txt", "two\n", "other's work\n")
    # A sed of another line keeps the other agent's work, unread or not.
    report = shell.run("echo hello; sed -i s/one/ONE/ list.txt")
    if report["mode"] != "overlay":
        pytest.skip("no overlay on this machine: " + "; ".join(report["notes"]))
    assert report["committed"] is True, report
    assert report["exit_code"] == 0
    assert report["output"] == "hello\n"
    assert [a["path"] for a in report["artifacts"]] == ["list.txt"]
    assert (server.root / "list.txt").read_text() == "ONE\nother's work\nthree\n"
    # Overwriting it whole is refused: the shell agent has not read that work.
    refused = shell.run(["sh", "-c", "printf 'x\\n' > list.txt"])
    assert refused["committed"] is False, refused
    assert refused["conflicts"][0]["writers"] == ["other"]
    assert (server.root / "list.txt").read_text() == "ONE\nother's work\nthree\n"
