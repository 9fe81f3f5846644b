"""The inspector's charts: small SVG drawn on the server (no script, no CDN, nothing fetched).

Each chart is `role="img"` with a `<title>` and a `<desc>` that says in words what it shows, so a
screen reader hears the numbers; the pages also put the same numbers in a table under the chart.
Every label passes `escape`: a kind or an agent id is data, never markup.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from datetime import datetime, timezone

from markupsafe import Markup, escape

from .recall_history import STATUSES, Bucket

COLORS = {"succeeded": "#2e7d32", "degraded": "#b8860b", "skipped": "#8a8f98", "timed_out": "#e07000",
          "failed": "#c62828"}
LABELS = {"succeeded": "succeeded", "degraded": "degraded (words only or shed)", "skipped": "skipped",
          "timed_out": "timed out", "failed": "failed"}
W, H, LEFT, RIGHT, TOP, BOTTOM = 640, 200, 52, 14, 30, 32


def _hhmm(at: float) -> str:
    return datetime.fromtimestamp(at, timezone.utc).strftime("%H:%M")


def _day(at: float) -> str:
    return datetime.fromtimestamp(at, timezone.utc).strftime("%b %d")


def _nice_max(value: float) -> float:
    """A round top for a y axis (1, 2, 5 × 10ⁿ)."""
    if value <= 0:
        return 1.0
    step = 10 ** len(str(int(value))) / 10
    for mult in (1, 2, 5, 10):
        if value <= mult * step:
            return mult * step
    return value


def _count_max(value: float) -> float:
    """A y axis top for counts: even, so the middle gridline is a whole number too."""
    return max(2.0, math.ceil(_nice_max(value) / 2) * 2)


def _frame(chart_id: str, title: str, desc: str, body: str, *, height: int = H) -> Markup:
    return Markup(
        f'<svg class="chart" id="{escape(chart_id)}" viewBox="0 0 {W} {height}" role="img" focusable="false" '
        f'aria-labelledby="{escape(chart_id)}-title {escape(chart_id)}-desc" preserveAspectRatio="xMidYMid meet">'
        f'<title id="{escape(chart_id)}-title">{escape(title)}</title>'
        f'<desc id="{escape(chart_id)}-desc">{escape(desc)}</desc>{body}</svg>')


def _axes(top_value: float, unit: str, x_labels: Sequence[tuple[float, str]]) -> str:
    """Y gridlines at 0, half and top; x labels at fractions of the plot's width."""
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    parts = []
    for frac in (0.0, 0.5, 1.0):
        y = TOP + plot_h * (1 - frac)
        value = top_value * frac
        shown = f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
                     f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(shown)}</text>')
    parts.append(f'<text class="tick" x="4" y="16">{escape(unit)}</text>')
    for frac, label in x_labels:
        x = LEFT + plot_w * frac
        anchor = "start" if frac == 0 else "end" if frac == 1 else "middle"
        parts.append(f'<text class="tick" x="{x:.1f}" y="{H - 10}" text-anchor="{anchor}">{escape(label)}</text>')
    return "".join(parts)


def _time_labels(buckets: Sequence[Bucket]) -> list[tuple[float, str]]:
    start, end = buckets[0].start, buckets[-1].end
    return [(0.0, _hhmm(start)), (0.5, _hhmm((start + end) / 2)), (1.0, _hhmm(end) + " UTC")]


