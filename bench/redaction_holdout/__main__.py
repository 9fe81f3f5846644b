"""Score redaction on the vendor-format corpus (`corpus.jsonl`, see generate.py): recall over
secrets, look-alike twins changed, collateral changed — the held-out split (vendors never looked at
while rules were written) first, then dev, then the project's older public-fixture set.

    python -m bench.redaction_holdout [--misses dev]   # list dev misses (never held-out ones)
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from memplane_core.redact import Redactor
from memplane_core.redaction.corpus import redacted

from ..harness import table, write_results
from ..redaction_quality import public_report
from .generate import Item, load


def leaked(secret: str, out: str) -> bool:
    """The secret, or any 12-character run of it, is still in the output (a half-redacted key leaks)."""
    if secret in out:
        return True
    n = 12
    return any(secret[i:i + n] in out for i in range(0, max(1, len(secret) - n + 1), 4) if len(secret) >= n)


def score(items: list[Item], redactor: Redactor) -> dict:
    rows: dict[str, dict] = defaultdict(lambda: {"secrets": 0, "found": 0, "twins": 0, "twins_changed": 0,
                                                 "collateral": 0, "collateral_changed": 0})
    misses: list[tuple[Item, str]] = []
    for it in items:
        out = redacted(redactor, it.text)
        for key in ("total", f"context:{it.context}" if it.group != "collateral" else "collateral:" + it.context):
            row = rows[key]
            if it.group == "secret":
                row["secrets"] += 1
                ok = not leaked(it.secret, out)
                row["found"] += ok
                if not ok and key == "total":
                    misses.append((it, out))
            elif it.group == "twin":
                row["twins"] += 1
                row["twins_changed"] += out != it.text
                if out != it.text and key == "total":
                    misses.append((it, out))
            else:
                row["collateral"] += 1
                row["collateral_changed"] += out != it.text
                if out != it.text and key == "total":
                    misses.append((it, out))
    for row in rows.values():
        row["recall"] = row["found"] / row["secrets"] if row["secrets"] else None
        row["twin_fp"] = row["twins_changed"] / row["twins"] if row["twins"] else None
        row["collateral_fp"] = row["collateral_changed"] / row["collateral"] if row["collateral"] else None
    return {"rows": dict(sorted(rows.items())), "misses": misses}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--misses", choices=["dev"], help="print the dev split's misses (held-out ones are never shown)")
    ap.add_argument("--contexts", action="store_true", help="per-context rows")
    ap.add_argument("--code", action="store_true", help="also: lines of installed third-party code changed")
    args = ap.parse_args()
    items = load()
    redactor = Redactor()
    report = {}
    for split in ("held-out", "dev"):
        res = score([i for i in items if i.split == split], redactor)
        report[split] = res["rows"]
        t = res["rows"]["total"]
        print(f"{split}: recall {_pct(t['recall'])} ({t['found']}/{t['secrets']}), look-alike twins changed "
              f"{_pct(t['twin_fp'])} ({t['twins_changed']}/{t['twins']}), collateral changed "
              f"{_pct(t['collateral_fp'])} ({t['collateral_changed']}/{t['collateral']})")
        if args.contexts:
            print(table(["group", "secrets", "recall", "twins", "twins changed", "collateral", "changed"],
                        [[k, r["secrets"], _pct(r["recall"]), r["twins"], _pct(r["twin_fp"]), r["collateral"],
                          _pct(r["collateral_fp"])] for k, r in res["rows"].items() if k != "total"]))
        if args.misses == split:
            for it, out in res["misses"]:
                print(f"--- {it.group} {it.vendor} {it.context}\n{it.text}\n=> {out}")
    pub = {split: groups["total"] for split, groups in public_report(redactor).items()}
    report["public"] = pub
    for split, r in pub.items():
        print(f"public fixtures ({split}): recall {_pct(r['recall'])} of {r['secrets']}, look-alikes changed "
              f"{_pct(r['fp_rate'])} of {r['lookalikes']}")
    if args.code:
        report["code"] = code_collateral(redactor)
        c = report["code"]
        print(f"installed third-party code ({', '.join(CODE_PACKAGES)}): {c['changed']} of {c['lines']} lines changed "
              f"({100 * c['changed'] / c['lines']:.3f} %), by kind {c['kinds']}")
    write_results("redaction_holdout", report)


# libraries every memplane install has: code and docs full of `token`, `api_key`, `secret`, `auth`
# names and ids, and (bar a few documented examples) no credential
CODE_PACKAGES = ("anthropic", "openai", "aiohttp", "httpx", "anyio", "click", "dateutil", "dns", "dotenv", "fsspec",
                 "attr", "cachetools", "structlog", "pydantic", "jsonschema", "yaml", "redis")


def code_collateral(redactor: Redactor, limit: int = 400_000) -> dict:
    """Each non-blank line of the packages' .py/.md/.rst/.yaml/.toml/.txt files, redacted alone."""
    import importlib.util
    from collections import Counter
    from pathlib import Path

    lines = changed = 0
    kinds: Counter[str] = Counter()
    for name in CODE_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = Path(list(spec.submodule_search_locations)[0])
        for path in sorted(root.rglob("*")):
            if path.suffix not in (".py", ".md", ".rst", ".yaml", ".yml", ".toml", ".txt") or not path.is_file():
                continue
            for line in path.read_text(errors="replace").splitlines():
                if not line.strip() or len(line) > 2000 or lines >= limit:
                    continue
                lines += 1
                out, found = redactor.text(line)
                if out != line:
                    changed += 1
                    kinds.update(found)
    return {"lines": lines, "changed": changed, "kinds": dict(kinds.most_common())}


if __name__ == "__main__":
    main()
