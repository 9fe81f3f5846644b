"""What one memory costs in the embedded service's resident memory (for MEMPLANE_MAX_MEMORIES_PER_AGENT).

    python -m bench.rss [--memories 20000]

Builds one agent's index in-process as the service does (the engine's `AgentIndex` with BM25
postings, what packing shows of each memory, and a 384-dim float32 vector) from chat-like episodes
of ~25 words, and prints the process's RSS growth per memory. The model itself (~90 MB) is not
counted: it is loaded once per process whatever the memories.
"""

from __future__ import annotations

import argparse
import gc
import random
import time

import numpy as np


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        import os
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--memories", type=int, default=20_000)
    args = p.parse_args()
    from memory_adapters.engine.dense import VectorIndex
    from memory_adapters.engine.index import AgentIndex
    from memory_adapters.engine.record import StoredMemory

    from .seed import sentence

    rng = random.Random(7)
    texts = [f"[{n % 28 + 1} May, 2023] Sam: {sentence(rng, 14)} {sentence(rng, 10)}" for n in range(args.memories)]
    vecs = np.random.default_rng(7).standard_normal((args.memories, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    gc.collect()
    before = rss_bytes()
    idx = AgentIndex(vectors=VectorIndex(384))
    started = time.perf_counter()
    for n, (text, vec) in enumerate(zip(texts, vecs)):
        m = StoredMemory(agent_id="a", scope="agent", key=f"episode:hist1_{n}:0", value=text, type="episode",
                         said_at=1_683_000_000 + n * 60, session_id=f"s{n // 20}",
                         source_entry_ids=[f"hist1_{n}"], metadata={"said": "2023-05-01"})
        idx.put(m, vec)
    built_s = time.perf_counter() - started
    del texts, vecs
    gc.collect()
    grown = rss_bytes() - before
    print(f"{args.memories} memories: RSS +{grown / 2**20:.1f} MiB, {grown / args.memories / 1024:.2f} KiB per memory "
          f"(index built in {built_s:.1f} s; vector 1.5 KiB of it)")


if __name__ == "__main__":
    main()
