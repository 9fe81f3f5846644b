"""What the attacker's review noticed and left as it was (docs/operating.md, "Leftovers mended"),
each through the real servers on loopback, as a prober or a provider would meet it.
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
import time

import httpx
import pytest
from aiohttp import web

from manifests.agents import memory_manifest, write_agent
from memory_adapters.reference.app import build_reference_app
from memplane_cli.runner import Site, start_site
from memplane_core.contract import RecallRequest
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from proxy.app import build_app
from proxy.app import STATE
from proxy.config import ProxySettings
from proxy.ledger.files import Ledger
from tests.conftest import url_of
from tests.test_odd_provider_answers import odd_provider

pytestmark = pytest.mark.asyncio


# -- 1. a client that announces a body and never sends it; one that sends its head slowly --

def _stalled(port: int, head: str, sent: bytes, wait_s: float = 20.0) -> tuple[int | None, dict, bytes, float]:
    """Send a request head and part of its body, then nothing: (status, headers, body, seconds until
    the server closed the connection). A status of None: the server closed without answering."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as s:
        s.sendall(head.encode() + sent)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except TimeoutError:
            return None, {}, out, wait_s  # still open
    took = time.monotonic() - started
    if not out:
        return None, {}, b"", took
    status_line, _, rest = out.partition(b"\r\n")
    headers, _, payload = rest.partition(b"\r\n\r\n")
    fields = dict(line.split(": ", 1) for line in headers.decode("latin-1").split("\r\n") if ": " in line)
    return int(status_line.split()[1]), {k.lower(): v for k, v in fields.items()}, payload, took


def _head(method: str, path: str, port: int, extra: str = "", length: int = 1000,
          content_type: str = "application/json") -> str:
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}"
            f"Content-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n")


async def _proxy_site(provider_url: str, tmp_path, memory_url: str | None = None):
    settings = ProxySettings(context_root=tmp_path / "context", history_root=tmp_path / "history",
                             openai_base_url=f"{provider_url}/v1", openai_api_key="sk-operator-openai-key",
                             anthropic_base_url=provider_url, anthropic_api_key="sk-ant-operator-key")
    memory = memory_manifest("mem-svc", memory_url) if memory_url else None
    token, _ = write_agent(settings.context_root, "a", memory=memory)
    log = io.StringIO()
    runner, port = await start_site(Site(build_app(settings, Telemetry(make_logger(log))), "127.0.0.1", 0))
    return runner, port, token, log


async def test_a_body_announced_and_never_sent_is_408_in_the_callers_format_and_the_connection_closes(
        provider_server, tmp_path, monkeypatch):
    """Served as `memplane serve`/`up` serve (memplane_cli/runner.py), with MEMPLANE_BODY_TIMEOUT_S
    short: a turn (OpenAI's and Anthropic's error shapes), a pass-through, /mcp and the inspector's
    form each answer 408 once the body is overdue, and close; before, the connection was held for
    ever (aiohttp has no body-read timeout)."""
    monkeypatch.setenv("MEMPLANE_BODY_TIMEOUT_S", "0.5")
    _, provider_url = provider_server
    memory = await start_site(Site(build_reference_app(tmp_path / "ref", redactor=Redactor()), "127.0.0.1", 0))
    runner, port, token, log = await _proxy_site(provider_url, tmp_path, f"http://127.0.0.1:{memory[1]}")
    auth = f"Authorization: Bearer {token}\r\n"
    probes = {
        "openai turn": _head("POST", "/v1/chat/completions", port, auth),
        "anthropic turn": _head("POST", "/v1/messages", port, f"x-api-key: {token}\r\n"),
        "pass-through": _head("POST", "/v1/embeddings", port, auth),
        "mcp": _head("POST", "/mcp", port, auth + "Accept: application/json, text/event-stream\r\n"),
        "inspector form": _head("POST", "/memplane/ui/agents/a/forget", port,
                                content_type="application/x-www-form-urlencoded"),
    }
    try:
        answers = await asyncio.gather(*(asyncio.to_thread(_stalled, port, head, b'{"model":')
                                         for head in probes.values()))
    finally:
        await runner.cleanup()
        await memory[0].cleanup()
    for name, (status, headers, payload, took) in zip(probes, answers):
        assert status == 408, (name, status, payload[:300])
        assert took < 10, (name, took)  # answered and closed, not held
        assert headers.get("connection", "").lower() == "close", (name, headers)
        if name == "inspector form":
            continue
        doc = json.loads(payload)
        assert "did not arrive" in doc["error"]["message"], (name, doc)
        if name == "anthropic turn":
            assert doc["type"] == "error", doc  # Anthropic's shape
        assert doc["error"]["type"] == "invalid_request_error", (name, doc)  # the caller's, not a 5xx
    assert "unhandled_error" not in log.getvalue()


