"""What quoting prompt-section headings (proxy/inject.py, docs/provenance.md) costs per block,
against quoting speaker labels alone, in the same run: LoCoMo-dev's turns as the engines pack them
(runs of eight `user: …` / `assistant: …` turns under a date line), CPU time, median of rounds.
The block's shown text is memoised per memory text, so this is paid once per new text.

    LOCOMO_DIR=../shared/datasets/locomo-dev python -m bench.heading_cost [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from proxy.inject import quoted_headings, quoted_roles

from .quality.locomo import DATASET


def blocks() -> list[str]:
    turns = []
    for path in sorted(DATASET.glob("*.json")):
        doc = json.loads(path.read_text())
        conv = doc.get("conversation", doc) if isinstance(doc, dict) else {}
        for session in conv.values():
            if isinstance(session, list):
                turns += [f"user: {t['text']}\nassistant: OK." for t in session if isinstance(t, dict) and "text" in t]
    return ["[2023-05-08]\n" + "\n".join(turns[i:i + 8]) for i in range(0, len(turns), 8)]


def per_block_us(texts: list[str], quote) -> float:
    started = time.process_time()
    for text in texts:
        quote(text)
    return (time.process_time() - started) / len(texts) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    texts = blocks()
    if not texts:
        raise SystemExit(f"no data set at {DATASET} (set LOCOMO_DIR)")
    roles, both = [], []
    for _ in range(args.rounds):  # alternating, so load from other processes hits both alike
        roles.append(per_block_us(texts, quoted_roles))
        both.append(per_block_us(texts, lambda t: quoted_headings(quoted_roles(t))))
    r, b = statistics.median(roles), statistics.median(both)
    print(f"{len(texts)} blocks: speaker labels {r:.1f} µs/block, labels + headings {b:.1f} µs/block, "
          f"headings add {b - r:.1f} µs ({b / r:.2f}x)")


if __name__ == "__main__":
    main()
