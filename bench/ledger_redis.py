"""What the shared ledger costs: turns/s and added p50 for one and two proxies on the Redis ledger,
against the file ledger and the provider called directly, all in one run; Redis with AOF
`appendfsync everysec` vs `always` (a redis-server started here on a free port); and the memory
model of a tiered replica's index cache (bytes per memory, agents per GB).

    python -m bench.ledger_redis            # BENCH_QUICK=1 for a short run
    python -m bench.ledger_redis --index-model   # only the memory model
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import redis

from manifests.agents import write_agent
from memplane_cli.runner import free_port

from .harness import QUICK, load, role, stop, table, write_results

BIN = Path(sys.executable).parent / "memplane"


@contextlib.contextmanager
def redis_server(fsync: str, tmp: Path):
    port = free_port()
    data = tmp / f"redis-{fsync}"
    data.mkdir()
    proc = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind",
                             "127.0.0.1", "--dir", str(data), "--save", "", "--appendonly", "yes",
                             "--appendfsync", fsync], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    for _ in range(200):
        with contextlib.suppress(redis.ConnectionError):
            client.ping()
            break
        time.sleep(0.05)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop(proc)


def wait_port(port: int, timeout: float = 30) -> None:
    import socket
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(port)


@contextlib.contextmanager
def proxies(n: int, provider: int, ctx: Path, tmp: Path, *extra: str):
    ports = [free_port() for _ in range(n)]
    procs = [subprocess.Popen([str(BIN), "serve", "--port", str(p), "--context-root", str(ctx), "--history-root",
                               str(tmp / f"hist-{p}"), "--openai-base-url", f"http://127.0.0.1:{provider}/v1", *extra],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for p in ports]
    try:
        for p in ports:
            wait_port(p)
        yield ports
    finally:
        for proc in procs:
            stop(proc)


def drive(ports: list[int], token: str, requests: int, concurrency: int) -> dict:
    """Load every proxy at once (what a load balancer spreads); turns/s summed, p50 the mean."""
    urls = [f"http://127.0.0.1:{p}/v1/chat/completions" for p in ports]
    with ThreadPoolExecutor(len(urls)) as pool:
        outs = list(pool.map(lambda u: load(u, token, concurrency, requests // len(urls), 120, False), urls))
    return {"rps": round(sum(o["rps"] for o in outs), 1), "p50_ms": sum(o["p50_ms"] for o in outs) / len(outs),
            "errors": sum(o["errors"] for o in outs), "requests": sum(o["requests"] for o in outs)}


def ledger_runs(rounds: int) -> list[list]:
    """Every setup `rounds` times, interleaved (a busy host's drift hits them alike); medians."""
    import statistics

    runs = [one_round() for _ in range(rounds)]
    rows = []
    for i, first in enumerate(runs[0]):
        col = [r[i] for r in runs]
        rows.append([first[0], first[1], statistics.median(c[2] for c in col), statistics.median(c[3] for c in col),
                     statistics.median(c[4] for c in col), sum(c[5] for c in col)])
    return rows


def one_round() -> list[list]:
    requests, concurrency = (300, 8) if QUICK else (2000, 16)
    tmp = Path(tempfile.mkdtemp(prefix="memplane-scale-bench-"))
    ctx = tmp / "ctx"
    token, _ = write_agent(ctx, "bench-agent")
    rows = []
    with role("provider") as provider:
        base = drive([provider], "x", requests, concurrency)  # the provider alone: what "added" is added to
        direct = base["p50_ms"]
        rows.append(["provider direct", 1, base["rps"], direct, 0.0, base["errors"]])
        with proxies(1, provider, ctx, tmp) as ports:
            o = drive(ports, token, requests, concurrency)
            rows.append(["file ledger", 1, o["rps"], o["p50_ms"], o["p50_ms"] - direct, o["errors"]])
        for fsync in ("everysec", "always"):
            with redis_server(fsync, tmp) as url:
                counts = (1, 2) if fsync == "everysec" else (1,)
                for n in counts:
                    with proxies(n, provider, ctx, tmp, "--ledger", "redis", "--redis-url", url) as ports:
                        o = drive(ports, token, requests, concurrency)
                        rows.append([f"redis ledger, appendfsync {fsync}", n, o["rps"], o["p50_ms"],
                                     o["p50_ms"] - direct, o["errors"]])
    return rows


def index_model(memories: int = 2000, text_chars: int = 240) -> dict:
    """Bytes one memory costs in a replica's index (no vectors), measured with tracemalloc."""
    from memory_adapters.engine.record import StoredMemory
    from memory_adapters.tiered.coherence import VersionedIndex
    from memory_adapters.tiered.index_cache import BYTES_PER_DIM

    words = ("launch moved thursday budget review alice paris flight hotel meeting notes quarterly "
             "migration database replica failover garden piano recipe").split()
    rows = [StoredMemory(agent_id="a", scope="agent", key=f"k{i}",
                         value=" ".join(words[(i * 7 + j) % len(words)] + str(i % 97) for j in range(text_chars // 9)),
                         source_entry_ids=[f"hist1_{i:064x}"]) for i in range(memories)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    idx = VersionedIndex()
    idx.load((m, None) for m in rows)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    per = (after - before) / memories
    # the rows themselves (StoredMemory objects) were made before tracing started: add them
    per_row = sum(sys.getsizeof(m.value) + sys.getsizeof(m.__dict__) + 200 for m in rows) / memories
    per_memory = per + per_row
    with_vectors = per_memory + 384 * BYTES_PER_DIM
    return {"memories": memories, "text_chars": text_chars, "index_bytes_per_memory": round(per),
            "bytes_per_memory": round(per_memory), "bytes_per_memory_384d": round(with_vectors),
            "agents_per_gb_at_100": int(2**30 / (100 * per_memory)),
            "agents_per_gb_at_1000": int(2**30 / (1000 * per_memory)),
            "agents_per_gb_at_1000_384d": int(2**30 / (1000 * with_vectors))}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--index-model", action="store_true", help="only the index cache's memory model")
    p.add_argument("--rounds", type=int, default=1 if QUICK else 3, help="runs of every setup (medians reported)")
    a = p.parse_args()
    model = index_model()
    print(table(list(model), [list(model.values())]))
    doc: dict = {"index_model": model, "rounds": a.rounds}
    if not a.index_model:
        rows = ledger_runs(a.rounds)
        heads = ["setup", "proxies", "turns/s", "p50 ms", "added p50 ms", "errors"]
        print(table(heads, rows))
        doc["ledger"] = [dict(zip(heads, r)) for r in rows]
    print(write_results("ledger_redis", doc))


if __name__ == "__main__":
    main()