@pytest.mark.parametrize("service", ["reference", "embedded", "tiered"])
async def test_a_body_announced_and_never_sent_is_408_on_the_memory_services(service, tmp_path, monkeypatch,
                                                                            request):
    """Every memory service: `{"error": {...}}` 408 on a body overdue, and the connection closed."""
    monkeypatch.setenv("MEMPLANE_BODY_TIMEOUT_S", "0.5")
    quiet = Telemetry(make_logger(io.StringIO()))
    if service == "reference":
        app = build_reference_app(tmp_path / "ref", redactor=Redactor())
    elif service == "embedded":
        from memory_adapters.embedded.app import build_embedded_app
        app = build_embedded_app(tmp_path / "memory", redactor=Redactor(), telemetry=quiet, embeddings="off")
    else:
        from memory_adapters.tiered.app import build_tiered_app
        settings = request.getfixturevalue("tiered_settings")
        settings.embeddings = "off"
        app = build_tiered_app(settings, quiet, Redactor())
    runner, port = await start_site(Site(app, "127.0.0.1", 0))
    try:
        answers = await asyncio.gather(*(asyncio.to_thread(_stalled, port, _head("POST", path, port), b'{"agent')
                                         for path in ("/recall", "/retain")))
    finally:
        await runner.cleanup()
    for status, headers, payload, took in answers:
        assert status == 408, (status, payload[:300])
        assert took < 10 and headers.get("connection", "").lower() == "close", (took, headers)
        assert "did not arrive" in json.loads(payload)["error"]["message"]


async def test_a_client_that_sends_its_request_head_slowly_is_let_go(provider_server, tmp_path, monkeypatch):
    """Slowloris: a head that never ends (a byte now and then, or nothing) is dropped once
    MEMPLANE_HEADER_TIMEOUT_S has passed since the connection opened (aiohttp's keep-alive timer)."""
    monkeypatch.setenv("MEMPLANE_HEADER_TIMEOUT_S", "1")
    _, provider_url = provider_server
    runner, port, _, _ = await _proxy_site(provider_url, tmp_path)

    def slow() -> float:
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            try:
                for _ in range(40):
                    s.sendall(b"X-A: b\r\n")
                    time.sleep(0.25)
            except OSError:
                pass  # closed under us
            s.settimeout(20)
            try:
                while s.recv(65536):
                    pass
            except OSError:
                pass
        return time.monotonic() - started

    try:
        took = await asyncio.to_thread(slow)
    finally:
        await runner.cleanup()
    assert took < 5, took


# -- 2. a provider's error event mid-stream; an upstream that drops mid-stream --

def _events(*pairs: tuple[str | None, dict]) -> list[bytes]:
    return [(f"event: {name}\n".encode() if name else b"") + b"data: " + json.dumps(doc).encode() + b"\n\n"
            for name, doc in pairs]


