"""An operator points memplane at an OpenTelemetry collector with the standard OTEL_* variables and
sees each turn as a trace: recall, the provider call with GenAI attributes, the ledger write and
the retain hand-off, under one root. The collector here is a real OTLP/HTTP receiver on loopback
that decodes the protobuf `ExportTraceServiceRequest` the SDK's exporter sends. No message text,
no agent token and no provider key reach it unless content capture is opted in, and then redacted."""

from __future__ import annotations

import asyncio
import gzip
import io
import subprocess
import sys

import orjson
import pytest
from aiohttp import web

from memory_adapters.embedded.app import build_embedded_app
from memplane_core.redact import Redactor
from memplane_cli.runner import free_port
from memplane_core.telemetry import Telemetry, make_logger
from tests.conftest import url_of

trace_service_pb2 = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")

SECRET = "sk-proj-Zq8Jt3vXb9LmN2pQr5sTu7wXy0zA1bC4dE6fG8hI"  # an OpenAI-shaped key the user pastes


class Collector:
    """What an OTLP/HTTP collector received: raw bodies and the decoded spans."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.spans: list[dict] = []

    async def traces(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        raw = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        self.bodies.append(raw)
        export = trace_service_pb2.ExportTraceServiceRequest()
        export.ParseFromString(raw)
        for rs in export.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append({
                        "name": s.name, "trace": s.trace_id.hex(), "id": s.span_id.hex(),
                        "parent": s.parent_span_id.hex(), "kind": s.kind, "status": s.status.code,
                        "attrs": {a.key: _value(a.value) for a in s.attributes}, "resource": resource,
                        "scope": ss.scope.name})
        return web.Response(body=trace_service_pb2.ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    def named(self, name: str) -> list[dict]:
        return [s for s in self.spans if s["name"] == name]

    async def wait_for(self, count: int, name: str = "memplane.turn", timeout: float = 20.0) -> None:
        async def enough() -> None:
            while len(self.named(name)) < count:
                await asyncio.sleep(0.02)
        await asyncio.wait_for(enough(), timeout)


def _value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


@pytest.fixture
async def collector(aiohttp_server, monkeypatch):
    found = Collector()
    app = web.Application()
    app.router.add_post("/v1/traces", found.traces)
    server = await aiohttp_server(app)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url_of(server))  # the exporter adds /v1/traces
    monkeypatch.setenv("OTEL_SERVICE_NAME", "memplane-under-test")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # ms: the batch goes out soon after a turn
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER",
                 "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"):
        monkeypatch.delenv(name, raising=False)
    return found


async def _agent_with_memory(make_stack, aiohttp_server, tmp_path):
    stack = await make_stack()
    stack.provider.reply = lambda body: "Noted."
    memory = await aiohttp_server(build_embedded_app(tmp_path / "mem", redactor=Redactor(), embeddings="off",
                                                     telemetry=Telemetry(make_logger(io.StringIO()))))
    stack.tokens["traced"] = stack.add_agent("traced", url_of(memory), service="embedded",
                                             recall={"path": "/recall", "timeout_ms": 3000})
    return stack


async def test_each_turn_is_one_trace_with_recall_provider_call_ledger_and_retain(
        collector, make_stack, aiohttp_server, tmp_path):
    stack = await _agent_with_memory(make_stack, aiohttp_server, tmp_path)
    client = stack.openai("traced")
    await client.chat.completions.create(model="gpt-test", messages=[
        {"role": "user", "content": f"My cat is called Miso. My key is {SECRET}"}], max_tokens=50)
    await stack.settle()
    await client.chat.completions.create(model="gpt-test", messages=[
        {"role": "user", "content": "What is my cat called?"}])
    await stack.settle()
    await collector.wait_for(2)
    await collector.wait_for(2, "memplane.retain.enqueue")

    roots = collector.named("memplane.turn")
    assert len({r["trace"] for r in roots}) == 2  # one trace per turn
    second = roots[-1]
    assert second["attrs"]["memplane.agent.id"] == "traced"
    assert second["attrs"]["memplane.turn.id"].startswith("turn_")
    assert second["attrs"]["http.response.status_code"] == 200
    assert second["resource"]["service.name"] == "memplane-under-test"
    children = {s["name"]: s for s in collector.spans if s["trace"] == second["trace"] and s["parent"] == second["id"]}
    assert {"memplane.recall", "chat gpt-test", "memplane.ledger.write", "memplane.retain.enqueue"} <= set(children)

    recall = children["memplane.recall"]["attrs"]
    assert recall["memplane.memory.op"] == "recall" and recall["memplane.memory.status"] == "succeeded"
    assert recall["memplane.memory.blocks"] >= 1 and recall["memplane.memory.service"] == "embedded"

    call = children["chat gpt-test"]
    assert call["kind"] == 3  # SPAN_KIND_CLIENT
    attrs = call["attrs"]
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == attrs["gen_ai.system"] == "openai"
    assert attrs["gen_ai.request.model"] == "gpt-test" and attrs["gen_ai.response.model"]
    assert attrs["gen_ai.usage.input_tokens"] > 0 and attrs["gen_ai.usage.output_tokens"] > 0
    assert attrs["server.address"] == "127.0.0.1"
    first_call = next(s for s in collector.named("chat gpt-test") if s["trace"] == roots[0]["trace"])
    assert first_call["attrs"]["gen_ai.request.max_tokens"] == 50
    ledgered = stack.ledger("traced")[-1]
    assert children["memplane.ledger.write"]["attrs"]["memplane.ledger.entry_id"] == ledgered["id"]

    # the retain delivery the turn handed off is a span too, with the memory op's attributes
    await collector.wait_for(1, "memplane.retain")
    retain = collector.named("memplane.retain")[0]["attrs"]
    assert retain["memplane.memory.op"] == "retain" and retain["memplane.agent.id"] == "traced"

    everything = b"".join(collector.bodies)
    for private in (b"Miso", b"cat is called", SECRET.encode(), stack.tokens["traced"].encode(),
                    b"sk-operator-openai-key"):
        assert private not in everything


async def test_message_content_is_sent_only_when_opted_in_and_then_redacted(
        collector, make_stack, aiohttp_server, tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    stack = await _agent_with_memory(make_stack, aiohttp_server, tmp_path)
    client = stack.openai("traced")
    await client.chat.completions.create(model="gpt-test", messages=[
        {"role": "user", "content": f"My cat is called Miso. My key is {SECRET}"}])
    await stack.settle()
    await collector.wait_for(1)

    call = collector.named("chat gpt-test")[0]["attrs"]
    assert "My cat is called Miso" in call["gen_ai.input.messages"]
    assert "Noted." in call["gen_ai.output.messages"]
    everything = b"".join(collector.bodies)
    assert SECRET.encode() not in everything and stack.tokens["traced"].encode() not in everything


async def test_an_agents_own_trace_continues_through_memplane(collector, make_stack, aiohttp_server, tmp_path):
    stack = await _agent_with_memory(make_stack, aiohttp_server, tmp_path)
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    await stack.openai("traced").chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "hello"}],
        extra_headers={"traceparent": f"00-{trace_id}-{parent_id}-01"})
    await stack.settle()
    await collector.wait_for(1)

    root = collector.named("memplane.turn")[0]
    assert root["trace"] == trace_id and root["parent"] == parent_id
    assert stack.provider.received[-1].headers.get("traceparent") is None  # never forwarded to the provider


async def test_a_refused_turn_is_a_trace_with_its_status_and_no_provider_call(collector, make_stack):
    stack = await make_stack()
    stack.add_agent("plain")
    stack.tokens["plain"] = "plain:wrong-secret"
    import openai

    with pytest.raises(openai.AuthenticationError):
        await stack.openai("plain").chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "hi"}])
    await collector.wait_for(1)

    root = collector.named("memplane.turn")[0]
    assert root["attrs"]["http.response.status_code"] == 401 and root["attrs"]["error.type"] == "401"
    assert not [s for s in collector.spans if s["name"].startswith("chat")]
    assert b"wrong-secret" not in b"".join(collector.bodies)


def test_without_an_otlp_endpoint_the_sdk_is_never_imported(tmp_path):
    """Off and costless: a proxy built and answering without OTEL_* never loads the SDK."""
    code = f"""
