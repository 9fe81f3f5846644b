"""Summarize memory_op (and request) JSON logs per agent and service: what memory did and how fast."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import orjson

STATUSES = ("succeeded", "failed", "timed_out", "skipped")


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


@dataclass
class Row:
    agent: str
    service: str
    op: str
    ops: int = 0
    statuses: dict[str, int] = field(default_factory=lambda: {s: 0 for s in STATUSES})
    latencies: list[float] = field(default_factory=list)
    degraded: int = 0  # of succeeded: answered with less than the service's usual ranking (event `degraded`)
    blocks: int = 0
    bytes: int = 0
    removed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"agent": self.agent, "service": self.service, "op": self.op, "ops": self.ops, **self.statuses,
                "degraded": self.degraded,
                "latency_p50_ms": percentile(self.latencies, 50), "latency_p95_ms": percentile(self.latencies, 95),
                "latency_max_ms": max(self.latencies) if self.latencies else None,
                "blocks": self.blocks, "bytes": self.bytes, "removed": self.removed}


def _num(value: Any) -> float:
    """A count or latency from a log line; anything else counts as 0 (odd lines never stop audit)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def parse_since(text: str) -> datetime:
    """An RFC 3339 time (a date alone means its midnight UTC); ValueError names what is wrong."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not an RFC3339 time: {text!r} (e.g. 2026-11-20T10:00:00Z)") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _after(ts: Any, since: datetime) -> bool:
    if not isinstance(ts, str):
        return False
    try:
        return parse_since(ts) >= since
    except ValueError:
        return False


def summarize(lines: Iterable[bytes | str], *, agent: str | None = None,
              since: str | datetime | None = None) -> dict[str, Any]:
    rows: dict[tuple[str, str, str], Row] = {}
    requests: dict[str, dict[str, Any]] = defaultdict(lambda: {"requests": 0, "errors": 0, "latencies": []})
    skipped = 0
    if isinstance(since, str):
        since = parse_since(since)
    for raw in lines:
        if not str(raw).strip():
            continue
        try:
            ev = orjson.loads(raw)
        except orjson.JSONDecodeError:
            skipped += 1
            continue
        if not isinstance(ev, dict):
            continue
        claw = str(ev.get("claw_id", ""))
        if (agent and claw != agent) or (since and not _after(ev.get("ts"), since)):
            continue
        if ev.get("type") == "memory_op":
            key = (claw, str(ev.get("memory_service", "")), str(ev.get("memory_op", "")))
            row = rows.setdefault(key, Row(*key))
            row.ops += 1
            status = ev.get("memory_status")
            if isinstance(status, str) and status in row.statuses:
                row.statuses[status] += 1
            if ev.get("degraded"):
                row.degraded += 1
            if isinstance(ev.get("latency_ms"), (int, float)):
                row.latencies.append(float(ev["latency_ms"]))
            row.blocks += int(_num(ev.get("memory_blocks")))
            row.bytes += int(_num(ev.get("memory_bytes")))
            row.removed += int(_num(ev.get("memory_removed")))
        elif ev.get("type") == "request":
            r = requests[claw]
            r["requests"] += 1
            if _num(ev.get("status_code")) >= 400:
                r["errors"] += 1
            if isinstance(ev.get("latency_ms"), (int, float)):
                r["latencies"].append(float(ev["latency_ms"]))
    return {
        "memory": [rows[k].as_dict() for k in sorted(rows)],
        "requests": [{"agent": a, "requests": r["requests"], "errors": r["errors"],
                      "latency_p50_ms": percentile(r["latencies"], 50),
                      "latency_p95_ms": percentile(r["latencies"], 95)} for a, r in sorted(requests.items())],
        "unparsed_lines": skipped,
    }


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.1f}"
    return str(v)


def render_table(summary: dict[str, Any]) -> str:
    cols = ["agent", "service", "op", "ops", "succeeded", "degraded", "failed", "timed_out", "skipped",
            "latency_p50_ms", "latency_p95_ms", "latency_max_ms", "blocks", "bytes", "removed"]
    heads = ["AGENT", "SERVICE", "OP", "OPS", "OK", "DEGRADED", "FAILED", "TIMED_OUT", "SKIPPED", "P50_MS", "P95_MS",
             "MAX_MS", "BLOCKS", "BYTES", "REMOVED"]
    body = [[_fmt(r[c]) for c in cols] for r in summary["memory"]]
    out = [_grid(heads, body) if body else "no memory_op events"]
    if summary["requests"]:
        rcols = ["agent", "requests", "errors", "latency_p50_ms", "latency_p95_ms"]
        out.append("")
        out.append(_grid(["AGENT", "REQUESTS", "ERRORS", "P50_MS", "P95_MS"],
                         [[_fmt(r[c]) for c in rcols] for r in summary["requests"]]))
    return "\n".join(out)


def _grid(heads: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(heads)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(heads, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)
