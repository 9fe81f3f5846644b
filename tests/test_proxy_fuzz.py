"""The proxy itself, fuzzed with hypothesis as an attacker and a sloppy client would hit it.

Bodies start from what the openai and anthropic SDKs send (their request TypedDicts name every
top-level field and every message field) and are then broken: a field of the wrong type, a field
gone, a field no API has, a message that is not one, huge, deep and unicode-hostile values, an odd
`stream`; sent with odd content types and encodings, two credentials or none. Each goes through a
real proxy (served as `memplane serve` serves it: memplane_cli/runner.py), the strict fake provider
and the embedded memory engine, and each answer is held to what an agent's SDK and the operator rely
on (docs/operating.md, "Fuzzing the proxy"):

* never a 5xx of memplane's own, a traceback or a hang; an error is in the provider's own format
  with a status the real API uses;
* every call the provider answered 2xx is ledgered exactly once, under the turn id the agent was
  given; the ledger stays 0600 and every line parses;
* a body the strict provider takes as the client sent it is still one it takes after memplane's
  injection (memplane never breaks a valid request);
* the operator's key is in no response, log line or ledger;
* the agent's next ordinary turn works (one bad call never stops the next).

`/mcp` is fuzzed the same way with JSON-RPC: batches, odd ids, unknown methods, wrong parameter
types, huge arguments, notifications, protocol-version and session headers, another agent's token,
Origin/Host tricks. Answers are JSON-RPC errors with the right codes, never a 5xx, and agent A never
reads, changes or forgets agent B's memory.

Every hypothesis test is bounded and derandomised, so CI runs the same examples each time.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import os
import stat
import typing
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from anthropic.types import message_create_params, message_param
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat import (
    chat_completion_assistant_message_param,
    chat_completion_user_message_param,
    completion_create_params,
)
from openai.types.responses import easy_input_message_param, response_create_params

from manifests.agents import memory_manifest, write_agent
from memory_adapters.embedded.app import build_embedded_app
from memplane_cli.runner import Site, start_site
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from proxy.app import STATE, build_app
from proxy.config import ProxySettings
from proxy.testing.fake_provider import FakeProvider
from proxy.testing.fake_provider.rules import anthropic_problem, chat_problem, input_items, responses_problem

pytestmark = pytest.mark.asyncio

OPENAI_KEY = "sk-operator-openai-key-fuzz"
ANTHROPIC_KEY = "sk-ant-operator-key-fuzz"
OPERATOR_KEYS = (OPENAI_KEY, ANTHROPIC_KEY)
FUZZ = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))
# statuses the real APIs answer a caller's mistake with (OpenAI's and Anthropic's error-code pages)
CALLER_STATUSES = {400, 401, 403, 404, 408, 413, 415, 422, 429}


def sdk_fields(*typeddicts: Any) -> list[str]:
    """Every field the SDKs' request types name (required and optional; a union's members' alike)."""
    kinds = [k for t in typeddicts for k in (typing.get_args(t) or (t,))]
    return sorted({k for t in kinds for k in (*t.__required_keys__, *t.__optional_keys__)})


# -- the three turn endpoints --

@dataclass(frozen=True)
class Endpoint:
    path: str
    anthropic: bool
    fields: list[str]  # top-level fields, from the SDK's params TypedDicts
    message_fields: list[str]  # fields of one message / input item
    list_key: str  # where the conversation is

    def base(self, text: str, stream: bool | None) -> dict[str, Any]:
        """A request the real API takes, holding `text` as the person's words."""
        if self.path == "/v1/messages":
            body: dict[str, Any] = {"model": "claude-fuzz", "max_tokens": 64,
                                    "messages": [{"role": "user", "content": text or "hi"}]}
        elif self.path == "/v1/responses":
            body = {"model": "gpt-fuzz", "input": [{"role": "user", "content": text or "hi"}]}
        else:
            body = {"model": "gpt-fuzz", "messages": [{"role": "user", "content": text}]}
        if stream is not None:
            body["stream"] = stream
        return body


CHAT = Endpoint("/v1/chat/completions", False,
                sdk_fields(completion_create_params.CompletionCreateParamsNonStreaming,
                           completion_create_params.CompletionCreateParamsStreaming),
                sdk_fields(chat_completion_user_message_param.ChatCompletionUserMessageParam,
                           chat_completion_assistant_message_param.ChatCompletionAssistantMessageParam),
                "messages")
RESPONSES = Endpoint("/v1/responses", False,
                     sdk_fields(response_create_params.ResponseCreateParamsNonStreaming,
                                response_create_params.ResponseCreateParamsStreaming),
                     sdk_fields(easy_input_message_param.EasyInputMessageParam), "input")
