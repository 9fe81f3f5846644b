"""`make bench`: every benchmark in one run, each printing its table and a summary line.
BENCH_QUICK=1 shortens every run (fewer requests, smaller sizes)."""

from __future__ import annotations

import sys
import traceback

from . import (
    ingest,
    ledger_index,
    overhead,
    recall_scale,
    redaction_quality,
    redaction_speed,
    retain_cost,
)


def main() -> None:
    failed = []
    for name, mod in (("redaction", redaction_speed), ("redaction quality", redaction_quality),
                      ("retain", retain_cost), ("ledger index", ledger_index), ("ingest", ingest),
                      ("overhead", overhead),
                      ("recall scale", recall_scale)):
        print(f"\n=== {name} ===", flush=True)
        try:
            mod.main()
        except Exception:
            traceback.print_exc()
            failed.append(name)
    print("\n=== recall quality (LoCoMo dev, through the proxy) ===", flush=True)
    from .quality import locomo
    sys.argv = [sys.argv[0]]
    try:
        locomo.main()
    except Exception:
        traceback.print_exc()
        failed.append("quality")
    if failed:
        print(f"benchmarks that failed: {', '.join(failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
