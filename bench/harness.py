"""Start benchmark server processes, seed memories, and write results."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import orjson

from memplane_cli.runner import free_port

RESULTS = Path(__file__).parent / "results"
PIDS: dict[int, int] = {}  # port -> pid of the role serving it (bench.overhead reads their CPU time)
QUICK = os.environ.get("BENCH_QUICK") == "1"


def stop(proc: subprocess.Popen, grace_s: float = 5) -> None:
    """Ask a server process to exit; kill it if it has not within `grace_s`."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def role(name: str, *args: str) -> Iterator[int]:
    """Run `python -m bench.servers NAME ...` and yield its port once it says READY."""
    errors = open(RESULTS.parent / f".{name}.stderr", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "bench.servers", name, *args], stdout=subprocess.PIPE,
                            stderr=errors, text=True, cwd=Path(__file__).parent.parent)
    try:
        line = proc.stdout.readline()
        if not line.startswith("READY"):
            errors.seek(0)
            raise RuntimeError(f"{name} did not start: {errors.read()[-2000:]}")
        port = int(line.split()[1])
        PIDS[port] = proc.pid
        yield port
    finally:
        stop(proc)
        errors.close()
        Path(errors.name).unlink(missing_ok=True)


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (a role's worker processes)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return out


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes and their children so far (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in {p for root in pids for p in _tree(root)}:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            continue
    return total / tick


def load(url: str, token: str, concurrency: int, requests: int, seconds: float, stream: bool) -> dict:
    cmd = [sys.executable, "-m", "bench.load", "--url", url, "--token", token, "--concurrency", str(concurrency),
           "--requests", str(requests), "--seconds", str(seconds)] + (["--stream"] if stream else [])
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).parent.parent, timeout=seconds + 120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def redis_url() -> str | None:
    import redis
    url = os.environ.get("MEMPLANE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    base = url.rsplit("/", 1)[0] if url.count("/") > 2 else url
    try:
        redis.Redis.from_url(base + "/14", socket_connect_timeout=1).ping()
        return base + "/14"
    except Exception:
        return None


@contextlib.contextmanager
def mongo(tmp: Path) -> Iterator[str | None]:
    """MEMPLANE_TEST_MONGO_URL, or nx-27017 on a free port; None if neither is available."""
    if os.environ.get("MEMPLANE_TEST_MONGO_URL"):
        yield os.environ["MEMPLANE_TEST_MONGO_URL"]
        return
    binary = Path(sys.executable).parent / "nx-27017"
    if not binary.exists():
        yield None
        return
    port = free_port()
    proc = subprocess.Popen([str(binary), "--data-dir", str(tmp / "nx"), "--port", str(port),
                             "--log-file", str(tmp / "nx.log"), "--pid-file", str(tmp / "nx.pid")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    try:
        yield f"mongodb://127.0.0.1:{port}/memplane_bench"
    finally:
        stop(proc)


def write_results(name: str, doc: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    data = orjson.dumps({"name": name, "at": stamp, "quick": QUICK, **doc}, option=orjson.OPT_INDENT_2)
    for n in range(1000):  # two runs that finish in the same second each keep their file (`-2`, `-3`, …)
        path = RESULTS / f"{name}-{stamp}{f'-{n + 1}' if n else ''}.json"
        try:
            with path.open("xb") as f:
                f.write(data)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{RESULTS}: no free name for {name}-{stamp}")


def fmt(v, digits: int = 2) -> str:
    if v is None:
        return "-"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def table(heads: list[str], rows: list[list]) -> str:
    cells = [[fmt(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(heads)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(heads, widths))]
    lines += ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    return "\n".join(lines)
