"""A bounded load generator, run as its own process so it does not share the proxy's event loop:

    python -m bench.load --url URL --token T --concurrency 32 --requests 2000 --seconds 20 [--stream]

Prints one JSON object: req/s, latency p50/p99 (ms), and for streams time-to-first-byte p50/p99.
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


async def run(url: str, token: str, concurrency: int, requests: int, seconds: float, stream: bool) -> dict:
    pool = bodies(stream)
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
            body = pool[(issued + len(latencies)) % len(pool)]
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
        errors = 0
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
    return {"requests": len(latencies), "errors": errors, "seconds": round(elapsed, 3),
            "rps": round(len(latencies) / elapsed, 1) if elapsed else 0.0,
            "p50_ms": pct(latencies, 50), "p99_ms": pct(latencies, 99),
            "ttfb_p50_ms": pct(ttfb, 50), "ttfb_p99_ms": pct(ttfb, 99)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--token", default="bench")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--requests", type=int, default=500)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--stream", action="store_true")
    a = p.parse_args()
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    out = asyncio.run(run(a.url, a.token, a.concurrency, a.requests, a.seconds, a.stream))
    sys.stdout.write(orjson.dumps(out).decode() + "\n")


if __name__ == "__main__":
    main()
