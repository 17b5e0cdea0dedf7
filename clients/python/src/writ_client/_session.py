"""Sessions, actors and holds: the control API of ``writ serve`` (SPEC §13, §15)."""

from __future__ import annotations

import atexit
import base64
import errno
import ipaddress
import json
import os
import stat
import threading
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import (
    Any,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    Type,
    Union,
)

from ._errors import Forbidden, Unavailable, UnknownActor, UnknownHold, UnknownLease, WritError
from ._transport import CALL_TIMEOUT, UNIX_SCHEME, Cancel, Transport

__all__ = [
    "Session",
    "Actor",
    "Hold",
    "Fence",
    "Target",
    "Task",
    "ReadResult",
    "discover",
]

#: Lease TTL assumed when the server does not say (the server's default).
DEFAULT_LEASE_TTL = 15.0


@dataclass(frozen=True)
class Target:
    """A path with options: ``tree`` covers everything beneath, ``shared`` is a read.

    A plain string works wherever a target is taken: ``"src/"`` (a trailing
    ``/``) is a tree and ``"*"`` the actor's whole writable scope.
    """

    path: str
    tree: bool = False
    shared: bool = False

    def to_wire(self) -> Dict[str, Any]:
        """The target as the server reads it."""
        return {"path": self.path, "tree": self.tree, "shared": self.shared}


def shared(path: Union[str, "os.PathLike[str]"], tree: bool = False) -> Target:
    """A shared (read) target on ``path``."""
    return Target(os.fspath(path), tree=tree, shared=True)


def tree(path: Union[str, "os.PathLike[str]"], shared: bool = False) -> Target:
    """A target covering ``path`` and everything beneath it."""
    return Target(os.fspath(path), tree=True, shared=shared)


Lines = Tuple[int, Optional[int]]

TargetLike = Union[str, "os.PathLike[str]", Target]
Paths = Union[TargetLike, Iterable[TargetLike]]


def _targets(paths: Paths) -> List[Any]:
    items: Iterable[TargetLike]
    if isinstance(paths, (str, Target)) or isinstance(paths, os.PathLike):
        items = [paths]
    else:
        items = paths
    out: List[Any] = []
    for item in items:
        if isinstance(item, Target):
            out.append(item.to_wire())
        else:
            out.append(os.fspath(item))
    return out


@dataclass(frozen=True)
class Task:
    """One task of a plan: its name, what it writes, what it depends on."""

    name: str
    writes: Sequence[TargetLike]
    depends_on: Sequence[str] = field(default_factory=tuple)


@dataclass(frozen=True)
class ReadResult:
    """A read: the content (``str``, or ``bytes`` when it is not UTF-8) and its mark."""

    content: Union[str, bytes]
    mark: Dict[str, Any]


def _content_to_wire(content: Union[str, bytes]) -> Any:
    if isinstance(content, str):
        return content
    return {"base64": base64.b64encode(bytes(content)).decode("ascii")}


def _content_from_wire(value: Any) -> Union[str, bytes]:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("base64"), str):
        return base64.b64decode(value["base64"])
    raise Unavailable(
        f"the server sent file content in an unknown shape: {value!r:.100}",
        {"kind": "unavailable"},
    )


