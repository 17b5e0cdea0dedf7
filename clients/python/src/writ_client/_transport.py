"""JSON-RPC 2.0 over HTTP with the standard library."""

from __future__ import annotations

import http.client
import itertools
import json
import socket
import threading
import urllib.error
import urllib.request
from typing import Any, Dict, Mapping, Optional

from ._errors import Unavailable, Unauthorized, WritError, error_from_wire

#: Extra seconds a socket waits beyond a server-side wait, so the server's
#: ``timeout`` refusal arrives before the client gives up on the connection.
WAIT_MARGIN = 30.0

#: Socket timeout for calls that do not wait on the scheduler.
CALL_TIMEOUT = 60.0


class Transport:
    """Posts JSON-RPC requests to ``<url>/rpc`` with a bearer token."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url.rstrip("/")
        self.token = token
        # No proxy, whatever the environment says: the server is on loopback
        # and the bearer token must not travel anywhere else.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._ids = itertools.count(1)
        self._ids_lock = threading.Lock()

    def _next_id(self) -> int:
        with self._ids_lock:
            return next(self._ids)

    def call(
        self,
        method: str,
        params: Optional[Mapping[str, Any]] = None,
        wait: Optional[float] = 0.0,
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
        request = urllib.request.Request(
            self.url + "/rpc",
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json",
                "Authorization": f"Bearer {self.token}",
            },
        )
        timeout = None if wait is None else CALL_TIMEOUT + wait + WAIT_MARGIN
        try:
            with self._opener.open(request, timeout=timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as err:
            raw = err.read()
            # JSON-RPC errors may come with a 4xx/5xx status; the body decides.
            reply = _decode(raw)
            if reply is not None and isinstance(reply.get("error"), Mapping):
                raise error_from_wire(reply["error"]) from None
            if err.code == 401:
                raise Unauthorized(
                    _text(raw) or "the server refused the token (HTTP 401)",
                    {"kind": "unauthorized", "status": 401},
                ) from None
            raise Unavailable(
                f"{method}: HTTP {err.code} from {self.url}: {_text(raw)[:200]}",
                {"kind": "unavailable", "status": err.code},
            ) from None
        except (urllib.error.URLError, http.client.HTTPException, socket.timeout, OSError) as err:
            raise Unavailable(
                f"{method}: cannot reach writ serve at {self.url}: {err}",
                {"kind": "unavailable"},
            ) from None
        reply = _decode(raw)
        if reply is None:
            raise Unavailable(
                f"{method}: the reply is not JSON-RPC: {_text(raw)[:200]}",
                {"kind": "unavailable"},
            )
        if "error" in reply and reply["error"] is not None:
            raise error_from_wire(_mapping(reply["error"]))
        return reply.get("result")


def _decode(raw: bytes) -> Optional[Dict[str, Any]]:
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").strip()


__all__ = ["Transport", "WritError"]
