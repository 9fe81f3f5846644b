"""What a turn's tracing calls cost, off and on (`python -m bench.tracing_cost`).

The tracing calls a turn makes (the turn, its agent attributes, recall with its memory op, the
provider call, the ledger write, the retain hand-off) run in a loop: with tracing off (`Tracing()`: the no-op spans every unconfigured proxy runs), and
on (the SDK, its batch processor exporting over OTLP/HTTP to a loopback sink that drops what it
gets). Reported per turn in microseconds and as a ratio to six plain `with nullcontext()` blocks
(what any with-statement costs on this machine, measured in the same run).
"""

from __future__ import annotations

import os
import threading
from contextlib import nullcontext
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import SimpleNamespace

from memplane_core.telemetry import MemoryOp
from proxy.tracing import Tracing

TURNS = int(os.environ.get("BENCH_TURNS", "20000"))
REQUEST = SimpleNamespace(headers={}, method="POST", path="/v1/chat/completions")
ANSWER = SimpleNamespace(status=200)
BODY = {"model": "gpt-test", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
ENTRY = {"id": "e" * 64, "claw_id": "bench", "status_code": 200, "effective_model": "gpt-test",
         "usage": {"prompt_tokens": 12, "completion_tokens": 30}, "response": {"format": "json", "json": {"id": "x"}}}
OP = MemoryOp("bench", "svc", "recall", "succeeded", 3.0, 200, 2, 400, 0)


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def _plain(n: int) -> float:
    """The reference: the same six `with` blocks around nothing (contextlib.nullcontext)."""
    start = time.perf_counter()
    for _ in range(n):
        with nullcontext():
            with nullcontext():
                pass
            with nullcontext():
                with nullcontext():
                    pass
            with nullcontext():
                pass
    return (time.perf_counter() - start) / n * 1e6


def _turns(tracing: Tracing, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        with tracing.turn("openai", "openai", REQUEST) as traced:
            tracing.agent("bench", "turn_x")
            with tracing.step("memplane.recall"):
                tracing.memory_op(OP)
            with tracing.upstream("openai", BODY, "http://127.0.0.1:9/v1/chat/completions"):
                with tracing.ledger_write(ENTRY):
                    pass
            with tracing.step("memplane.retain.enqueue"):
                pass
            traced.answered(ANSWER)
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    server = HTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    on = Tracing.from_env(env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_port}"})
    off = Tracing.from_env(env={})
    assert on.enabled and not off.enabled
    rows: dict[str, list[float]] = {"six `with nullcontext()` (reference)": [], "tracing off (no-op spans)": [],
                                    "tracing on (SDK, OTLP/HTTP)": []}
    for _ in range(3):  # interleaved repeats: the machine's noise hits every row alike
        rows["six `with nullcontext()` (reference)"].append(_plain(TURNS))
        rows["tracing off (no-op spans)"].append(_turns(off, TURNS))
        rows["tracing on (SDK, OTLP/HTTP)"].append(_turns(on, TURNS // 10))
    on.shutdown()
    server.shutdown()
    ref = min(rows["six `with nullcontext()` (reference)"])
    print(f"{TURNS} turns per row (on: {TURNS // 10}), best of 3 interleaved runs")
    print("| row | µs per turn | × reference |")
    print("|---|---|---|")
    for name, values in rows.items():
        best = min(values)
        print(f"| {name} | {best:.2f} | {best / ref:.2f} |")


if __name__ == "__main__":
    main()
