"""Where a lone recall's time goes, stage by stage, in-process — and a hash of every answer.

    python -m bench.recall_stages [--rounds 5]

The engine's own index per LoCoMo dev conversation (the episodes the embedded service makes of
each turn, vectors from the shipped encoder), then every dev question, one at a time: the median
over questions and rounds of each stage, **warm** (the stage run back to back, as a loop of
recalls sees it) and **cold** (48 MB of other memory walked before each call, as on the c=1 LoCoMo
protocol, where the proxy, the provider and retains run between two recalls and evict the caches:
both the encoder and the ranking took about twice as long there). `timely_recall` is the whole
service path as `EmbeddedMemory.recall` runs it: slot, query vector from the encoder's thread (the
query cache cleared each time), ranking and packing.

The answer hash covers every block of every question's recall (text, score, kind, time, ids): a
change made for speed alone must leave it unchanged. Compare timings of one run only (ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import time
from statistics import median

import numpy as np
import orjson

from .harness import table, write_results
from .quality.locomo import DATASET, load
from .quality.loo import build, index_of

THRASH = np.ones(48 * 2**20 // 8)  # larger than this machine's L3 (32 MB)


def evict() -> None:
    THRASH[::8] += 1.0  # one write per cache line


def answers_hash(idxs: dict, questions: list[tuple[str, str]], vectors: dict) -> str:
    from memory_adapters.engine.index import RecallQuery, recall_with_shared, visible_in
    h = hashlib.sha256()
    for name, text in questions:
        for p in recall_with_shared(idxs[name], None, RecallQuery(text, vector=vectors[text]),
                                    visible=visible_in(None, time.time())):
            h.update(orjson.dumps([p.text, p.score, p.kind, p.ts, p.id, p.memory_ids]))
    return h.hexdigest()[:16]


def timed(stages: dict, questions: list[tuple[str, str]], rounds: int, cold: bool) -> dict[str, float]:
    """Median ms per stage over every question and round."""
    took: dict[str, list[float]] = {k: [] for k in stages}
    for _ in range(rounds):
        for name, text in questions:
            for stage, fn in stages.items():
                if cold:
                    evict()
                started = time.perf_counter()
                fn(name, text)
                took[stage].append(time.perf_counter() - started)
    return {k: round(median(v) * 1000, 3) for k, v in took.items()}


def service_path(embedder, idxs: dict, questions: list[tuple[str, str]], rounds: int, cold: bool) -> float:
    """Median ms of `timely_recall` (the embedded service's recall) with the query cache cleared."""
    from memory_adapters.engine.dense import QueryBatcher
    from memory_adapters.engine.index import RecallQuery, visible_in
    from memory_adapters.engine.schedule import Deadline, RecallScheduler, timely_recall

    async def go() -> float:
        scheduler, batcher = RecallScheduler(), QueryBatcher(embedder)
        took = []
        try:
            for _ in range(rounds):
                for name, text in questions:
                    embedder._cache.clear()
                    if cold:
                        evict()

                    async def indexes(name=name):
                        return idxs[name], None

                    started = time.perf_counter()
                    await timely_recall(scheduler, batcher, name, Deadline(180), indexes, RecallQuery(text),
                                        visible=visible_in(None, time.time()))
                    took.append(time.perf_counter() - started)
        finally:
            batcher.close()
        return round(median(took) * 1000, 3)
    return asyncio.run(go())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    if not DATASET.is_dir() or not any(DATASET.glob("conversation_*.json")):
        print(f"recall stages skipped: no data set at {DATASET} (set LOCOMO_DIR)")
        return
    from memory_adapters.engine.dense import Embedder
    from memory_adapters.engine.index import CANDIDATES, RecallQuery, recall_with_shared, visible_in
    from memplane_core.contract import RecalledMemory

    embedder = Embedder.load(1)
    convs = load(DATASET)
    idxs = {c["name"]: index_of(build(c, embedder)) for c in convs}
    questions = [(c["name"], q["question"]) for c in convs for q in c["questions"]]
    vectors = {text: embedder.embed([idxs[name].query_text(text)])[0] for name, text in questions}  # as services ask
    packed = {}

    def recall(name: str, text: str) -> None:
        packed[text] = recall_with_shared(idxs[name], None, RecallQuery(text, vector=vectors[text]),
                                          visible=visible_in(None, time.time()))

    def answer_json(name: str, text: str) -> None:
        orjson.dumps({"memories": [RecalledMemory(text=b.text, score=b.score, kind=b.kind, source="embedded", ts=b.ts,
                                                  id=b.id).model_dump(exclude_none=True) for b in packed[text]]})

    stages = {
        "tokenise": lambda name, text: embedder.encoder.tokenizer.encode(text),
        "encode (the query's vector)": lambda name, text: embedder.embed([text]),
        "lexical candidates": lambda name, text: idxs[name].lexical.scored(text, CANDIDATES),
        "dense candidates": lambda name, text: idxs[name].vectors.scored(vectors[text], CANDIDATES),
        "rank (fused, filtered)": lambda name, text: idxs[name].rank(text, vectors[text], limit=400),
        "recall (rank + pack)": recall,
        "answer JSON": answer_json,
    }
    rows, doc = [], {"answers_sha256": answers_hash(idxs, questions, vectors), "questions": len(questions),
                     "memories": {name: len(idx) for name, idx in idxs.items()}}
    for cold in (False, True):
        got = timed(stages, questions, args.rounds, cold)
        got["timely_recall (service path)"] = service_path(embedder, idxs, questions, max(1, args.rounds // 2), cold)
        doc["cold" if cold else "warm"] = got
    for stage in doc["warm"]:
        rows.append([stage, doc["warm"][stage], doc["cold"][stage]])
    print(table(["stage (median ms)", "warm", "cold caches"], rows))
    path = write_results("recall_stages", doc)
    print(f"answers sha256 {doc['answers_sha256']} over {len(questions)} questions ({path.name})")


if __name__ == "__main__":
    main()
