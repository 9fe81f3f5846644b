"""What traces cost a turn, off and on (`python -m bench.tracing_cost [--rounds N]`, issue 52).

Four memplane processes serve one memory-off agent in front of the fast fake provider: traces off,
and traces on (every turn sampled) exporting to a live OTLP/HTTP collector that answers 200 at
once, to a port that refuses connections, and to a collector that accepts and never answers.
Each round loads every variant at concurrency 1 (p50/p99 latency) and 32 (requests/s), in a
rotated order; the table gives per-variant medians over the rounds and the ratios against off in
the same run. The live collector counts the `memplane.turn` spans it received (decoded after the
load, not during it) against the turns the traced proxy answered: every turn traced, or not.

`--calls N`: only the tracing calls one turn makes, N times in a loop in this process, exporting to
the live collector: the CPU per turn of this process and of its exporting process. To compare with
another implementation, run it from that checkout's directory with this one's bench on the path:
`cd OTHER && PYTHONPATH=OTHER:THIS python -m bench.tracing_cost --calls 3000`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from manifests.agents import write_agent
from memplane_cli.runner import free_port

from .harness import PIDS, QUICK, _tree, cpu_seconds, load, role, table, write_results

VARIANTS = ("off", "on, live collector", "on, refusing collector", "on, hanging collector")
WARMUP = 20  # bench.load's warm-up turns before it measures


def _collector_app(hang: bool):
    """A collector: keeps the bodies and answers 200 at once, decoding only when /count asks; or one
    that reads a request and never answers (`hang`)."""
    from aiohttp import web
    bodies: list[bytes] = []

    async def traces(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if hang:
            await asyncio.sleep(3600)
        bodies.append(body)
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def count(request: web.Request) -> web.Response:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
        names: dict[str, int] = {}
        for raw in bodies:
            export = ExportTraceServiceRequest()
            export.ParseFromString(raw)
            for rs in export.resource_spans:
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        names[s.name] = names.get(s.name, 0) + 1
        return web.json_response(names)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/traces", traces)
    app.router.add_get("/count", count)
    return app


def _serve_collector(hang: bool) -> None:
    from aiohttp import web

    async def main() -> None:
        runner = web.AppRunner(_collector_app(hang))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(f"READY {site._server.sockets[0].getsockname()[1]}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


@contextlib.contextmanager
def _collector(hang: bool):
    import subprocess
    proc = subprocess.Popen([sys.executable, "-m", "bench.tracing_cost", "--collector",
                             "hang" if hang else "live"], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).parent.parent)
    try:
        line = proc.stdout.readline()
        if not line.startswith("READY"):
            raise RuntimeError("the collector did not start")
        yield int(line.split()[1])
    finally:
        proc.terminate()
        proc.wait(5)


@contextlib.contextmanager
def _memplane(upstream: str, ctx: Path, hist: Path, otel: dict[str, str]):
    """A memplane process with these OTEL_* variables (and none other)."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("OTEL_")}
    for k in saved:
        del os.environ[k]
    os.environ.update(otel)
    try:
        cm = role("memplane", "--upstream", upstream, "--context-root", str(ctx), "--history-root", str(hist))
        port = cm.__enter__()
    finally:
        for k in otel:
            os.environ.pop(k, None)
        os.environ.update(saved)
    try:
        yield port
    finally:
        cm.__exit__(None, None, None)


def _cpu(pid: int) -> tuple[float, float]:
    """CPU seconds so far of the proxy process itself, and of its children (the exporting process)."""
    everything = cpu_seconds([pid])
    children = cpu_seconds([p for p in _tree(pid) if p != pid])
    return everything - children, children


def _count(port: int) -> dict[str, int]:
    async def get() -> dict[str, int]:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/count") as r:
            return await r.json()
    return asyncio.run(get())


def _median(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 2) if values else None


