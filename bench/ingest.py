"""Ingest and recall at the memory service, over HTTP, as the proxy's delivery drives it: ten
agents' LoCoMo turns retained at once (batches of 32 where the service offers batched retain,
else 8 concurrent single retains per agent), then recall latency with 8 questions in flight.

Turns/s counts retains acknowledged (durable and searchable by their words); `vectors caught up`
is when the embedded service's background embeddings finished too.
"""

from __future__ import annotations

import asyncio
import io
import multiprocessing
import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import aiohttp

from memplane_core.contract import RETAIN_BATCH_PATH
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from memplane_cli.runner import Site, start_site

from .harness import mongo, redis_url, table, write_results
from .quality.locomo import DATASET, load


def entries(conv: dict, agent: str) -> list[dict]:
    return [{"id": f"hist1_{agent}_{n}", "ts": f"2026-11-20T10:{n // 3600 % 60:02d}:{n // 60 % 60:02d}.{n % 60:03d}Z",
             "request_original": {"model": "m", "messages": [{"role": "user", "content": t["message"]}]},
             "response": {"format": "json", "json": {"choices": [{"message": {"content": "OK."}}]}}}
            for n, t in enumerate(conv["turns"])]


IN_FLIGHT = 8


def ask_all(url: str, questions: list[tuple[str, str]], in_flight: int) -> list[float]:
    """Recall latencies (ms) with `in_flight` questions outstanding at a time."""
    async def go() -> list[float]:
        lat: list[float] = []
        sem = asyncio.Semaphore(in_flight)
        async with aiohttp.ClientSession() as http:
            async def ask(agent: str, q: str) -> None:
                async with sem:
                    t0 = time.perf_counter()
                    async with http.post(url + "/recall", json={"agent_id": agent, "query": q, "budget_tokens": 3000,
                                                                "max_blocks": 8}) as r:
                        await r.read()
                        assert r.status == 200, r.status
                    lat.append((time.perf_counter() - t0) * 1000)
            await asyncio.gather(*(ask(a, q) for a, q in questions))
        return lat
    return asyncio.run(go())


async def run(app, label: str, convs: list[dict], agents: int, batch: bool) -> dict:
    runner, port = await start_site(Site(app, "127.0.0.1", 0))
    url = f"http://127.0.0.1:{port}"
    work = {f"{label}-a{i}": entries(convs[i % len(convs)], f"a{i}") for i in range(agents)}
    total = sum(len(v) for v in work.values())
    try:
        async with aiohttp.ClientSession() as http:
            async def acknowledged(path: str, body: dict) -> None:
                """POST until the service takes it: 5xx/429 retried with backoff, as delivery does."""
                for attempt in range(30):
                    async with http.post(url + path, json=body) as r:
                        if r.status < 300:
                            return
                        assert r.status >= 500 or r.status == 429, await r.text()
                        wait = float(r.headers.get("Retry-After", 0.2 * 2 ** min(attempt, 5)))
                    await asyncio.sleep(wait)
                raise AssertionError(f"{path} never acknowledged")

            async def feed(agent: str, items: list[dict]) -> None:
                if batch:
                    for i in range(0, len(items), 32):
                        await acknowledged(RETAIN_BATCH_PATH,
                                           {"agent_id": agent, "items": [{"entry": e} for e in items[i:i + 32]]})
                else:
                    for i in range(0, len(items), 8):
                        await asyncio.gather(*(acknowledged("/retain", {"agent_id": agent, "entry": e})
                                               for e in items[i:i + 8]))

            questions = [(a, q["question"]) for a in list(work)[:3]
                         for q in convs[int(a.rsplit("a", 1)[1]) % len(convs)]["questions"][:160]]
            # the questions come from another process, as an agent's would (a client in the service's
            # own event loop would take the CPU the service is measured on); each phase asks different
            # questions, as a query asked before is embedded from the cache
            pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(pool, ask_all, url, [], 1)  # the worker process is up

            started = time.perf_counter()
            await asyncio.gather(*(feed(a, items) for a, items in work.items()))
            retained_s = time.perf_counter() - started
            busy = await loop.run_in_executor(pool, ask_all, url, questions[0::3], IN_FLIGHT)
            while True:
                async with http.get(url + "/health") as r:
                    if not (await r.json()).get("embedding_backlog"):
                        break
                await asyncio.sleep(0.2)
            caught_up_s = time.perf_counter() - started
            lone = await loop.run_in_executor(pool, ask_all, url, questions[1::3], 1)
            lat = await loop.run_in_executor(pool, ask_all, url, questions[2::3], IN_FLIGHT)
            pool.shutdown()
    finally:
        await runner.cleanup()
    return {"turns": total, "retained_s": round(retained_s, 1), "turns_per_s": round(total / retained_s),
            "vectors_caught_up_s": round(caught_up_s, 1),
            "recall_while_embedding_p50_ms": percentile(busy, 50), "recall_while_embedding_p99_ms": percentile(busy, 99),
            "lone_recall_p50_ms": percentile(lone, 50), "lone_recall_p99_ms": percentile(lone, 99),
            "recall_p50_ms": percentile(lat, 50), "recall_p99_ms": percentile(lat, 99)}


