"""One exception class per error kind the server reports.

A refusal arrives as a JSON-RPC error whose ``data`` is ``{"kind": ..., ...}``.
The class is chosen by ``kind``; every other field of ``data`` becomes an
attribute of the same name, so ``err.holder`` of a :class:`Busy` is the
``holder`` the server sent. The class name is the kind in CamelCase (the name
of the ``writ::Error`` variant where there is one), so one table documents
both sides.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Type

__all__ = [
    "WritError",
    "error_class",
    "error_from_wire",
    "KINDS",
]


class WritError(Exception):
    """Base of every error this client raises.

    ``kind`` is the wire name (snake_case), ``code`` the JSON-RPC error code
    the server used (``None`` for errors raised before a reply arrived),
    ``message`` the server's sentence and ``data`` the full error data.
    """

    kind: str = "error"
    code: Optional[int]
    message: str
    data: Dict[str, Any]

    def __init__(
        self,
        message: str,
        data: Optional[Mapping[str, Any]] = None,
        code: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.data = dict(data or {})
        # Declared fields default to None so a field the server leaves out is
        # an attribute with no value, not an AttributeError in a handler.
        for klass in reversed(type(self).__mro__):
            for name in getattr(klass, "__annotations__", {}):
                if name not in _RESERVED:
                    setattr(self, name, None)
        for name, value in self.data.items():
            if name.isidentifier() and name not in _RESERVED:
                setattr(self, name, value)
        wire_kind = self.data.get("kind")
        if isinstance(wire_kind, str):
            self.kind = wire_kind

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, kind={self.kind!r}, code={self.code!r})"


_RESERVED = frozenset({"kind", "code", "message", "data", "args", "with_traceback"})


# -- refusals of the scheduler (§3, §4, §11) --------------------------------


class Busy(WritError):
    """A path is held (or queued for) by someone else; nothing was reserved."""

    kind = "busy"
    path: str
    holder: str
    hold_kind: str
    mode: str
    label: Optional[str]
    age: float
    queued: bool
    relative: str


class Timeout(WritError):
    """A waiting request gave up after its timeout; nothing was reserved."""

    kind = "timeout"
    paths: List[str]
    waited: float


class Deadlock(WritError):
    """Waiting would close a cycle; ``cycle`` names the actors in it."""

    kind = "deadlock"
    cycle: List[str]


class OutsideGrant(WritError):
    """The path resolves outside the actor's grant root."""

    kind = "outside_grant"
    path: str
    root: str


class OutsideFence(WritError):
    """The path lies outside the fence the actor (or its parent) holds."""

    kind = "outside_fence"
    path: str
    actor: str
    fence: List[str]


class InvalidPath(WritError):
    """The path is malformed or not of the kind the operation needs."""

    kind = "invalid_path"
    path: str
    reason: str


class NoSlot(WritError):
    """A slot limit (``max_actors``/``max_writers``) is reached."""

    kind = "no_slot"
    limit: str
    max: int


class ReadOnly(WritError):
    """A read-only actor asked for a write."""

    kind = "read_only"
    actor: str
    path: str


class Released(WritError):
    """A guard's actor is gone, so the guard no longer holds anything."""

    kind = "released"
    what: str
    actor: str


class NotApproved(WritError):
    """The approval hook refused to widen a fence."""

    kind = "not_approved"
    actor: str
    path: str


# -- file operations (§6-§8) ------------------------------------------------


class Policy(WritError):
    """The path policy refuses this access."""

    kind = "policy"
    path: str
    reason: str


class NotRead(WritError):
    """A write to an existing file the actor has not read."""

    kind = "not_read"
    path: str


class Stale(WritError):
    """A write to a file that changed since the read; ``writer`` names who changed it."""

    kind = "stale"
    path: str
    writer: Optional[str]
    ago: Optional[float]


class NotFound(WritError):
    """The file does not exist."""

    kind = "not_found"
    path: str


class PartialView(WritError):
    """A whole-file write (write, delete, rename) after a read that showed part of the file.

    ``seen`` says what was shown ("lines 1-2000 of 5000"), ``rest`` how to see the rest.
    """

    kind = "partial_view"
    path: str
    seen: str
    rest: str


class TooLarge(WritError):
    """A whole read would exceed the server's ``max_read_bytes``; read a line range instead."""

    kind = "too_large"
    path: str
    size: int
    limit: int


