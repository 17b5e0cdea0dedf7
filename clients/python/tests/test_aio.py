"""The asyncio front-end, including cancelling a wait."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable

import pytest

import writ_client
from writ_client.aio import AsyncFence, AsyncSession

from conftest import DEADLINE, Server


async def poll(what: str, condition: Callable[[], Awaitable[Any]]) -> Any:
    end = time.monotonic() + DEADLINE
    while True:
        value = await condition()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def test_async_round_trip(server: Server) -> None:
    async def main() -> None:
        async with await AsyncSession.connect(server.url, server.token) as s:
            lead = await s.actor("lead")
            kid = await lead.child("kid", fenced=["src/"])
            async with await kid.admit(["src/a.py"], timeout=5) as hold:
                assert hold.id is not None
                with pytest.raises(writ_client.Busy):
                    await lead.try_admit(["src/a.py"])
            await kid.write("src/a.py", "one\n")
            assert await kid.read("src/a.py") == "one\n"
            await kid.edit("src/a.py", "one", "two")
            assert (server.root / "src" / "a.py").read_text() == "two\n"
            async with await lead.fence(["docs/"]) as fence:
                assert isinstance(fence, AsyncFence)
                await fence.extend(["notes/"])
                await fence.narrow(["docs/"])
            assert await s.plan([writ_client.Task("a", ["a"])]) == [["a"]]
            dump = await s.dump()
            assert {a["name"] for a in dump["actors"]} >= {"lead", "kid"}
            assert "kid" in await s.dump_table()
            await kid.drop()

    asyncio.run(main())


def test_cancelling_a_waiting_admit_leaves_nothing_behind(server: Server) -> None:
    async def main() -> None:
        async with await AsyncSession.connect(server.url, server.token) as s:
            holder = await s.actor("holder")
            waiter = await s.actor("waiter")
            held = await holder.try_admit(["x.txt"])
            task = asyncio.ensure_future(waiter.admit(["x.txt"]))

            async def waiting() -> bool:
                return any(w["actor"] == "waiter" for w in (await s.dump())["waiters"])

            await poll("the admit to wait", waiting)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

            async def gone() -> bool:
                return not await waiting()

            # The closed connection cancels the wait on the server.
            await poll("the cancelled wait to leave the queue", gone)
            await held.release()
            other = await s.actor("other")
            async with await other.try_admit(["x.txt"]):
                pass
            assert not any(h["actor"] == "waiter" for h in (await s.dump())["holds"])

    asyncio.run(main())