def _is_loopback_url(url: str) -> bool:
    """Whether ``url`` is ``http://`` on localhost, 127.0.0.0/8 or [::1]."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
        _ = parts.port  # a malformed port raises here
    except ValueError:
        return False
    if parts.scheme != "http" or host is None or parts.username is not None:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _untrusted(path: Path, why: str) -> Unavailable:
    return Unavailable(
        f"{path} is not used as a discovery file: {why}; a token is never sent "
        "where such a file points (start the server again, or pass url= and token=)",
        {"kind": "unavailable"},
    )


def _read_trusted(path: Path) -> Optional[Dict[str, Any]]:
    """The discovery file at ``path`` if it passes the rules of SPEC §15.

    ``None`` when there is no file. A file that is a symlink, belongs to
    another user, can be read or written by others (writ writes it 0600), or
    names a URL that is not loopback is refused with the reason.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise _untrusted(path, "it is a symlink") from None
        raise Unavailable(
            f"cannot read the discovery file {path}: {err}", {"kind": "unavailable"}
        ) from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise _untrusted(path, "it is not a regular file")
        if info.st_uid != os.geteuid():
            raise _untrusted(path, f"it belongs to uid {info.st_uid}, not to this user")
        if info.st_mode & 0o077:
            raise _untrusted(
                path, f"its mode is {stat.S_IMODE(info.st_mode):04o}, so others could have written it"
            )
        raw = file.read(64 * 1024)
    try:
        value = json.loads(raw.decode("utf-8"))
    except ValueError:
        raise Unavailable(
            f"the discovery file {path} is not JSON; is the server still starting?",
            {"kind": "unavailable"},
        ) from None
    if not isinstance(value, dict):
        raise Unavailable(
            f"the discovery file {path} is not a JSON object", {"kind": "unavailable"}
        )
    url = value.get("url")
    if isinstance(url, str) and not _is_loopback_url(url):
        raise _untrusted(path, f"its URL {url} is not a loopback address")
    socket_path = value.get("socket")
    if isinstance(socket_path, str) and socket_path and not os.path.isabs(socket_path):
        raise _untrusted(path, "its socket is not an absolute path")
    return value


def discover(
    root: Union[str, "os.PathLike[str]", None] = None, *, search_parents: bool = True
) -> Dict[str, Any]:
    """Read the discovery file ``ROOT/.writ/serve.json`` of a running server.

    Without ``root``, the current folder is read, then (with
    ``search_parents``) its parents. The file is used only when it is this
    user's, mode 0600, not a symlink, and names a loopback URL or a socket;
    otherwise :class:`Unavailable` says why.
    """
    if root is not None:
        candidates = [Path(root)]
    else:
        here = Path.cwd()
        candidates = [here, *here.parents] if search_parents else [here]
    for folder in candidates:
        path = folder / ".writ" / "serve.json"
        found = _read_trusted(path)
        if found is not None:
            return found
    if root is not None:
        where = os.fspath(root)
    elif search_parents:
        where = f"{Path.cwd()} or its parents"
    else:
        where = str(Path.cwd())
    raise Unavailable(
        f"no running writ serve found in {where} (no .writ/serve.json); "
        "start one with `writ serve ROOT`, or pass url= and token=",
        {"kind": "unavailable"},
    )


def _normalize_url(url: str) -> str:
    if url.startswith(UNIX_SCHEME):
        return url.rstrip("/")
    if "://" not in url:
        url = "http://" + url
    return url.rstrip("/")