def percentile(values: list[float], p: int) -> float:
    return round(statistics.quantiles(values, n=100, method="inclusive")[p - 1] if p < 100 else max(values), 1)


async def main_async() -> None:
    if not DATASET.is_dir():
        print(f"ingest bench skipped: no data set at {DATASET}")
        return
    convs = load(DATASET)
    agents = int(os.environ.get("INGEST_AGENTS", 10))
    tmp = Path(tempfile.mkdtemp(prefix="memplane-ingest-"))
    quiet = Telemetry(make_logger(io.StringIO()))
    rows = {}
    from memory_adapters.embedded.app import build_embedded_app
    from memory_adapters.embedded.config import EmbeddedSettings
    if os.environ.get("INGEST_EMBEDDED", "1") == "1":
        rows["embedded"] = await run(build_embedded_app(tmp / "emb", redactor=Redactor(), telemetry=quiet,
                                                        settings=EmbeddedSettings.from_env()),
                                     "emb", convs, agents, batch=True)
    rurl = redis_url()
    with mongo(tmp) as murl:
        if rurl and murl and os.environ.get("INGEST_TIERED", "1") == "1":
            import redis as redis_sync

            from memory_adapters.tiered.app import build_tiered_app
            from memory_adapters.tiered.config import TieredSettings
            redis_sync.Redis.from_url(rurl).flushdb()
            settings = TieredSettings.from_env(redis_url=rurl, mongo_url=murl.rsplit("/", 1)[0] + "/ingest")
            rows["tiered (Mongo stand-in)"] = await run(build_tiered_app(settings, quiet, Redactor()), "tie", convs, agents,
                                                        batch=True)
    print(table(["service", "turns", "retained s", "turns/s", "vectors caught up s",
                 f"recall p50/p99 ms, {IN_FLIGHT} in flight while embedding", "lone recall p50/p99 ms",
                 f"recall p50/p99 ms, {IN_FLIGHT} in flight"],
                [[k, r["turns"], r["retained_s"], r["turns_per_s"], r["vectors_caught_up_s"],
                  f'{r["recall_while_embedding_p50_ms"]} / {r["recall_while_embedding_p99_ms"]}',
                  f'{r["lone_recall_p50_ms"]} / {r["lone_recall_p99_ms"]}', f'{r["recall_p50_ms"]} / {r["recall_p99_ms"]}']
                 for k, r in rows.items()]))
    write_results("ingest", {"agents": agents, "rows": rows})


def main() -> None:
    asyncio.run(main_async())


if __name__ == "__main__":
    main()
