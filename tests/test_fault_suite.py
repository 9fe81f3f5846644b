"""The fault suite: thousands of requests through a real proxy process while the memory service
is killed and restarted, answers 500s, hangs, and the proxy itself is restarted (and killed).

At the end every request got its normal answer, the ledger has exactly one line per completed
turn, and the memory service holds exactly one memory per ledger id: zero lost, zero duplicated.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web

from manifests.agents import memory_manifest, write_agent
from memplane_core.contract import RETAIN_BATCH_PATH
from proxy.ledger.files import Ledger
from memplane_cli.runner import free_port
from tests.conftest import url_of
from tests.harness import stop, wait_port

BIN = Path(sys.executable).parent / "memplane"


def spawn(*args: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen([str(BIN), *args], stdout=open(log, "ab"), stderr=subprocess.STDOUT)


class Chaos:
    """A front for the memory service that passes through, answers 500, or hangs."""

    def __init__(self, target_port: int) -> None:
        self.mode = "pass"
        self.target = f"http://127.0.0.1:{target_port}"
        self.session: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self.mode == "500":
            return web.json_response({"error": "injected"}, status=500)
        if self.mode == "hang":
            await asyncio.sleep(30)
        self.session = self.session or aiohttp.ClientSession()
        try:
            async with self.session.request(request.method, self.target + request.path, data=await request.read(),
                                            headers={"Content-Type": "application/json"}) as r:
                return web.Response(status=r.status, body=await r.read(), content_type="application/json")
        except aiohttp.ClientError:
            return web.json_response({"error": "service down"}, status=502)


async def drive(proxy_port: int, token: str, total: int, concurrency: int, on_progress) -> dict[str, int]:
    """Send `total` uniquely marked requests; retry only when the connection itself failed."""
    answers: dict[str, int] = {}
    next_i = 0
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
        async def worker():
            nonlocal next_i
            while next_i < total:
                i = next_i
                next_i += 1
                marker = f"req-{i:05d}"
                body = orjson.dumps({"model": "m", "stream": i % 3 == 0,
                                     "messages": [{"role": "user", "content": f"{marker} note about topic {i % 17}"}]})
                deadline = time.monotonic() + 60  # a restarting proxy may take a while under load
                attempt = 0
                while True:
                    attempt += 1
                    try:
                        async with s.post(f"http://127.0.0.1:{proxy_port}/v1/chat/completions", data=body,
                                          headers=headers) as r:
                            text = await r.text()
                            assert r.status == 200, (marker, r.status, text)
                            if i % 3 == 0:  # a stream: complete, ending as the provider ended it
                                assert text.endswith("data: [DONE]\n\n") and '"finish_reason":"stop"' in text
                            else:
                                content = orjson.loads(text)["choices"][0]["message"]["content"]
                                assert content == "Noted." or content.startswith("From memory"), content
                            answers[marker] = attempt
                            break
                    except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError):
                        if time.monotonic() > deadline:
                            raise AssertionError(f"{marker} never answered") from None
                        await asyncio.sleep(0.05)
                await on_progress(len(answers))
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return answers


def ledger_markers(history: Path, agent: str) -> list[tuple[str, str]]:
    out = []
    for ref in Ledger(history).read(agent):
        content = ref.entry["request_original"]["messages"][-1]["content"]
        out.append((content.split()[0], ref.entry["id"]))
    return out


def stored_ids(data_dir: Path, agent: str) -> list[str]:
    path = data_dir / agent / "entries.jsonl"
    return [orjson.loads(line)["id"] for line in path.read_bytes().splitlines() if line.strip()] if path.exists() else []


async def wait_delivered(data_dir: Path, agent: str, ids: set[str], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if set(stored_ids(data_dir, agent)) >= ids:
            return
        await asyncio.sleep(0.2)


def log_tail(log: Path, size: int = 4000) -> str:
    """What the spawned processes last said, for a failure's message."""
    return log.read_bytes()[-size:].decode(errors="replace") if log.exists() else "(no log)"


@pytest.fixture
def world(tmp_path, provider_server):
    provider, provider_url = provider_server
    provider.record = False
    return {"tmp": tmp_path, "provider_url": provider_url, "ctx": tmp_path / "ctx", "hist": tmp_path / "hist",
            "data": tmp_path / "data", "log": tmp_path / "procs.log"}


