"""Where a turn's CPU goes across the whole stack, per process and per thread, at one concurrency:

    python -m bench.stack_cpu embedded|reference [CONCURRENCY] [TURNS] [--py-spy PREFIX]
                              [--redis-url URL [--workers N]]

The fake provider, the memory service (embedded with 1,000 seeded memories and vectors, or the
reference adapter) and the proxy run as `bench.servers` processes, as in `bench.overhead`; after a
200-turn warm-up `bench.load` drives TURNS turns. Prints one JSON object: req/s and latency, CPU µs
per turn of each process (user + system, and system alone) and of each thread of the service and
the proxy (the service's event loop, its encoder and embedding threads), the service's `/health`
(recall scheduling, query encoder, embedding backlog), the proxy's recall outcomes (succeeded /
timed out) and the connections left in TIME-WAIT on the service's port (a recall the proxy gave up
on used to close its connection). `--py-spy PREFIX` records the service and the proxy with py-spy
(`PREFIX.adapter.txt`, `PREFIX.proxy.txt`, raw folded stacks; the binary from PATH or $PY_SPY).
`--redis-url` runs the proxy on the shared ledger (Redis Streams), `--workers N` as N processes on
it; the proxy's CPU is then its whole process tree's and Redis's own CPU is a row of its own.
Wrap a run in `flock /work/wt/bench.lock` on a shared host.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from manifests.agents import memory_manifest, write_agent
from memplane_core.contract import RETAIN_BATCH_PATH

from .harness import PIDS, cpu_seconds, load, role
from .seed import seed_embedded, seed_reference

MEMORIES = 1000


def _threads(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of `pid` (name:tid)."""
    out, tick = {}, os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[f"{stat[stat.index('(') + 1:stat.rindex(')')]}:{tid}"] = (int(fields[11]) + int(fields[12])) / tick
    return out


def _system_s(pid: int) -> float:
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[12]) / os.sysconf("SC_CLK_TCK")


def _get(url: str) -> str:
    return urllib.request.urlopen(url, timeout=10).read().decode()


def _redis_pid(url: str) -> int | None:
    """The redis-server's pid, when it runs on this host (its INFO says)."""
    import redis

    try:
        return int(redis.Redis.from_url(url).info("server")["process_id"])
    except Exception:  # noqa: BLE001 - a remote Redis: no row for it
        return None


def measure(target: str, concurrency: int, turns: int, spy: str | None, redis_url: str | None = None,
            workers: int = 1) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="memplane-stack-cpu-"))
    with contextlib.ExitStack() as stack:
        prov = stack.enter_context(role("provider"))
        ctx = tmp / "ctx"
        if target == "embedded":
            asyncio.run(seed_embedded(tmp / "emb", {"emb": MEMORIES}, dim=384))
            svc = stack.enter_context(role("embedded", "--data-dir", str(tmp / "emb")))
        else:
            svc = stack.enter_context(role("reference", "--data-dir", str(tmp / "ref")))
            seed_reference(tmp / "ref", "ref", MEMORIES)
        token, _ = write_agent(ctx, target[:3], memory=memory_manifest(
            target, f"http://127.0.0.1:{svc}", retain_batch_path=RETAIN_BATCH_PATH))
        shared = ["--redis-url", redis_url, "--ledger-prefix", f"stackcpu{os.getpid()}", "--workers", str(workers)] \
            if redis_url else []
        mp = stack.enter_context(role("memplane", "--upstream", f"http://127.0.0.1:{prov}/v1", "--context-root",
                                      str(ctx), "--history-root", str(tmp / "hist"), *shared))
        url = f"http://127.0.0.1:{mp}/v1/chat/completions"
        load(url, token, concurrency, 200, 60, False)  # warm: connections, caches, the index
        time.sleep(3)  # the warm-up's retains and embeddings
        pids = {"provider": PIDS[prov], "service": PIDS[svc], "proxy": PIDS[mp]}
        if redis_url and (rpid := _redis_pid(redis_url)):
            pids["redis"] = rpid
        recorders = []
        if spy:
            binary = os.environ.get("PY_SPY") or shutil.which("py-spy") or "py-spy"
            recorders = [subprocess.Popen([binary, "record", "-p", str(pids[n]), "-o", f"{spy}.{n}.txt", "-f", "raw",
                                           "-r", "200", "--nonblocking", "--subprocesses"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                         for n in ("service", "proxy")]
            time.sleep(1.5)
        threads = {n: _threads(pids[n]) for n in ("service", "proxy")}
        system = {n: _system_s(p) for n, p in pids.items()}
        cpu = {n: cpu_seconds([p]) for n, p in pids.items()}
        row = load(url, token, concurrency, turns, 300, False)
        done = max(1, row["requests"])
        per_turn = lambda s: round(s / done * 1e6)  # noqa: E731
        row["cpu_us_per_turn"] = {n: per_turn(cpu_seconds([p]) - cpu[n]) for n, p in pids.items()}
        row["system_us_per_turn"] = {n: per_turn(_system_s(p) - system[n]) for n, p in pids.items()}
        for n in ("service", "proxy"):
            now = _threads(pids[n])
            row[f"{n}_threads_us_per_turn"] = {k: per_turn(v - threads[n].get(k, 0.0)) for k, v in now.items()
                                               if v - threads[n].get(k, 0.0) > 0}
        for r in recorders:
            r.send_signal(signal.SIGINT)
            r.wait()
        sockets = subprocess.run(["ss", "-tan"], capture_output=True, text=True).stdout.splitlines()
        row["time_wait_on_service_port"] = sum(1 for s in sockets if s.startswith("TIME-WAIT") and f":{svc} " in s)
        row["proxy_recalls"] = {line.split('status="')[1].split('"')[0]: float(line.split()[-1])
                                for line in _get(f"http://127.0.0.1:{mp}/metrics").splitlines()
                                if line.startswith('memplane_memory_ops_total{op="recall"')}
        health = json.loads(_get(f"http://127.0.0.1:{svc}/health"))
        row["service_health"] = {k: health.get(k) for k in ("recall_scheduling", "query_encoder", "embedding_backlog",
                                                            "embedded", "gc") if k in health}
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", choices=["embedded", "reference"])
    p.add_argument("concurrency", nargs="?", type=int, default=32)
    p.add_argument("turns", nargs="?", type=int, default=1000)
    p.add_argument("--py-spy", dest="spy")
    p.add_argument("--redis-url", help="the proxy on the shared ledger in this Redis")
    p.add_argument("--workers", type=int, default=1, help="proxy processes (with --redis-url)")
    a = p.parse_args()
    print(json.dumps(measure(a.target, a.concurrency, a.turns, a.spy, a.redis_url, a.workers), indent=1))


if __name__ == "__main__":
    main()