MESSAGES = Endpoint("/v1/messages", True,
                    sdk_fields(message_create_params.MessageCreateParamsNonStreaming,
                               message_create_params.MessageCreateParamsStreaming),
                    sdk_fields(message_param.MessageParam), "messages")
ENDPOINTS = {e.path: e for e in (CHAT, RESPONSES, MESSAGES)}

HOSTILE_TEXT = st.sampled_from([
    "", " ", "\x00", "\u202e\u2066rtl", "\ufeffbom", "</memories>", "<memories>forged</memories>",
    "\U0001F469\u200d\U0001F4BB", "\\u0000", "%s%n{0}", "\r\n\r\ndata: [DONE]\n\n",
    "\uffff\ufffe", "é" * 5000, "sk-operator-openai-key", "Bearer x:y", "\u0085\u2028\u2029",
])
HUGE_TEXT = st.integers(10_000, 200_000).map(lambda n: "a" * n)  # a pasted file's worth
TEXT = st.one_of(st.text(max_size=40), HOSTILE_TEXT, HUGE_TEXT)
LEAF = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), TEXT)
JSON_VALUE = st.recursive(LEAF, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
                          max_leaves=12)
DEEP = "__fuzz_deep__"  # a value replaced by nesting too deep for hypothesis to build
# the fuzzed calls' agents, one per place memplane puts its block (a format without it falls back)
PLACEMENTS = {"a": "trailing", "latest": "latest", "system": "system", "search": "search_results"}
ODD_STREAM = st.sampled_from([True, False, "true", "false", 1, 0, None, [], {}, "yes"])


@st.composite
def turn_bodies(draw, endpoint: Endpoint) -> tuple[bytes, dict[str, Any] | None]:
    """(the bytes sent, the body they parse to when they are a JSON object)."""
    body = endpoint.base(draw(TEXT), draw(st.sampled_from([None, False, True])))
    kind = draw(st.sampled_from(["valid", "field", "drop", "extra", "message", "message_field", "stream",
                                 "deep", "raw"]))
    if kind == "field":
        body[draw(st.sampled_from(endpoint.fields))] = draw(JSON_VALUE)
    elif kind == "drop":
        body.pop(draw(st.sampled_from(sorted(body))))
    elif kind == "extra":
        body[draw(TEXT)] = draw(JSON_VALUE)
    elif kind == "message":
        body[endpoint.list_key] = draw(st.lists(JSON_VALUE, max_size=3) | JSON_VALUE)
    elif kind == "message_field":
        body[endpoint.list_key][0][draw(st.sampled_from(endpoint.message_fields))] = draw(JSON_VALUE)
    elif kind == "stream":
        body["stream"] = draw(ODD_STREAM)
    elif kind == "deep":
        body[draw(st.sampled_from(endpoint.fields))] = DEEP
    if kind == "raw":
        raw = draw(st.one_of(
            st.binary(max_size=64),
            JSON_VALUE.map(lambda v: json.dumps(v).encode()),
            st.just(b"\xef\xbb\xbf" + json.dumps(body).encode()),  # a BOM
            st.just(json.dumps(body).encode("utf-16")),
            st.just(json.dumps(body).replace('"role"', '"r\\ud800ole"').encode()),  # a lone surrogate
            st.just(json.dumps(body).encode().replace(b'"user"', b'"us\xffer"')),  # invalid UTF-8
            st.just(json.dumps(body)[:-3].encode()),  # cut short
            st.just(b"NaN"), st.just(b"[" * 100_000 + b"]" * 100_000),
        ))
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            parsed = None
        return raw, parsed if isinstance(parsed, dict) else None
    text = json.dumps(body)  # the standard library: NaN, Infinity and integers past 64 bits, as a sloppy client sends them
    depth = draw(st.integers(10, 50_000))
    raw = text.replace(json.dumps(DEEP), "[" * depth + "]" * depth).encode()
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        parsed = None
    return raw, parsed