class TxnTooLarge(WritError):
    """An admission needs more operations than one etcd transaction allows; ask for fewer paths."""

    kind = "txn_too_large"
    ops: int
    limit: int


class Unsupported(WritError):
    """A server whose table is in etcd cannot serve this request yet; nothing was changed."""

    kind = "unsupported"
    what: str


class NoMatch(WritError):
    """``edit`` found no occurrence of the old text."""

    kind = "no_match"
    path: str


class AmbiguousMatch(WritError):
    """``edit`` found the old text more than once."""

    kind = "ambiguous_match"
    path: str
    count: int


class Io(WritError):
    """An operating-system error on a path, on the server."""

    kind = "io"
    op: str
    path: str
    error: str
    io_kind: str


# -- history (§7) -------------------------------------------------------------


class RewindConflict(WritError):
    """A rewind or redo would overwrite changes writ did not make."""

    kind = "rewind_conflict"
    conflicts: List[Dict[str, Any]]


class UnknownTurn(WritError):
    """No history is recorded for this turn."""

    kind = "unknown_turn"
    turn: str


class History(WritError):
    """History is not configured or cannot be used."""

    kind = "history"
    reason: str


# -- plans (§11) ---------------------------------------------------------------


class PlanConflict(WritError):
    """Two unordered tasks write overlapping paths."""

    kind = "plan_conflict"
    first: str
    second: str
    path: str


class PlanCycle(WritError):
    """The plan's dependencies form a cycle."""

    kind = "plan_cycle"
    tasks: List[str]


class InvalidPlan(WritError):
    """The plan is malformed (unknown dependency, duplicate name)."""

    kind = "invalid_plan"
    reason: str


class Spawn(WritError):
    """A delegated command could not start."""

    kind = "spawn"
    program: str
    reason: str


# -- the wire (§13) ------------------------------------------------------------


class ParseError(WritError):
    """The request body was not JSON."""

    kind = "parse_error"
    detail: str


class InvalidRequest(WritError):
    """The body was JSON but not a JSON-RPC 2.0 request object."""

    kind = "invalid_request"
    detail: str


class UnknownMethod(WritError):
    """The server has no such method."""

    kind = "unknown_method"
    detail: str


class InvalidParams(WritError):
    """A parameter is missing or has the wrong type."""

    kind = "invalid_params"
    detail: str


class Internal(WritError):
    """The server failed in a way that is not the caller's fault."""

    kind = "internal"
    detail: str


class BodyTooLarge(WritError):
    """The request body exceeds the server's ``--max-body``."""

    kind = "body_too_large"
    detail: str


class Unauthorized(WritError):
    """No token, or a token the server does not know (HTTP 401)."""

    kind = "unauthorized"
    detail: str


class Forbidden(WritError):
    """An actor token tried to act outside its actor's line; nothing changed."""

    kind = "forbidden"
    reason: str


class UnknownLease(WritError):
    """The lease expired, was revoked, or the server restarted: create the actors again."""

    kind = "unknown_lease"
    lease: str


class UnknownActor(WritError):
    """The actor was dropped or its lease ended."""

    kind = "unknown_actor"
    actor: str


class UnknownHold(WritError):
    """The hold was released or its lease ended."""

    kind = "unknown_hold"
    hold: str


class Unavailable(WritError):
    """The server is shutting down or cannot be reached (also raised by this client)."""

    kind = "unavailable"
    reason: str


def _all_subclasses(base: Type[WritError]) -> List[Type[WritError]]:
    out: List[Type[WritError]] = []
    for sub in base.__subclasses__():
        out.append(sub)
        out.extend(_all_subclasses(sub))
    return out


#: Every kind this client knows, mapped to its exception class.
KINDS: Dict[str, Type[WritError]] = {cls.kind: cls for cls in _all_subclasses(WritError)}


def error_class(kind: str) -> Type[WritError]:
    """The exception class for a wire kind (``WritError`` for one this client does not know)."""
    return KINDS.get(kind, WritError)


def error_from_wire(error: Mapping[str, Any]) -> WritError:
    """Build the exception for a JSON-RPC ``error`` object."""
    message = error.get("message")
    code = error.get("code")
    data = error.get("data")
    data_map: Dict[str, Any] = dict(data) if isinstance(data, Mapping) else {}
    kind = data_map.get("kind")
    cls = error_class(kind) if isinstance(kind, str) else WritError
    return cls(
        message if isinstance(message, str) else "the server reported an error without a message",
        data_map,
        code if isinstance(code, int) else None,
    )
