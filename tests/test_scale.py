"""More than one proxy: two proxy processes and two tiered memory replicas on one Redis (AOF on)
and the Mongo stand-in. Turns for 20 agents go through both proxies (the client alternates, as a
load balancer would, and moves to the other proxy when one stops answering); one proxy and one
memory replica are SIGKILLed mid-load and restarted.

Then: every answered turn is in the shared ledger, every ledger entry reached the memory service,
the dead proxy's pending retains were claimed by a live one after the stated idle time, repeat
deliveries stay under 5 %, one agent's rate limit holds across both proxies, and `memplane explain`
answers from either proxy. The default run sends 400 turns (MEMPLANE_SCALE_TURNS=2000 for the
issue's full size).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import aiohttp
import orjson
import pytest
import redis as redis_sync
from pymongo import MongoClient

from manifests.agents import memory_manifest, write_agent
from proxy.ledger.redis_streams import GROUP, RedisLedger
from memplane_cli.runner import free_port
from tests.harness import stop
from tests.harness import wait_port as wait_for_listener

BIN = Path(sys.executable).parent / "memplane"
CLAIM_IDLE_S = 5.0  # the default is 30 s; short here, long enough for a box at load 8
AGENTS = 20


def spawn(*args: str, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([str(BIN), *args], stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                            env={**os.environ, "MEMPLANE_EMBEDDINGS": "off", **(env or {})})


async def wait_port(port: int, timeout: float = 60) -> None:
    await wait_for_listener(port, timeout)


@pytest.fixture
def aof_redis(tmp_path):
    """A redis-server of our own on a free port, persisting with AOF (appendfsync everysec)."""
    binary = shutil.which("redis-server")
    if not binary:
        pytest.skip("redis-server is not installed")
    port = free_port()
    data = tmp_path / "redis"
    data.mkdir()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--save", "",
                             "--appendonly", "yes", "--appendfsync", "everysec"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis_sync.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            break
        except redis_sync.ConnectionError:
            time.sleep(0.05)
    assert client.config_get("appendonly")["appendonly"] == "yes"
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(10)


async def test_two_proxies_and_two_memory_replicas_lose_nothing_when_one_of_each_dies(
        tmp_path, aof_redis, mongo_base_url, provider_server):
    _, provider_url = provider_server
    mongo_url = f"{mongo_base_url}/memplane_scale_{uuid.uuid4().hex[:8]}"
    ctx_root, log = tmp_path / "ctx", tmp_path / "servers.log"
    mem_ports = [free_port(), free_port()]
    proxy_ports = [free_port(), free_port()]
    tokens = {}
    for i in range(AGENTS):  # agents sharded over the memory replicas (agent i -> replica i % 2)
        agent = f"agent-{i:02d}"
        tokens[agent], _ = write_agent(ctx_root, agent, memory=memory_manifest(
            "tiered", f"http://127.0.0.1:{mem_ports[i % 2]}"))
    tokens["bursty"], _ = write_agent(ctx_root, "bursty")
    mem_args = [["adapter", "tiered", "--port", str(p), "--redis-url", aof_redis, "--mongo-url", mongo_url]
                for p in mem_ports]
    proxy_args = [["serve", "--port", str(p), "--context-root", str(ctx_root), "--history-root",
                   str(tmp_path / f"hist{n}"), "--openai-base-url", f"{provider_url}/v1", "--ledger", "redis",
                   "--redis-url", aof_redis, "--retain-claim-idle", str(CLAIM_IDLE_S),
                   "--rate-limit", "2", "--rate-limit-burst", "8"] for n, p in enumerate(proxy_ports)]
    mems = [spawn(*a, log=log) for a in mem_args]
    proxies = [spawn(*a, log=log) for a in proxy_args]
    r = redis_sync.Redis.from_url(aof_redis)
    try:
        for p in [*mem_ports, *proxy_ports]:
            await wait_port(p)
        total = int(os.environ.get("MEMPLANE_SCALE_TURNS", "400"))
        answered: dict[str, tuple[str, str]] = {}  # marker -> (agent, turn id)
        killed_at: float | None = None
        dead_consumers: set[str] = set()
        claimed_after: float | None = None
        watcher: list[asyncio.Task] = []
        held_at_kill: list[int] = []

        async def chaos(n_done: int) -> None:
            nonlocal killed_at, dead_consumers
            if killed_at is None and n_done >= total * 0.4:
                dead_pid = proxies[0].pid
                stop(proxies[0], signal.SIGKILL)
                stop(mems[0], signal.SIGKILL)
                killed_at = time.monotonic()
                # the consumer the dead proxy was (named host-pid-random)
                dead_consumers = {_name(c) for q in _queues() for c in r.xinfo_consumers(q, GROUP)
                                  if f"-{dead_pid}-" in _name(c)}
                held_at_kill.append(sum(c["pending"] for q in _queues() for c in r.xinfo_consumers(q, GROUP)
                                        if _name(c) in dead_consumers))
                watcher.append(asyncio.create_task(watch_claims(dead_consumers)))
            elif killed_at is not None and proxies[0].poll() is not None and n_done >= total * 0.65:
                proxies[0] = spawn(*proxy_args[0], log=log)
                mems[0] = spawn(*mem_args[0], log=log)

        async def watch_claims(dead: set[str]) -> None:
            """When the dead proxy's last pending entry was taken over, counted from the kill."""
            nonlocal claimed_after
            while any(c["pending"] for q in _queues() for c in r.xinfo_consumers(q, GROUP) if _name(c) in dead):
                await asyncio.sleep(0.1)
            claimed_after = time.monotonic() - killed_at

        def _queues() -> list[str]:
            return [f"memplane:retain:{i}" for i in range(8)]

        await _drive(proxy_ports, tokens, total, answered, chaos)
        assert killed_at is not None and len(answered) == total and dead_consumers
        for p in [*mem_ports, *proxy_ports]:
            await wait_port(p)

        # every retain settles: no queue holds pending or unread work
        await asyncio.wait_for(watcher[0], 120)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            groups = [g for q in _queues() for g in r.xinfo_groups(q)]
            if all(g["pending"] == 0 and (g.get("lag") or 0) == 0 for g in groups):
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError(f"retains never settled: {[(g['pending'], g.get('lag')) for g in groups]}")

        ledger = RedisLedger(aof_redis, tmp_path)
        entries = {a: [ref.entry for ref in ledger.read(a)] for a in tokens if a != "bursty"}
        # every answered turn is in the shared ledger (one line each: the client never retried an answered turn)
        ledgered = {str(e["request_original"]["messages"][0]["content"]).split()[0]: a
                    for a, es in entries.items() for e in es}
        assert {m: a for m, (a, _) in answered.items()} == ledgered
        # every ledger entry reached the memory service, across the dead replica and the dead proxy
        marks = MongoClient(mongo_url.rsplit("/", 1)[0])[mongo_url.rsplit("/", 1)[1]]["retained_entries"]
        retained = {(m["agent_id"], m["entry_id"]) for m in marks.find({}, {"agent_id": 1, "entry_id": 1})}
        wanted = {(a, e["id"]) for a, es in entries.items() for e in es}
        assert wanted - retained == set(), f"{len(wanted - retained)} of {len(wanted)} ledger entries never retained"
        # the dead proxy's pending entries were claimed (by the survivor or the restarted proxy) after the idle time
        reclaimed = int(r.hget("memplane:retain:stats", "reclaimed") or 0)
        assert claimed_after is not None
        assert claimed_after < CLAIM_IDLE_S + 20, claimed_after  # idle time + a claim round, loose for a busy box
        # only what the dead proxy held unacknowledged (a read of 32 plus its retries) is delivered
        # again: live proxies keep what they are delivering; under 5 % of entries at 2,000 turns
        assert reclaimed <= held_at_kill[0], (reclaimed, held_at_kill, log)
        if len(wanted) >= 2000:
            assert reclaimed <= 0.05 * len(wanted), (reclaimed, len(wanted))
        print(f"\nscale: {total} turns, {len(wanted)} ledger entries, 0 lost, {reclaimed} reclaimed "
              f"({reclaimed / len(wanted):.1%}; the dead proxy held {held_at_kill[0]}), dead proxy's pending claimed {claimed_after:.1f} s after the kill "
              f"(idle {CLAIM_IDLE_S} s)")

        # `memplane explain` answers from either proxy, whichever served the turn
        marker, (agent, turn_id) = next(iter(answered.items()))
        for port in proxy_ports:
            out = subprocess.run([str(BIN), "explain", turn_id, "--url", f"http://127.0.0.1:{port}", "--json"],
                                 capture_output=True, text=True, timeout=30)
            assert out.returncode == 0, out.stderr
            doc = orjson.loads(out.stdout)
            assert doc["turn_id"] == turn_id and doc["agent_id"] == agent
            assert doc["retain_state"] == "delivered"

        # one agent's rate limit holds across both proxies: a burst of 8, then 2 per second, not twice that
        started = time.monotonic()
        codes = await _burst(proxy_ports, tokens["bursty"], 40)
        elapsed = time.monotonic() - started
        allowed = codes.count(200)
        assert set(codes) <= {200, 429}
        assert 8 - 1 <= allowed <= 8 + 2 * elapsed + 1, (allowed, elapsed)
    finally:
        for p in [*proxies, *mems]:
            stop(p)


