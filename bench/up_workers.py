"""`memplane up` as one process (`--workers 1`) and as the proxy and the embedded engine in a process
each (`--workers 2`, the default on two cores or more), at c=32 against the pass-through floor of
the same round:

    python -m bench.up_workers [ROUNDS]

Each round starts a fresh `memplane up` home per setup (embeddings on), warms it with 200 turns at
c=8, then measures 600 turns at c=32 (8 s at most) with bench.load.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from memplane_cli.runner import free_port

from .harness import role, write_results

BIN = str(Path(sys.executable).parent / "memplane")


def _load(url: str, token: str, c: int, n: int, seconds: float) -> dict:
    out = subprocess.run([sys.executable, "-m", "bench.load", "--url", url, "--token", token, "--concurrency", str(c),
                          "--requests", str(n), "--seconds", str(seconds)], capture_output=True, text=True,
                         cwd=Path(__file__).parent.parent)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _up(workers: int, provider: str) -> dict:
    home, port, aport = Path(tempfile.mkdtemp(prefix="memplane-up-")), free_port(), free_port()
    env = {**os.environ, "OPENAI_BASE_URL": provider, "OPENAI_API_KEY": "sk-bench"}
    proc = subprocess.Popen([BIN, "up", "--workers", str(workers), "--home", str(home), "--port", str(port),
                             "--adapter-port", str(aport)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=env)
    try:
        token = ""
        while not token.startswith("default:"):  # the token line, among the JSON log lines
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"memplane up --workers {workers} exited before it was ready")
            token = line.strip()
        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # keep draining logs
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        _load(url, token, 8, 200, 5)
        return _load(url, token, 32, 600, 8)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def main(rounds: int = 2) -> list[dict]:
    out = []
    with role("provider") as prov_port, role("passthrough", "--upstream", f"http://127.0.0.1:{prov_port}/v1") as pt:
        for r in range(rounds):
            floor = _load(f"http://127.0.0.1:{pt}/v1/chat/completions", "bench", 32, 600, 8)
            one, two = _up(1, f"http://127.0.0.1:{prov_port}/v1"), _up(2, f"http://127.0.0.1:{prov_port}/v1")
            row = {"floor": floor, "one_process": one, "two_processes": two,
                   "two_over_one": round(two["rps"] / one["rps"], 3) if one["rps"] else None}
            out.append(row)
            print(f"round {r + 1}: floor {floor['rps']:.0f} req/s; up, one process {one['rps']:.0f} "
                  f"({one['rps'] / floor['rps']:.2f} of floor, p99 {one['p99_ms']:.0f} ms); two processes "
                  f"{two['rps']:.0f} ({two['rps'] / floor['rps']:.2f}, p99 {two['p99_ms']:.0f} ms); "
                  f"two / one = {row['two_over_one']}", flush=True)
    print(f"results: {write_results('up_workers', {'rounds': out})}")
    return out


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
