"""Redaction quality on the labelled corpus (`quality_corpus` in memplane_core/redaction/corpus.py): recall over secrets and
the false-positive rate over look-alikes, on the held-out third (never used to tune the rules),
next to detect-secrets (a well-kept scanner) as a baseline row, plus throughput on mixed text."""

from __future__ import annotations

import time
from collections import defaultdict

from memplane_core.redact import Redactor
from memplane_core.redaction.corpus import Sample, redacted
from memplane_core.redaction.corpus import quality_corpus as corpus

from .harness import table, write_results
from .redaction_public_data import samples as public_samples


def memplane_scan(redactor: Redactor):
    def scan(sample: Sample) -> str:
        return redacted(redactor, sample.text)
    return scan


def detect_secrets_scan():
    """detect-secrets' default plugins on each line; a found secret is blanked like a redaction."""
    try:
        from detect_secrets.core.scan import scan_line
        from detect_secrets.settings import default_settings
    except ImportError:
        return None

    def scan(sample: Sample) -> str:
        out = sample.text
        with default_settings():
            for line in sample.text.splitlines() or [sample.text]:
                for found in scan_line(line):
                    value = found.secret_value
                    if value:
                        out = out.replace(value, "[redacted]")
        return out
    return scan


def score(samples: list[Sample], scan) -> dict:
    per_kind: dict[str, list[bool]] = defaultdict(list)
    fp = 0
    looks = 0
    for s in samples:
        out = scan(s)
        if s.kind == "lookalike":
            looks += 1
            fp += out != s.text
        else:
            # every line of the secret must be gone (a PEM block counts as found when its body is)
            body = [ln for ln in s.secret.splitlines() if ln and not ln.startswith("-----")] or [s.secret]
            per_kind[s.kind].append(all(ln not in out for ln in body))
    found = [ok for v in per_kind.values() for ok in v]
    return {"secrets": len(found), "recall": sum(found) / len(found), "lookalikes": looks,
            "false_positive_rate": fp / looks if looks else 0.0,
            "missed_kinds": sorted(k for k, v in per_kind.items() if not all(v))}


def throughput_mb_s(redactor: Redactor, samples: list[Sample]) -> tuple[float, float]:
    """(MB/s in CPU time of this process, MB/s by the wall clock): on a shared machine the first is
    the engine's speed, the second also counts time other processes took."""
    text = "\n".join(s.text for s in samples) + "\n" + ("ordinary chat text about the quarterly plan. " * 20000)
    fresh = Redactor(rules=redactor.rules, allow=redactor.allow)  # no memo: every string new
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(text), 4096):
        fresh.text(text[i:i + 4096])
    size = len(text.encode()) / 1e6
    return size / (time.process_time() - cpu), size / (time.perf_counter() - started)


def main() -> None:
    samples = corpus()
    held = [s for s in samples if s.held_out]
    tuning = [s for s in samples if not s.held_out]
    kinds = {s.kind for s in samples if s.kind != "lookalike"}
    redactor = Redactor()
    rows = {"memplane (held-out)": score(held, memplane_scan(redactor)),
            "memplane (tuning split)": score(tuning, memplane_scan(redactor))}
    ds = detect_secrets_scan()
    if ds is not None:
        rows["detect-secrets 1.5 (held-out)"] = score(held, ds)
    else:
        print("detect-secrets row skipped: pip install detect-secrets")
    public = public_report(redactor)
    mbs = throughput_mb_s(redactor, samples)
    print(f"corpus: {sum(s.kind != 'lookalike' for s in samples)} secrets of {len(kinds)} kinds, "
          f"{sum(s.kind == 'lookalike' for s in samples)} look-alikes; held-out {len(held)} samples")
    print(table(["scanner", "secrets", "recall", "look-alikes", "false positives", "missed kinds"],
                [[name, r["secrets"], f"{r['recall']:.3f}", r["lookalikes"], f"{r['false_positive_rate']:.3f}",
                  ", ".join(r["missed_kinds"][:6])] for name, r in rows.items()]))
    print(f"memplane throughput on mixed text (no memo): {mbs[0]:.1f} MB/s CPU time, {mbs[1]:.1f} MB/s wall clock")
    print("\nindependent data from public scanner fixtures (bench/redaction_public_data.py)")
    print(table(["split", "group", "secrets", "recall", "look-alikes", "false positives"],
                [[split, group, r["secrets"], f"{r['recall']:.3f}" if r["secrets"] else "-", r["lookalikes"],
                  f"{r['fp_rate']:.3f}" if r["lookalikes"] else "-"]
                 for split, groups in public.items() for group, r in groups.items()]))
    write_results("redaction_quality", {"rows": rows, "throughput_mb_s": mbs[0], "throughput_wall_mb_s": mbs[1], "public": public})


def public_report(redactor: Redactor) -> dict:
    """Recall and false positives on the public-fixture data, per source and per context, for the
    held-out third and for everything."""
    scan = memplane_scan(redactor)
    out: dict[str, dict[str, dict]] = {}
    for split, keep in (("held-out", lambda s: s.held_out), ("all", lambda s: True)):
        groups: dict[str, dict] = defaultdict(lambda: {"secrets": 0, "found": 0, "lookalikes": 0, "changed": 0})
        for s in public_samples():
            if not keep(s):
                continue
            got = scan(Sample(s.context, s.secret, s.text, s.context, s.held_out))
            for group in ("total", f"source:{s.source}", f"context:{s.context}"):
                g = groups[group]
                if s.secret:
                    g["secrets"] += 1
                    g["found"] += s.secret not in got
                else:
                    g["lookalikes"] += 1
                    g["changed"] += got != s.text
        for g in groups.values():
            g["recall"] = g["found"] / g["secrets"] if g["secrets"] else 0.0
            g["fp_rate"] = g["changed"] / g["lookalikes"] if g["lookalikes"] else 0.0
        out[split] = dict(sorted(groups.items()))
    return out


if __name__ == "__main__":
    main()
