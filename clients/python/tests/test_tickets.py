"""Tickets: a grant whose answer never reached the client is handed back.

A proxy between client and server forwards every call but, for the calls
it is told to lose, reads the server's answer and closes the client's
connection instead of passing the answer on: the grant has been made, and
the client cannot know it.
"""

from __future__ import annotations

import json
import socket
import threading
from typing import List, Optional

import pytest

import writ_client
from writ_client import Session

from conftest import Server, holds_of, wait_until


def _read_request(conn: socket.socket) -> Optional[bytes]:
    """One whole HTTP request (head and its Content-Length body), or None at EOF."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        body += chunk
    return head + b"\r\n\r\n" + body


class AnswerLosingProxy:
    """Forwards HTTP calls to ``target``; loses the answers of ``lose`` methods."""

    def __init__(self, target: str, lose: List[str]) -> None:
        host, _, port = target.removeprefix("http://").partition(":")
        self.target = (host, int(port.rstrip("/")))
        self.lose = lose
        self.lost = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            self._forward(client)
        except OSError:
            # A server stopped under a late call: that call fails, as without a proxy.
            client.close()

    def _forward(self, client: socket.socket) -> None:
        with client, socket.create_connection(self.target) as server:
            request = _read_request(client)
            if request is None:
                return
            method = json.loads(request.partition(b"\r\n\r\n")[2] or b"{}").get("method")
            server.sendall(request)
            answer = server.recv(65536)
            if method in self.lose:
                # The server has answered (so it decided): the client hears nothing.
                self.lost += 1
                return
            client.sendall(answer)
            # The rest of a long answer, until the server is done with it.
            server.settimeout(0.5)
            try:
                while chunk := server.recv(65536):
                    client.sendall(chunk)
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()


def _free(session: Session, path: str) -> bool:
    other = session.actor("probe")
    try:
        other.try_admit([path]).release()
        return True
    except writ_client.Busy:
        return False
    finally:
        other.drop()


@pytest.mark.parametrize("wait", [False, True])
def test_a_grant_whose_answer_was_lost_is_given_back(server: Server, session: Session, wait: bool) -> None:
    proxy = AnswerLosingProxy(server.url, lose=["admit"])
    try:
        lossy = Session(proxy.url, server.token)
        agent = lossy.actor("agent")
        with pytest.raises(writ_client.Unavailable):
            if wait:
                agent.admit(["lost.rs"], timeout=10)
            else:
                agent.try_admit(["lost.rs"])
        assert proxy.lost == 1
        # The grant was made; the client gives its ticket up, which
        # releases it, while the agent's lease lives on.
        wait_until("the lost grant to be handed back", lambda: not holds_of(session, "agent"))
        assert _free(session, "lost.rs")
        assert [a["name"] for a in session.dump()["actors"]] == ["agent"]
        lossy.close()
    finally:
        proxy.close()


def test_a_lost_fence_is_given_back_and_a_clear_refusal_keeps_nothing(server: Server, session: Session) -> None:
    proxy = AnswerLosingProxy(server.url, lose=["fence"])
    try:
        lossy = Session(proxy.url, server.token)
        agent = lossy.actor("agent")
        with pytest.raises(writ_client.Unavailable):
            agent.fence(["src/"])
        wait_until("the lost fence to be handed back", lambda: not holds_of(session, "agent"))
        # A clear answer (busy) needs no giving up, and leaves nothing.
        holder = session.actor("holder")
        with holder.try_admit(["src/a.rs"]):
            with pytest.raises(writ_client.Busy):
                agent.try_admit(["src/a.rs"])
        assert holds_of(session, "agent") == []
        lossy.close()
    finally:
        proxy.close()
