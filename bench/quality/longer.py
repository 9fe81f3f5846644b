"""Longer conversations made of the dev set's: does a ranking change hold as a history grows?

    python -m bench.quality.longer [--experiment NAME] [--replies assistant|assistant-b|small-talk|ok]

The held-out conversations are longer than most of the dev set's (most of theirs run 500-690
turns, the dev set's 369, 419 and 663), and the dev set's longest scores lowest: the block holds
a smaller share of a longer history, so the ranking's depth matters more. This makes three longer
histories out of the dev set's conversations, each two conversations said by the same two people
(the second conversation's speakers renamed, by the genders their names suggest where both allow;
the turns ordered by their date stamps, each question's evidence kept) — 788, 1,032 and 1,082
turns — and scores a `loo.py` experiment's settings on them, in-process as `loo.evaluate` does.
It is a stress condition of the same questions, not a held-out set: a setting is chosen by
leave-one-conversation-out (`loo.py`), and this says whether it holds at length.
"""

from __future__ import annotations

import argparse
import re
import time
from datetime import datetime

from ..harness import table, write_results
from .locomo import CATEGORIES, DATASET, REPLIES, load, scores
from .loo import EXPERIMENTS, REPLYING, corpora_of, evaluate, prepared, three

# (first conversation, second, the second's speakers renamed to the first's)
MERGES = (("conversation_41", "conversation_30", {"Jon": "John", "Gina": "Maria"}),
          ("conversation_26", "conversation_30", {"Jon": "Melanie", "Gina": "Caroline"}),
          ("conversation_41", "conversation_26", {"Caroline": "Maria", "Melanie": "John"}))
_STAMP = "%I:%M %p on %d %B, %Y"


def _renamed(text: str, names: dict[str, str]) -> str:
    for old, new in names.items():
        text = re.sub(rf"\b{re.escape(old)}\b", new, text)
    return text


def _said(turn: dict) -> datetime:
    return datetime.strptime(turn["message"][1:].split("]", 1)[0], _STAMP)


def merged(first: dict, second: dict, names: dict[str, str]) -> dict:
    """One history of both conversations, in date order; turn ids prefixed A/B so both sets' evidence stays."""
    turns, questions = [], []
    for prefix, conv, rename in (("A", first, {}), ("B", second, names)):
        turns += [{"id": prefix + t["id"], "text": _renamed(t["text"], rename),
                   "message": _renamed(t["message"], rename)} for t in conv["turns"]]
        questions += [{**q, "question": _renamed(q["question"], rename),
                       "evidence": [prefix + e for e in q["evidence"]]} for q in conv["questions"]]
    turns.sort(key=_said)  # stable: a conversation's turns of one minute keep their order
    return {"name": f"{first['name'].rsplit('_', 1)[1]}+{second['name'].rsplit('_', 1)[1]}",
            "turns": turns, "questions": questions}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--experiment", choices=sorted(EXPERIMENTS), default="expansion")
    p.add_argument("--replies", choices=REPLIES, default="assistant")
    args = p.parse_args()
    REPLYING["replies"] = args.replies
    if not DATASET.is_dir():
        print(f"longer conversations skipped: no data set at {DATASET} (set LOCOMO_DIR)")
        return
    from memory_adapters.engine.dense import Embedder
    embedder = Embedder.load()
    by_name = {c["name"]: c for c in load(DATASET)}
    if not all(a in by_name and b in by_name for a, b, _ in MERGES):
        print(f"longer conversations skipped: {DATASET} lacks one of {sorted({m[0] for m in MERGES} | {m[1] for m in MERGES})}")
        return
    started = time.perf_counter()
    convs = [merged(by_name[a], by_name[b], names) for a, b, names in MERGES]
    corpora, qvecs, asked, settings = prepared(embedder, convs, args.experiment)
    built = corpora_of(settings, convs, corpora, embedder)  # settings with a corpus of their own
    cats = [*CATEGORIES.values(), "all"]
    rows, doc = [], {}
    for name, setting in settings.items():
        pooled = []
        for c in convs:
            got = evaluate(c, built.get(name, corpora)[c["name"]], qvecs, setting, True, 0.0, asked[c["name"]])[0]
            pooled += got
            s = scores(got)
            doc.setdefault(name, {})[c["name"]] = s
            rows.append([name, f"{c['name']} ({len(c['turns'])} turns)", *[three(s.get(k)) for k in cats]])
        s = scores(pooled)
        doc[name]["pooled"] = s
        rows.append([name, "pooled", *[three(s.get(k)) for k in cats]])
    print(table(["setting", "history", *cats], rows))
    path = write_results(f"longer-{args.experiment}", {"replies": args.replies, "scores": doc})
    print(f"longer conversations, {args.experiment}, replies {args.replies}, "
          f"{time.perf_counter() - started:.0f} s ({path.name})")


if __name__ == "__main__":
    main()