async def test_no_turn_or_memory_is_lost_or_duplicated_under_faults(world, aiohttp_server):
    w = world
    adapter_port, proxy_port = free_port(), free_port()
    chaos = Chaos(adapter_port)
    chaos_server = await aiohttp_server(chaos.app())
    token, _ = write_agent(w["ctx"], "worker", memory=memory_manifest("mem-svc", url_of(chaos_server)))
    adapter_args = ["adapter", "reference", "--port", str(adapter_port), "--data-dir", str(w["data"])]
    proxy_args = ["serve", "--port", str(proxy_port), "--context-root", str(w["ctx"]), "--history-root", str(w["hist"]),
                  "--openai-base-url", f"{w['provider_url']}/v1", "--shutdown-grace", "20"]
    procs = {"adapter": spawn(*adapter_args, log=w["log"]), "proxy": spawn(*proxy_args, log=w["log"])}
    await wait_port(adapter_port)
    await wait_port(proxy_port)
    assert all(p.poll() is None for p in procs.values()), log_tail(w["log"])  # ours listen, not a stranger
    total = int(os.environ.get("MEMPLANE_FAULT_REQUESTS", "2000"))
    done_phases: set[str] = set()

    async def phases(answered: int) -> None:
        share = answered / total
        for at, name in ((0.10, "kill-adapter"), (0.25, "restart-adapter"), (0.40, "500s"), (0.50, "hang"),
                         (0.58, "heal"), (0.70, "restart-proxy")):
            if share >= at and name not in done_phases:
                done_phases.add(name)
                if name == "kill-adapter":
                    stop(procs["adapter"], signal.SIGKILL)
                elif name == "restart-adapter":
                    procs["adapter"] = spawn(*adapter_args, log=w["log"])
                elif name in ("500s", "hang"):
                    chaos.mode = "500" if name == "500s" else "hang"
                elif name == "heal":
                    chaos.mode = "pass"
                elif name == "restart-proxy":
                    old = procs["proxy"]
                    old.send_signal(signal.SIGTERM)  # graceful: in-flight turns finish
                    await asyncio.get_running_loop().run_in_executor(None, old.wait, 60)
                    procs["proxy"] = spawn(*proxy_args, log=w["log"])

    try:
        answers = await drive(proxy_port, token, total, 16, phases)
        assert len(answers) == total and len(done_phases) == 6
        markers = ledger_markers(w["hist"], "worker")
        assert sorted(m for m, _ in markers) == sorted(answers)  # exactly one line per completed turn
        ids = {eid for _, eid in markers}
        assert len(ids) == total
        await wait_delivered(w["data"], "worker", ids)
        stored = stored_ids(w["data"], "worker")
        assert len(stored) == len(set(stored)) == total and set(stored) == ids, (  # zero lost, zero duplicated
            len(stored), len(set(stored)), len(ids - set(stored)), log_tail(w["log"]))
    finally:
        for p in procs.values():
            stop(p)
        if chaos.session:
            await chaos.session.close()


async def test_a_hard_killed_proxy_loses_no_answered_turn(world, reference):
    w = world
    ref_url, store = reference
    proxy_port = free_port()
    token, _ = write_agent(w["ctx"], "hard", memory=memory_manifest("mem-svc", ref_url, retain_batch_path=RETAIN_BATCH_PATH))
    args = ["serve", "--port", str(proxy_port), "--context-root", str(w["ctx"]), "--history-root", str(w["hist"]),
            "--openai-base-url", f"{w['provider_url']}/v1"]
    procs = {"proxy": spawn(*args, log=w["log"])}
    await wait_port(proxy_port)
    killed = False

    async def kill_once(answered: int) -> None:
        nonlocal killed
        if answered >= 150 and not killed:
            killed = True
            stop(procs["proxy"], signal.SIGKILL)
            procs["proxy"] = spawn(*args, log=w["log"])

    try:
        answers = await drive(proxy_port, token, 400, 8, kill_once)
        markers = ledger_markers(w["hist"], "hard")
        ledgered = {m for m, _ in markers}
        assert set(answers) <= ledgered  # every answer the agent saw is in the ledger
        ids = {eid for _, eid in markers}
        assert len(ids) == len(markers)
        for _ in range(300):
            if all(eid in store._agents.get("hard").records for eid in ids):
                break
            await asyncio.sleep(0.1)
        assert store.count("hard") == len(ids)  # the restarted proxy delivered what the dead one had not
    finally:
        stop(procs["proxy"])


async def test_tiered_adapter_survives_redis_connections_being_killed_under_load(stack, tiered, redis_url):
    import redis.asyncio as aioredis
    url, service = tiered
    service.settings.ltm_max_entries = 0  # unlimited: this test counts every memory
    stack.add_agent("tiered-load", url)
    client = stack.openai("tiered-load")
    admin = aioredis.Redis.from_url(redis_url)

    async def one(i: int) -> None:
        reply = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"item {i} is blue"}])
        assert reply.choices[0].message.content

    for start in range(0, 300, 50):
        await asyncio.gather(*(one(i) for i in range(start, start + 50)))
        await admin.client_kill_filter(_type="normal", skipme=True)  # every client connection dropped
    await stack.settle()
    ids = {e["id"] for e in stack.ledger("tiered-load")}
    assert len(ids) == 300
    episodes = [m for m in await service.ltm.all_for("tiered-load")
                if m.type == "episode" and m.metadata.get("origin") == "user"]
    assert sorted(m.source_entry_ids[0] for m in episodes) == sorted(ids)  # the person's words once per ledger id
    assert await service.stm.newest("tiered-load")  # Redis is in use again after the reconnects
    await admin.aclose()
