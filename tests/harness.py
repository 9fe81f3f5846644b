"""A real loopback stack for tests: fake provider, memory services and the proxy, all over TCP."""

from __future__ import annotations

import asyncio
import io
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from manifests.agents import memory_manifest, write_agent
from proxy.ledger.files import Ledger
from proxy.state import ProxyState
from proxy.testing.fake_provider import FakeProvider


@dataclass
class Stack:
    provider: FakeProvider
    provider_url: str
    proxy_url: str
    state: ProxyState
    log: io.StringIO
    context_root: Path
    history_root: Path
    tokens: dict[str, str] = field(default_factory=dict)

    def add_agent(self, agent_id: str, memory_url: str | None = None, *, service: str = "mem-svc",
                  pod: str = "test-pod", **overrides: Any) -> str:
        memory = None
        if memory_url:
            memory = memory_manifest(service, memory_url)
            memory.update(overrides)
            memory = {k: v for k, v in memory.items() if v is not None}
        token, _ = write_agent(self.context_root, agent_id, pod=pod, memory=memory)
        self.tokens[agent_id] = token
        return token

    def events(self, op: str | None = None, **match: Any) -> list[dict[str, Any]]:
        out = []
        for line in self.log.getvalue().splitlines():
            ev = orjson.loads(line)
            if ev.get("type") != "memory_op" or (op and ev.get("memory_op") != op):
                continue
            if all(ev.get(k) == v for k, v in match.items()):
                out.append(ev)
        return out

    def log_lines(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.log.getvalue().splitlines()]

    def ledger(self, agent_id: str) -> list[dict[str, Any]]:
        return [ref.entry for ref in Ledger(self.history_root).read(agent_id)]

    def openai(self, agent_id: str, **kw: Any):
        from openai import AsyncOpenAI
        return AsyncOpenAI(base_url=f"{self.proxy_url}/v1", api_key=self.tokens[agent_id], max_retries=0, **kw)

    def anthropic(self, agent_id: str, **kw: Any):
        from anthropic import AsyncAnthropic
        return AsyncAnthropic(base_url=self.proxy_url, api_key=self.tokens[agent_id], max_retries=0, **kw)

    async def settle(self, timeout: float = 60.0) -> None:
        """Every turn answered and every retain delivered; generous, as the Mongo stand-in is slow."""
        await self.state.settle(timeout)

    async def caught_up(self, timeout: float = 60.0) -> None:
        """Every ledgered turn acknowledged by its memory service. `settle` takes a lane backing off
        as done (right for a broken service); on a loaded host a slow first retain can time out and
        back off, and a test that reads the service next needs it delivered, not merely idle."""
        async def wait() -> None:
            while self.state.active_turns or not self.state.retain.caught_up():
                await asyncio.sleep(0.01)
        await asyncio.wait_for(wait(), timeout)


async def wait_port(port: int, timeout: float = 20) -> None:
    """Until something accepts connections on 127.0.0.1:port (a server process we started)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        except OSError:
            await asyncio.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port}")


def stop(proc: subprocess.Popen, sig=signal.SIGTERM) -> None:
    """Signal a server process we started and wait for it (killed if it has not gone in 30 s)."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
