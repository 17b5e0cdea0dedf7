"""The client over ``writ serve --socket PATH`` (``unix:PATH`` URLs)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Iterator, Tuple

import pytest

import writ_client
from writ_client import Session

from conftest import Server, holds_of


@pytest.fixture
def socket_server(tmp_path: Path) -> Iterator[Tuple[Server, Path]]:
    sock = tmp_path / "writ.sock"
    srv = Server(tmp_path, "--socket", str(sock))
    yield srv, sock
    srv.stop()
    assert not sock.exists(), "the socket outlived the server"


def test_the_discovery_file_names_the_0600_socket(socket_server: Tuple[Server, Path]) -> None:
    server, sock = socket_server
    assert server.info["socket"] == str(sock)
    assert stat.S_ISSOCK(os.lstat(sock).st_mode)
    assert stat.S_IMODE(os.lstat(sock).st_mode) == 0o600


def test_admit_write_read_over_the_socket(socket_server: Tuple[Server, Path]) -> None:
    server, sock = socket_server
    with Session.connect(f"unix:{sock}", server.token) as s:
        assert s.url == f"unix:{sock}"
        a = s.actor("a")
        b = s.actor("b")
        with a.try_admit(["x.txt"]):
            held = holds_of(s, "a")
            assert len(held) == 1 and held[0]["paths"][0]["path"].endswith("/x.txt")
            with pytest.raises(writ_client.Busy):
                b.try_admit(["x.txt"])
        assert holds_of(s, "a") == []
        a.write("x.txt", "over the socket\n")
        assert a.read("x.txt") == "over the socket\n"
        assert (server.root / "x.txt").read_text() == "over the socket\n"


def test_connect_prefers_the_socket_and_falls_back_to_the_url(
    socket_server: Tuple[Server, Path],
) -> None:
    server, sock = socket_server
    with Session.connect(root=server.root) as s:
        assert s.url == f"unix:{sock}"
        s.info()
    # A socket that does not answer: the loopback URL is used instead.
    found = json.loads(server.discovery.read_text())
    found["socket"] = str(sock.parent / "gone.sock")
    server.discovery.write_text(json.dumps(found))
    with Session.connect(root=server.root) as s:
        assert s.url == server.url.rstrip("/")
        s.info()


def test_the_socket_still_needs_the_token(socket_server: Tuple[Server, Path]) -> None:
    server, sock = socket_server
    with pytest.raises(writ_client.Unauthorized):
        Session.connect(f"unix:{sock}", "f" * 64)


def test_a_unix_url_without_a_path_is_refused() -> None:
    with pytest.raises(writ_client.Unavailable) as err:
        Session.connect("unix:", "f" * 64)
    assert "unix:/path" in str(err.value)