_HEAD = {  # the first words of an answer, as each API streams them
    "/v1/chat/completions": _events((None, {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [
        {"index": 0, "delta": {"role": "assistant", "content": "Tromsø is in"}, "finish_reason": None}]})),
    "/v1/messages": _events(
        ("message_start", {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                                                                "model": "m", "content": [], "usage": {
                                                                    "input_tokens": 5, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "Tromsø is in"}})),
    "/v1/responses": _events(
        ("response.created", {"type": "response.created", "sequence_number": 0,
                              "response": {"id": "resp_1", "status": "in_progress", "model": "m", "output": []}}),
        ("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": 1,
                                        "item_id": "msg_1", "output_index": 0, "content_index": 0,
                                        "delta": "Tromsø is in"})),
}
_ERROR = {  # each API's error event mid-stream (OpenAI: an `error` chunk / the Responses `error` event;
    # Anthropic: `event: error`, "Error events" in its streaming docs)
    "/v1/chat/completions": _events((None, {"error": {"message": "The server had an error", "type": "server_error",
                                                      "param": None, "code": None}})),
    "/v1/messages": _events(("error", {"type": "error", "error": {"type": "overloaded_error",
                                                                   "message": "Overloaded"}})),
    "/v1/responses": _events(("error", {"type": "error", "code": "server_error", "message": "The server had an error",
                                        "param": None, "sequence_number": 2})),
}
_ASKS = {
    "/v1/chat/completions": {"model": "m", "stream": True, "stream_options": {"include_usage": True},
                             "messages": [{"role": "user", "content": "My sister Ingrid lives in Tromsø."}]},
    "/v1/messages": {"model": "m", "max_tokens": 50, "stream": True,
                     "messages": [{"role": "user", "content": "My sister Ingrid lives in Tromsø."}]},
    "/v1/responses": {"model": "m", "stream": True, "input": "My sister Ingrid lives in Tromsø."},
}


def _failing_provider(how: str) -> web.Application:
    """Streams an answer's first words, then its API's error event (`error`) or drops the connection."""
    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for raw in _HEAD[request.path]:
            await resp.write(raw)
        if how == "cut":
            await asyncio.sleep(0.05)
            request.transport.abort()
            return resp
        if how == "stop":  # a clean end of the response, before the answer's last event
            await resp.write_eof()
            return resp
        for raw in _ERROR[request.path]:
            await resp.write(raw)
        await resp.write_eof()
        return resp

    app = web.Application()
    for path in _HEAD:
        app.router.add_post(path, answer)
    return app


async def _behind(aiohttp_server, tmp_path, upstream_app, reference_url):
    upstream = url_of(await aiohttp_server(upstream_app))
    settings = ProxySettings(context_root=tmp_path / "ctx", history_root=tmp_path / "hist",
                             openai_base_url=f"{upstream}/v1", openai_api_key="sk-op",
                             anthropic_base_url=upstream, anthropic_api_key="sk-ant-op")
    app = build_app(settings, Telemetry(make_logger(io.StringIO())))
    proxy = url_of(await aiohttp_server(app))
    token, _ = write_agent(settings.context_root, "a", memory=memory_manifest("reference", reference_url))
    return proxy, token, settings.history_root, app[STATE]