def _calls(n: int) -> dict:
    """The tracing calls of one turn, `n` times, on (every turn sampled) and off: CPU per turn."""
    from types import SimpleNamespace

    from memplane_core.telemetry import MemoryOp
    from proxy.tracing import Tracing
    request = SimpleNamespace(headers={}, method="POST", path="/v1/chat/completions")
    body = {"model": "gpt-test", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    op = MemoryOp("bench", "svc", "recall", "succeeded", 3.0, 200, 2, 400, 0)

    def turns(tracing: Tracing, count: int) -> None:
        for i in range(count):
            with tracing.turn("openai", "openai", request) as traced:
                tracing.agent("bench", f"turn_{i}")
                with tracing.step("memplane.recall"):
                    tracing.memory_op(op)
                with tracing.upstream("openai", body, "http://127.0.0.1:9/v1/chat/completions"):
                    with tracing.ledger_write({"id": f"e{i}", "claw_id": "bench", "status_code": 200,
                                               "effective_model": "gpt-test", "response": {"format": "json"},
                                               "usage": {"prompt_tokens": 12, "completion_tokens": 30}}):
                        pass
                with tracing.step("memplane.retain.enqueue"):
                    pass
                traced.answered(SimpleNamespace(status=200))

    me = os.getpid()
    with _collector(hang=False) as port:
        collector_pid = [p for p in _tree(me) if p != me][0]

        def exporters() -> float:
            return cpu_seconds([p for p in _tree(me) if p not in (me, collector_pid)])

        out = {}
        # a queue that holds every span of the loop (which runs far faster than turns): all of them encoded
        os.environ["OTEL_BSP_MAX_QUEUE_SIZE"] = str(8 * n)  # (an SDK-based implementation reads os.environ)
        for name, env in (("off", {}), ("on", {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
                                               "OTEL_TRACES_SAMPLER": "always_on",
                                               "OTEL_BSP_MAX_QUEUE_SIZE": str(8 * n)})):
            tracing = Tracing.from_env(env=env)
            turns(tracing, 200)
            time.sleep(3)  # the exporting process started
            own, theirs = time.process_time(), exporters()
            turns(tracing, n)
            time.sleep(2 * float(env.get("OTEL_BSP_SCHEDULE_DELAY", 5000)) / 1000 + 1)
            out[name] = {"process_cpu_us": round((time.process_time() - own) / n * 1e6, 1),
                         "exporter_cpu_us": round((exporters() - theirs) / n * 1e6, 1)}
            tracing.shutdown()
            print(f"tracing {name}: {out[name]['process_cpu_us']} µs of this process's CPU per turn, "
                  f"{out[name]['exporter_cpu_us']} µs of its exporting process's", flush=True)
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--requests", type=int, default=400 if QUICK else 1500, help="c=1 turns per run")
    p.add_argument("--seconds", type=float, default=3 if QUICK else 6, help="c=32 seconds per run")
    p.add_argument("--collector", choices=["live", "hang"], help=argparse.SUPPRESS)
    p.add_argument("--calls", type=int, default=0, help="only the tracing calls, this many turns in a loop")
    opts = p.parse_args(argv)
    if opts.calls:
        return _calls(opts.calls)
    if opts.collector:
        _serve_collector(opts.collector == "hang")
        return {}
    load_before = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="memplane-tracing-bench-"))
    ctx = tmp / "ctx"
    token, _ = write_agent(ctx, "off")
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    answered = 0
    with contextlib.ExitStack() as stack:
        prov = stack.enter_context(role("provider"))
        upstream = f"http://127.0.0.1:{prov}/v1"
        live = stack.enter_context(_collector(hang=False))
        hanging = stack.enter_context(_collector(hang=True))
        refusing = free_port()  # nothing listens there
        on = {"OTEL_TRACES_SAMPLER": "always_on"}
        endpoints = {"on, live collector": live, "on, refusing collector": refusing,
                     "on, hanging collector": hanging}
        urls, pids = {}, {}
        for i, name in enumerate(VARIANTS):
            otel = {} if name == "off" else {**on, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{endpoints[name]}"}
            port = stack.enter_context(_memplane(upstream, ctx, tmp / f"hist{i}", otel))
            urls[name] = f"http://127.0.0.1:{port}/v1/chat/completions"
            pids[name] = PIDS[port]
        for name in VARIANTS:  # warm-up: connections, and the exporting process started (~1 s of CPU)
            warm = load(urls[name], token, 4, 200, 60, False)
            if name == "on, live collector":
                answered += warm["requests"] + WARMUP
        time.sleep(3)
        for r in range(opts.rounds):
            order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
            for name in order:
                one = load(urls[name], token, 1, opts.requests, 120, False)
                before = _cpu(pids[name])
                many = load(urls[name], token, 32, 10**7, opts.seconds, False)
                after, turns = _cpu(pids[name]), max(many["requests"], 1)
                many["proxy_cpu_us"] = round((after[0] - before[0]) / turns * 1e6, 1)
                many["exporter_cpu_us"] = round((after[1] - before[1]) / turns * 1e6, 1)
                runs[name].append({"c1": one, "c32": many})
                if name == "on, live collector":
                    answered += one["requests"] + many["requests"] + 2 * WARMUP
                print(f"round {r + 1} {name}: c=1 p50 {one['p50_ms']} p99 {one['p99_ms']} ms, "
                      f"c=32 {many['rps']} req/s", file=sys.stderr, flush=True)
                time.sleep(1)
        deadline = time.monotonic() + 20  # the last spans: a schedule delay (5 s) here and one in the exporter
        while (received := _count(live)).get("memplane.turn", 0) < answered and time.monotonic() < deadline:
            time.sleep(1)
    rows, summary = [], {}
    off = None
    for name in VARIANTS:
        m = {"c1_p50_ms": _median([x["c1"]["p50_ms"] for x in runs[name]]),
             "c1_p99_ms": _median([x["c1"]["p99_ms"] for x in runs[name]]),
             "c32_rps": _median([x["c32"]["rps"] for x in runs[name]]),
             "proxy_cpu_us": _median([x["c32"]["proxy_cpu_us"] for x in runs[name]]),
             "exporter_cpu_us": _median([x["c32"]["exporter_cpu_us"] for x in runs[name]]),
             "errors": sum(x["c1"]["errors"] + x["c32"]["errors"] for x in runs[name])}
        off = off or m
        m["c1_p99_ratio"] = round(m["c1_p99_ms"] / off["c1_p99_ms"], 2)
        m["c32_rps_ratio"] = round(m["c32_rps"] / off["c32_rps"], 2)
        # the same, round by round (each variant against off in its own round), then the median
        m["c1_p99_ratio_by_round"] = _median([x["c1"]["p99_ms"] / o["c1"]["p99_ms"]
                                              for x, o in zip(runs[name], runs["off"])])
        m["c32_rps_ratio_by_round"] = _median([x["c32"]["rps"] / o["c32"]["rps"]
                                               for x, o in zip(runs[name], runs["off"])])
        summary[name] = m
        rows.append([name, m["c1_p50_ms"], m["c1_p99_ms"], m["c1_p99_ratio"], m["c1_p99_ratio_by_round"],
                     m["c32_rps"], m["c32_rps_ratio"], m["c32_rps_ratio_by_round"],
                     m["proxy_cpu_us"], m["exporter_cpu_us"], m["errors"]])
    print(f"{opts.rounds} rounds, rotated order; medians; c=1: {opts.requests} turns a run, "
          f"c=32: {opts.seconds:g} s a run; host: {os.cpu_count()} cores, shared, load average "
          f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(table(["traces", "c=1 p50 ms", "c=1 p99 ms", "p99 × off", "(by round)", "c=32 req/s", "req/s × off",
                 "(by round)", "proxy CPU µs/turn",
                "exporter CPU µs/turn", "errors"], rows))
    turns = received.get("memplane.turn", 0)
    print(f"live collector: {turns} memplane.turn spans for {answered} turns answered "
          f"({received.get('chat bench-model', 0)} chat spans, {received.get('memplane.ledger.write', 0)} ledger)")
    doc = {"rounds": runs, "summary": summary, "turns_answered": answered, "spans_received": received}
    print(f"results: {write_results('tracing_cost', doc)}")
    return doc


if __name__ == "__main__":
    main()
