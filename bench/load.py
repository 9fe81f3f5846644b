"""A bounded load generator, run as its own process so it does not share the proxy's event loop:

    python -m bench.load --url URL --token T --concurrency 32 --requests 2000 --seconds 20 [--stream] [--distinct]

Prints one JSON object: req/s, latency p50/p99 (ms), for streams time-to-first-byte p50/p99, and
the turns' recall outcomes by the status their `X-Memplane-Recall` header gave (`recalls`).
`--distinct`: every request its own question (no query-vector cache hit after the first round).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import aiohttp
import orjson


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


TOPICS = ("quarterly numbers", "hiring plan", "cloud costs", "churn analysis", "pricing change", "launch date",
          "support backlog", "security review", "office move", "travel budget", "roadmap", "vendor contract")


def prompts(n: int = 64) -> list[str]:
    """Varied prompts (the same sequence for every target), as real traffic is."""
    return [f"Summarize the {TOPICS[i % len(TOPICS)]} for team {i} in two sentences." for i in range(n)]


def bodies(stream: bool, n: int = 64) -> list[bytes]:
    return [orjson.dumps({"model": "bench-model", "stream": stream, "messages": [
        {"role": "system", "content": "You are a concise analyst."}, {"role": "user", "content": prompt}]})
        for prompt in prompts(n)]


def distinct_body(stream: bool, n: int) -> bytes:
    """Request `n`'s own question: the topics again, with a number no other request has."""
    return orjson.dumps({"model": "bench-model", "stream": stream, "messages": [
        {"role": "system", "content": "You are a concise analyst."},
        {"role": "user", "content": f"Summarize the {TOPICS[n % len(TOPICS)]} for team {n} in two sentences."}]})


async def run(url: str, token: str, concurrency: int, requests: int, seconds: float, stream: bool,
              distinct: bool = False, offset: int = 0) -> dict:
    pool = bodies(stream)
    recalls: dict[str, int] = {}
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    latencies: list[float] = []
    ttfb: list[float] = []
    errors = 0
    issued = 0
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def one() -> None:
            nonlocal errors
            n = issued + len(latencies)
            body = distinct_body(stream, offset + n) if distinct else pool[n % len(pool)]
            t0 = time.perf_counter()
            try:
                async with session.post(url, data=body, headers=headers) as r:
                    first = None
                    async for _ in r.content.iter_any():
                        if first is None:
                            first = time.perf_counter()
                    if r.status != 200:
                        errors += 1
                        return
                    said = r.headers.get("X-Memplane-Recall", "none").split(";", 1)[0]
                    recalls[said] = recalls.get(said, 0) + 1
                latencies.append((time.perf_counter() - t0) * 1000)
                if stream and first is not None:
                    ttfb.append((first - t0) * 1000)
            except aiohttp.ClientError:
                errors += 1

        async def worker() -> None:
            nonlocal issued
            while issued < requests and time.perf_counter() < deadline:
                issued += 1
                await one()

        for _ in range(min(20, requests)):  # warm-up: connections, caches, JIT-free but still
            await one()
        latencies.clear()
        ttfb.clear()
        recalls.clear()
        errors = 0
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
    return {"requests": len(latencies), "errors": errors, "seconds": round(elapsed, 3),
            "rps": round(len(latencies) / elapsed, 1) if elapsed else 0.0,
            "p50_ms": pct(latencies, 50), "p99_ms": pct(latencies, 99),
            "ttfb_p50_ms": pct(ttfb, 50), "ttfb_p99_ms": pct(ttfb, 99), "recalls": recalls,
            "latencies_ms": [round(x, 2) for x in latencies] if LATENCIES else None}


LATENCIES = False  # --latencies: every latency in the output (bench.scale merges several load processes)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--token", default="bench")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--requests", type=int, default=500)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--stream", action="store_true")
    p.add_argument("--distinct", action="store_true", help="every request its own question")
    p.add_argument("--offset", type=int, default=0, help="with --distinct: the first question's number")
    p.add_argument("--latencies", action="store_true", help="print every latency too")
    a = p.parse_args()
    global LATENCIES
    LATENCIES = a.latencies
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    out = asyncio.run(run(a.url, a.token, a.concurrency, a.requests, a.seconds, a.stream, a.distinct, a.offset))
    if not LATENCIES:
        out.pop("latencies_ms")
    sys.stdout.write(orjson.dumps(out).decode() + "\n")


if __name__ == "__main__":
    main()