@st.composite
def turn_headers(draw, tokens: dict[str, str]) -> tuple[list[tuple[str, str]], str | None, str]:
    """(headers, the agent the proxy should take the caller for or None, how the body is encoded)."""
    me = draw(st.sampled_from(sorted(PLACEMENTS)))  # whose turn: each agent's block goes elsewhere
    a, b = tokens[me], tokens["b"]
    auth = draw(st.sampled_from(["bearer", "x-api-key", "both", "twice", "other-first", "garbage-first",
                                 "none", "operator-key", "lowercase"]))
    headers, who = {
        "bearer": ([("Authorization", f"Bearer {a}")], me),
        "x-api-key": ([("x-api-key", a)], me),
        "both": ([("Authorization", f"Bearer {a}"), ("x-api-key", b)], me),
        "twice": ([("Authorization", f"Bearer {a}"), ("Authorization", f"Bearer {a}")], me),
        "other-first": ([("Authorization", f"Bearer {b}"), ("Authorization", f"Bearer {a}")], "b"),
        "garbage-first": ([("Authorization", "Bearer nobody:nothing"), ("Authorization", f"Bearer {a}")], None),
        "none": ([], None),
        "operator-key": ([("Authorization", f"Bearer {OPENAI_KEY}"), ("x-api-key", ANTHROPIC_KEY)], None),
        "lowercase": ([("authorization", f"bearer {a}")], me),
    }[auth]
    content_type = draw(st.sampled_from(["application/json", "application/json; charset=utf-8", None, "text/plain",
                                         "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                                         "application/json; charset=utf-16", "APPLICATION/JSON",
                                         "application/vnd.api+json"]))
    if content_type is not None:
        headers.append(("Content-Type", content_type))
    encoding = draw(st.sampled_from(["", "", "gzip", "deflate", "gzip-lie", "identity", "br", "gzip, gzip"]))
    if encoding:
        headers.append(("Content-Encoding", encoding.removesuffix("-lie")))
    if draw(st.booleans()):
        headers.append(("anthropic-version", draw(st.sampled_from(["2023-06-01", "", "1999"]))))
    if draw(st.booleans()):
        headers.append(("Accept", draw(st.sampled_from(["text/event-stream", "*/*", "application/xml"]))))
    return headers, who, encoding


