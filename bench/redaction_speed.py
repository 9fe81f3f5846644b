"""Redaction throughput (MB/s) on chat-sized and 1 MB payloads, next to orjson round-trips of
the same bytes as a baseline measured in the same run. Chat requests are measured new (every
string unseen) and resent (what an agent does with its history every turn: the memo answers)."""

from __future__ import annotations

import time

import orjson

from memplane_core.redact import Redactor

from .harness import table, write_results


def chat_payload(n: int = 0) -> dict:
    """A chat request; `n` makes every string new, so the redactor's memo cannot answer."""
    return {"model": "gpt-4o", "messages": [
        {"role": "system", "content": f"You are a careful assistant for the finance team {n}. " * 6},
        {"role": "user", "content": f"Here is config {n}, can you check it? DATABASE_URL=postgres://app:"
                                    "Zq8uN2vLm4@db:5432/prod and the key sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z."},
        {"role": "assistant", "content": f"Sure ({n}). The connection string looks fine, but rotate that key. " * 4},
        {"role": "user", "content": f"Thanks! Also summarise the quarterly numbers for board {n}. " * 5}]}


def big_text() -> str:
    lines = []
    for i in range(12000):
        lines.append(f"2026-11-20T10:{i % 60:02d}:00Z INFO request {i} served in {i % 97} ms for user {i * 7}")
        if i % 500 == 0:
            lines.append(f"2026-11-20T10:00:00Z WARN token=ghp_{'a1B2c3D4' * 4}abcd leaked in debug output")
    return "\n".join(lines)[: 1 << 20]


def rate(fn, payload_bytes: int, min_seconds: float = 1.0) -> tuple[float, float]:
    """(MB/s, µs per call)."""
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < min_seconds:
        fn()
        n += 1
    elapsed = time.perf_counter() - t0
    return payload_bytes * n / elapsed / 1e6, elapsed / n * 1e6


def main() -> dict:
    r = Redactor()
    chat = chat_payload()
    chat_bytes = len(orjson.dumps(chat))
    fresh = iter([chat_payload(i) for i in range(1, 60_000)])  # more than a second of calls
    text = big_text()
    rows = []
    results = {}
    for name, size, fn, base in [
        ("chat JSON (json walk)", chat_bytes, lambda: r.json(next(fresh)), lambda: orjson.loads(orjson.dumps(chat))),
        ("chat JSON resent (memo)", chat_bytes, lambda: r.json(chat), lambda: orjson.loads(orjson.dumps(chat))),
        ("1 MB log text", len(text.encode()), lambda: r.text(text), lambda: orjson.loads(orjson.dumps(text))),
    ]:
        mbps, us = rate(fn, size)
        base_mbps, base_us = rate(base, size)
        results[name] = {"bytes": size, "mb_per_s": round(mbps, 2), "us_per_call": round(us, 1),
                         "orjson_roundtrip_mb_per_s": round(base_mbps, 2), "ratio_to_orjson": round(mbps / base_mbps, 3)}
        rows.append([name, size, mbps, us, base_mbps, mbps / base_mbps])
    print(table(["payload", "bytes", "MB/s", "us/call", "orjson MB/s", "ratio"], rows))
    path = write_results("redaction", results)
    chat_us = results["chat JSON (json walk)"]["us_per_call"]
    print(f"redaction: {chat_us:.0f} us per new chat-sized request "
          f"({results['chat JSON resent (memo)']['us_per_call']:.0f} us resent), "
          f"{results['1 MB log text']['mb_per_s']:.1f} MB/s on 1 MB of logs ({path.name})")
    return results


if __name__ == "__main__":
    main()
