"""The same client for asyncio code: every method awaited, standard library only.

Each call runs the blocking client in the loop's default thread pool. A
waiting call (``admit``, ``fence(wait=True)``, ``child(wait=True)``) that is
cancelled closes its connection, so the server cancels the wait with nothing
left behind; a grant that raced with the cancellation is released (a child
dropped) in the background, never leaked.

>>> async with await AsyncSession.connect() as session:       # doctest: +SKIP
...     lead = await session.actor("lead")
...     async with await lead.fence(["src/"], wait=True, timeout=5):
...         await lead.write("src/a.py", "print('hi')\\n")
"""

from __future__ import annotations

import asyncio
import os
from types import TracebackType
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Type, TypeVar, Union

from ._errors import WritError
from ._session import Actor, Fence, Hold, Lines, Paths, ReadResult, Session, Task
from ._transport import Cancel

__all__ = ["AsyncSession", "AsyncActor", "AsyncHold", "AsyncFence"]

T = TypeVar("T")
PathArg = Union[str, "os.PathLike[str]", None]


async def _run(fn: Callable[[], T]) -> T:
    return await asyncio.get_running_loop().run_in_executor(None, fn)


async def _wait(fn: Callable[[Cancel], T], undo: Callable[[T], None]) -> T:
    """Run a waiting call; on cancellation abandon it and undo a late success."""
    loop = asyncio.get_running_loop()
    cancel = Cancel()
    future = loop.run_in_executor(None, fn, cancel)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        cancel.cancel()

        def late(done: "asyncio.Future[T]") -> None:
            if done.cancelled() or done.exception() is not None:
                return
            # Off the loop: undoing is a blocking call.
            loop.run_in_executor(None, _quietly, undo, done.result())

        future.add_done_callback(late)
        raise


def _quietly(undo: Callable[[T], None], value: T) -> None:
    try:
        undo(value)
    except WritError:
        # The lease may be gone already, which released it anyway.
        pass


def _release(hold: Hold) -> None:
    hold.release()


def _drop(actor: Actor) -> None:
    actor.drop()


class AsyncHold:
    """A hold for ``async with``; :meth:`release` is awaited."""

    def __init__(self, hold: Hold) -> None:
        self.sync = hold

    @property
    def id(self) -> Any:
        """The hold's wire handle."""
        return self.sync.id

    @property
    def released(self) -> bool:
        """True once released through this handle."""
        return self.sync.released

    async def release(self) -> None:
        """Release the hold (idempotent)."""
        await _run(self.sync.release)

    async def __aenter__(self) -> "AsyncHold":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.release()


class AsyncFence(AsyncHold):
    """A fence for ``async with``, with ``extend`` and ``narrow``."""

    sync: Fence

    def __init__(self, fence: Fence) -> None:
        super().__init__(fence)
        self.sync = fence

    async def __aenter__(self) -> "AsyncFence":
        return self

    async def extend(self, paths: Paths) -> None:
        """Widen the fence, all-or-nothing."""
        await _run(lambda: self.sync.extend(paths))

    async def narrow(self, paths: Paths) -> None:
        """Keep only ``paths``; the rest is released at once."""
        await _run(lambda: self.sync.narrow(paths))


