"""Attacks on the client's discovery rules (SPEC §15), each asserted to fail.

A discovery file decides where the client sends a token. A planted file
(another user's, readable or writable by others, a symlink, or naming a
non-loopback URL) must not draw one, and a client given a token never
searches parent folders for a file to follow.
"""

from __future__ import annotations

import http.server
import json
import os
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

from writ_client import Session, Unavailable


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A listener that records every Authorization header it receives."""

    seen: List[str] = []

    def do_POST(self) -> None:  # noqa: N802 (the standard library's name)
        self.seen.append(self.headers.get("Authorization", ""))
        self.send_response(500)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@pytest.fixture
def listener() -> Iterator[str]:
    """A loopback HTTP listener standing in for an attacker's."""
    _Recorder.seen = []
    srv = http.server.HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _plant(folder: Path, info: Dict[str, Any], mode: int) -> Path:
    writ = folder / ".writ"
    writ.mkdir(parents=True, exist_ok=True)
    path = writ / "serve.json"
    path.write_text(json.dumps(info))
    os.chmod(path, mode)
    return path


def _info(url: str) -> Dict[str, Any]:
    return {"url": url, "socket": None, "pid": 1, "token": "0" * 64, "version": "0"}


def test_a_discovery_file_others_can_write_draws_no_token(tmp_path: Path, listener: str) -> None:
    _plant(tmp_path, _info(listener), 0o666)
    with pytest.raises(Unavailable, match="0666"):
        Session.connect(root=tmp_path)
    with pytest.raises(Unavailable, match="0666"):
        Session.connect(token="actor-token", root=tmp_path)
    assert _Recorder.seen == []


def test_a_non_loopback_url_in_a_discovery_file_is_refused(tmp_path: Path) -> None:
    _plant(tmp_path, _info("http://10.0.0.5:4000"), 0o600)
    with pytest.raises(Unavailable, match="loopback"):
        Session.connect(root=tmp_path)


def test_a_symlinked_discovery_file_is_refused(tmp_path: Path, listener: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "x.json"
    target.write_text(json.dumps(_info(listener)))
    os.chmod(target, 0o600)
    (tmp_path / "ws" / ".writ").mkdir(parents=True)
    (tmp_path / "ws" / ".writ" / "serve.json").symlink_to(target)
    with pytest.raises(Unavailable, match="symlink"):
        Session.connect(root=tmp_path / "ws")
    assert _Recorder.seen == []


def test_a_client_given_a_token_never_follows_a_file_in_a_parent(
    tmp_path: Path, listener: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file planted above the working folder, even one that passes every
    # other rule, must not receive the caller's token.
    _plant(tmp_path, _info(listener), 0o600)
    below = tmp_path / "project" / "src"
    below.mkdir(parents=True)
    monkeypatch.chdir(below)
    with pytest.raises(Unavailable, match="no running writ serve"):
        Session.connect(token="actor-token-secret")
    assert not any("actor-token-secret" in seen for seen in _Recorder.seen)