@pytest.mark.parametrize("path", sorted(_HEAD))
async def test_a_providers_error_event_mid_stream_marks_the_ledgered_turn_incomplete(aiohttp_server, tmp_path,
                                                                                     reference, path):
    """The agent gets exactly the bytes the provider sent (its SDK raises on the error event, as it
    would without memplane); the ledger says the answer broke off (`incomplete: provider_error`),
    and the person's words still reach memory, as for any other turn that broke off."""
    proxy, token, history, state = await _behind(aiohttp_server, tmp_path, _failing_provider("error"), reference[0])
    async with httpx.AsyncClient(base_url=proxy, timeout=30) as client:
        r = await client.post(path, json=_ASKS[path], headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200
    assert r.content == b"".join(_HEAD[path] + _ERROR[path])  # nothing added, nothing held back
    [entry] = [ref.entry for ref in Ledger(history).read("a")]
    assert entry["response"]["incomplete"] == "provider_error", entry["response"]
    assert "Tromsø is in" in entry["response"]["text"]
    await state.settle(30)
    found = await reference[1].recall(RecallRequest(agent_id="a", query="Where does Ingrid live?"))
    assert any("Ingrid lives in Tromsø" in m.text for m in found)


@pytest.mark.parametrize("path", sorted(_HEAD))
async def test_an_upstream_that_drops_mid_stream_marks_the_ledgered_turn_incomplete(aiohttp_server, tmp_path,
                                                                                    reference, path):
    proxy, token, history, state = await _behind(aiohttp_server, tmp_path, _failing_provider("cut"), reference[0])
    async with httpx.AsyncClient(base_url=proxy, timeout=30) as client:
        r = await client.post(path, json=_ASKS[path], headers={"Authorization": f"Bearer {token}"})
    assert r.content.startswith(b"".join(_HEAD[path]))
    [entry] = [ref.entry for ref in Ledger(history).read("a")]
    assert entry["response"]["incomplete"] == "upstream_broke_off", entry["response"]


@pytest.mark.parametrize("path", sorted(_HEAD))
async def test_a_stream_ended_before_its_last_event_marks_the_ledgered_turn_incomplete(aiohttp_server, tmp_path,
                                                                                      reference, path):
    """The provider closes the response cleanly after the first words, without `[DONE]`,
    `message_stop` or `response.completed`: the agent gets those bytes as sent, and the ledger says
    the answer was cut (`stream_unfinished`) instead of keeping "Tromsø is in" as a finished answer;
    the person's words still reach memory."""
    proxy, token, history, state = await _behind(aiohttp_server, tmp_path, _failing_provider("stop"), reference[0])
    async with httpx.AsyncClient(base_url=proxy, timeout=30) as client:
        r = await client.post(path, json=_ASKS[path], headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200 and r.content == b"".join(_HEAD[path])
    [entry] = [ref.entry for ref in Ledger(history).read("a")]
    assert entry["response"]["incomplete"] == "stream_unfinished", entry["response"]
    await state.settle(30)
    found = await reference[1].recall(RecallRequest(agent_id="a", query="Where does Ingrid live?"))
    assert any("Ingrid lives in Tromsø" in m.text for m in found)


# -- 3. a stream (or a whole answer) longer than the ledger keeps of one answer --

_DELTA = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
          "choices": [{"index": 0, "delta": {"content": "word " * 200}, "finish_reason": None}]}
_LONG_EVENTS = [json.dumps(_DELTA).encode()] * 300  # ~330 KB
_LONG_WHOLE = json.dumps({"id": "c1", "object": "chat.completion", "model": "m", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "word " * 60_000}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 60_000, "total_tokens": 60_005}}).encode()  # ~300 KB


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_the_ledger_keeps_the_head_of_an_answer_longer_than_its_cap_and_the_agent_gets_it_all(
        aiohttp_server, tmp_path, stream):
    """MEMPLANE_LEDGER_MAX_ANSWER_BYTES (here 64 KiB): the agent gets every byte the provider sent;
    the ledger keeps the answer's first 64 KiB, marked `truncated` with the answer's size, so a
    provider that streams without end cannot grow the proxy's memory (before: held whole)."""
    upstream = url_of(await aiohttp_server(odd_provider(_LONG_EVENTS, _LONG_WHOLE)))
    settings = ProxySettings(context_root=tmp_path / "ctx", history_root=tmp_path / "hist",
                             openai_base_url=f"{upstream}/v1", openai_api_key="sk-op",
                             ledger_max_answer_bytes=64 * 1024)
    proxy = url_of(await aiohttp_server(build_app(settings, Telemetry(make_logger(io.StringIO())))))
    token, _ = write_agent(settings.context_root, "a")
    ask = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "Say it many times."}]}
    if stream:
        ask["stream_options"] = {"include_usage": True}
    async with httpx.AsyncClient(base_url=proxy, timeout=30) as client:
        r = await client.post("/v1/chat/completions", json=ask, headers={"Authorization": f"Bearer {token}"})
    sent = b"".join(b"data: " + e + b"\n\n" for e in [*_LONG_EVENTS, b"[DONE]"]) if stream else _LONG_WHOLE
    assert r.status_code == 200 and r.content == sent
    [entry] = [ref.entry for ref in Ledger(settings.history_root).read("a")]
    response = entry["response"]
    assert response["truncated"] is True and response["answer_bytes"] == len(sent), {
        k: v for k, v in response.items() if k not in ("text", "raw")}
    kept = response.get("text", "") + response.get("raw", "")
    assert 1000 < len(kept.encode()) <= 64 * 1024
    assert "word word" in kept[:2000]  # the answer's head