class AsyncActor:
    """:class:`writ_client.Actor` with every method awaited."""

    def __init__(self, actor: Actor) -> None:
        self.sync = actor

    @property
    def id(self) -> Any:
        """The actor's wire handle."""
        return self.sync.id

    @property
    def name(self) -> str:
        """The actor's name."""
        return self.sync.name

    @property
    def token(self) -> Optional[str]:
        """The actor's own token."""
        return self.sync.token

    @property
    def lease(self) -> Any:
        """The lease the actor belongs to."""
        return self.sync.lease

    async def child(
        self,
        name: str,
        *,
        fenced: Optional[Paths] = None,
        read_only: bool = False,
        root: PathArg = None,
        wait: bool = False,
        timeout: Optional[float] = None,
    ) -> "AsyncActor":
        """Create a child actor; ``wait=True`` waits (cancellably) for a slot or its fence."""

        def make(cancel: Cancel) -> Actor:
            return self.sync.child(
                name, fenced=fenced, read_only=read_only, root=root, wait=wait, timeout=timeout, cancel=cancel
            )

        return AsyncActor(await _wait(make, _drop))

    async def admit(
        self,
        paths: Paths,
        timeout: Optional[float] = None,
        *,
        priority: Optional[int] = None,
        label: Optional[str] = None,
    ) -> AsyncHold:
        """Wait until every path is free and reserve them all; cancellable."""

        def admit(cancel: Cancel) -> Hold:
            return self.sync.admit(paths, timeout, priority=priority, label=label, cancel=cancel)

        return AsyncHold(await _wait(admit, _release))

    async def try_admit(
        self, paths: Paths, *, priority: Optional[int] = None, label: Optional[str] = None
    ) -> AsyncHold:
        """Reserve every path now or raise ``Busy``."""
        return AsyncHold(await _run(lambda: self.sync.try_admit(paths, priority=priority, label=label)))

    async def fence(self, paths: Paths, *, wait: bool = False, timeout: Optional[float] = None) -> AsyncFence:
        """Take a fence; try-only unless ``wait=True`` (then cancellable)."""

        def fence(cancel: Cancel) -> Fence:
            return self.sync.fence(paths, wait=wait, timeout=timeout, cancel=cancel)

        return AsyncFence(await _wait(fence, _release))

    async def read(self, path: str, lines: Optional[Lines] = None, *, timeout: Optional[float] = None) -> str:
        """Read a text file (recording the read mark); ``timeout`` waits for a write in progress."""
        return await _run(lambda: self.sync.read(path, lines, timeout=timeout))

    async def read_bytes(self, path: str, lines: Optional[Lines] = None, *, timeout: Optional[float] = None) -> bytes:
        """Read a file as bytes."""
        return await _run(lambda: self.sync.read_bytes(path, lines, timeout=timeout))

    async def read_with_mark(
        self, path: str, lines: Optional[Lines] = None, *, timeout: Optional[float] = None
    ) -> ReadResult:
        """Read a file and its mark."""
        return await _run(lambda: self.sync.read_with_mark(path, lines, timeout=timeout))

    async def write(self, path: str, content: Union[str, bytes], *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Replace or create a file; ``timeout`` waits for a contested path, then ``Busy``."""
        return await _run(lambda: self.sync.write(path, content, timeout=timeout))

    async def append(self, path: str, content: Union[str, bytes], *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Append to a file."""
        return await _run(lambda: self.sync.append(path, content, timeout=timeout))

    async def edit(self, path: str, old: str, new: str, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Replace the one occurrence of ``old`` by ``new``."""
        return await _run(lambda: self.sync.edit(path, old, new, timeout=timeout))

    async def delete(self, path: str, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Delete a file."""
        return await _run(lambda: self.sync.delete(path, timeout=timeout))

    async def rename(self, source: str, destination: str, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Rename a file."""
        return await _run(lambda: self.sync.rename(source, destination, timeout=timeout))

    async def set_turn(self, turn: str) -> None:
        """Group the next writes under ``turn``."""
        await _run(lambda: self.sync.set_turn(turn))

    async def run(
        self,
        command: Union[str, Sequence[str]],
        *,
        cwd: Optional[str] = None,
        timeout: float = 600.0,
        keep: Optional[float] = None,
    ) -> Dict[str, Any]:
        """Run a shell command as a transaction (see ``Actor.run``)."""
        return await _run(lambda: self.sync.run(command, cwd=cwd, timeout=timeout, keep=keep))

    async def drop(self) -> None:
        """Drop the actor (its fences go)."""
        await _run(self.sync.drop)

    async def __aenter__(self) -> "AsyncActor":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.drop()


class AsyncSession:
    """:class:`writ_client.Session` with every method awaited."""

    def __init__(self, session: Session) -> None:
        self.sync = session

    @classmethod
    async def connect(
        cls,
        url: Optional[str] = None,
        token: Optional[str] = None,
        root: PathArg = None,
        *,
        keepalive: Optional[float] = None,
    ) -> "AsyncSession":
        """Connect as :meth:`Session.connect` does."""
        return cls(await _run(lambda: Session.connect(url, token, root, keepalive=keepalive)))

    async def actor(
        self, name: str, *, fenced: Optional[Paths] = None, read_only: bool = False, root: PathArg = None
    ) -> AsyncActor:
        """Create a root actor with its own lease."""
        return AsyncActor(await _run(lambda: self.sync.actor(name, fenced=fenced, read_only=read_only, root=root)))

    def attach(self, actor_id: Any, token: Optional[str] = None, name: str = "") -> AsyncActor:
        """A handle on an existing actor (no call is made)."""
        return AsyncActor(self.sync.attach(actor_id, token, name))

    async def info(self) -> Dict[str, Any]:
        """``session.info``."""
        return await _run(self.sync.info)

    async def plan(self, tasks: Iterable[Union[Task, Mapping[str, Any]]]) -> List[List[str]]:
        """Validate a plan; its waves."""
        return await _run(lambda: self.sync.plan(tasks))

    async def rewind(self, turn: str, merge: bool = False) -> Dict[str, Any]:
        """Undo a turn's writes."""
        return await _run(lambda: self.sync.rewind(turn, merge))

    async def redo(self, turn: str) -> Dict[str, Any]:
        """Re-apply a rewound turn."""
        return await _run(lambda: self.sync.redo(turn))

    async def dump(self) -> Dict[str, Any]:
        """The dump as a dict."""
        return await _run(self.sync.dump)

    async def dump_table(self) -> str:
        """The dump as the server's text table."""
        return await _run(self.sync.dump_table)

    async def close(self) -> None:
        """Revoke every lease and stop the keepalive thread."""
        await _run(self.sync.close)

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.close()
