"""`memplane serve --workers N`: several processes answer on one port, and the turns they answer
land in the shared ledger once each. With the file ledger (one writer per agent) it refuses."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import aiohttp
import orjson

from manifests.agents import write_agent
from memplane_cli.runner import free_port
from proxy.ledger.redis_streams import RedisLedger
from tests.harness import stop, wait_port

BIN = Path(sys.executable).parent / "memplane"


def _parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


async def test_two_workers_both_answer_and_every_turn_is_in_the_shared_ledger_once(tmp_path, provider_server,
                                                                                     redis_url):
    _, provider_url = provider_server
    prefix = f"w{uuid.uuid4().hex[:6]}"
    token, _ = write_agent(tmp_path / "ctx", "many")
    port = free_port()
    proc = subprocess.Popen([str(BIN), "serve", "--workers", "2", "--port", str(port), "--context-root",
                             str(tmp_path / "ctx"), "--history-root", str(tmp_path / "hist"), "--openai-base-url",
                             f"{provider_url}/v1", "--ledger", "redis", "--redis-url", redis_url,
                             "--ledger-prefix", prefix],
                            stdout=subprocess.PIPE, stderr=open(tmp_path / "serve.log", "wb"), env=os.environ.copy())
    try:
        await wait_port(port, 60)
        pids = set()
        async def healthz() -> int:  # a new connection each time: the kernel picks a worker per connection
            async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/healthz") as r:
                return (await r.json())["pid"]
        for _ in range(40):
            pids.add(await healthz())
            if len(pids) == 2:
                break
        assert len(pids) == 2, pids
        assert {_parent_of(p) for p in pids} == {proc.pid}  # the workers of this serve, not another process

        async def turn(i: int) -> str:
            body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": f"mark-{i:03d} hello"}]})
            async with aiohttp.ClientSession() as s, s.post(
                    f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                    headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}) as r:
                assert r.status == 200, await r.text()
                return r.headers["X-Memplane-Turn-Id"]
        turn_ids = await asyncio.gather(*(turn(i) for i in range(60)))
        entries = [ref.entry for ref in RedisLedger(redis_url, tmp_path, prefix=prefix).read("many")]
        marks = sorted(str(e["request_original"]["messages"][0]["content"]).split()[0] for e in entries)
        assert marks == [f"mark-{i:03d}" for i in range(60)]  # nothing lost, nothing twice
        assert len({e["id"] for e in entries}) == 60 and len(set(turn_ids)) == 60
    finally:
        stop(proc)
    assert proc.returncode == 0
    for pid in pids:  # the workers went with it
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


def test_more_than_one_worker_on_the_file_ledger_is_refused_with_the_reason(tmp_path):
    out = subprocess.run([str(BIN), "serve", "--workers", "2", "--port", str(free_port()), "--context-root",
                          str(tmp_path / "ctx"), "--history-root", str(tmp_path / "hist")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "--ledger redis" in out.stderr and "one writer per agent" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_port_another_program_serves_is_refused_not_shared(tmp_path):
    import socket
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        out = subprocess.run([str(BIN), "adapter", "tiered", "--workers", "2", "--port", str(held.getsockname()[1])],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "cannot listen" in out.stderr and "Traceback" not in out.stderr


async def test_two_tiered_workers_both_serve_and_see_each_others_writes(tmp_path, redis_url, mongo_url):
    """`memplane adapter tiered --workers 2`: two replicas on one port. Every search, whichever
    worker the connection lands on, finds a memory stored through the other one after both had
    loaded the agent."""
    port = free_port()
    proc = subprocess.Popen([str(BIN), "adapter", "tiered", "--workers", "2", "--port", str(port),
                             "--redis-url", redis_url, "--mongo-url", mongo_url],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "tiered.log", "wb"),
                            env={**os.environ, "MEMPLANE_EMBEDDINGS": "off"})
    url = f"http://127.0.0.1:{port}"

    async def search(query: str) -> list[str]:  # a new connection each time: either worker
        async with aiohttp.ClientSession() as s, s.post(url + "/api/memories/search",
                                                        json={"agent_id": "pair", "query": query}) as r:
            assert r.status == 200, await r.text()
            return [m["value"] for m in (await r.json())["results"]]
    try:
        await wait_port(port, 90)
        children = set()
        for _ in range(100):
            children = set(Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split())
            if len(children) == 2:
                break
            await asyncio.sleep(0.1)
        assert len(children) == 2
        for _ in range(16):  # both workers load the agent (still empty)
            assert await search("where is the staging database") == []
        async with aiohttp.ClientSession() as s, s.post(url + "/api/memories", json={
                "agent_id": "pair", "key": "staging", "value": "The staging database lives in Frankfurt"}) as r:
            assert r.status == 201
        found = [await search("where is the staging database") for _ in range(16)]
        assert all(f == ["The staging database lives in Frankfurt"] for f in found), found
    finally:
        stop(proc)
    assert proc.returncode == 0


def test_a_worker_that_cannot_start_stops_the_command_with_its_error_instead_of_hanging(tmp_path):
    out = subprocess.run([str(BIN), "adapter", "tiered", "--workers", "2", "--port", str(free_port()),
                          "--mongo-url", "notaurl://x"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "MEMPLANE_EMBEDDINGS": "off"})
    assert out.returncode == 1
    assert "URI must begin with 'mongodb://'" in out.stderr
    assert "a worker exited before it listened" in out.stderr