class Session:
    """A connection to ``writ serve``: creates actors, validates plans, rewinds, dumps.

    Every root actor created here gets its own lease (children share their
    parent's); a daemon thread keeps the leases alive and :meth:`close` (or
    interpreter exit) revokes them, releasing every hold they own.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        keepalive: Optional[float] = None,
    ) -> None:
        self.url = _normalize_url(url)
        self.token = token
        self._transport = Transport(self.url, token)
        self._leases: Set[Any] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._closed = False
        self._info: Optional[Dict[str, Any]] = None
        self._keepalive = keepalive
        atexit.register(self.close)

    # -- connecting ---------------------------------------------------------

    @classmethod
    def connect(
        cls,
        url: Optional[str] = None,
        token: Optional[str] = None,
        root: Union[str, "os.PathLike[str]", None] = None,
        *,
        keepalive: Optional[float] = None,
    ) -> "Session":
        """Connect to a running server.

        ``url`` is ``http://HOST:PORT`` or, for a server started with
        ``--socket PATH``, ``unix:PATH``. ``url`` and ``token`` default to the
        discovery file of ``root`` (or of the current folder, or a parent when
        no ``token`` is given: a caller's token is never sent where a file
        found above points); when it names a socket, the socket is tried
        first and the loopback URL if the socket does not answer. A
        discovery file is used only if it is this user's, mode 0600, and
        names a loopback URL (SPEC §15). ``keepalive`` is the renewal interval
        in seconds (default: a third of the server's lease TTL).
        """
        urls: List[str] = [] if url is None else [url]
        if url is None or token is None:
            found = discover(root, search_parents=token is None)
            if url is None:
                found_socket = found.get("socket")
                if isinstance(found_socket, str) and found_socket:
                    urls.append(UNIX_SCHEME + found_socket)
                found_url = found.get("url")
                if isinstance(found_url, str):
                    urls.append(found_url)
                if not urls:
                    raise Unavailable(
                        "the discovery file has no url; pass url=", {"kind": "unavailable"}
                    )
            if token is None:
                found_token = found.get("token")
                if not isinstance(found_token, str):
                    raise Unavailable(
                        "the discovery file has no token; pass token=",
                        {"kind": "unavailable"},
                    )
                token = found_token
        for i, candidate in enumerate(urls):
            session = cls(candidate, token, keepalive=keepalive)
            try:
                session.info()
            except Unavailable:
                session.close()
                if i + 1 < len(urls):
                    continue  # the socket did not answer: try the URL
                raise
            except BaseException:
                session.close()
                raise
            return session
        raise AssertionError("unreachable: urls is never empty here")

    def call(self, method: str, params: Optional[Mapping[str, Any]] = None, wait: Optional[float] = 0.0) -> Any:
        """Call any control-API method; the typed methods are built on this."""
        return self._transport.call(method, params, wait)

    def info(self) -> Dict[str, Any]:
        """``session.info``: the server's version, protocol, root and lease TTL."""
        result = self.call("session.info")
        self._info = dict(result) if isinstance(result, Mapping) else {}
        return dict(self._info)

    @property
    def lease_ttl(self) -> float:
        """The server's lease TTL in seconds (as ``session.info`` reports it)."""
        info = self._info if self._info is not None else self.info()
        for key, scale in (("lease_ttl_ms", 0.001), ("lease_ttl", 1.0), ("lease_ttl_secs", 1.0)):
            value = info.get(key)
            if isinstance(value, (int, float)) and value > 0:
                return float(value) * scale
        return DEFAULT_LEASE_TTL

    # -- actors -------------------------------------------------------------

    def actor(
        self,
        name: str,
        *,
        fenced: Optional[Paths] = None,
        read_only: bool = False,
        root: Union[str, "os.PathLike[str]", None] = None,
    ) -> "Actor":
        """Create a root actor with its own lease.

        The grant is the whole workspace by default, ``fenced=[..]`` for an
        explicit fence held for the actor's life (``Busy`` when contested), or
        ``read_only=True``. ``root`` is a folder inside the server's root.
        """
        return self._create(
            name, None, _grant(fenced, read_only, root), wait=False, timeout=None, cancel=None
        )

    def attach(self, actor_id: Any, token: Optional[str] = None, name: str = "") -> "Actor":
        """An :class:`Actor` handle for an existing actor, e.g. in a worker process.

        ``token`` (the actor's token) makes this handle's calls carry that
        token instead of the session's.
        """
        transport = Transport(self.url, token) if token is not None else self._transport
        return Actor(self, actor_id, name, token, None, transport)

    def me(self, name: str = "") -> "Actor":
        """The actor this session's token acts as, when it is an actor token.

        A worker handed only an actor token and the URL needs nothing else:
        ``Session.connect(url, token).me()``. With the session token this is
        ``Forbidden`` (the session token is no actor).
        """
        caller = self.info().get("caller")
        if not isinstance(caller, str) or caller == "session":
            raise Forbidden(
                "this session was opened with the session token, which acts as no actor; "
                "connect with an actor's token, or create an actor with session.actor(..)",
                {"kind": "forbidden", "reason": "the session token is no actor"},
            )
        return self.attach(caller, None, name)

    def _create(
        self,
        name: str,
        parent: Optional["Actor"],
        grant: Dict[str, Any],
        *,
        wait: bool,
        timeout: Optional[float],
        cancel: Optional[Cancel],
    ) -> "Actor":
        params: Dict[str, Any] = {"name": name, "grant": grant}
        if parent is not None:
            params["parent"] = parent.id
        transport = parent._transport if parent is not None else self._transport
        if wait:
            if timeout is not None:
                params["timeout_ms"] = _millis(timeout)
            result = transport.call("actor.child_wait", params, wait=timeout, cancel=cancel)
        else:
            result = transport.call("actor.create", params)
        if not isinstance(result, Mapping):
            raise Unavailable(f"actor.create returned {result!r:.100}", {"kind": "unavailable"})
        lease = result.get("lease")
        if parent is None and lease is not None:
            self._adopt(lease)
        token = result.get("token")
        return Actor(
            self,
            result.get("actor"),
            name,
            token if isinstance(token, str) else None,
            lease,
            transport,
        )

    # -- leases ---------------------------------------------------------------

    def _adopt(self, lease: Any) -> None:
        with self._lock:
            self._leases.add(lease)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._keep_alive, name="writ-lease-keepalive", daemon=True
                )
                self._thread.start()

    @property
    def leases(self) -> List[Any]:
        """The leases this session keeps alive."""
        with self._lock:
            return sorted(self._leases, key=str)

    def _interval(self) -> float:
        if self._keepalive is not None:
            return self._keepalive
        try:
            ttl = self.lease_ttl
        except WritError:
            ttl = DEFAULT_LEASE_TTL
        return max(0.05, ttl / 3.0)

    def _keep_alive(self) -> None:
        interval = self._interval()
        while not self._stop.wait(interval):
            self.keepalive()

    def keepalive(self) -> None:
        """Renew every lease now (the background thread does this on its own)."""
        for lease in self.leases:
            try:
                self.call("lease.keepalive", {"lease": lease})
            except UnknownLease:
                with self._lock:
                    self._leases.discard(lease)
            except WritError:
                # A failed renewal is retried next round; the TTL leaves room for two more.
                pass

    def revoke(self, lease: Any) -> None:
        """Revoke one lease: its actors are dropped and their holds released."""
        with self._lock:
            self._leases.discard(lease)
        try:
            self.call("lease.revoke", {"lease": lease})
        except UnknownLease:
            pass

    # -- the rest of the control API -------------------------------------------

    def plan(self, tasks: Iterable[Union[Task, Mapping[str, Any]]]) -> List[List[str]]:
        """Validate a plan; returns its waves, or raises ``PlanConflict``/``PlanCycle``/``InvalidPlan``."""
        wire: List[Dict[str, Any]] = []
        for task in tasks:
            if isinstance(task, Task):
                wire.append(
                    {
                        "name": task.name,
                        "writes": _targets(task.writes),
                        "depends_on": list(task.depends_on),
                    }
                )
            else:
                entry = dict(task)
                entry["writes"] = _targets(entry.get("writes", []))
                entry.setdefault("depends_on", [])
                wire.append(entry)
        result = self.call("plan.validate", {"tasks": wire})
        waves = result.get("waves") if isinstance(result, Mapping) else result
        if not isinstance(waves, list):
            raise Unavailable(f"plan.validate returned {result!r:.100}", {"kind": "unavailable"})
        return [[str(name) for name in wave] for wave in waves]

    def rewind(self, turn: str, merge: bool = False) -> Dict[str, Any]:
        """Undo every write of ``turn``; ``RewindConflict`` if a file changed since."""
        return _dict(self.call("history.rewind", {"turn": turn, "merge": merge}))

    def redo(self, turn: str) -> Dict[str, Any]:
        """Re-apply a rewound turn."""
        return _dict(self.call("history.redo", {"turn": turn}))

    def dump(self) -> Dict[str, Any]:
        """The scheduler's dump (SPEC §5) as a dict: actors, holds, waiters, edges, counters."""
        return _dict(self.call("dump"))

    def dump_table(self) -> str:
        """The dump as the server's aligned text table."""
        result = self.call("dump", {"format": "table"})
        table = result.get("table") if isinstance(result, Mapping) else result
        if not isinstance(table, str):
            raise Unavailable(f"dump returned {result!r:.100}", {"kind": "unavailable"})
        return table

    # -- closing ----------------------------------------------------------------

    def close(self) -> None:
        """Stop the keepalive thread and revoke every lease (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=CALL_TIMEOUT)
        for lease in self.leases:
            try:
                self.revoke(lease)
            except WritError:
                # The server may already be gone; its TTL frees the lease anyway.
                pass
        atexit.unregister(self.close)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._closed

    def __enter__(self) -> "Session":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()


def _grant(
    fenced: Optional[Paths], read_only: bool, root: Union[str, "os.PathLike[str]", None]
) -> Dict[str, Any]:
    if fenced is not None and read_only:
        raise ValueError("a grant is either fenced=[..] or read_only=True, not both")
    grant: Dict[str, Any]
    if fenced is not None:
        grant = {"fenced": _targets(fenced)}
    elif read_only:
        grant = {"read_only": True}
    else:
        grant = {"workspace": True}
    if root is not None:
        grant["root"] = os.fspath(root)
    return grant


def _millis(seconds: float) -> int:
    if seconds < 0:
        raise ValueError("a timeout cannot be negative")
    return int(round(seconds * 1000))


def _dict(value: Any) -> Dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    return {"result": value}


class Hold:
    """A reservation (``admit``/``try_admit``) or fence; a context manager.

    :meth:`release` frees it (idempotent); leaving the ``with`` block does the same.
    """

    def __init__(self, actor: "Actor", hold_id: Any, kind: str) -> None:
        self.actor = actor
        self.id = hold_id
        self.kind = kind
        self._released = False

    @property
    def released(self) -> bool:
        """True once released through this handle."""
        return self._released

    def release(self) -> None:
        """Release the hold and wake whoever waits for it.

        A hold the server no longer knows (its actor or lease is gone) is
        already free, so that is not an error here.
        """
        if self._released:
            return
        self._released = True
        try:
            self.actor._transport.call("release", {"hold": self.id})
        except UnknownHold:
            pass

    def __enter__(self) -> "Hold":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        return f"<{type(self).__name__} {self.id!r} of {self.actor.name!r} ({state})>"


class Fence(Hold):
    """A fence: a hold that can be widened or narrowed."""

    def __enter__(self) -> "Fence":
        return self

    def extend(self, paths: Paths) -> None:
        """Widen the fence, all-or-nothing (``Busy`` if contested, nothing added)."""
        self.actor._transport.call("fence.extend", {"hold": self.id, "targets": _targets(paths)})

    def narrow(self, paths: Paths) -> None:
        """Keep only ``paths`` (each inside the fence); the rest is released at once."""
        self.actor._transport.call("fence.narrow", {"hold": self.id, "targets": _targets(paths)})


class Actor:
    """One agent of the session: admits calls, takes fences, reads and writes files.

    ``token`` is the actor's own token: hand it to the process that acts as
    this actor (``Session.connect(url, token).me()``); it
    can act only as this actor and its descendants.
    """

    def __init__(
        self,
        session: Session,
        actor_id: Any,
        name: str,
        token: Optional[str],
        lease: Any,
        transport: Transport,
    ) -> None:
        self.session = session
        self.id = actor_id
        self.name = name
        self.token = token
        self.lease = lease
        self._transport = transport
        self._dropped = False

    def __repr__(self) -> str:
        return f"<Actor {self.name!r} id={self.id!r}>"

    def _call(
        self,
        method: str,
        params: Dict[str, Any],
        wait: Optional[float] = 0.0,
        cancel: Optional[Cancel] = None,
    ) -> Any:
        params["actor"] = self.id
        return self._transport.call(method, params, wait, cancel)

    def _ask_hold(
        self,
        method: str,
        params: Dict[str, Any],
        wait: Optional[float] = 0.0,
        cancel: Optional[Cancel] = None,
    ) -> Any:
        """Asks for a hold with a ticket (SPEC §13).

        An answer that says what happened ends the ticket. One that does not
        (``Unavailable``: the server or its etcd did not answer, the reply
        broke off, the call was cancelled; or an interrupt mid-call) may hide
        a grant made meanwhile: the ticket is then given up, which releases
        such a grant, or makes sure a grant still on its way never lands.
        """
        ticket = self._transport.ticket()
        params["ticket"] = ticket
        try:
            return self._call(method, params, wait, cancel)
        except BaseException as err:
            if isinstance(err, Unavailable) or not isinstance(err, WritError):
                self._give_up(ticket)
            raise

    def _give_up(self, ticket: str) -> None:
        """Gives ``ticket`` up in the background: the caller has its answer
        already, and a server that did not answer may take a while to refuse
        this call too. If it never arrives, the lease frees the hold."""
        params = {"actor": self.id, "ticket": ticket}

        def give_up() -> None:
            try:
                self._transport.call("release", params)
            except WritError:
                pass

        threading.Thread(target=give_up, name="writ-give-up", daemon=True).start()

    # -- children -----------------------------------------------------------------

    def child(
        self,
        name: str,
        *,
        fenced: Optional[Paths] = None,
        read_only: bool = False,
        root: Union[str, "os.PathLike[str]", None] = None,
        wait: bool = False,
        timeout: Optional[float] = None,
        cancel: Optional[Cancel] = None,
    ) -> "Actor":
        """Create a child actor (same lease). ``wait=True`` waits for a slot or its fence."""
        return self.session._create(
            name, self, _grant(fenced, read_only, root), wait=wait, timeout=timeout, cancel=cancel
        )

    def drop(self) -> None:
        """Drop the actor: its fences are released (idempotent)."""
        if self._dropped:
            return
        self._dropped = True
        try:
            self._call("actor.drop", {})
        except UnknownActor:
            pass

    def __enter__(self) -> "Actor":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.drop()

    # -- admission ------------------------------------------------------------------

    def admit(
        self,
        paths: Paths,
        timeout: Optional[float] = None,
        *,
        priority: Optional[int] = None,
        label: Optional[str] = None,
        cancel: Optional[Cancel] = None,
    ) -> Hold:
        """Wait until every path is free and reserve them all (``Timeout`` after ``timeout`` s).

        ``cancel`` (a :class:`Cancel`) abandons the wait from another thread.
        """
        params: Dict[str, Any] = {"targets": _targets(paths), "wait": True}
        if timeout is not None:
            params["timeout_ms"] = _millis(timeout)
        _request_options(params, priority, label)
        return self._hold(self._ask_hold("admit", params, wait=timeout, cancel=cancel), "call", Hold)

    def try_admit(
        self,
        paths: Paths,
        *,
        priority: Optional[int] = None,
        label: Optional[str] = None,
    ) -> Hold:
        """Reserve every path now or raise ``Busy`` (nothing reserved)."""
        params: Dict[str, Any] = {"targets": _targets(paths), "wait": False}
        _request_options(params, priority, label)
        return self._hold(self._ask_hold("admit", params), "call", Hold)

    def fence(
        self,
        paths: Paths,
        *,
        wait: bool = False,
        timeout: Optional[float] = None,
        cancel: Optional[Cancel] = None,
    ) -> Fence:
        """Take a fence (long-lived hold); try-only (``Busy``) unless ``wait=True``."""
        params: Dict[str, Any] = {"targets": _targets(paths), "wait": wait}
        if timeout is not None:
            params["timeout_ms"] = _millis(timeout)
        waited: Optional[float] = timeout if wait else 0.0
        fence = self._hold(self._ask_hold("fence", params, wait=waited, cancel=cancel), "fence", Fence)
        assert isinstance(fence, Fence)
        return fence

    def _hold(self, result: Any, kind: str, cls: Type[Hold]) -> Hold:
        hold_id = result.get("hold") if isinstance(result, Mapping) else result
        if hold_id is None:
            raise Unavailable(f"the server returned no hold: {result!r:.100}", {"kind": "unavailable"})
        return cls(self, hold_id, kind)

    # -- files ----------------------------------------------------------------------

    def _file_call(self, method: str, params: Dict[str, Any], timeout: Optional[float]) -> Any:
        """A file method; with ``timeout``, the server waits that long (seconds)
        for a path another actor is writing or has reserved, then runs it, or
        raises ``Busy`` naming who still holds the path. Without, a contested
        path is ``Busy`` at once."""
        if timeout is None:
            return self._call(method, params)
        params["timeout_ms"] = _millis(timeout)
        return self._call(method, params, wait=timeout)

    def read_with_mark(
        self, path: str, lines: Optional[Lines] = None, *, timeout: Optional[float] = None
    ) -> ReadResult:
        """Read a file and the mark the gate checks.

        ``lines=(start, end)`` returns only those lines, numbered from 0 with
        ``end`` excluded, as a Python slice (``end=None``: to the end); the
        mark still covers the whole file, so a tail is enough before an append
        or an edit, and its ``view`` says which lines were read: ``write``,
        ``delete`` and ``rename`` need a read of all of it (``PartialView``).
        ``timeout`` (seconds) waits for a write in progress instead of ``Busy``.
        """
        params: Dict[str, Any] = {"path": path}
        if lines is not None:
            params["lines"] = list(lines)
        result = self._file_call("files.read", params, timeout)
        if not isinstance(result, Mapping):
            raise Unavailable(f"files.read returned {result!r:.100}", {"kind": "unavailable"})
        mark = result.get("mark")
        return ReadResult(_content_from_wire(result.get("content")), dict(mark) if isinstance(mark, Mapping) else {})

    def read(self, path: str, lines: Optional[Lines] = None, *, timeout: Optional[float] = None) -> str:
        """Read a text file; the read is what allows a later write (SPEC §6)."""
        content = self.read_with_mark(path, lines, timeout=timeout).content
        if isinstance(content, bytes):
            return content.decode("utf-8")
        return content

    def read_bytes(self, path: str, lines: Optional[Lines] = None, *, timeout: Optional[float] = None) -> bytes:
        """Read a file as bytes."""
        content = self.read_with_mark(path, lines, timeout=timeout).content
        return content.encode("utf-8") if isinstance(content, str) else content

    def write(self, path: str, content: Union[str, bytes], *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Replace (or create) a file; ``NotRead``/``Stale`` unless read in its current version.

        A read of part of the file (``lines``) is not enough: ``PartialView``.

        ``timeout`` (seconds) waits for a contested path, then ``Busy``; every
        file method takes it.
        """
        params = {"path": path, "content": _content_to_wire(content)}
        return _dict(self._file_call("files.write", params, timeout))

    def append(self, path: str, content: Union[str, bytes], *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Append to a file (creating it if missing).

        The receipt carries ``anchored`` (``marked``, ``writer``, ``diff``,
        ``truncated``) when the mark was stale and the append was applied on
        top of the changes since the read (SPEC §6, anchored edits). The
        same append sent again with the same read (a retry after a lost
        answer) writes nothing and returns the first receipt with
        ``repeat: True``; to append the same text again, read first.
        """
        params = {"path": path, "content": _content_to_wire(content)}
        return _dict(self._file_call("files.append", params, timeout))

    def edit(self, path: str, old: str, new: str, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Replace the one occurrence of ``old`` by ``new`` (``NoMatch``/``AmbiguousMatch``).

        With a stale mark the edit is applied when it cannot overwrite unseen
        work; the receipt then carries ``anchored`` with the ``diff`` of what
        changed since the read (SPEC §6, anchored edits).
        """
        return _dict(self._file_call("files.replace", {"path": path, "old": old, "new": new}, timeout))

    def delete(self, path: str, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Delete a file (it must have been read in its current version)."""
        return _dict(self._file_call("files.delete", {"path": path}, timeout))

    def rename(self, source: str, destination: str, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Rename a file (the source, and an existing destination, must have been read)."""
        return _dict(self._file_call("files.rename", {"from": source, "to": destination}, timeout))

    def set_turn(self, turn: str) -> None:
        """Group this actor's next writes under ``turn`` in history (for ``Session.rewind``)."""
        self._call("turn.set", {"turn": turn})

    def run(
        self,
        command: Union[str, Sequence[str]],
        *,
        cwd: Optional[str] = None,
        timeout: float = 600.0,
        keep: Optional[float] = None,
    ) -> Dict[str, Any]:
        """Run a shell command as a transaction (``files.run``, SPEC §17).

        ``command`` is a shell line (run with ``/bin/sh -c``) or an argument
        list. The server runs it with the workspace seen through a private
        copy-on-write layer and, when it ends (or after ``timeout`` seconds,
        when its whole process tree is stopped), applies its file changes as
        this actor's writes, all or nothing: merged with what others changed
        meanwhile, or refused (``committed`` is ``False``, ``conflicts`` says
        which files, who changed them and both diffs). The report also has
        ``exit_code``, ``output``, ``artifacts`` and ``mode``.
        """
        params: Dict[str, Any] = (
            {"command": command} if isinstance(command, str) else {"argv": list(command)}
        )
        if cwd is not None:
            params["cwd"] = cwd
        params["timeout_s"] = float(timeout)
        if keep is not None:
            params["keep_s"] = float(keep)
        # The call lasts as long as the command: wait that long, and a
        # commit's reservation on top.
        return _dict(self._call("files.run", params, wait=float(timeout) + 60.0))


def _request_options(params: Dict[str, Any], priority: Optional[int], label: Optional[str]) -> None:
    if priority is not None:
        params["priority"] = priority
    if label is not None:
        params["label"] = label
