"""What a forget costs on the embedded store, and what it makes other agents wait.

A forget used to scan every episode of the agent (66k memories: 18.5 s for 5,000 ids, on the one
SQLite worker every agent's writes queue behind). It now looks the ids up in `sources` and is
capped at MAX_FORGET_IDS per call. Measured in the same run: the earlier scan (kept here as the
baseline), the lookup, at two memory counts (the lookup should not grow with memories), and one
write of another agent submitted while each forget runs.

    python -m bench.forget_cost [--memories 66000] [--ids 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import orjson

from memory_adapters.embedded.sqlite_store import SQLiteStore
from memory_adapters.engine.record import StoredMemory
from memplane_core.contract import MAX_FORGET_IDS

from .harness import QUICK, mongo, table, write_results


def episode(agent: str, n: int) -> StoredMemory:
    return StoredMemory(agent_id=agent, scope="agent", key=f"episode:hist1_{n}", value=f"turn {n}: the launch moved",
                        type="episode", id=f"ep_{agent}_{n}", source_entry_ids=[f"hist1_{n}"])


async def seed(store: SQLiteStore, agent: str, count: int) -> None:
    for i in range(0, count, 5000):
        await store.write([episode(agent, n) for n in range(i, min(count, i + 5000))])


def legacy_forget(store: SQLiteStore, agent_id: str, entry_ids: list[str]) -> list[str]:
    """The earlier forget: every episode of the agent decoded and its sources intersected."""
    db = store._conn()
    removed = []
    with db:
        db.execute("BEGIN")
        for doc, _ in db.execute("SELECT doc, vector FROM memories WHERE agent_id = ? AND type = 'episode'",
                                 (agent_id,)).fetchall():
            m = StoredMemory(**orjson.loads(doc))
            if set(m.source_entry_ids) & set(entry_ids):
                removed.append(m.id)
        db.executemany("DELETE FROM memories WHERE id = ?", [(i,) for i in removed])
    return removed


async def timed_forget(store: SQLiteStore, agent: str, ids: list[str], legacy: bool) -> tuple[float, float, int]:
    """(forget seconds, seconds another agent's write waited, memories removed)."""
    t0 = time.perf_counter()
    if legacy:
        job = asyncio.get_running_loop().run_in_executor(store._pool, legacy_forget, store, agent, ids)
    else:
        job = asyncio.ensure_future(store.forget(agent, ids, "bench", time.time()))
    await asyncio.sleep(0)
    w0 = time.perf_counter()
    await store.write([episode("bystander", int(w0 * 1e6))])  # queued behind the forget on the one worker
    waited = time.perf_counter() - w0
    removed = await job
    return time.perf_counter() - t0, waited, len(removed)


async def tiered_forget(memories: int, ids: int) -> dict | None:
    """The same on MongoDB (the stand-in unless MEMPLANE_TEST_MONGO_URL): the earlier tombstones,
    one upsert per id, against the one unordered insert; memories found by the `agent_sources` index."""
    from memory_adapters.tiered.ltm import MongoLTM

    with tempfile.TemporaryDirectory(prefix="memplane-forget-mongo-") as tmp, mongo(Path(tmp)) as url:
        if url is None:
            return None
        ltm = MongoLTM(url)
        await ltm.ensure_indexes()
        for i in range(0, memories, 2000):
            await ltm.upsert_many([episode("big", n) for n in range(i, min(memories, i + 2000))])
        out = {}
        for legacy in (True, False):
            start = 0 if legacy else ids
            chosen = [f"hist1_{n}" for n in range(start, start + ids)]
            t0 = time.perf_counter()
            if legacy:
                for eid in chosen:
                    await ltm.tombstones.update_one({"agent_id": "big", "entry_id": eid},
                                                    {"$setOnInsert": {"reason": "bench", "ts": time.time()}}, upsert=True)
            else:
                await ltm.tombstone("big", chosen, "bench")
            found = await ltm.by_source("big", chosen)
            await ltm.delete(found)
            out["upserts" if legacy else "insert"] = {"ms": (time.perf_counter() - t0) * 1000, "removed": len(found)}
        await ltm.close()
    return out


async def main(memories: int, ids: int) -> dict:
    rows, out = [], {}
    with tempfile.TemporaryDirectory(prefix="memplane-forget-") as tmp:
        store = SQLiteStore(Path(tmp) / "mem")
        await store.open()
        small = max(ids * 4, memories // 4)
        await seed(store, "small", small)
        await seed(store, "big", memories)
        for agent, count in (("small", small), ("big", memories)):
            for legacy in (True, False):
                start = 0 if legacy else ids  # each run forgets entries still present
                chosen = [f"hist1_{n}" for n in range(start, start + ids)]
                took, waited, removed = await timed_forget(store, agent, chosen, legacy)
                name = f"{'scan (before)' if legacy else 'sources lookup'} @ {count:,} memories"
                rows.append([name, ids, removed, took * 1000, waited * 1000])
                out[f"{'scan' if legacy else 'lookup'}_{agent}"] = {"memories": count, "ids": ids, "removed": removed,
                                                                    "forget_ms": took * 1000, "bystander_write_wait_ms": waited * 1000}
        await store.close()
    print(table(["forget", "ids", "removed", "ms", "other agent's write waited ms"], rows))
    speedup = out["scan_big"]["forget_ms"] / out["lookup_big"]["forget_ms"]
    growth = out["lookup_big"]["forget_ms"] / out["lookup_small"]["forget_ms"]
    scan_growth = out["scan_big"]["forget_ms"] / out["scan_small"]["forget_ms"]
    print(f"summary: {ids} ids on {memories:,} memories: lookup {out['lookup_big']['forget_ms']:.0f} ms vs scan "
          f"{out['scan_big']['forget_ms']:.0f} ms ({speedup:.0f}x); {memories // small}x the memories costs the lookup "
          f"{growth:.2f}x and the scan {scan_growth:.2f}x; cap {MAX_FORGET_IDS} ids per call")
    tiered = await tiered_forget(min(memories, 5000 if QUICK else 20000), ids)
    if tiered:
        print(f"tiered ({min(memories, 5000 if QUICK else 20000):,} memories, Mongo stand-in unless "
              f"MEMPLANE_TEST_MONGO_URL): {ids} ids with one upsert per tombstone (before) "
              f"{tiered['upserts']['ms']:.0f} ms, one insert {tiered['insert']['ms']:.0f} ms "
              f"({tiered['upserts']['ms'] / tiered['insert']['ms']:.1f}x)")
    doc = {"rows": out, "speedup": speedup, "lookup_growth": growth, "scan_growth": scan_growth, "tiered": tiered}
    write_results("forget", doc)
    return doc


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memories", type=int, default=8000 if QUICK else 66000)
    ap.add_argument("--ids", type=int, default=MAX_FORGET_IDS)
    args = ap.parse_args()
    asyncio.run(main(args.memories, args.ids))
