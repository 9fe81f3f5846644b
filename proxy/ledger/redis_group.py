"""Group commit for the shared ledger's appends: the appends that arrive while one round trip is out
go together in the next, one pipelined round trip of the same Lua script each, in arrival order.

Each append is still its own script run (ledger and retain queue written atomically, the same
stream ids), and each caller still waits for its own reply, so a turn is answered only once Redis
has its entry — or gets the error its own command got. What changes is the proxy's cost: redis-py's
per-command work (a pooled connection taken and given back, timeouts armed, the reply awaited) is
paid once per round trip instead of once per turn."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from typing import Any

import redis.asyncio as aredis
from redis.exceptions import NoScriptError


class GroupCommit:
    """One writer task per event loop, started by the first append that finds none running."""

    BATCH = 256  # appends a round trip carries at most

    def __init__(self, client: Callable[[], aredis.Redis], script: str, numkeys: int) -> None:
        self.client = client
        self.script = script
        self.sha = hashlib.sha1(script.encode()).hexdigest()  # what Redis names the script (EVALSHA)
        self.numkeys = numkeys
        self._waiting: list[tuple[tuple[Any, ...], asyncio.Future]] = []
        self._task: asyncio.Task | None = None
        self.round_trips = 0

    async def run(self, *keys_and_args: Any) -> Any:
        """The script's reply for these keys and arguments (`numkeys` keys first), or its error."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._waiting.append((keys_and_args, fut))
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._flush())
        return await fut

    async def _flush(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting[:self.BATCH], self._waiting[self.BATCH:]
            try:
                replies = await self._send([args for args, _ in batch])
            except Exception as exc:  # the round trip failed: every append in it failed
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for (_, fut), reply in zip(batch, replies):
                if fut.done():
                    continue
                if isinstance(reply, Exception):
                    fut.set_exception(reply)
                else:
                    fut.set_result(reply)

    async def _send(self, batch: list[tuple[Any, ...]]) -> list[Any]:
        replies = await self._pipeline(batch)
        lost = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
        if lost:  # Redis lost its scripts (restarted, SCRIPT FLUSH): load it, run those again
            await self.client().script_load(self.script)
            for i, reply in zip(lost, await self._pipeline([batch[i] for i in lost])):
                replies[i] = reply
        return replies

    async def _pipeline(self, batch: list[tuple[Any, ...]]) -> list[Any]:
        pipe = self.client().pipeline(transaction=False)
        for args in batch:
            pipe.execute_command("EVALSHA", self.sha, self.numkeys, *args)
        self.round_trips += 1
        return await pipe.execute(raise_on_error=False)