# -- 4. the strict fake provider: a field of the wrong type is the API's 400, never a crash --

_WRONG = {"list": ["x"], "object": {"a": 1}, "number": 7, "null": None, "bool": True, "string": "s"}
_VALID = {
    "/v1/chat/completions": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/messages": {"model": "claude-sonnet-4-5", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses": {"model": "gpt-4o-mini", "input": "hi"},
}
_FIELDS = {  # each API's request fields (its reference's request body), and a message's
    "/v1/chat/completions": ["model", "messages", "stream", "stream_options", "temperature", "top_p", "n",
                             "max_tokens", "max_completion_tokens", "tools", "tool_choice", "parallel_tool_calls",
                             "response_format", "user", "metadata", "stop", "seed", "presence_penalty",
                             "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "store",
                             "reasoning_effort", "modalities", "prediction", "service_tier", "functions",
                             "messages.0", "messages.0.role", "messages.0.content", "messages.0.name"],
    "/v1/messages": ["model", "messages", "max_tokens", "system", "stream", "temperature", "top_p", "top_k",
                     "stop_sequences", "tools", "tool_choice", "metadata", "thinking", "service_tier", "container",
                     "messages.0", "messages.0.role", "messages.0.content"],
    "/v1/responses": ["model", "input", "instructions", "stream", "previous_response_id", "tools", "tool_choice",
                      "store", "reasoning", "text", "max_output_tokens", "temperature", "top_p", "truncation",
                      "metadata", "include", "parallel_tool_calls", "user", "background", "prompt", "conversation"],
}


def _with(body: dict, field: str, value) -> dict:
    out = json.loads(json.dumps(body))
    *path, last = field.split(".")
    at = out
    for part in path:
        at = at[int(part)] if isinstance(at, list) else at[part]
    if isinstance(at, list):
        at[int(last)] = value
    else:
        at[last] = value
    return out


@pytest.mark.parametrize("path", sorted(_VALID))
async def test_the_strict_fake_provider_answers_every_wrong_type_in_the_apis_own_format(provider_server, path):
    """`model` given as a list crashed the fake provider (a 500 from aiohttp, which no real API
    answers); every field of each format as a list, object, number, null, boolean or string is now
    answered as the API answers it: a 200, or a 4xx JSON error of the API's own shape."""
    _, url = provider_server
    crashed = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for field in _FIELDS[path]:
            for kind, value in _WRONG.items():
                for stream in (False, True):
                    body = _with({**_VALID[path], "stream": stream}, field, value)
                    r = await client.post(path, json=body)
                    ok = r.status_code < 500
                    if ok and r.status_code >= 400:
                        doc = r.json()
                        ok = (doc.get("type") == "error" and isinstance(doc["error"].get("message"), str)
                              if path == "/v1/messages" else isinstance(doc["error"]["message"], str))
                    if not ok:
                        crashed.append((field, kind, stream, r.status_code, r.text[:120]))
    assert crashed == []


# -- 5. `memplane compile` stages in directories of its own, 0700 --