def _name(c: dict) -> str:
    return c["name"].decode() if isinstance(c["name"], bytes) else c["name"]


async def _drive(ports: list[int], tokens: dict[str, str], total: int, answered: dict, on_progress) -> None:
    """Send `total` marked turns round-robin over the agents and proxies; a proxy that does not
    answer (killed) or asks to wait (429) gets the turn again, or the other proxy does."""
    agents = [a for a in tokens if a != "bursty"]
    next_i = 0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
        async def worker() -> None:
            nonlocal next_i
            while next_i < total:
                i = next_i
                next_i += 1
                agent = agents[i % len(agents)]
                marker = f"req-{i:05d}"
                body = orjson.dumps({"model": "m", "messages": [
                    {"role": "user", "content": f"{marker} my favourite number is {i}"}]})
                attempt = 0
                while True:
                    port = ports[(i + attempt) % 2]
                    attempt += 1
                    try:
                        async with s.post(f"http://127.0.0.1:{port}/v1/chat/completions", data=body, headers={
                                "Authorization": f"Bearer {tokens[agent]}", "Content-Type": "application/json"}) as resp:
                            await resp.read()
                            if resp.status == 429:
                                await asyncio.sleep(float(resp.headers.get("Retry-After", "1")) / 2)
                                continue
                            assert resp.status == 200, (marker, resp.status)
                            answered[marker] = (agent, resp.headers["X-Memplane-Turn-Id"])
                            break
                    except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError):
                        await asyncio.sleep(0.05)
                    assert attempt < 400, f"{marker} never answered"
                await on_progress(len(answered))
        await asyncio.gather(*(worker() for _ in range(12)))


async def _burst(ports: list[int], token: str, n: int) -> list[int]:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    async with aiohttp.ClientSession() as s:
        async def one(i: int) -> int:
            async with s.post(f"http://127.0.0.1:{ports[i % 2]}/v1/chat/completions", data=body,
                              headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}) as r:
                await r.read()
                return r.status
        return list(await asyncio.gather(*(one(i) for i in range(n))))
