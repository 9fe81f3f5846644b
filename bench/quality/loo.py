"""Leave-one-conversation-out: judge a ranking change so that a gain on one conversation shows as such.

    python -m bench.quality.loo [--experiment dense-skip|deadline]

The dev set is three conversations. For each, the setting is chosen on the other two (best
overall score there, ties to the default) and scored on the third; all three splits are printed,
with the default's score beside each. In-process over the engine's own index (no proxy, same
episodes and the acceptance scoring of `locomo.py`), so a grid runs in a minute.

Experiments:
* `dense-skip`: skip the query encoder when BM25 is already confident (the best lexical hit's
  z-score at least T): a cheaper query path, if it keeps quality.
* `deadline`: what the deadline path costs when it answers: every question by words alone
  (`lexical: deadline`) and with a quarter of the candidates, against the default.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from memplane_core.redact import Redactor

from ..harness import table, write_results
from .locomo import CATEGORIES, DATASET, evidence_found, load, memory_elements, scores


def build(conv: dict, embedder) -> tuple:
    from memory_adapters.engine.dense import VectorIndex
    from memory_adapters.engine.episodes import episodes_from_entry
    from memory_adapters.engine.index import AgentIndex

    redactor = Redactor()
    idx = AgentIndex(vectors=VectorIndex(embedder.dim))
    memories = []
    for n, t in enumerate(conv["turns"]):
        entry = {"id": f"hist1_{n}", "ts": f"2026-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}.000Z",
                 "request_original": {"messages": [{"role": "user", "content": t["message"]}]},
                 "response": {"format": "json", "json": {"choices": [{"message": {"content": "OK."}}]}}}
        memories += episodes_from_entry(conv["name"], entry, {}, redactor)
    vecs = embedder.embed([m.value for m in memories])
    for m, v in zip(memories, vecs):
        idx.put(m, v)
    return idx


def block_of(packed) -> str:
    return "".join(f"<memory>{p.text}</memory>" for p in packed)


def evaluate(conv: dict, idx, qvecs: dict, setting) -> tuple[list[tuple[int, bool]], float]:
    """Scores of one conversation under `setting(idx, question, vector) -> RecallQuery`; share of
    questions that skipped the encoder."""
    from memory_adapters.engine.index import recall_with_shared
    by_id = {t["id"]: t for t in conv["turns"]}
    out, skipped = [], 0
    for q in conv["questions"]:
        rq = setting(idx, q["question"], qvecs[q["question"]])
        skipped += rq.vector is None
        elements = memory_elements(block_of(recall_with_shared(idx, None, rq)))
        out.append((q["category"], all(evidence_found(by_id[e]["text"], elements)
                                       for e in q["evidence"] if e in by_id)))
    return out, skipped / max(1, len(conv["questions"]))


def dense_skip(threshold: float):
    from memory_adapters.engine.index import RecallQuery

    def setting(idx, text, vector):
        hits, mean, std = idx.lexical.scored(text, 1)
        confident = bool(hits) and std > 0 and (hits[0][1] - mean) / std >= threshold
        return RecallQuery(text, vector=None if confident else vector)
    return setting


def deadline_path(lexical: bool, fewer: bool):
    from memory_adapters.engine.index import CANDIDATES, RecallQuery

    def setting(idx, text, vector):
        q = RecallQuery(text, vector=None if lexical else vector)
        return replace(q, candidates=CANDIDATES // 4) if fewer else q
    return setting


EXPERIMENTS = {
    "dense-skip": {"default (never skip)": dense_skip(float("inf")),
                   **{f"skip when top BM25 z >= {t}": dense_skip(t) for t in (12, 10, 8, 6)}},
    "deadline": {"default (dense+lexical)": deadline_path(False, False),
                 "fewer candidates": deadline_path(False, True),
                 "lexical: deadline": deadline_path(True, False),
                 "lexical, fewer candidates": deadline_path(True, True)},
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--experiment", choices=sorted(EXPERIMENTS), default="dense-skip")
    args = p.parse_args()
    if not DATASET.is_dir():
        print(f"leave-one-out skipped: no data set at {DATASET} (set LOCOMO_DIR)")
        return
    from memory_adapters.engine.dense import Embedder
    embedder = Embedder.load()
    convs = load(DATASET)
    started = time.perf_counter()
    idxs = {c["name"]: build(c, embedder) for c in convs}
    qvecs = dict(zip([q["question"] for c in convs for q in c["questions"]],
                     embedder.embed([q["question"] for c in convs for q in c["questions"]])))
    settings = EXPERIMENTS[args.experiment]
    grid: dict[str, dict[str, tuple[list, float]]] = {
        name: {c["name"]: evaluate(c, idxs[c["name"]], qvecs, s) for c in convs} for name, s in settings.items()}
    default = next(iter(settings))
    rows, doc = [], {}
    for held in convs:
        train = [c["name"] for c in convs if c is not held]

        def train_score(name: str) -> float:
            return scores([r for c in train for r in grid[name][c][0]])["all"]
        chosen = max(settings, key=lambda n: (train_score(n), n == default))
        got, base = scores(grid[chosen][held["name"]][0]), scores(grid[default][held["name"]][0])
        rows.append([held["name"], chosen, train_score(chosen), got["all"], base["all"],
                     got.get("multi-hop"), base.get("multi-hop"), round(grid[chosen][held["name"]][1], 2)])
        doc[held["name"]] = {"chosen": chosen, "held_out": got, "default_held_out": base}
    print(table(["held out", "chosen on the other two", "train all", "held-out all", "default all",
                 "held-out multi-hop", "default multi-hop", "encoder skipped"], rows))
    every = [[name, *[scores(grid[name][c["name"]][0])["all"] for c in convs],
              scores([r for c in convs for r in grid[name][c["name"]][0]])["all"],
              scores([r for c in convs for r in grid[name][c["name"]][0]]).get("multi-hop"),
              round(sum(grid[name][c["name"]][1] for c in convs) / len(convs), 2)] for name in settings]
    print(table(["setting", *[c["name"] for c in convs], "all", "multi-hop", "encoder skipped"], every))
    path = write_results(f"loo-{args.experiment}", {"splits": doc, "grid": {
        name: {c: {"scores": scores(v[0]), "skipped": v[1]} for c, v in per.items()} for name, per in grid.items()}})
    print(f"leave-one-conversation-out, {args.experiment}, {time.perf_counter() - started:.0f} s ({path.name}); "
          f"categories {', '.join(CATEGORIES.values())}")


if __name__ == "__main__":
    main()