async def test_compile_stages_and_leaves_its_output_0700_and_never_follows_a_planted_symlink(tmp_path):
    """The compiled context root lists every agent of the pod: it was staged with `mkdir` under the
    umask (0755) and renamed into place, so it stayed 0755; the staging and old names were fixed, so
    a symlink planted there stopped the compile with a traceback. Now each is a fresh 0700
    directory of compile's own (a name no one can guess), and the output is 0700."""
    import os
    import stat

    from click.testing import CliRunner

    from memplane_cli.main import main
    from tests.test_compiler import BASE, pod

    pod_file = pod(tmp_path, BASE)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("mine")
    out = tmp_path / "deep" / "ctx"
    (tmp_path / "deep").mkdir()
    for name in (".ctx.staging", ".ctx.old"):
        (tmp_path / "deep" / name).symlink_to(victim)
    previous = os.umask(0o022)
    try:
        for _ in range(2):  # a first compile, then a recompile over it
            result = CliRunner().invoke(main, ["compile", str(pod_file), "--out", str(out)])
            assert result.exit_code == 0 and "Traceback" not in result.output, result.output
            assert stat.S_IMODE(out.stat().st_mode) == 0o700
    finally:
        os.umask(previous)
    assert sorted(p.name for p in victim.iterdir()) == ["keep"] and (victim / "keep").read_text() == "mine"
    assert sorted(p.name for p in (tmp_path / "deep").iterdir()) == [".ctx.old", ".ctx.staging", "ctx"]
    assert {p.name for p in out.iterdir()} >= {"analyst", "researcher"}


# -- 6. the reference adapter keeps a tool loop's person's words by its loop_key --

def _persons_words(store, agent_id: str) -> list[str]:
    """The person's part of each summary (the fake model's replies quote the memories it was given)."""
    return [r["summary"].split(" | Assistant: ")[0] for r in store._agents[agent_id].records.values()]


async def test_the_reference_adapter_keeps_a_loop_that_ends_on_a_tool_call_and_one_memory_per_loop(stack, reference):
    """Behind the reference adapter a loop ending on a tool call whose result never returns (an
    agent's `finish` tool) was lost: each step was dropped, waiting for a last call that never came.
    Now each step is kept under the loop's `loop_key`, the latest replacing the one before, as the
    engines do: the finished turn is remembered, a loop that ends with an answer is one memory,
    and forgetting any call of the loop forgets it."""
    from proxy.testing.fake_provider import ToolCall, ToolLoop
    from tests.test_tool_loops import FACT, LOOP, _weather_loop

    ref_url, store = reference
    stack.add_agent("coder", ref_url)
    client = stack.openai("coder")
    finish = [{"type": "function", "function": {"name": "finish", "parameters": {"type": "object", "properties": {}}}}]
    stack.provider.model = ToolLoop([ToolCall("finish", {})])
    ended = await client.chat.completions.create(model="m", tools=finish, messages=[
        {"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": FACT}])
    assert ended.choices[0].message.tool_calls[0].function.name == "finish"  # and the client stops there
    stack.provider.model = ToolLoop(LOOP[:1])
    trip = "Please check the weather in Lisbon for my trip on Friday."
    await _weather_loop(client, [{"role": "user", "content": trip}])
    await stack.caught_up()

    stack.provider.model = None
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Where does Ana live?"}])
    assert FACT in (stack.provider.received[-1].memories_block or ""), "the finished turn was remembered"
    await stack.caught_up()
    said = _persons_words(store, "coder")
    assert sum(FACT in s for s in said) == 1, said
    assert sum("my trip on Friday" in s for s in said) == 1, said  # the loop's two calls: one memory

    first = stack.ledger("coder")[1]["id"]  # the weather loop's first call, not the one its memory came from
    async with httpx.AsyncClient(base_url=ref_url, timeout=30) as http:
        r = await http.post("/forget", json={"agent_id": "coder", "entry_ids": [first], "reason": "asked"})
        assert r.status_code == 204, r.text
    assert not any("my trip on Friday" in s for s in _persons_words(store, "coder"))
    store._agents.clear()  # as after a restart: read back from its files
    await store.recall(RecallRequest(agent_id="coder", query="trip"))
    said = _persons_words(store, "coder")
    assert not any("my trip on Friday" in s for s in said) and sum(FACT in s for s in said) == 1
