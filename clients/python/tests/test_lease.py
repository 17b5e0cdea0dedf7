"""Leases: a killed client's holds are freed within the TTL; a clean exit frees them at once."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import List

import pytest

import writ_client
from writ_client import Session

from conftest import DEADLINE, LEASE_TTL, Server, holds_of, run_python, wait_until, waiters_of

# A client that fences a folder, takes a call hold, says so, then blocks
# until it is killed (it never closes its session).
HOLDER = """
import sys, writ_client
s = writ_client.Session.connect(sys.argv[1], sys.argv[2])
a = s.actor("victim", fenced=["locked/"])
a.try_admit(["locked/file.txt"])
print("held", flush=True)
sys.stdin.read()
"""

# A client that takes holds and returns from the script without closing:
# interpreter exit (atexit) must revoke its lease.
EXITER = """
import sys, writ_client
s = writ_client.Session.connect(sys.argv[1], sys.argv[2])
a = s.actor("leaver", fenced=["gone/"])
a.try_admit(["gone/file.txt"])
print("held", flush=True)
"""


def test_sigkilled_client_frees_its_holds_within_the_ttl(server: Server, session: Session) -> None:
    proc = run_python(HOLDER, server.url, server.token, stdin=__import__("subprocess").PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "held", proc.stderr.read() if proc.stderr else line
    waiter = session.actor("waiter")
    with pytest.raises(writ_client.Busy) as err:
        waiter.try_admit(["locked/file.txt"])
    assert err.value.holder == "victim"

    got: List[writ_client.Hold] = []
    t = threading.Thread(target=lambda: got.append(waiter.admit(["locked/file.txt"], timeout=DEADLINE)))
    t.start()
    wait_until("the waiter to queue", lambda: waiters_of(session, "waiter"))

    os.kill(proc.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    proc.wait()
    t.join(DEADLINE)
    freed_after = time.monotonic() - killed_at
    assert got, "the waiter was not admitted after the holder was killed"
    # Freed by the lease's expiry: at most one TTL after the last renewal,
    # with room for a loaded machine.
    print(f"killed client: waiter admitted {freed_after:.2f}s after SIGKILL (lease TTL {LEASE_TTL}s)")
    assert freed_after < LEASE_TTL + 3, f"freed after {freed_after:.2f}s"
    assert holds_of(session, "victim") == []
    assert "victim" not in [a["name"] for a in session.dump()["actors"]]
    got[0].release()


def test_interpreter_exit_revokes_the_lease_at_once(tmp_path: Path) -> None:
    # A long TTL: only the atexit revoke can free the holds within the deadline.
    srv = Server(tmp_path, lease_ttl=600)
    try:
        with srv.connect() as s:
            proc = run_python(EXITER, srv.url, srv.token)
            out, errs = proc.communicate(timeout=DEADLINE)
            assert proc.returncode == 0, errs
            assert out.strip() == "held"
            assert holds_of(s, "leaver") == []
            assert "leaver" not in [a["name"] for a in s.dump()["actors"]]
    finally:
        srv.stop()


def test_without_keepalive_the_lease_expires(server: Server, session: Session) -> None:
    # The control for test_keepalive_outlives_the_ttl: a session whose keepalive
    # thread never runs in time loses its holds after the TTL.
    quiet = server.connect(keepalive=3600)
    try:
        quiet.actor("quiet", fenced=["q/"])
        assert holds_of(session, "quiet")
        wait_until("the silent lease to expire", lambda: not holds_of(session, "quiet"), deadline=LEASE_TTL * 3 + 5)
        with pytest.raises(writ_client.UnknownLease):
            quiet.call("lease.keepalive", {"lease": quiet.leases[0]})
    finally:
        quiet.close()
