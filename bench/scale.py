"""Does memplane scale with the machine? (issue 49)

    python -m bench.scale [--quick] [--workers 1,2,4,8] [--targets off,reference,embedded]
                          [--concurrency 64] [--turns 3000] [--providers 4] [--loaders 4]
                          [--memory-workers N] [--memories 1000] [--redis-url URL]

The fake provider runs as `--providers` processes on one port, the load as `--loaders` processes
(`bench.load --distinct`: every request its own question, closed loop, `--concurrency` in all);
memplane runs as `memplane serve`-style workers on the Redis ledger (`--workers` list), with memory
off, behind the reference adapter (`--memory-workers` processes over its JSONL files) or behind the
embedded engine (`--memory-workers` processes over one SQLite store, 1,000 seeded memories with
vectors); `--memory-workers` defaults to as many as the proxy's workers, at most 4. Against them, in the same run: the aiohttp pass-through as one process and as
`--providers` processes. Per row: req/s, p50/p99, its ratio to both pass-throughs, CPU µs per turn
of each group of processes (provider, memory service, proxy, Redis), and the turns' recall
outcomes by their `X-Memplane-Recall` status (succeeded, degraded, timed_out, ...).

`--quick` (the 2-core default): workers 1,2, one provider and one load process, c=16, 600 turns —
on two cores the rows measure CPU per turn, not scaling (every process shares the same two cores).
Wrap a run in `flock /work/wt/bench.lock` on a shared host.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from manifests.agents import memory_manifest, write_agent
from memplane_core.contract import RETAIN_BATCH_PATH

from .harness import PIDS, cpu_seconds, redis_url, role, table, write_results
from .seed import seed_embedded, seed_reference

ROOT = Path(__file__).parent.parent


def _redis_pid(url: str) -> int | None:
    import redis
    try:
        return int(redis.Redis.from_url(url).info("server")["process_id"])
    except Exception:  # noqa: BLE001 - a remote Redis: no row for it
        return None


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))], 1)


def drive(url: str, token: str, concurrency: int, turns: int, loaders: int, offset: int) -> dict:
    """`loaders` bench.load processes at once, each its share of the concurrency and the turns."""
    procs = []
    for i in range(loaders):
        share_c = concurrency // loaders + (1 if i < concurrency % loaders else 0)
        share_n = turns // loaders + (1 if i < turns % loaders else 0)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "bench.load", "--url", url, "--token", token, "--concurrency", str(max(1, share_c)),
             "--requests", str(share_n), "--seconds", "300", "--distinct", "--latencies",
             "--offset", str(offset + i * 1_000_000)], stdout=subprocess.PIPE, text=True, cwd=ROOT))
    rows = [json.loads(p.communicate(timeout=420)[0].strip().splitlines()[-1]) for p in procs]
    latencies = [x for r in rows for x in r["latencies_ms"]]
    recalls: dict[str, int] = {}
    for r in rows:
        for k, v in r["recalls"].items():
            recalls[k] = recalls.get(k, 0) + v
    seconds = max(r["seconds"] for r in rows) or 1.0
    done = sum(r["requests"] for r in rows)
    return {"requests": done, "errors": sum(r["errors"] for r in rows), "seconds": seconds,
            "rps": round(done / seconds, 1), "p50_ms": _pct(latencies, 50), "p99_ms": _pct(latencies, 99),
            "recalls": recalls}


def measure(url: str, token: str, groups: dict[str, list[int]], a: argparse.Namespace, offset: int) -> dict:
    drive(url, token, a.concurrency, max(100, a.turns // 5), a.loaders, offset)  # warm: connections, caches
    time.sleep(2)  # the warm-up's retains and embeddings
    before = {n: cpu_seconds(p) for n, p in groups.items()}
    row = drive(url, token, a.concurrency, a.turns, a.loaders, offset + 500_000)
    time.sleep(1)  # the last batched retains
    done = max(1, row["requests"])
    row["cpu_us_per_turn"] = {n: round((cpu_seconds(p) - before[n]) / done * 1e6) for n, p in groups.items()}
    return row


def run(a: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="memplane-scale-"))
    rows: dict[str, dict] = {}
    redis = a.redis_url or redis_url()
    rpid = _redis_pid(redis) if redis else None
    try:
        with contextlib.ExitStack() as stack:
            prov = stack.enter_context(role("provider", "--workers", str(a.providers)))
            upstream = f"http://127.0.0.1:{prov}/v1"
            base = {"provider": [PIDS[prov]]}
            for procs in sorted({1, a.providers}):
                with role("passthrough", "--upstream", upstream, "--workers", str(procs)) as pt:
                    name = f"pass-through x{procs}"
                    rows[name] = measure(f"http://127.0.0.1:{pt}/v1/chat/completions", "bench",
                                         {**base, "proxy": [PIDS[pt]]}, a, 0)
                    print(name, json.dumps(rows[name]), file=sys.stderr, flush=True)
            for target in a.targets:
                for w in a.workers:
                    if w > 1 and not redis:
                        print(f"skipped: {target} x{w} needs Redis (--redis-url)", file=sys.stderr)
                        continue
                    name = f"{target} x{w}"
                    rows[name] = one_row(tmp / name.replace(" ", "_"), target, w, upstream, redis, rpid, base, a)
                    print(name, json.dumps(rows[name]), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def one_row(tmp: Path, target: str, w: int, upstream: str, redis: str | None, rpid: int | None,
            base: dict[str, list[int]], a: argparse.Namespace) -> dict:
    with contextlib.ExitStack() as stack:
        ctx, groups = tmp / "ctx", dict(base)
        if target == "off":
            token, _ = write_agent(ctx, "off")
        else:
            engines = a.memory_workers or min(w, 4)
            if target == "embedded":
                asyncio.run(seed_embedded(tmp / "emb", {"emb": a.memories}, dim=384))
                svc = stack.enter_context(role("embedded", "--data-dir", str(tmp / "emb"), "--workers", str(engines)))
            else:
                seed_reference(tmp / "ref", "ref", a.memories)
                svc = stack.enter_context(role("reference", "--data-dir", str(tmp / "ref"), "--workers", str(engines)))
            groups["service"] = [PIDS[svc]]
            token, _ = write_agent(ctx, target[:3], memory=memory_manifest(
                target, f"http://127.0.0.1:{svc}", retain_batch_path=RETAIN_BATCH_PATH))
        shared = ["--redis-url", redis, "--ledger-prefix", f"scale{os.getpid()}{target}{w}", "--workers", str(w)] \
            if redis else []  # the Redis ledger for every row when there is one: rows differ only in workers
        mp = stack.enter_context(role("memplane", "--upstream", upstream, "--context-root", str(ctx),
                                      "--history-root", str(tmp / "hist"), *shared))
        groups["proxy"] = [PIDS[mp]]
        if redis and rpid:
            groups["redis"] = [rpid]
        row = measure(f"http://127.0.0.1:{mp}/v1/chat/completions", token, groups, a, 10_000_000 * w)
        row["proxy_workers"] = w
        if target != "off":
            row["memory_workers"] = a.memory_workers or min(w, 4)
        return row


def summarize(rows: dict[str, dict]) -> tuple[str, dict]:
    one = rows.get("pass-through x1")
    many = max((r for n, r in rows.items() if n.startswith("pass-through")), key=lambda r: r["rps"], default=one)
    heads = ["row", "req/s", "x pass-through 1", "x pass-through N", "p50 ms", "p99 ms", "proxy CPU µs/turn",
             "x pass-through CPU", "service CPU µs/turn", "provider CPU µs/turn", "recalls"]
    out, ratios = [], {}
    for name, r in rows.items():
        cpu = r["cpu_us_per_turn"]
        x1 = round(r["rps"] / one["rps"], 2) if one else None
        xn = round(r["rps"] / many["rps"], 2) if many else None
        xcpu = round(cpu["proxy"] / one["cpu_us_per_turn"]["proxy"], 2) if one else None
        ratios[name] = {"rps_vs_passthrough_1": x1, "rps_vs_passthrough_n": xn, "proxy_cpu_vs_passthrough": xcpu}
        recalls = ", ".join(f"{k} {v}" for k, v in sorted(r["recalls"].items()) if k != "none") or "-"
        out.append([name, r["rps"], x1, xn, r["p50_ms"], r["p99_ms"], cpu.get("proxy"), xcpu, cpu.get("service"),
                    cpu.get("provider"), recalls])
    return table(heads, out), ratios


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small: a 2-core machine (the default sizes below change)")
    p.add_argument("--workers", default=None, help="proxy worker counts (default 1,2,4,8; quick 1,2)")
    p.add_argument("--targets", default="off,reference,embedded")
    p.add_argument("--concurrency", type=int, default=None, help="default 64; quick 16")
    p.add_argument("--turns", type=int, default=None, help="per row (default 3000; quick 600)")
    p.add_argument("--providers", type=int, default=None, help="fake provider processes (default 4; quick 1)")
    p.add_argument("--loaders", type=int, default=None, help="load processes (default 4; quick 1)")
    p.add_argument("--memory-workers", type=int, default=0, help="memory service processes (0: min(workers, 4))")
    p.add_argument("--memories", type=int, default=1000)
    p.add_argument("--redis-url", default=None, help="for more than one proxy worker (default: the tests' Redis)")
    a = p.parse_args()
    q = a.quick
    a.workers = [int(x) for x in (a.workers or ("1,2" if q else "1,2,4,8")).split(",")]
    a.targets = [t for t in a.targets.split(",") if t]
    a.concurrency = a.concurrency or (16 if q else 64)
    a.turns = a.turns or (600 if q else 3000)
    a.providers = a.providers or (1 if q else 4)
    a.loaders = a.loaders or (1 if q else 4)
    started = time.time()
    rows = run(a)
    text, ratios = summarize(rows)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    path = write_results("scale", {"cores": cores, "args": {k: v for k, v in vars(a).items()}, "rows": rows,
                                   "ratios": ratios, "seconds": round(time.time() - started)})
    print(f"bench.scale on {cores} cores, c={a.concurrency}, {a.turns} turns a row, {a.providers} provider and "
          f"{a.loaders} load processes ({path.name})")
    print(text)


if __name__ == "__main__":
    main()