def recall_status(buckets: Sequence[Bucket], hours: float, chart_id: str = "recall-status") -> Markup:
    """Recalls per time slice, stacked by status."""
    totals = {s: sum(b.counts[s] for b in buckets) for s in STATUSES}
    n = sum(totals.values())
    title = f"Recalls per {hours * 60 / len(buckets):.0f} minutes over the last {hours:g} hours, by status"
    desc = (f"{n} recalls: " + ", ".join(f"{totals[s]} {LABELS[s]}" for s in STATUSES) + "." if n
            else "No recalls in this window.")
    top = _count_max(max((b.total for b in buckets), default=0))
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    slot = plot_w / len(buckets)
    bars = []
    for i, b in enumerate(buckets):
        y = TOP + plot_h
        for s in STATUSES:
            if not b.counts[s]:
                continue
            h = plot_h * b.counts[s] / top
            y -= h
            bars.append(f'<rect x="{LEFT + i * slot + 1:.1f}" y="{y:.1f}" width="{max(1.0, slot - 2):.1f}" '
                        f'height="{h:.1f}" fill="{COLORS[s]}"><title>{escape(_hhmm(b.start))}: '
                        f'{b.counts[s]} {escape(LABELS[s])}</title></rect>')
    return _frame(chart_id, title, desc, _axes(top, "recalls", _time_labels(buckets)) + "".join(bars))


def recall_latency(buckets: Sequence[Bucket], hours: float, chart_id: str = "recall-latency") -> Markup:
    """Median and 95th-percentile recall latency per time slice (slices without a recall are gaps)."""
    p50 = [b.percentile(0.5) for b in buckets]
    p95 = [b.percentile(0.95) for b in buckets]
    seen = [v for v in p95 if v is not None]
    title = f"Recall latency over the last {hours:g} hours (median and 95th percentile, ms)"
    if not seen:
        desc = "No timed recalls in this window."
    else:
        all_lat = sorted(x for b in buckets for x in b.latencies)
        desc = (f"Median {all_lat[len(all_lat) // 2]:.0f} ms, 95th percentile "
                f"{all_lat[min(len(all_lat) - 1, int(0.95 * len(all_lat)))]:.0f} ms, slowest {all_lat[-1]:.0f} ms "
                f"over {len(all_lat)} recalls.")
    top = _nice_max(max(seen, default=0))
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    slot = plot_w / len(buckets)

    def path(values: list[float | None]) -> str:
        d, pen = [], "M"
        for i, v in enumerate(values):
            if v is None:
                pen = "M"
                continue
            d.append(f"{pen}{LEFT + (i + 0.5) * slot:.1f},{TOP + plot_h * (1 - v / top):.1f}")
            pen = "L"
        return " ".join(d)

    def dots(values: list[float | None], color: str, what: str) -> str:
        return "".join(f'<circle cx="{LEFT + (i + 0.5) * slot:.1f}" cy="{TOP + plot_h * (1 - v / top):.1f}" r="5" '
                       f'fill="{color}"><title>{escape(_hhmm(buckets[i].start))}: {what} {v:.0f} ms</title></circle>'
                       for i, v in enumerate(values) if v is not None)

    body = (_axes(top, "ms", _time_labels(buckets))
            + f'<path d="{path(p95)}" fill="none" stroke="#c62828" stroke-width="2" stroke-dasharray="5 3"/>'
            + f'<path d="{path(p50)}" fill="none" stroke="#1d5fbf" stroke-width="2"/>'
            + dots(p95, "#c62828", "95th percentile") + dots(p50, "#1d5fbf", "median"))
    return _frame(chart_id, title, desc, body)


def memories_by_kind(counts: dict[str, int], chart_id: str = "memories-by-kind") -> Markup:
    """Horizontal bars, one per kind, with the count written beside each."""
    rows = [(k, n) for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if n]
    total = sum(n for _, n in rows)
    title = "Memories by kind"
    desc = (", ".join(f"{n} {k}" for k, n in rows) + f"; {total} in all." if rows else "No memories.")
    row_h, label_w, pad = 32, 175, 8
    height = max(40, pad * 2 + row_h * len(rows))
    top = max((n for _, n in rows), default=1)
    bar_w = W - label_w - RIGHT - 50
    body = "".join(
        f'<text class="label" x="{label_w - 8}" y="{pad + i * row_h + 21}" text-anchor="end">{escape(k)}</text>'
        f'<rect x="{label_w}" y="{pad + i * row_h + 6}" width="{max(2.0, bar_w * n / top):.1f}" height="{row_h - 10}" '
        f'fill="#1d5fbf"/><text class="value" x="{label_w + max(2.0, bar_w * n / top) + 6:.1f}" '
        f'y="{pad + i * row_h + 21}">{n}</text>'
        for i, (k, n) in enumerate(rows))
    return _frame(chart_id, title, desc, body, height=height)


