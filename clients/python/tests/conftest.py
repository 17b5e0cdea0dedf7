"""Starts a real ``writ serve`` per test on a temporary workspace.

The binary comes from ``WRIT_BIN`` (``cargo test --test python_client`` sets it);
without it the suite fails with one line saying so.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

import writ_client

#: Lease TTL of the test servers, in seconds: short, so expiry tests are quick,
#: and three keepalive rounds long, so a busy machine does not expire a live lease.
LEASE_TTL = 2.0

#: Upper bound for anything the tests wait for.
DEADLINE = 30.0


def writ_bin() -> str:
    path = os.environ.get("WRIT_BIN")
    if not path:
        pytest.fail("WRIT_BIN is not set: point it at the writ binary (cargo test --test python_client does)")
    if not os.access(path, os.X_OK):
        pytest.fail(f"WRIT_BIN={path} is not an executable writ binary")
    return path


def wait_until(what: str, condition: Callable[[], Any], deadline: float = DEADLINE) -> Any:
    """Poll ``condition`` until it returns something truthy, failing after ``deadline`` seconds."""
    end = time.monotonic() + deadline
    delay = 0.005
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"timed out after {deadline:.0f}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


class Server:
    """One ``writ serve`` process on ``root``."""

    def __init__(self, tmp: Path, *extra: str, lease_ttl: float = LEASE_TTL, history: bool = True) -> None:
        self.root = tmp / "ws"
        self.root.mkdir(exist_ok=True)
        state = tmp / "state"
        state.mkdir(exist_ok=True)
        self.discovery = self.root / ".writ" / "serve.json"
        env = dict(os.environ)
        env["XDG_STATE_HOME"] = str(state)
        self.log_path = tmp / "serve.log"
        self._log = open(self.log_path, "wb")
        args = [
            writ_bin(),
            "serve",
            str(self.root),
            "--lease-ttl",
            str(lease_ttl),
            *(["--history-dir", str(state / "history")] if history else []),
            *extra,
        ]
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self.info: Dict[str, Any] = wait_until("the discovery file", self._discovered)
        self.url: str = self.info["url"]
        self.token: str = self.info["token"]

    def _discovered(self) -> Optional[Dict[str, Any]]:
        if self.proc.poll() is not None:
            pytest.fail(f"writ serve exited with {self.proc.returncode}: {self.log()}")
        try:
            info = json.loads(self.discovery.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(info, dict) or info.get("pid") != self.proc.pid:
            return None
        return info

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def connect(self, **kwargs: Any) -> writ_client.Session:
        return writ_client.Session.connect(self.url, self.token, **kwargs)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path)
    yield srv
    srv.stop()


@pytest.fixture
def session(server: Server) -> Iterator[writ_client.Session]:
    s = server.connect()
    yield s
    s.close()


def run_python(code: str, *args: str, **kwargs: Any) -> "subprocess.Popen[str]":
    """Start a Python child process running ``code`` with this interpreter."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def holds_of(session: writ_client.Session, actor_name: str) -> List[Dict[str, Any]]:
    return [h for h in session.dump()["holds"] if h["actor"] == actor_name]


def waiters_of(session: writ_client.Session, actor_name: str) -> List[Dict[str, Any]]:
    return [w for w in session.dump()["waiters"] if w["actor"] == actor_name]