import sys
from aiohttp.test_utils import TestClient, TestServer
import asyncio
from proxy.app import build_app
from proxy.config import ProxySettings

async def main():
    app = build_app(ProxySettings(context_root={str(tmp_path / 'ctx')!r}, history_root={str(tmp_path / 'h')!r},
                                  openai_base_url="http://127.0.0.1:9/v1", openai_api_key="sk-x"))
    async with TestClient(TestServer(app)) as client:
        r = await client.post("/v1/chat/completions", json={{"model": "m", "messages": []}},
                              headers={{"Authorization": "Bearer nobody:nothing"}})
        assert r.status == 401, r.status
    # (redis-py imports opentelemetry.sdk.metrics by itself when the SDK is installed: not memplane's)
    loaded = sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk.trace", "opentelemetry.exporter",
                                                            "proxy.tracing.otel")))
    print("LOADED", loaded)

asyncio.run(main())
"""
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "LOADED []" in out.stdout


async def test_a_streamed_anthropic_turn_reports_its_usage_on_the_provider_span(
        collector, make_stack, aiohttp_server, tmp_path):
    stack = await _agent_with_memory(make_stack, aiohttp_server, tmp_path)
    client = stack.anthropic("traced")
    async with client.messages.stream(model="claude-test", max_tokens=64,
                                      messages=[{"role": "user", "content": "Tell me about Miso."}]) as stream:
        async for _ in stream.text_stream:
            pass
    await stack.settle()
    await collector.wait_for(1)

    call = collector.named("chat claude-test")[0]
    root = collector.named("memplane.turn")[0]
    assert call["parent"] == root["id"] and root["attrs"]["memplane.format"] == "anthropic"
    attrs = call["attrs"]
    assert attrs["gen_ai.provider.name"] == "anthropic" and attrs["memplane.stream"] is True
    assert attrs["gen_ai.request.max_tokens"] == 64
    assert attrs["gen_ai.usage.input_tokens"] > 0 and attrs["gen_ai.usage.output_tokens"] > 0
    assert b"Miso" not in b"".join(collector.bodies)


def _roots_of(collector, agent_id: str) -> list[dict]:
    return [r for r in collector.named("memplane.turn") if r["attrs"].get("memplane.agent.id") == agent_id]


async def test_sampling_follows_the_standard_variables_and_keeps_a_degraded_turn(
        collector, make_stack, monkeypatch):
    """parentbased_traceidratio at 0: a turn of its own is dropped, so is one whose caller did not
    sample it; a caller's sampled trace is kept, and so is a turn whose recall failed."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    stack = await make_stack()
    stack.add_agent("plain")
    stack.add_agent("broken", f"http://127.0.0.1:{free_port()}", service="gone",  # nothing listens there
                    recall={"path": "/recall", "timeout_ms": 300})
    plain = stack.openai("plain")
    ask = {"model": "gpt-test", "messages": [{"role": "user", "content": "hello"}]}
    await plain.chat.completions.create(**ask)  # a root of its own: the ratio says no
    unsampled, sampled = "1" * 32, "2" * 32
    await plain.chat.completions.create(**ask, extra_headers={"traceparent": f"00-{unsampled}-{'3' * 16}-00"})
    await stack.openai("broken").chat.completions.create(**ask)  # recall failed: degraded, kept anyway
    await plain.chat.completions.create(**ask, extra_headers={"traceparent": f"00-{sampled}-{'4' * 16}-01"})
    await stack.settle()
    await collector.wait_for(2)

    # spans leave in order: the kept ones are here, so the dropped ones would be too
    kept = _roots_of(collector, "plain")
    assert [r["trace"] for r in kept] == [sampled]
    assert "memplane.trace.kept" not in kept[0]["attrs"]
    broken = _roots_of(collector, "broken")
    assert len(broken) == 1 and broken[0]["attrs"]["memplane.trace.kept"] == "failed"
    recall = next(s for s in collector.spans if s["trace"] == broken[0]["trace"] and s["name"] == "memplane.recall")
    assert recall["status"] == 2 and recall["attrs"]["memplane.memory.status"] == "failed"  # STATUS_CODE_ERROR
    assert {s["name"] for s in collector.spans if s["trace"] == broken[0]["trace"]} >= {
        "memplane.turn", "memplane.recall", "chat gpt-test", "memplane.ledger.write"}  # the whole turn


