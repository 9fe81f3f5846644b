"""Recall latency as memories grow: reference and tiered adapters at 1k, 10k and 100k memories
for one agent, and 1k agents × 100 memories; p50/p99 over HTTP, warm, with the first (cold)
recall reported apart. Seeded tiered memories get synthetic unit vectors when embeddings are
on: the search cost does not depend on what the vectors mean.
"""

from __future__ import annotations

import asyncio
import io
import random
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

from memory_adapters.reference.app import build_reference_app
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from memplane_cli.runner import Site, start_site

from .harness import QUICK, mongo, redis_url, table, write_results
from .seed import VOCAB, seed_embedded, seed_reference, seed_tiered


def queries(n: int, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    return [f"What did I say about the {rng.choice(VOCAB[:600])} and the {rng.choice(VOCAB[:600])}?" for _ in range(n)]


async def measure(url: str, agents: list[str], n: int) -> dict:
    qs = queries(n)
    lat = []
    async with aiohttp.ClientSession() as s:
        async def one(agent: str, q: str) -> float:
            t0 = time.perf_counter()
            async with s.post(url, data=orjson.dumps({"agent_id": agent, "query": q}),
                              headers={"Content-Type": "application/json"}) as r:
                await r.read()
                assert r.status == 200
            return (time.perf_counter() - t0) * 1000
        cold = [await one(a, qs[0]) for a in agents]  # every agent's first recall loads its index
        for i, q in enumerate(qs):
            lat.append(await one(agents[i % len(agents)], q))
    lat.sort()
    return {"cold_first_ms": round(statistics.median(cold), 2), "p50_ms": round(lat[len(lat) // 2], 3),
            "p99_ms": round(lat[int(len(lat) * 0.99)], 3)}


async def main_async() -> dict:
    sizes = [1000, 10_000] if QUICK else [1000, 10_000, 100_000]
    n = 200 if QUICK else 500
    tmp = Path(tempfile.mkdtemp(prefix="memplane-scale-"))
    results: dict[str, dict] = {}
    for size in sizes:
        seed_reference(tmp / f"ref{size}", "one", size)
        runner, port = await start_site(Site(build_reference_app(tmp / f"ref{size}", redactor=Redactor()), "127.0.0.1", 0))
        results[f"reference|1 agent x {size}"] = await measure(f"http://127.0.0.1:{port}/recall", ["one"], n)
        print(f"reference 1 agent x {size}: {results[f'reference|1 agent x {size}']}", flush=True)
        await runner.cleanup()
    from memory_adapters.embedded.app import EMBEDDED_SERVICE, build_embedded_app
    from memory_adapters.embedded.config import EmbeddedSettings
    for size in sizes:
        app = build_embedded_app(tmp / f"emb{size}", redactor=Redactor(), telemetry=Telemetry(make_logger(io.StringIO())),
                                 settings=EmbeddedSettings.from_env())
        runner, port = await start_site(Site(app, "127.0.0.1", 0))  # loads the model: its dimension seeds vectors
        embedder = app[EMBEDDED_SERVICE].embedder
        await runner.cleanup()
        t0 = time.perf_counter()
        await seed_embedded(tmp / f"emb{size}", {"one": size}, embedder.dim if embedder else None)
        seeded = time.perf_counter() - t0
        app = build_embedded_app(tmp / f"emb{size}", redactor=Redactor(), telemetry=Telemetry(make_logger(io.StringIO())),
                                 settings=EmbeddedSettings.from_env())
        runner, port = await start_site(Site(app, "127.0.0.1", 0))
        row = await measure(f"http://127.0.0.1:{port}/recall", ["one"], n)
        row.update(seed_s=round(seeded, 1), embeddings=embedder is not None)
        results[f"embedded|1 agent x {size}"] = row
        print(f"embedded 1 agent x {size}: {row}", flush=True)
        await runner.cleanup()
    many = {f"agent{i:04d}": 100 for i in range(1000 if not QUICK else 200)}
    for agent in many:
        seed_reference(tmp / "refmany", agent, 100)
    runner, port = await start_site(Site(build_reference_app(tmp / "refmany", redactor=Redactor()), "127.0.0.1", 0))
    results[f"reference|{len(many)} agents x 100"] = await measure(f"http://127.0.0.1:{port}/recall", list(many), n)
    await runner.cleanup()

    rurl = redis_url()
    with mongo(tmp) as murl:
        if rurl and murl:
            import os

            import redis as redis_sync

            from memory_adapters.tiered.app import build_tiered_app
            from memory_adapters.tiered.config import TieredSettings
            tiered_many = many
            if not os.environ.get("MEMPLANE_TEST_MONGO_URL") and len(many) > 200:
                # The stand-in filters in Python: every per-agent query scans the whole collection,
                # so 1,000 agents' start-up and first recalls would take hours there, not seconds.
                tiered_many = dict(list(many.items())[:200])
                print("tiered many-agents row: 200 agents x 100 against the Mongo stand-in "
                      "(set MEMPLANE_TEST_MONGO_URL for 1,000)", flush=True)
            for label, counts in [*[(f"1 agent x {s}", {f"one{s}": s}) for s in sizes],
                                  (f"{len(tiered_many)} agents x 100", tiered_many)]:
                redis_sync.Redis.from_url(rurl).flushdb()
                db = murl.rsplit("/", 1)[0] + f"/scale_{abs(hash(label)) % 10**8}"
                settings = TieredSettings.from_env(redis_url=rurl, mongo_url=db, ltm_max_entries=0)
                app = build_tiered_app(settings, Telemetry(make_logger(io.StringIO())), Redactor())
                from memory_adapters.tiered.app import TIERED_SERVICE
                service = app[TIERED_SERVICE]
                await service.load_embedder()
                dim = service.embedder.dim if service.embedder else None
                t0 = time.perf_counter()
                await seed_tiered(db, counts, dim)
                seeded = time.perf_counter() - t0
                runner, port = await start_site(Site(app, "127.0.0.1", 0))
                row = await measure(f"http://127.0.0.1:{port}/recall", list(counts), n)
                row["seed_s"] = round(seeded, 1)
                row["embeddings"] = bool(dim)
                results[f"tiered|{label}"] = row
                print(f"tiered {label}: {row}", flush=True)
                await runner.cleanup()
    print(table(["adapter", "memories", "cold_first_ms", "p50_ms", "p99_ms"],
                [[k.split("|")[0], k.split("|")[1], v["cold_first_ms"], v["p50_ms"], v["p99_ms"]] for k, v in results.items()]))
    path = write_results("recall_scale", results)
    big = max(sizes)
    t = results.get(f"tiered|1 agent x {big}")
    e = results[f"embedded|1 agent x {big}"]
    print(f"recall scale: embedded p50 {e['p50_ms']} ms / p99 {e['p99_ms']} ms at {big} memories; tiered p50 {t and t['p50_ms']} ms / p99 {t and t['p99_ms']} ms at {big} memories; "
          f"reference p50 {results[f'reference|1 agent x {big}']['p50_ms']} ms ({path.name})")
    return results


def main() -> dict:
    return asyncio.run(main_async())


if __name__ == "__main__":
    main()
