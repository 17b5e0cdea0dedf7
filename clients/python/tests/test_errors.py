"""Every error kind the server emits arrives as its own exception, with its fields."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

import writ_client
from writ_client import Session, Task, WritError, error_from_wire

from conftest import Server, holds_of, wait_until, waiters_of


def raw_post(server: Server, body: bytes, token: Optional[str] = None, headers: Optional[Dict[str, str]] = None) -> "tuple[int, Dict[str, Any]]":
    request = urllib.request.Request(
        server.url.rstrip("/") + "/rpc",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token or server.token}", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            return err.code, json.loads(raw)
        except ValueError:
            return err.code, {}


def check(err: WritError, cls: type, **fields: Any) -> None:
    assert type(err) is cls, f"{type(err).__name__}: {err}"
    assert isinstance(err, WritError)
    assert err.kind == cls.kind  # type: ignore[attr-defined]
    assert isinstance(err.code, int)
    assert err.message and str(err) == err.message
    assert err.data["kind"] == err.kind
    for name, expected in fields.items():
        assert getattr(err, name) == expected, (name, getattr(err, name), err.data)


def test_busy(session: Session, server: Server) -> None:
    holder = session.actor("parser")
    other = session.actor("lead")
    holder.try_admit(["lex.rs"], label="write lex")
    with pytest.raises(writ_client.Busy) as err:
        other.try_admit(["lex.rs"])
    check(err.value, writ_client.Busy, holder="parser", hold_kind="call", mode="exclusive", queued=False, label="write lex")
    assert err.value.path.endswith("lex.rs")
    assert "parser" in str(err.value)


def test_timeout(session: Session) -> None:
    holder = session.actor("holder")
    waiter = session.actor("waiter")
    holder.try_admit(["t.txt"])
    with pytest.raises(writ_client.Timeout) as err:
        waiter.admit(["t.txt"], timeout=0.2)
    check(err.value, writ_client.Timeout)
    assert err.value.paths and err.value.paths[0].endswith("t.txt")
    assert err.value.waited >= 0.15
    assert waiters_of(session, "waiter") == []


def test_deadlock(session: Session) -> None:
    # Workspace actors holding extra fences: each may wait on the other's.
    a = session.actor("alpha")
    b = session.actor("beta")
    a.fence(["a/"])
    b.fence(["b/"])
    outcome: Dict[str, Any] = {}

    def alpha_waits() -> None:
        try:
            outcome["hold"] = a.admit(["b/x.txt"], timeout=20)
        except WritError as e:
            outcome["err"] = e

    t = threading.Thread(target=alpha_waits)
    t.start()
    wait_until("alpha to wait", lambda: waiters_of(session, "alpha") or outcome)
    assert not outcome, outcome
    with pytest.raises(writ_client.Deadlock) as err:
        b.admit(["a/y.txt"], timeout=20)
    check(err.value, writ_client.Deadlock)
    assert set(err.value.cycle) == {"alpha", "beta"}
    b.drop()
    t.join(20)
    assert "hold" in outcome, outcome


def test_outside_grant_and_invalid_path(session: Session) -> None:
    a = session.actor("a")
    with pytest.raises(writ_client.OutsideGrant) as err:
        a.try_admit(["../outside.txt"])
    check(err.value, writ_client.OutsideGrant)
    assert err.value.path.endswith("outside.txt") and err.value.root
    with pytest.raises(writ_client.InvalidPath) as bad:
        a.try_admit([])
    check(bad.value, writ_client.InvalidPath)
    with pytest.raises(writ_client.InvalidPath):
        a.write("bad\x00name", "x")


def test_outside_fence(session: Session) -> None:
    kid = session.actor("kid", fenced=["src/"])
    with pytest.raises(writ_client.OutsideFence) as err:
        kid.try_admit(["docs/a.md"])
    check(err.value, writ_client.OutsideFence, actor="kid")
    assert err.value.path.endswith("a.md") and err.value.fence


def test_released(session: Session) -> None:
    a = session.actor("owner")
    fence = a.fence(["r/"])
    a.drop()
    # The fence went with its actor; the handle is left over.
    with pytest.raises(writ_client.Released) as err:
        fence.extend(["s/"])
    check(err.value, writ_client.Released, what="fence", actor="owner")


def test_read_only(session: Session) -> None:
    reader = session.actor("reviewer", read_only=True)
    with pytest.raises(writ_client.ReadOnly) as err:
        reader.write("r.txt", "x")
    check(err.value, writ_client.ReadOnly, actor="reviewer")


def test_policy(session: Session, server: Server) -> None:
    a = session.actor("a")
    with pytest.raises(writ_client.Policy) as err:
        a.write(".env", "SECRET=1\n")
    check(err.value, writ_client.Policy)
    assert err.value.path.endswith(".env") and err.value.reason
    # The discovery file holds the session token: no actor reads it through writ.
    with pytest.raises(writ_client.Policy):
        a.read(".writ/serve.json")


def test_gate_errors(session: Session, server: Server) -> None:
    (server.root / "g.txt").write_text("base\n")
    a = session.actor("a")
    b = session.actor("bob")
    with pytest.raises(writ_client.NotRead) as nr:
        a.write("g.txt", "mine\n")
    check(nr.value, writ_client.NotRead)
    assert nr.value.path.endswith("g.txt")
    a.read("g.txt")
    b.read("g.txt")
    b.write("g.txt", "bob's\n")
    with pytest.raises(writ_client.Stale) as st:
        a.write("g.txt", "mine\n")
    check(st.value, writ_client.Stale, writer="bob")
    assert (server.root / "g.txt").read_text() == "bob's\n"
    a.read("g.txt")
    (server.root / "g.txt").write_text("by hand\n")
    with pytest.raises(writ_client.Stale) as outside:
        a.write("g.txt", "mine\n")
    assert outside.value.writer is None


def test_not_found_no_match_ambiguous(session: Session, server: Server) -> None:
    a = session.actor("a")
    with pytest.raises(writ_client.NotFound) as nf:
        a.read("missing.txt")
    check(nf.value, writ_client.NotFound)
    (server.root / "m.txt").write_text("x x\n")
    a.read("m.txt")
    with pytest.raises(writ_client.NoMatch) as nm:
        a.edit("m.txt", "y", "z")
    check(nm.value, writ_client.NoMatch)
    with pytest.raises(writ_client.AmbiguousMatch) as am:
        a.edit("m.txt", "x", "z")
    check(am.value, writ_client.AmbiguousMatch, count=2)
    assert (server.root / "m.txt").read_text() == "x x\n"


def test_no_slot(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"max_actors": 1}))
    srv = Server(tmp_path, "--config", str(config))
    try:
        with srv.connect() as s:
            lead = s.actor("lead")
            lead.child("one")
            with pytest.raises(writ_client.NoSlot) as err:
                lead.child("two")
            check(err.value, writ_client.NoSlot, limit="max_actors", max=1)
    finally:
        srv.stop()


def test_rewind_conflict_and_unknown_turn(session: Session, server: Server) -> None:
    a = session.actor("a")
    a.set_turn("t1")
    a.write("c.txt", "from writ\n")
    (server.root / "c.txt").write_text("a person typed this\n")
    with pytest.raises(writ_client.RewindConflict) as rc:
        session.rewind("t1")
    check(rc.value, writ_client.RewindConflict)
    assert len(rc.value.conflicts) == 1
    assert (server.root / "c.txt").read_text() == "a person typed this\n"
    with pytest.raises(writ_client.UnknownTurn) as ut:
        session.rewind("no-such-turn")
    check(ut.value, writ_client.UnknownTurn, turn="no-such-turn")


def test_history_unavailable(tmp_path: Path) -> None:
    srv = Server(tmp_path, "--no-history", history=False)
    try:
        with srv.connect() as s:
            with pytest.raises(writ_client.History) as err:
                s.rewind("t1")
            check(err.value, writ_client.History)
            assert err.value.reason
    finally:
        srv.stop()


def test_plan_errors(session: Session) -> None:
    with pytest.raises(writ_client.PlanConflict) as pc:
        session.plan([Task("a", ["src/"]), Task("b", ["src/x.py"])])
    check(pc.value, writ_client.PlanConflict)
    assert {pc.value.first, pc.value.second} == {"a", "b"}
    with pytest.raises(writ_client.PlanCycle) as cy:
        session.plan([Task("a", ["a"], ["b"]), Task("b", ["b"], ["a"])])
    check(cy.value, writ_client.PlanCycle)
    assert set(cy.value.tasks) >= {"a", "b"}
    with pytest.raises(writ_client.InvalidPlan) as ip:
        session.plan([Task("a", ["a"], ["nobody"])])
    check(ip.value, writ_client.InvalidPlan)


def test_forbidden(session: Session, server: Server) -> None:
    a = session.actor("a")
    b = session.actor("b")
    assert a.token is not None
    with Session.connect(server.url, a.token) as as_a:
        impostor = as_a.attach(b.id)
        with pytest.raises(writ_client.Forbidden) as err:
            impostor.try_admit(["x.txt"])
        check(err.value, writ_client.Forbidden)
        with pytest.raises(writ_client.Forbidden):
            impostor.write("x.txt", "x")
        with pytest.raises(writ_client.Forbidden):
            as_a.actor("root-from-an-actor-token")
    assert holds_of(session, "b") == []
    assert not (server.root / "x.txt").exists()


def test_unknown_ids(session: Session) -> None:
    a = session.actor("a")
    hold = a.try_admit(["x"])
    hold.release()
    with pytest.raises(writ_client.UnknownHold) as uh:
        session.call("release", {"hold": hold.id})
    check(uh.value, writ_client.UnknownHold, hold=hold.id)
    gone = session.actor("gone")
    gone.drop()
    with pytest.raises(writ_client.UnknownActor) as ua:
        gone.try_admit(["x"])
    check(ua.value, writ_client.UnknownActor, actor=gone.id)
    session.revoke(gone.lease)
    with pytest.raises(writ_client.UnknownLease) as ul:
        session.call("lease.keepalive", {"lease": gone.lease})
    check(ul.value, writ_client.UnknownLease, lease=gone.lease)
    a.drop()
    with pytest.raises(writ_client.UnknownActor):
        a.try_admit(["x"])
    # Releasing a hold the server no longer knows is not an error for the client.
    writ_client.Hold(a, hold.id, "call").release()


def test_protocol_errors(server: Server, session: Session) -> None:
    # The client never sends these; the replies still map to their classes.
    status, reply = raw_post(server, b"{not json")
    check(error_from_wire(reply["error"]), writ_client.ParseError)
    status, reply = raw_post(server, b'{"id": 1, "method": 5}')
    check(error_from_wire(reply["error"]), writ_client.InvalidRequest)
    with pytest.raises(writ_client.UnknownMethod) as um:
        session.call("no.such.method")
    check(um.value, writ_client.UnknownMethod)
    with pytest.raises(writ_client.InvalidParams) as ip:
        session.call("admit", {"actor": "x", "targets": 5})
    check(ip.value, writ_client.InvalidParams)
    big = b'{"jsonrpc":"2.0","id":1,"method":"dump","params":{"pad":"' + b"x" * (9 * 1024 * 1024) + b'"}}'
    status, reply = raw_post(server, big)
    check(error_from_wire(reply["error"]), writ_client.BodyTooLarge)
    # None of it changed anything, and the server still answers.
    assert session.dump()["actors"] == []


def test_unauthorized_and_foreign_origin(server: Server) -> None:
    with pytest.raises(writ_client.Unauthorized) as err:
        Session.connect(server.url, "not-the-token")
    assert err.value.kind == "unauthorized"
    status, _ = raw_post(
        server,
        b'{"jsonrpc":"2.0","id":1,"method":"session.info"}',
        headers={"Origin": "http://evil.example"},
    )
    assert status == 403


def test_unavailable_when_the_server_is_gone(tmp_path: Path) -> None:
    srv = Server(tmp_path)
    s = srv.connect()
    srv.stop()
    with pytest.raises(writ_client.Unavailable):
        s.dump()
    s.close()  # closing after the server is gone does not raise


def test_shutdown_fails_waiters(tmp_path: Path) -> None:
    srv = Server(tmp_path)
    s = srv.connect()
    holder = s.actor("holder")
    waiter = s.actor("waiter")
    holder.try_admit(["s.txt"])
    outcome: List[BaseException] = []

    def wait() -> None:
        try:
            waiter.admit(["s.txt"], timeout=25)
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            outcome.append(e)

    t = threading.Thread(target=wait)
    t.start()
    wait_until("the waiter to queue", lambda: waiters_of(s, "waiter"))
    srv.stop()
    t.join(25)
    assert outcome and isinstance(outcome[0], writ_client.Unavailable), outcome
    s.close()


def test_every_class_is_a_writ_error_with_a_distinct_kind() -> None:
    kinds = writ_client.KINDS
    assert len(kinds) == len(set(kinds))
    for kind, cls in kinds.items():
        assert issubclass(cls, WritError)
        assert cls.kind == kind
        # The class name is the kind in CamelCase (the Rust variant's name).
        assert cls.__name__ == "".join(part.capitalize() for part in kind.split("_"))
    # An unknown kind still raises a WritError carrying its data.
    err = writ_client._errors.error_from_wire({"code": 9999, "message": "m", "data": {"kind": "brand_new", "x": 1}})
    assert type(err) is WritError and err.kind == "brand_new" and err.data["x"] == 1
