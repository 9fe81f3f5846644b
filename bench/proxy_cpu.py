"""The proxy's own CPU per turn, with the proxy in this process (so a profiler can watch it):

    python -m bench.proxy_cpu [reference|off] [CONCURRENCY] [TURNS] [--cprofile OUT] [--py-spy OUT]

The fake provider and (for `reference`) the reference adapter with 1,000 seeded memories run as
`bench.servers` processes; `bench.load` drives the turns from its own process. Prints the proxy
process's CPU µs per turn and the provider's + adapter's, read from /proc. `--py-spy OUT` records
this process with py-spy (raw folded stacks; the binary from PATH or $PY_SPY); `--cprofile OUT`
writes a cProfile of the run (slows the proxy several times over: for where, not how much).
Wrap a run in `flock /work/wt/bench.lock` on a shared host.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from manifests.agents import memory_manifest, write_agent
from memplane_cli.runner import Site, freeze_startup_heap, run, start_site
from memplane_core.contract import RETAIN_BATCH_PATH

from .harness import PIDS, cpu_seconds, role
from .seed import seed_reference
from .servers import memplane_app

MEMORIES = 1000


async def _load(url: str, token: str, concurrency: int, turns: int) -> dict:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.load", "--url", url, "--token", token, "--concurrency", str(concurrency),
        "--requests", str(turns), "--seconds", "300", stdout=asyncio.subprocess.PIPE,
        cwd=Path(__file__).parent.parent)
    out, _ = await proc.communicate()
    return json.loads(out.decode().strip().splitlines()[-1])


async def measure(stack: contextlib.ExitStack, target: str, concurrency: int, turns: int,
                  cprofile: str | None, spy: str | None) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="memplane-proxy-cpu-"))
    prov = stack.enter_context(role("provider"))
    others = [PIDS[prov]]
    ctx = tmp / "ctx"
    if target == "reference":
        ref = stack.enter_context(role("reference", "--data-dir", str(tmp / "ref")))
        token, _ = write_agent(ctx, "ref", memory=memory_manifest("reference", f"http://127.0.0.1:{ref}",
                                                                  retain_batch_path=RETAIN_BATCH_PATH))
        seed_reference(tmp / "ref", "ref", MEMORIES)
        others.append(PIDS[ref])
    else:
        token, _ = write_agent(ctx, "off")
    runner, port = await start_site(Site(memplane_app(f"http://127.0.0.1:{prov}/v1", ctx, tmp / "hist"),
                                         "127.0.0.1", 0), 2)
    freeze_startup_heap()
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    try:
        await _load(url, token, concurrency, 200)  # warm: connections, caches, the adapter's index
        await asyncio.sleep(1)
        recorder = None
        if spy:
            binary = os.environ.get("PY_SPY") or shutil.which("py-spy") or "py-spy"
            recorder = subprocess.Popen([binary, "record", "-p", str(os.getpid()), "-o", spy, "-f", "raw",
                                         "-r", "250", "--nonblocking"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            await asyncio.sleep(1.5)
        profile = cProfile.Profile() if cprofile else None
        mine, theirs = time.process_time(), cpu_seconds(others)
        if profile:
            profile.enable()
        row = await _load(url, token, concurrency, turns)
        await asyncio.sleep(1.0)  # the last batched retains
        if profile:
            profile.disable()
            profile.dump_stats(cprofile)
        mine, theirs = time.process_time() - mine, cpu_seconds(others) - theirs
        if recorder:
            recorder.send_signal(signal.SIGINT)
            recorder.wait()
    finally:
        await runner.cleanup()
    done = max(1, row["requests"])
    return {**row, "proxy_cpu_us_per_turn": round(mine / done * 1e6),
            "provider_and_adapter_cpu_us_per_turn": round(theirs / done * 1e6)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", nargs="?", default="reference", choices=["reference", "off"])
    p.add_argument("concurrency", nargs="?", type=int, default=32)
    p.add_argument("turns", nargs="?", type=int, default=2000)
    p.add_argument("--cprofile")
    p.add_argument("--py-spy", dest="spy")
    a = p.parse_args()

    async def go() -> None:
        with contextlib.ExitStack() as stack:
            print(json.dumps(await measure(stack, a.target, a.concurrency, a.turns, a.cprofile, a.spy)))

    run(go())  # uvloop, as `memplane serve` runs


if __name__ == "__main__":
    main()