async def test_parentbased_always_off_keeps_only_what_the_caller_sampled(collector, make_stack, monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off")
    stack = await make_stack()
    stack.add_agent("plain")
    plain = stack.openai("plain")
    ask = {"model": "gpt-test", "messages": [{"role": "user", "content": "hello"}]}
    await plain.chat.completions.create(**ask)
    sampled = "5" * 32
    await plain.chat.completions.create(**ask, extra_headers={
        "traceparent": f"00-{sampled}-{'6' * 16}-01", "tracestate": "vendor=abc"})
    await collector.wait_for(1)
    assert [r["trace"] for r in collector.named("memplane.turn")] == [sampled]


async def test_always_off_records_nothing(collector, make_stack, monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    stack = await make_stack()
    assert not stack.state.tracing.enabled  # not even the exporting process


async def test_an_unreachable_collector_is_logged_once_a_minute_and_turns_go_on(
        collector, make_stack, monkeypatch, capfd):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # refuses connections
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    stack = await make_stack()
    stack.add_agent("plain")
    plain = stack.openai("plain")
    ask = {"model": "gpt-test", "messages": [{"role": "user", "content": "hello"}]}

    def failures() -> list[dict]:
        lines = [orjson.loads(line) for line in stack.log.getvalue().splitlines()]
        return [e for e in lines if e.get("event") == "tracing_export_failed"]

    for _ in range(3):
        assert (await plain.chat.completions.with_raw_response.create(**ask)).http_response.status_code == 200
    for _ in range(200):
        if failures():
            break
        await asyncio.sleep(0.05)
    for _ in range(10):  # more turns, more failed exports, within the same minute
        await plain.chat.completions.create(**ask)
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.5)

    reported = failures()
    assert len(reported) == 1
    assert reported[0]["spans_lost"] >= 1 and reported[0]["endpoint"].endswith("/v1/traces")
    assert reported[0]["error"]  # what the exporter said, once
    assert "Failed to export" not in capfd.readouterr().err  # the SDK's per-batch lines stay quiet


def test_the_exporting_process_sends_the_bytes_the_sdk_would():
    """A span record encoded here parses to the same OTLP span the SDK's encoder makes of it."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

    from proxy.tracing.encode import Encoder

    attrs = {"gen_ai.request.model": "gpt-test", "memplane.stream": False, "server.port": 8080,
             "memplane.memory.latency_ms": 3.25, "memplane.turn.id": "turn_1", "tags": ["a", "b"]}
    records = [(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7 + i, 0x1111 if i else 0x2222, i == 0,
                "chat gpt-test", kind, 1_700_000_000_000_000_000 + i, 1_700_000_000_000_500_000 + i,
                dict(attrs, i=i), code, "timed_out" if code == 2 else None, "vendor=abc" if i % 2 else None)
               for i, (kind, code) in enumerate([(1, 0), (2, 2), (0, 1), (2, 0)])]
    resource = Resource.create({"service.name": "memplane"})

    def readable(r):
        trace_id, span_id, parent_id, remote, name, kind, start, end, a, code, desc, state = r
        ts = TraceState.from_header([state]) if state else None
        ctx = SpanContext(trace_id, span_id, False, TraceFlags(1), ts)
        return ReadableSpan(name=name, context=ctx, kind=SpanKind(kind), resource=resource, attributes=a,
                            parent=SpanContext(trace_id, parent_id, remote, TraceFlags(1), ts),
                            status=Status(StatusCode(code), desc), start_time=start, end_time=end,
                            instrumentation_scope=InstrumentationScope("memplane.proxy"))

    sdk, ours = trace_service_pb2.ExportTraceServiceRequest(), trace_service_pb2.ExportTraceServiceRequest()
    sdk.ParseFromString(encode_spans([readable(r) for r in records]).SerializeToString())
    encoder = Encoder(dict(resource.attributes), "memplane.proxy")
    encoder.encode(records)  # a second pass: from the cache of serialized attributes
    ours.ParseFromString(encoder.encode(records))
    assert ours == sdk


async def test_a_malformed_traceparent_starts_a_trace_of_its_own(collector, make_stack):
    stack = await make_stack()
    stack.add_agent("plain")
    for header in ("00-zz-yy-01", "00-" + "0" * 32 + "-" + "0" * 16 + "-01", "01-" + "a" * 2000,
                   "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"):  # version ff: invalid (W3C)
        await stack.openai("plain").chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "hello"}],
            extra_headers={"traceparent": header, "tracestate": "=" * 500})
    await collector.wait_for(4)
    roots = collector.named("memplane.turn")
    assert all(r["parent"] == "" and r["trace"] != "0" * 32 for r in roots)
    assert len({r["trace"] for r in roots}) == 4


async def test_turns_go_on_when_the_exporting_process_is_killed(collector, make_stack):
    """The exporting process killed under the proxy (OOM killer, an operator's kill): turns are still
    answered at once, the loss is logged, and nothing hangs."""
    import os
    import signal
    stack = await make_stack()
    stack.add_agent("plain")
    plain = stack.openai("plain")
    ask = {"model": "gpt-test", "messages": [{"role": "user", "content": "hello"}]}
    await plain.chat.completions.create(**ask)
    await collector.wait_for(1)
    shipper = stack.state.tracing.shipper
    child = shipper.child
    assert child is not None and child.poll() is None
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    for _ in range(20):
        raw = await asyncio.wait_for(plain.chat.completions.with_raw_response.create(**ask), 10)
        assert raw.http_response.status_code == 200
        await asyncio.sleep(0.02)
    for _ in range(200):
        if "tracing_exporter_exited" in stack.log.getvalue():
            break
        await asyncio.sleep(0.05)
    assert "tracing_exporter_exited" in stack.log.getvalue()


async def test_a_hostile_tracestate_writes_nothing_of_its_own_to_the_proxys_log(collector, make_stack, caplog):
    """A caller's malformed `tracestate` (8 KB; a control byte is refused by the HTTP parser) is
    dropped quietly: the W3C parser's warning carries the caller's bytes, once a request, and with
    no logging configured Python prints it to the proxy's stderr, unstructured, beside its JSON."""
    import logging
    caplog.set_level(logging.DEBUG)
    stack = await make_stack()
    stack.add_agent("plain")
    plain = stack.openai("plain")
    for state in ("=" * 500, "k=v," * 40, "a" * 8000):
        await plain.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "hello"}],
            extra_headers={"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                           "tracestate": state})
    await collector.wait_for(3)
    said = [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry")]
    assert not any("=" * 100 in m or "a" * 100 in m or "k=v" in m for m in said), said[:1]
    assert {r["trace"] for r in collector.named("memplane.turn")} == {"4bf92f3577b34da6a3ce929d0e0e4736"}


def test_stopping_the_proxy_does_not_hang_on_an_exporting_process_that_stopped_reading():
    """An exporting process that is alive but reads nothing (stopped, frozen by its cgroup): the pipe
    fills and the shipping thread's write waits. Shutting down must still return (the proxy's stop
    waits on it), the stuck process ended."""
    import os
    import signal
    import threading
    import time
    from proxy.tracing.ship import Shipper
    shipper = Shipper(f"http://127.0.0.1:{free_port()}", {"OTEL_BSP_SCHEDULE_DELAY": "10",
                                                          "OTEL_BSP_MAX_QUEUE_SIZE": "100000"})
    now = time.time_ns()
    record = lambda i: (i + 1, i + 1, 0, False, "memplane.turn", 1, now, now, {"k": "v" * 200}, 0, "", None)  # noqa: E731
    shipper.put(record(0))
    for _ in range(600):
        if shipper.child is not None:
            break
        time.sleep(0.05)
    child = shipper.child
    assert child is not None
    os.kill(child.pid, signal.SIGSTOP)
    try:
        for i in range(1, 20_000):
            shipper.put(record(i))
        for _ in range(200):  # until the shipping thread is blocked in its write (the queue stops draining)
            before = len(shipper.queue)
            time.sleep(0.05)
            if before and len(shipper.queue) == before:
                break
        done = threading.Event()
        threading.Thread(target=lambda: (shipper.shutdown(timeout_s=0.5), done.set()), daemon=True).start()
        assert done.wait(30), "shutdown hung on the stuck exporter"
        assert child.wait(10) is not None
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