def memories_over_time(created: Sequence[float], now: float | None = None,
                       chart_id: str = "memories-over-time") -> Markup:
    """How many memories there were at each moment: a step line from the oldest to now."""
    now = time.time() if now is None else now
    times = sorted(t for t in created if t <= now)
    title = "Memories over time (cumulative, by creation time)"
    if not times:
        return _frame(chart_id, title, "No memories.", _axes(1, "memories", []))
    start = min(times[0], now - 3600)
    span = max(1.0, now - start)
    top = _count_max(len(times))
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    x = lambda t: LEFT + plot_w * (t - start) / span  # noqa: E731
    y = lambda n: TOP + plot_h * (1 - n / top)  # noqa: E731
    d = [f"M{x(start):.1f},{y(0):.1f}"]
    for i, t in enumerate(times):
        d.append(f"H{x(t):.1f} V{y(i + 1):.1f}")
    d.append(f"H{x(now):.1f}")
    fmt = _hhmm if span < 2 * 86400 else _day
    labels = [(0.0, fmt(start)), (0.5, fmt(start + span / 2)), (1.0, fmt(now) + (" UTC" if fmt is _hhmm else ""))]
    desc = f"{len(times)} memories, the first created {_day(times[0])} {_hhmm(times[0])} UTC, the newest {_day(times[-1])} {_hhmm(times[-1])} UTC."
    area = " ".join(d) + f" V{y(0):.1f} Z"
    body = (_axes(top, "memories", labels) + f'<path d="{area}" fill="#1d5fbf22" stroke="none"/>'
            + f'<path d="{" ".join(d)}" fill="none" stroke="#1d5fbf" stroke-width="2"/>')
    return _frame(chart_id, title, desc, body)


def sparkline(buckets: Sequence[Bucket], label: str) -> Markup:
    """A row's small chart: median recall latency per slice; red ticks where recalls failed or timed out."""
    w, h = 160, 32
    p50 = [b.percentile(0.5) for b in buckets]
    seen = [v for v in p50 if v is not None]
    bad = sum(b.counts["failed"] + b.counts["timed_out"] for b in buckets)
    degraded = sum(b.counts["degraded"] for b in buckets)
    n = sum(b.total for b in buckets)
    desc = (f"{n} recalls, median latency from {min(seen):.0f} to {max(seen):.0f} ms, {bad} failed or timed out"
            + (f", {degraded} degraded." if degraded else ".")
            if seen else f"{n} recalls, none timed." if n else "No recalls.")
    top = max(seen, default=1) or 1
    slot = w / len(buckets)
    pts = " ".join(f"{(i + 0.5) * slot:.1f},{h - 3 - (h - 8) * v / top:.1f}" for i, v in enumerate(p50) if v is not None)
    ticks = "".join(f'<rect x="{i * slot:.1f}" y="0" width="{max(1.0, slot - 1):.1f}" height="4" fill="#c62828"/>'
                    for i, b in enumerate(buckets) if b.counts["failed"] + b.counts["timed_out"])
    line = f'<polyline points="{pts}" fill="none" stroke="#1d5fbf" stroke-width="1.5"/>' if pts else ""
    line += "".join(f'<circle cx="{x}" cy="{y}" r="2.5" fill="#1d5fbf"/>'  # a lone slice is a dot, not nothing
                    for x, y in (p.split(",") for p in pts.split()))
    return Markup(f'<svg class="spark" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" focusable="false" '
                  f'aria-label="{escape(label)}: {escape(desc)}"><title>{escape(label)}: {escape(desc)}</title>'
                  f'<line x1="0" x2="{w}" y1="{h - 1}" y2="{h - 1}" class="grid"/>{line}{ticks}</svg>')
