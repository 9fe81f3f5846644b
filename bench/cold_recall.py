"""A recall's CPU in-process, as at one agent in flight: each recall follows a retained turn.

    python -m bench.cold_recall [ROUNDS] [--no-put] [--evict MB] [--seconds S]

Builds `bench.stack_cpu`'s embedded index (1,000 seeded memories with random unit vectors) plus
200 warm-up turns of `bench.load`'s 64 prompts (each turn's episode as the service makes it from
the proxy's ledger entry, with `bench.servers`' reply), then per turn: the turn's episode is put
(no vector: at one in flight the embedding backlog runs behind) and the next prompt is recalled
(`pinned_first(recall_with_shared)`, as the service). Prints JSON: thread CPU per recall, p10 /
p50 / p90 in ms over ROUNDS × 64 turns, and the answers' sha256 (the same on any engine that
ranks and packs the same). `--no-put` recalls without the puts (caches stay warm: what a recall
costs when many share one put); `--evict MB` writes MB of memory between recalls (the proxy and
the provider running between two turns leave the caches cold: `--evict 64` costs a recall what the
service's ranking costs at one in flight, bench/README.md "cold caches"). `--seconds` loops that
long (for py-spy) instead of ROUNDS; the index then grows past the stack's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections.abc import Callable

import numpy as np

from memory_adapters.engine.dense import VectorIndex
from memory_adapters.engine.episodes import episodes_from_entry, recall_query
from memory_adapters.engine.index import AgentIndex, RecallQuery, recall_with_shared, visible_in
from memory_adapters.engine.pins import pinned_first
from memplane_core.redact import Redactor
from memplane_core.turn_text import query_from

from .load import prompts
from .seed import seeded_memory, unit_vectors
from .servers import REPLY

DIM = 384
NOW = 1_795_000_000.0  # a fixed clock: the answers' dates, hence their hash, do not move between runs


def build(seed: int = 1, memories: int = 1000, warm: int = 200) -> tuple[AgentIndex, list, list[str], Callable]:
    """The index, each prompt's recall query with its vector, the prompts, and what makes a turn's
    episodes of a prompt (each call the next turn)."""
    import random

    rng, vecs = random.Random(seed), np.random.default_rng(seed)
    idx = AgentIndex(vectors=VectorIndex(DIM))
    v = unit_vectors(vecs, memories, DIM)
    for i in range(memories):
        idx.put(seeded_memory("emb", i, rng, NOW), v[i])
    asks = prompts()
    q = unit_vectors(vecs, len(asks), DIM)
    redactor, turn = Redactor(), [0]

    def episode(text: str) -> list:
        turn[0] += 1
        entry = {"id": f"e{turn[0]:08d}", "ts": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(NOW + turn[0])),
                 "request_original": {"messages": [{"role": "system", "content": "You are a concise analyst."},
                                                   {"role": "user", "content": text}]},
                 "response": {"json": {"choices": [{"message": {"role": "assistant", "content": REPLY}}]}}}
        return episodes_from_entry("emb", entry, {}, redactor)

    for i in range(warm):
        for m in episode(asks[i % len(asks)]):
            idx.put(m, q[i % len(asks)])
    return idx, [(recall_query(query_from([{"role": "user", "content": a}])), q[i]) for i, a in enumerate(asks)], \
        asks, episode


def run(rounds: int, put: bool, evict_mb: int, seconds: float | None) -> dict:
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, "blas")  # as the service
    idx, questions, asks, episode = build()
    shared, recall = AgentIndex(vectors=VectorIndex(DIM)), pinned_first(recall_with_shared)
    junk = np.zeros(evict_mb * 131072) if evict_mb else None
    times, digest, turns = [], hashlib.sha256(), 0
    stop = time.monotonic() + seconds if seconds else None
    while (stop is not None and time.monotonic() < stop) or (stop is None and turns < rounds * len(questions)):
        i = turns % len(questions)
        text, vec = questions[i]
        if put:
            for m in episode(asks[i]):
                idx.put(m)
        if junk is not None:
            junk += 1.0
        began = time.thread_time()
        packed = recall(idx, shared, RecallQuery(text, vector=vec), visible_in(None, time.time(), None))
        times.append(time.thread_time() - began)
        digest.update(json.dumps([(p.text, p.score) for p in packed]).encode())
        turns += 1
    t = np.sort(np.array(times)) * 1e3
    return {"turns": turns, "memories": len(idx), "put": put, "evict_mb": evict_mb,
            "p10_ms": round(float(t[len(t) // 10]), 3), "p50_ms": round(float(t[len(t) // 2]), 3),
            "p90_ms": round(float(t[9 * len(t) // 10]), 3), "mean_ms": round(float(t.mean()), 3),
            "answers": digest.hexdigest()[:16] if stop is None else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("rounds", nargs="?", type=int, default=10)
    p.add_argument("--no-put", dest="put", action="store_false")
    p.add_argument("--evict", type=int, default=0, help="MB written between recalls")
    p.add_argument("--seconds", type=float)
    a = p.parse_args()
    print(json.dumps(run(a.rounds, a.put, a.evict, a.seconds)))


if __name__ == "__main__":
    main()