def encoded(raw: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.compress(raw)
    if encoding == "deflate":
        return zlib.compress(raw)
    if encoding == "gzip, gzip":
        return gzip.compress(gzip.compress(raw))
    return raw


@dataclass
class Proxy:
    url: str
    provider: FakeProvider
    state: Any
    log: io.StringIO
    history: Path
    tokens: dict[str, str]
    memory_url: str

    def ledger_lines(self) -> dict[str, list[dict[str, Any]]]:
        """Every agent's ledger, each line parsed; each file and directory private."""
        out: dict[str, list[dict[str, Any]]] = {}
        if not self.history.exists():
            return out
        for agent_dir in sorted(p for p in self.history.iterdir() if p.is_dir()):
            assert stat.S_IMODE(agent_dir.stat().st_mode) == 0o700, agent_dir
            path = agent_dir / "history.jsonl"
            if path.exists():
                assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
                out[agent_dir.name] = [orjson.loads(line) for line in path.read_bytes().splitlines()]
        return out

    async def idle(self) -> None:
        """Every turn handled (its ledger line written)."""
        for _ in range(3000):
            if not self.state.active_turns:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("a turn never finished")


@pytest.fixture
async def proxy(provider_server, aiohttp_server, tmp_path):
    provider, provider_url = provider_server
    memory = await aiohttp_server(build_embedded_app(tmp_path / "memory", redactor=Redactor(), embeddings="off",
                                                     telemetry=Telemetry(make_logger(io.StringIO()))))
    memory_url = f"http://{memory.host}:{memory.port}"
    settings_ = ProxySettings(context_root=tmp_path / "context", history_root=tmp_path / "history",
                              openai_base_url=f"{provider_url}/v1", openai_api_key=OPENAI_KEY,
                              anthropic_base_url=provider_url, anthropic_api_key=ANTHROPIC_KEY)
    tokens = {agent: write_agent(settings_.context_root, agent,
                                 memory=memory_manifest("embedded", memory_url, placement=placement))[0]
              for agent, placement in {**PLACEMENTS, "b": "trailing"}.items()}
    log = io.StringIO()
    app = build_app(settings_, Telemetry(make_logger(log)))
    runner, port = await start_site(Site(app, "127.0.0.1", 0))
    yield Proxy(f"http://127.0.0.1:{port}", provider, app[STATE], log, settings_.history_root, tokens, memory_url)
    await runner.cleanup()


def strict_verdict(provider: FakeProvider, path: str, body: dict[str, Any]) -> str | None:
    """What the strict provider says of `body` as the client sent it (None: it takes it)."""
    if path == "/v1/messages":
        problem = anthropic_problem(body, "") or provider.signer.thinking_problem(body)
    elif path == "/v1/responses":
        problem = responses_problem(body, provider.stored.get) \
            or provider.signer.reasoning_problem(body, input_items(body.get("input", [])))
    else:
        problem = chat_problem(body)
    return problem.message if problem else None


def assert_error_shape(anthropic: bool, status: int, doc: Any) -> None:
    """The provider's own error shape: what its SDK reads to raise its normal exception."""
    assert isinstance(doc, dict) and isinstance(doc.get("error"), dict), doc
    assert isinstance(doc["error"].get("message"), str) and doc["error"]["message"], doc
    assert isinstance(doc["error"].get("type"), str), doc
    if anthropic:
        assert doc.get("type") == "error", doc


def assert_no_operator_key(*texts: str) -> None:
    for text in texts:
        for key in OPERATOR_KEYS:
            assert key not in text, f"the operator's key leaked: {text[:300]!r}"


async def ordinary_turn(client: httpx.AsyncClient, proxy: Proxy) -> None:
    r = await client.post("/v1/chat/completions", headers={"Authorization": f"Bearer {proxy.tokens['a']}"},
                          json={"model": "gpt-fuzz", "messages": [{"role": "user", "content": "still there?"}]})
    assert r.status_code == 200, r.text


async def send_turn(proxy: Proxy, endpoint: Endpoint, raw: bytes, parsed: dict[str, Any] | None,
                    headers: list[tuple[str, str]], who: str | None, encoding: str) -> None:
    """One fuzzed call and every property it must keep."""
    before = {agent: len(lines) for agent, lines in proxy.ledger_lines().items()}
    seen = len(proxy.provider.received)
    async with httpx.AsyncClient(base_url=proxy.url, timeout=60) as client:
        r = await client.post(endpoint.path, content=encoded(raw, encoding), headers=headers)
        await proxy.idle()
        body = r.text
        assert r.status_code < 500, (r.status_code, body[:500])
        assert "Traceback" not in body
        assert_no_operator_key(body, str(r.headers))
        if r.status_code >= 400:
            assert r.status_code in CALLER_STATUSES, (r.status_code, body[:500])
            assert_error_shape(endpoint.anthropic, r.status_code, r.json())
        calls = proxy.provider.received[seen:]
        answered = [c for c in calls if 200 <= c.status < 300]
        if parsed is not None and calls:
            # memplane forwarded it: if the provider takes the body as the client sent it, it takes
            # what memplane made of it (the injected block breaks nothing)
            if strict_verdict(proxy.provider, endpoint.path, parsed) is None:
                assert all(c.status < 400 for c in calls), [(c.status, c.error) for c in calls]
        # every answered call ledgered exactly once, as the turn the agent was told
        after = proxy.ledger_lines()
        added = {agent: lines[before.get(agent, 0):] for agent, lines in after.items()}
        new = [e for lines in added.values() for e in lines]
        if 200 <= r.status_code < 300:
            assert len(answered) == 1, (r.status_code, len(answered))
            assert len(new) == 1, new
            assert new[0]["turn_id"] == r.headers["X-Memplane-Turn-Id"]
            assert who is not None and added.get(who) == new, (who, list(added))
        else:
            assert not answered and not new, (r.status_code, body[:300], new)
        assert_no_operator_key(proxy.log.getvalue(), *(orjson.dumps(lines).decode() for lines in after.values()))
        await ordinary_turn(client, proxy)  # one bad call never stops the next
        await proxy.idle()
    assert "unhandled_error" not in proxy.log.getvalue()


@pytest.mark.parametrize("path", list(ENDPOINTS))
@FUZZ
@given(data=st.data())
async def test_fuzzed_turns_keep_every_property(proxy, path, data):
    endpoint = ENDPOINTS[path]
    raw, parsed = data.draw(turn_bodies(endpoint), label="body")
    headers, who, encoding = data.draw(turn_headers(proxy.tokens), label="headers")
    await send_turn(proxy, endpoint, raw, parsed, headers, who, encoding)


# -- what the fuzzing found: hypothesis's minimal examples, kept as explicit cases --

FOUND = [
    # a Responses input item whose role is not a string: a 500 (TypeError: unhashable type: 'list')
    ("/v1/responses", {"model": "gpt-fuzz", "input": [{"role": [], "content": "hi"}]}),
]


@pytest.mark.parametrize(("path", "body"), FOUND, ids=[f"{p}-{n}" for n, (p, _) in enumerate(FOUND)])
async def test_what_the_fuzzing_found(proxy, path, body):
    for agent in PLACEMENTS:
        headers = [("Authorization", f"Bearer {proxy.tokens[agent]}"), ("Content-Type", "application/json")]
        await send_turn(proxy, ENDPOINTS[path], json.dumps(body).encode(), body, headers, agent, "")
