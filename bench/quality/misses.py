"""Why a LoCoMo dev question misses: where each of its missing evidence turns ranks.

    python -m bench.quality.misses [--categories 1,3]

In-process, as `loo.py` evaluates (the engine's own index, questions retained after they are
asked, the default ranking). For every question of the chosen categories (default: multi-hop and
open-domain) whose block misses an evidence turn, one line per missing turn: its rank in the
ranking recall packs from (after the speaker, context and sitting steps), its rank by MiniLM alone
and by BM25 alone (a turn past a signal's candidates ranks there as "-"), the best rank of a turn
beside it, and how many turns of its sitting the block holds. The block reaches about the 60th
hit; a turn ranked past that was not cut by the budget, by neighbours or by dedupe, but ranked
out. Nothing here knows the conversations' names or topics.
"""

from __future__ import annotations

import argparse
import time

from memplane_core.redact import Redactor

from .locomo import CATEGORIES, DATASET, evidence_found, load, memory_elements
from .loo import block_of, build, index_of, query_vectors, turn_entry

DEPTH = 5_000  # ranks looked up per signal: past every dev conversation's length


def rank_of(ranking: dict[str, int], ids: list[str]) -> int | None:
    got = [ranking[i] for i in ids if i in ranking]
    return min(got) if got else None


def shown(rank: int | None) -> str:
    return "-" if rank is None else str(rank)


def misses(conv: dict, embedder, categories: set[int]) -> list[str]:
    from memory_adapters.engine.episodes import episode_id, episodes_from_entry
    from memory_adapters.engine.index import CANDIDATES, RecallQuery, recall_with_shared

    idx = index_of(corpus := build(conv, embedder))
    vectors = dict(zip([q["question"] for q in conv["questions"]],
                       embedder.embed([q["question"] for q in conv["questions"]])))
    asked = query_vectors(embedder, [conv], {conv["name"]: corpus}, vectors)[conv["name"]]  # as the services ask
    turn = {t["id"]: (n, t) for n, t in enumerate(conv["turns"])}
    redactor, out = Redactor(), []
    for n, q in enumerate(conv["questions"]):
        text, vector = q["question"], asked[q["question"]]
        packed = recall_with_shared(idx, None, RecallQuery(text, vector=vector))
        elements = memory_elements(block_of(packed))
        missing = [e for e in q["evidence"] if e in turn and not evidence_found(turn[e][1]["text"], elements)]
        if missing and q["category"] in categories:
            in_block = {i for p in packed for i in p.memory_ids}
            fused = {d: r for r, (d, _) in enumerate(idx._ranked(text, vector, CANDIDATES, time.time(), None, None,
                                                                 True))}
            dense = {d: r for r, (d, _) in enumerate(idx.vectors.scored(vector, DEPTH)[0])}
            lexical = {d: r for r, (d, _) in enumerate(idx.lexical.scored(text, DEPTH)[0])}
            sittings = idx.sittings.of
            out.append(f"[{conv['name']} {CATEGORIES[q['category']]}] {text} -> {q.get('answer')} "
                       f"(block: {len(in_block)} turns, {len({sittings.get(i) for i in in_block})} sittings)")
            for e in missing:
                entry = f"hist1_{turn[e][0]}"
                ids = [i for i in [episode_id(conv["name"], entry)] +
                       [episode_id(conv["name"], f"{entry}#{k}") for k in range(1, 8)] if i in idx.memories]
                beside = [b for i in ids for b in idx.around.get(i, ())]
                sitting = {sittings.get(i) for i in ids}
                out.append(f"    {e:7} rank {shown(rank_of(fused, ids)):>5}  MiniLM {shown(rank_of(dense, ids)):>5}  "
                           f"BM25 {shown(rank_of(lexical, ids)):>5}  beside {shown(rank_of(fused, beside)):>5}  "
                           f"sitting in block {sum(sittings.get(i) in sitting for i in in_block):>2}: "
                           f"{turn[e][1]['text'][:100]}")
        for m in episodes_from_entry(conv["name"], turn_entry(n, text, "question", 1), {}, redactor):
            idx.put(m, vectors[text])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--categories", default="1,3", help="comma-separated: 1 multi-hop, 2 temporal, 3 open-domain, "
                                                        "4 single-hop")
    args = p.parse_args()
    if not DATASET.is_dir():
        print(f"misses skipped: no data set at {DATASET} (set LOCOMO_DIR)")
        return
    from memory_adapters.engine.dense import Embedder
    embedder = Embedder.load()
    categories = {int(c) for c in args.categories.split(",") if c.strip()}
    lines = [line for conv in load(DATASET) for line in misses(conv, embedder, categories)]
    print("\n".join(lines))
    print(f"{sum(not line.startswith(' ') for line in lines)} questions of categories "
          f"{', '.join(CATEGORIES[c] for c in sorted(categories))} miss evidence")


if __name__ == "__main__":
    main()
