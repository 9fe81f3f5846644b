"""Redaction cost per MB of this tree against a baseline tree (another checkout, e.g. main), in
the same run: rounds alternate one process per tree, each measuring CPU time of its own scans, so
load from other processes on a shared machine hits both sides alike. Reports MB/s per payload and
the median ratio this/baseline.

    python -m bench.redaction_cost --baseline /path/to/main [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from .harness import table, write_results

_MEASURE = r"""
import base64, json, random, time
from memplane_core.redact import Redactor
from memplane_core.redaction.corpus import quality_corpus
from bench.redaction_speed import big_text

rng = random.Random(5)
def pem_pieces():
    out = []
    for i in range(300):
        raw = base64.b64encode(rng.randbytes(700)).decode()
        lines = [raw[j:j + 64] for j in range(0, len(raw), 64)]
        a = rng.randrange(len(lines)); b = rng.randrange(a, len(lines)) + 1
        head = "-----BEGIN RSA PRIVATE KEY-----\n" if a == 0 else ""
        out.append(f"turn {i}: here is the key\n" + head + "\n".join(lines[a:b]) + "\nthanks")
    return "\n".join(out)

payloads = {
    "1 MB log text": big_text(),
    "labelled corpus text (no memo)": "\n".join(s.text for s in quality_corpus()),
    "cut PEM keys": pem_pieces(),
}
res = {}
for name, text in payloads.items():
    chunks = [text[i:i + 4096] for i in range(0, len(text), 4096)]
    best = 0.0
    for _ in range(3):
        r = Redactor()  # a new memo: every chunk is scanned
        t = time.process_time()
        for c in chunks:
            r.text(c)
        best = max(best, len(text.encode()) / 1e6 / max(time.process_time() - t, 1e-9))
    res[name] = best
print(json.dumps(res))
"""


def _measure(tree: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    here = Path(__file__).resolve().parent.parent
    # the payload builders come from this tree's bench/ (the baseline may not have them)
    code = f"import sys; sys.path.append({str(here)!r})\n" + _MEASURE  # the tree under test first
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True, type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    this = Path(__file__).resolve().parent.parent
    rows: dict[str, dict[str, list[float]]] = {}
    for _ in range(args.rounds):
        for side, tree in (("baseline", args.baseline), ("this", this)):
            for name, mbs in _measure(tree).items():
                rows.setdefault(name, {"baseline": [], "this": []})[side].append(mbs)
    report = {}
    for name, sides in rows.items():
        ratios = [t / b for t, b in zip(sides["this"], sides["baseline"])]
        report[name] = {"baseline_mb_s": statistics.median(sides["baseline"]), "this_mb_s": statistics.median(sides["this"]),
                        "median_ratio": statistics.median(ratios), "ratios": [round(r, 3) for r in ratios]}
    print(table(["payload", "baseline MB/s (CPU)", "this MB/s (CPU)", "median ratio", "ratios per round"],
                [[n, r["baseline_mb_s"], r["this_mb_s"], r["median_ratio"], " ".join(map(str, r["ratios"]))]
                 for n, r in report.items()]))
    write_results("redaction_cost", {"baseline": str(args.baseline), "rounds": args.rounds, "payloads": report})


if __name__ == "__main__":
    main()
