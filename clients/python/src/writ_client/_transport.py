"""JSON-RPC 2.0 over HTTP with the standard library.

The server is reached at an ``http://HOST:PORT`` URL, or at ``unix:PATH`` when
it was started with ``writ serve --socket PATH``.
"""

from __future__ import annotations

import http.client
import itertools
import json
import secrets
import socket
import threading
import urllib.parse
from typing import Any, Dict, Mapping, Optional

from ._errors import Unauthorized, Unavailable, error_from_wire

#: Extra seconds a socket waits beyond a server-side wait, so the server's
#: ``timeout`` refusal arrives before the client gives up on the connection.
WAIT_MARGIN = 30.0

#: Socket timeout for calls that do not wait on the scheduler.
CALL_TIMEOUT = 60.0

#: The prefix of a Unix socket URL: ``unix:/run/user/1000/writ.sock``.
UNIX_SCHEME = "unix:"


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a Unix socket; the host name only fills the Host header."""

    def __init__(self, path: str, timeout: Optional[float]) -> None:
        super().__init__("localhost", timeout=timeout)
        self._socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class Cancel:
    """Cancels a waiting call from another thread or a coroutine.

    Pass one as ``cancel=`` to ``admit``, ``fence(wait=True)`` or
    ``child(wait=True)``. :meth:`cancel` closes the call's connection; the
    server then cancels the wait with nothing left behind, and the call
    raises :class:`Unavailable`. A call started after :meth:`cancel` fails at
    once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._conn: Optional[http.client.HTTPConnection] = None

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` ran."""
        return self._cancelled

    def cancel(self) -> None:
        """Abandon the call: close its connection (idempotent)."""
        with self._lock:
            self._cancelled = True
            conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _attach(self, conn: http.client.HTTPConnection) -> bool:
        with self._lock:
            if self._cancelled:
                return False
            self._conn = conn
            return True


class Transport:
    """Posts JSON-RPC requests to ``<url>/rpc`` with a bearer token.

    One connection per call: a waiting call holds its own connection, and
    closing it is how a wait is cancelled. ``http.client`` never consults
    proxy settings, so the token goes to the server and nowhere else.
    """

    def __init__(self, url: str, token: str) -> None:
        self.url = url.rstrip("/")
        self._socket: Optional[str] = None
        if self.url.startswith(UNIX_SCHEME):
            self._socket = self.url[len(UNIX_SCHEME) :]
            if not self._socket:
                raise Unavailable(
                    f"{url!r} names no socket (the form is unix:/path/to/writ.sock)",
                    {"kind": "unavailable"},
                )
            self._host = "localhost"
            self._port = 80
            self._path = "/rpc"
        else:
            parts = urllib.parse.urlsplit(self.url)
            if parts.scheme != "http" or not parts.hostname:
                raise Unavailable(
                    f"{url!r} is neither an http:// URL nor unix:PATH of writ serve",
                    {"kind": "unavailable"},
                )
            self._host = parts.hostname
            self._port = parts.port or 80
            self._path = parts.path.rstrip("/") + "/rpc"
        self.token = token
        self._ids = itertools.count(1)
        self._ids_lock = threading.Lock()
        # Tickets are unique per actor on the server; another client acting
        # for the same actor (a token handed on) must not pick the same.
        self._ticket_prefix = "py-" + secrets.token_hex(6)
        self._tickets = itertools.count(1)

    def _next_id(self) -> int:
        with self._ids_lock:
            return next(self._ids)

    def ticket(self) -> str:
        """A fresh ticket: this client's name for one request of a hold."""
        with self._ids_lock:
            return f"{self._ticket_prefix}-{next(self._tickets)}"

    def call(
        self,
        method: str,
        params: Optional[Mapping[str, Any]] = None,
        wait: Optional[float] = 0.0,
        cancel: Optional[Cancel] = None,
    ) -> Any:
        """Call ``method`` and return its ``result`` or raise its error.

        ``wait`` is how long the server may legitimately take before answering
        (``None``: no bound, for a wait without a timeout).
        """
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": self._next_id(),
                "method": method,
                "params": dict(params or {}),
            }
        ).encode("utf-8")
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Authorization": f"Bearer {self.token}",
        }
        timeout = None if wait is None else CALL_TIMEOUT + wait + WAIT_MARGIN
        conn: http.client.HTTPConnection
        if self._socket is not None:
            conn = _UnixHTTPConnection(self._socket, timeout)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        try:
            if cancel is not None and not cancel._attach(conn):
                raise Unavailable(f"{method}: cancelled before it started", {"kind": "unavailable"})
            conn.request("POST", self._path, body=body, headers=headers)
            response = conn.getresponse()
            status = response.status
            raw = response.read()
        except (http.client.HTTPException, OSError) as err:
            if cancel is not None and cancel.cancelled:
                raise Unavailable(f"{method}: cancelled", {"kind": "unavailable"}) from None
            raise Unavailable(
                f"{method}: cannot reach writ serve at {self.url}: {err}",
                {"kind": "unavailable"},
            ) from None
        finally:
            conn.close()
        reply = _decode(raw)
        # JSON-RPC errors may come with any HTTP status; the body decides.
        if reply is not None and isinstance(reply.get("error"), Mapping):
            raise error_from_wire(reply["error"])
        if status == 401:
            raise Unauthorized(
                _text(raw) or "the server refused the token (HTTP 401)",
                {"kind": "unauthorized", "status": 401},
            )
        if status != 200 or reply is None or "result" not in reply:
            raise Unavailable(
                f"{method}: HTTP {status} from {self.url}: {_text(raw)[:200]}",
                {"kind": "unavailable", "status": status},
            )
        return reply["result"]


def _decode(raw: bytes) -> Optional[Dict[str, Any]]:
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").strip()


__all__ = ["Cancel", "Transport", "UNIX_SCHEME"]
