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
* the operator's key is in no response, log line, explanation or ledger; the provider gets the
  operator's key and nothing of the caller's credentials;
* the agent's next ordinary turn works (one bad call never stops the next).

`/mcp` is fuzzed the same way with JSON-RPC: batches, odd ids, unknown methods, wrong parameter
types, huge arguments, notifications, protocol-version and session headers, another agent's token,
Origin/Host tricks. Answers are JSON-RPC errors with the right codes, never a 5xx, and agent A never
reads, changes or forgets agent B's memory.

Every hypothesis test is bounded and derandomised, so CI runs the same examples each time
(MEMPLANE_FUZZ_EXAMPLES=2000 for a longer hunt with fresh ones). What the fuzzing found is kept at
the end as explicit cases: hypothesis's minimal examples.
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

import aiohttp
import httpx
import orjson
import pytest
from anthropic.types import message_create_params, message_param
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict
from openai.types.chat import (
    chat_completion_assistant_message_param,
    chat_completion_user_message_param,
    completion_create_params,
)
from openai.types.responses import easy_input_message_param, response_create_params
from yarl import URL

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
# CI runs the same bounded examples every time; MEMPLANE_FUZZ_EXAMPLES=2000 runs that many fresh ones
# each (a longer hunt on a developer's machine), still without the example database.
LONGER = int(os.environ.get("MEMPLANE_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=LONGER or 100, deadline=None, derandomize=not LONGER, database=None,
                suppress_health_check=list(HealthCheck))
FUZZ_MCP = settings(FUZZ, max_examples=LONGER or 150)
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


WORDS = st.one_of(st.text(min_size=1, max_size=30).filter(str.strip), HOSTILE_TEXT.filter(str.strip))
CALL_ID = st.text("abcdef0123456789", min_size=1, max_size=8).map(lambda s: f"call_{s}")


@st.composite
def chat_conversation(draw) -> list[dict[str, Any]]:
    """A Chat Completions history the real API takes: system/developer first, user turns, assistant
    turns that may call tools, each call answered by a `tool` message before anything else."""
    out: list[dict[str, Any]] = []
    if draw(st.booleans()):
        out.append({"role": draw(st.sampled_from(["system", "developer"])), "content": draw(WORDS)})
    for _ in range(draw(st.integers(0, 3))):
        out.append({"role": "user", "content": draw(st.one_of(
            WORDS, st.lists(WORDS.map(lambda t: {"type": "text", "text": t}), min_size=1, max_size=2)))})
        ids = draw(st.lists(CALL_ID, max_size=2, unique=True))
        if ids:
            out.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": i, "type": "function", "function": {"name": "lookup", "arguments": "{}"}} for i in ids]})
            out += [{"role": "tool", "tool_call_id": i, "content": draw(WORDS)} for i in ids]
            if draw(st.booleans()):
                continue  # the loop's next step: the conversation may end on tool results
        out.append({"role": "assistant", "content": draw(WORDS)})
    if not out or out[-1]["role"] != "tool":
        out.append({"role": "user", "content": draw(WORDS)})
    return out


@st.composite
def responses_input(draw) -> list[dict[str, Any]]:
    """A Responses input the real API takes: messages and function calls, each call's output after it."""
    out: list[dict[str, Any]] = []
    if draw(st.booleans()):
        out.append({"role": "developer", "content": draw(WORDS)})
    for _ in range(draw(st.integers(0, 3))):
        out.append({"type": "message", "role": "user", "content": draw(st.one_of(
            WORDS, st.lists(WORDS.map(lambda t: {"type": "input_text", "text": t}), min_size=1, max_size=2)))})
        for call in draw(st.lists(CALL_ID, max_size=2, unique=True)):
            out.append({"type": "function_call", "call_id": call, "name": "lookup", "arguments": "{}"})
            out.append({"type": "function_call_output", "call_id": call, "output": draw(WORDS)})
        out.append({"role": "assistant", "content": draw(WORDS)})
    if draw(st.booleans()) or not out:
        out.append({"role": "user", "content": draw(WORDS)})
    return out


@st.composite
def anthropic_conversation(draw) -> dict[str, Any]:
    """A Messages request the real API takes: alternating turns, tool_use answered by tool_result
    blocks first in the next user turn, at most four cache breakpoints."""
    breakpoints = draw(st.integers(0, 4))

    def block(text: str) -> dict[str, Any]:
        nonlocal breakpoints
        out: dict[str, Any] = {"type": "text", "text": text}
        if breakpoints and draw(st.booleans()):
            breakpoints -= 1
            out["cache_control"] = {"type": "ephemeral"}
        return out

    messages: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 3))):
        user = messages[-1]["content"] if messages and messages[-1]["role"] == "user" else None
        if user is None:
            messages.append({"role": "user", "content": [block(draw(WORDS))]})
        else:
            user.append(block(draw(WORDS)))
        ids = draw(st.lists(CALL_ID.map(lambda c: "toolu_" + c), max_size=2, unique=True))
        messages.append({"role": "assistant", "content": [block(draw(WORDS))] + [
            {"type": "tool_use", "id": i, "name": "lookup", "input": {}} for i in ids]})
        if ids:
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": i, "content": draw(WORDS)} for i in ids]})
    if not messages or messages[-1]["role"] == "assistant" or draw(st.booleans()):
        if messages and messages[-1]["role"] == "user":
            messages[-1]["content"].append(block(draw(WORDS)))
        else:
            messages.append({"role": "user", "content": draw(st.one_of(WORDS, WORDS.map(lambda t: [block(t)])))})
    body: dict[str, Any] = {"model": "claude-fuzz", "max_tokens": 2048, "messages": messages}
    if draw(st.booleans()):
        body["system"] = draw(st.one_of(WORDS, st.lists(WORDS.map(block), min_size=1, max_size=2)))
    if breakpoints and draw(st.booleans()):
        body["cache_control"] = {"type": "ephemeral"}  # automatic caching: the API picks the last block
    return body


def rich_body(endpoint: Endpoint) -> st.SearchStrategy[dict[str, Any]]:
    """A longer request the real API takes: histories, tool loops, content parts, cache breakpoints."""
    if endpoint.path == "/v1/messages":
        return anthropic_conversation()
    if endpoint.path == "/v1/responses":
        # `store: false` (as Codex sends): the input is not kept, so `latest` places the block among it
        return st.builds(lambda items, instructions, store: {
            "model": "gpt-fuzz", "input": items, **({"instructions": instructions} if instructions else {}),
            **({"store": store} if store is not None else {})}, responses_input(), st.none() | WORDS,
            st.sampled_from([None, False, True]))
    return chat_conversation().map(lambda messages: {"model": "gpt-fuzz", "messages": messages})


@st.composite
def turn_bodies(draw, endpoint: Endpoint) -> tuple[bytes, dict[str, Any] | None]:
    """(the bytes sent, the body they parse to when they are a JSON object)."""
    stream = draw(st.sampled_from([None, False, True]))
    body = endpoint.base(draw(TEXT), stream) if draw(st.booleans()) else draw(rich_body(endpoint))
    if stream is not None:
        body["stream"] = stream
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
            st.just(json.dumps(body).encode().replace(b'"hi"', b'"' + b"x" * (11 << 20) + b'"', 1)),  # over 10 MiB
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


# Where the call goes: the route as the SDK writes it, or a trick on it. (True: still the turn endpoint
# and answered in its dialect; a trick that is refused may answer in the caller's.) Sent unnormalised.
PATH_TRICKS = [("{p}", True), ("{p}?beta=true", True), ("{p}?stream=true&x=%00", True), ("{p}/", False),
               ("/{p}", False), ("{p}#frag", True), ("{v}/./{r}", False), ("/v1/../{p}", False),
               ("{v}/{r}%00", False), ("{v}/{r};x", False), ("{P}", False), ("{v}/{r}/x", False),
               ("{v}//{r}", False), ("{e}", True), ("{v}%2F{r}", False), ("{v}/{r}%2f..%2f", False)]


@dataclass(frozen=True)
class Call:
    path: str
    headers: list[tuple[str, str]]
    who: str | None  # the agent the proxy should take the caller for (None: nobody)
    encoding: str  # how the body is encoded
    same_route: bool


ODD_HEADERS = {
    "X-Session-Id": ["../../etc/passwd", "s" * 7000, "$where", "nul%00", "é"],
    "X-Memplane-Project": ["../../x", "p" * 5000, "a/b", ""],
    "traceparent": ["00-" + "0" * 32 + "-" + "0" * 16 + "-00", "garbage", "ff-" + "a" * 32 + "-" + "b" * 16 + "-01"],
    "anthropic-beta": ["context-management-2025-06-27", "x" * 3000, ","],
    "OpenAI-Organization": ["org-not-the-operators"],
    "OpenAI-Project": ["proj_not_the_operators"],
    "X-Memplane-Agent": ["b:wrong", "nobody:x", ""],
    "User-Agent": ["u" * 6000, "openai-python/1.0"],
    "Transfer-Encoding": ["chunked"],
    "Accept-Encoding": ["br", "gzip", "identity;q=0"],
    "Cookie": ["session=stolen"],
    "Proxy-Authorization": ["Basic eDp5"],
}


@st.composite
def turn_calls(draw, endpoint: Endpoint, tokens: dict[str, str]) -> Call:
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
    for name in draw(st.sets(st.sampled_from(sorted(ODD_HEADERS)), max_size=2)):
        headers.append((name, draw(st.sampled_from(ODD_HEADERS[name]))))
    trick, same_route = draw(st.sampled_from([PATH_TRICKS[0]] * 8 + PATH_TRICKS))
    v, r = "/v1", endpoint.path.removeprefix("/v1/")
    path = trick.format(p=endpoint.path, P=endpoint.path.upper(), v=v, r=r,
                        e=endpoint.path.replace("e", "%65", 1))
    return Call(path, headers, who, encoding, same_route)


def encoded(raw: bytes, encoding: str) -> bytes:
    """The body as its Content-Encoding says (a lying `gzip` and `br`, which aiohttp cannot decode, as they are)."""
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
        assert stat.S_IMODE(self.history.stat().st_mode) == 0o700, self.history
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


def note(what: str) -> None:
    """What a run covered (`--hypothesis-show-statistics`); the explicit cases run outside hypothesis."""
    if currently_in_test_context():
        event(what)


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


def assert_operator_credentials_only(sent: dict[str, str], tokens: dict[str, str], *, anthropic: bool) -> None:
    """What the provider got: the operator's key where the API reads it, no agent token anywhere,
    none of the caller's cookies or proxy credentials."""
    lower = {k.lower(): v for k, v in sent.items()}
    if anthropic:
        assert lower.get("x-api-key") == ANTHROPIC_KEY and "authorization" not in lower, lower.keys()
    else:
        assert lower.get("authorization") == f"Bearer {OPENAI_KEY}" and "x-api-key" not in lower, lower.keys()
    assert not {"cookie", "proxy-authorization", "x-memplane-agent"} & set(lower), lower.keys()
    everything = " ".join(lower.values())
    assert not any(token in everything or token.split(":", 1)[1] in everything for token in tokens.values())


async def ordinary_turn(client: httpx.AsyncClient, proxy: Proxy) -> None:
    r = await client.post("/v1/chat/completions", headers={"Authorization": f"Bearer {proxy.tokens['a']}"},
                          json={"model": "gpt-fuzz", "messages": [{"role": "user", "content": "still there?"}]})
    assert r.status_code == 200, r.text


async def post_raw(url: str, call: Call, body: bytes) -> tuple[int, Any, str]:
    """(status, headers, text) of a POST sent as written: the path not normalised (httpx would
    remove dot segments), every header as given, none added but the connection's own."""
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
        async with session.post(URL(url + call.path, encoded=True), data=body, headers=CIMultiDict(call.headers),
                                skip_auto_headers=("Content-Type", "User-Agent", "Accept", "Accept-Encoding")) as r:
            return r.status, r.headers, (await r.read()).decode("utf-8", "replace")


async def send_turn(proxy: Proxy, endpoint: Endpoint, raw: bytes, parsed: dict[str, Any] | None, call: Call) -> None:
    """One fuzzed call and every property it must keep."""
    before = {agent: len(lines) for agent, lines in proxy.ledger_lines().items()}
    seen = len(proxy.provider.received)
    async with httpx.AsyncClient(base_url=proxy.url, timeout=60) as client:
        status, headers, body = await post_raw(proxy.url, call, encoded(raw, call.encoding))
        await proxy.idle()
        assert status < 500, (status, body[:500])
        assert "Traceback" not in body
        assert_no_operator_key(body, str(headers))
        if status >= 400:
            assert status in CALLER_STATUSES, (status, body[:500])
            assert_error_shape(endpoint.anthropic and call.same_route, status, orjson.loads(body))
        note(f"status {status}")
        calls = proxy.provider.received[seen:]
        answered = [c for c in calls if 200 <= c.status < 300]
        for c in calls:  # upstream the operator's key, and nothing of the caller's credentials
            assert_operator_credentials_only(c.headers, proxy.tokens, anthropic=endpoint.anthropic)
        if 200 <= status < 300 and isinstance(parsed, dict) and parsed.get("stream") is True:
            assert headers.get("Content-Type", "").startswith("text/event-stream"), headers
            note("streamed")
        if parsed is not None and calls:
            # memplane forwarded it: if the provider takes the body as the client sent it, it takes
            # what memplane made of it (the injected block breaks nothing)
            if strict_verdict(proxy.provider, endpoint.path, parsed) is None:
                note("a body the provider takes, forwarded")
                assert all(c.status < 400 for c in calls), [(c.status, c.error) for c in calls]
        # every answered call ledgered exactly once, as the turn the agent was told
        after = proxy.ledger_lines()
        added = {agent: lines[before.get(agent, 0):] for agent, lines in after.items()}
        new = [e for lines in added.values() for e in lines]
        if 200 <= status < 300:
            assert len(answered) == 1, (status, len(answered))
            assert len(new) == 1, new
            assert new[0]["turn_id"] == headers["X-Memplane-Turn-Id"]
            told = await client.get(f"/memplane/turns/{headers['X-Memplane-Turn-Id']}")  # what `memplane explain` reads
            assert told.status_code == 200 and told.json()["agent_id"] == call.who, told.text[:300]
            assert_no_operator_key(told.text)
            assert call.who is not None and added.get(call.who) == new, (call.who, list(added))
        else:
            assert not answered and not new, (status, body[:300], new)
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
    await send_turn(proxy, endpoint, raw, parsed, data.draw(turn_calls(endpoint, proxy.tokens), label="call"))


# -- /mcp: JSON-RPC as an attacker and a sloppy client send it --

NOT_JSON = object()  # a body cut short
B_SECRET = "zq-bob-private-7731"  # the other agent's memory: never read, changed or forgotten by anyone else
MCP_METHODS = ["initialize", "ping", "tools/list", "tools/call", "notifications/initialized",
               "resources/list", "prompts/list", "logging/setLevel", "completion/complete"]
JSONRPC_CODES = {-32700, -32600, -32601, -32602, -32000, -32001}  # parse, request, method, params; memplane's auth / limit
MCP_STATUSES = {200, 202, 400, 401, 403, 404, 405, 406, 413, 415}
ACCEPT_BOTH = "application/json, text/event-stream"


async def mcp_call(proxy: Proxy, token: str, message: Any, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=proxy.url, timeout=60) as client:
        return await client.post("/mcp", content=orjson.dumps(message), headers={
            "Authorization": f"Bearer {token}", "Accept": ACCEPT_BOTH, "Content-Type": "application/json", **headers})


async def b_memories(proxy: Proxy) -> list[dict[str, Any]]:
    """Agent b's memories, read from the engine itself (not through anything under test)."""
    async with httpx.AsyncClient(base_url=proxy.memory_url, timeout=30) as client:
        r = await client.get("/api/memories", params={"agent_id": "b"})
        assert r.status_code == 200, r.text
        return r.json()["memories"]


@pytest.fixture
async def mcp_proxy(proxy):
    """The proxy, with agent b holding one memory (stored over /mcp with b's own token)."""
    stored = await mcp_call(proxy, proxy.tokens["b"], {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "store_memory", "arguments": {"key": "private", "value": f"Bob's locker code is {B_SECRET}"}}})
    assert stored.status_code == 200 and not stored.json()["result"]["isError"], stored.text
    [memory] = await b_memories(proxy)
    return proxy, memory


def _secret_of(token: str) -> str:
    return token.split(":", 1)[1]


@st.composite
def mcp_arguments(draw, b_id: str) -> Any:
    name = draw(st.sampled_from(["search_memory", "store_memory", "forget_memory"]))
    args = {
        "search_memory": {"query": draw(st.one_of(TEXT, st.just(B_SECRET), st.just("locker code"), JSON_VALUE)),
                          "limit": draw(st.one_of(st.integers(-5, 50), JSON_VALUE))},
        "store_memory": {"key": draw(st.one_of(st.just("private"), TEXT, JSON_VALUE)), "value": draw(TEXT | JSON_VALUE),
                         "scope": draw(st.sampled_from(["agent", "session", "global", "b", "*"]) | JSON_VALUE),
                         "metadata": draw(st.one_of(JSON_VALUE, st.just({"agent_id": "b"})))},
        "forget_memory": {"id": draw(st.one_of(st.just(b_id), st.just(b_id.upper()), st.just(f" {b_id}"), TEXT)),
                          "reason": draw(TEXT | JSON_VALUE)},
    }[name]
    drop = draw(st.sampled_from([None, *sorted(args)]))
    args.pop(drop, None)
    if draw(st.booleans()):
        args["agent_id"] = "b"  # a second agent named in the arguments: the token decides
    odd = draw(st.sampled_from([None] * 8 + ["name", "arguments"]))
    return {"name": draw(st.one_of(TEXT, JSON_VALUE)) if odd == "name" else name,
            "arguments": draw(JSON_VALUE) if odd == "arguments" else args}


@st.composite
def jsonrpc_messages(draw, b_id: str) -> Any:
    """One JSON-RPC message, broken (one time in four) or not; or a batch; or not JSON-RPC at all."""
    method = draw(st.sampled_from(["tools/call"] * 6 + ["tools/list", "ping", "initialize"]))
    ident = draw(st.one_of(st.integers(-2**63, 2**63 - 1), st.text(max_size=12)))
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
    if method == "tools/call":
        message["params"] = draw(mcp_arguments(b_id))
    if draw(st.sampled_from([True, True, True, False])):  # (whole, usually)
        return message
    broken = draw(st.sampled_from(["method", "id", "no id", "params", "jsonrpc", "no jsonrpc", "no method",
                                   "batch", "empty batch", "scalar", "result", "error", "huge"]))
    if broken == "method":
        message["method"] = draw(st.one_of(st.sampled_from(MCP_METHODS), TEXT, JSON_VALUE))
    elif broken == "id":
        message["id"] = draw(st.one_of(st.sampled_from([None, 1.5, True, [], {}, 2**70, -2**64]), JSON_VALUE))
    elif broken == "params":
        message["params"] = draw(JSON_VALUE)
    elif broken == "huge":  # over the 1 MiB one message may take
        message["params"] = {"name": "store_memory", "arguments": {"key": "k", "value": "v" * (1 << 20)}}
    elif broken == "jsonrpc":
        message["jsonrpc"] = draw(st.one_of(st.sampled_from(["1.0", 2, 2.0, None, "2.0 "]), JSON_VALUE))
    elif broken.startswith("no "):
        message.pop(broken.removeprefix("no "))
    elif broken == "batch":
        return [message, *draw(st.lists(st.just(message), max_size=2))]
    elif broken == "empty batch":
        return []
    elif broken == "scalar":
        return draw(LEAF)
    else:  # a response sent to the server, well formed or not
        return {"jsonrpc": "2.0", "id": ident, broken: draw(st.one_of(
            JSON_VALUE, st.just({}), st.just({"code": -32000, "message": "client-side failure"})))}
    return message


@st.composite
def mcp_headers(draw, proxy: Proxy, port: int) -> tuple[dict[str, str], bool]:
    """(headers, whether they authenticate agent a)."""
    a, b = proxy.tokens["a"], proxy.tokens["b"]
    token = draw(st.sampled_from([a] * 12 + [f"b:{_secret_of(a)}", f"a:{_secret_of(b)}", "", "b", "a:", OPENAI_KEY]))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    optional = {
        "Accept": st.sampled_from([ACCEPT_BOTH, "application/json", "text/event-stream", "*/*", "text/html"]),
        "Content-Type": st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain",
                                         "application/x-www-form-urlencoded"]),
        "MCP-Protocol-Version": st.sampled_from(["2025-06-18", "2025-03-26", "2024-11-05", "garbage", ""]),
        "Mcp-Session-Id": st.sampled_from(["abc", "00000000-0000-0000-0000-000000000000", "../../b"]),
        "X-Session-Id": st.sampled_from(["s1", "../../etc/passwd", "b"]),
        "Origin": st.sampled_from([f"http://127.0.0.1:{port}", "http://evil.example", "null", f"http://localhost:{port}"]),
        "Host": st.sampled_from(["evil.example", f"localhost:{port}", f"127.0.0.1:{port}"]),
        "Sec-Fetch-Site": st.sampled_from(["cross-site", "same-origin", "none"]),
    }
    odd = draw(st.sampled_from([False, False, True]))
    for name in draw(st.sets(st.sampled_from(sorted(optional)), min_size=1, max_size=2)) if odd else ():
        headers[name] = draw(optional[name])
    headers.setdefault("Accept", ACCEPT_BOTH)
    headers.setdefault("Content-Type", "application/json")
    return headers, token == a


def envelope_problem(message: Any) -> bool:
    """The message is no JSON-RPC 2.0 request, notification or response an MCP server takes: JSON-RPC
    2.0 section 4/5 and MCP's base protocol (an id is a string or an integer, never null; params an
    object; no batches since 2025-06-18). (`params` of another type is either's -32600 or -32602.)"""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return True
    if "method" in message:
        ident = message.get("id")
        return not isinstance(message["method"], str) \
            or ("id" in message and (isinstance(ident, bool) or not isinstance(ident, (str, int))))
    return "id" not in message or not ({"result", "error"} & set(message))


@FUZZ_MCP
@given(data=st.data())
async def test_fuzzed_mcp_messages_keep_every_property(mcp_proxy, data):
    proxy, b_memory = mcp_proxy
    message = data.draw(jsonrpc_messages(b_memory["id"]), label="message")
    headers, as_a = data.draw(mcp_headers(proxy, int(proxy.url.rsplit(":", 1)[1])), label="headers")
    raw = json.dumps(message).encode()  # NaN and Infinity as a sloppy client writes them: not JSON
    if data.draw(st.sampled_from([False] * 5 + [True]), label="cut short"):
        raw = b"{" + raw
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError:
        message = NOT_JSON
    await check_mcp(proxy, b_memory, message, raw, headers, as_a)


async def check_mcp(proxy: Proxy, b_memory: dict[str, Any], message: Any, raw: bytes, headers: dict[str, str],
                    as_a: bool) -> None:
    async with httpx.AsyncClient(base_url=proxy.url, timeout=60) as client:
        r = await client.post("/mcp", content=raw, headers=headers)
    case = (message, headers, r.status_code, r.text[:400])
    note(f"status {r.status_code}")
    if r.status_code == 200:
        doc = r.json()
        note(f"JSON-RPC error {doc['error']['code']}" if "error" in doc else
             "tool error" if doc["result"].get("isError") else "answered")
    assert r.status_code < 500 and "Traceback" not in r.text, case
    assert r.status_code in MCP_STATUSES, case
    assert B_SECRET not in r.text, case  # agent b's memory is read by nobody else
    assert_no_operator_key(r.text)
    if r.status_code == 202:
        # accepted with no answer: only for a notification or a response, never a request (its
        # client would wait for ever)
        assert r.text == "" and isinstance(message, dict) and ("id" not in message or "method" not in message), case
    else:
        doc = r.json()
        assert isinstance(doc, dict) and doc.get("jsonrpc") == "2.0" and ("error" in doc) != ("result" in doc), case
        if "error" in doc:
            assert doc["error"]["code"] in JSONRPC_CODES and isinstance(doc["error"]["message"], str), case
        ready = as_a and r.status_code not in (401, 403, 406, 415) and headers.get("MCP-Protocol-Version") in (
            None, "2025-06-18", "2025-03-26")
        if ready and message is NOT_JSON:
            assert doc["error"]["code"] == -32700, case  # not JSON: a parse error
        elif ready and envelope_problem(message):
            assert doc["error"]["code"] == -32600 and doc["id"] is None, case  # not a JSON-RPC request: Invalid Request
        elif ready and isinstance(message, dict) and "method" in message and r.status_code != 413:
            assert doc["id"] == message.get("id"), case  # the answer names the request it answers
    [still] = await b_memories(proxy)  # nothing of b's changed or gone, nothing new in b's name
    assert still["id"] == b_memory["id"] and B_SECRET in still["value"], still
    assert "unhandled_error" not in proxy.log.getvalue()


# -- what the fuzzing found: hypothesis's minimal examples, kept as explicit cases --

FOUND = [
    # a Responses input item whose role is not a string: a 500 (TypeError: unhashable type: 'list')
    ("/v1/responses", {"model": "gpt-fuzz", "input": [{"role": [], "content": "hi"}]}),
]


@pytest.mark.parametrize(("path", "body"), FOUND, ids=[f"{p}-{n}" for n, (p, _) in enumerate(FOUND)])
async def test_what_the_fuzzing_found(proxy, path, body):
    for agent in PLACEMENTS:
        call = Call(path, [("Authorization", f"Bearer {proxy.tokens[agent]}"), ("Content-Type", "application/json")],
                    agent, "", True)
        await send_turn(proxy, ENDPOINTS[path], json.dumps(body).encode(), body, call)


MCP_FOUND = [
    # a body that is JSON but no message, and a batch: -32602 from the package, not -32600
    None, [{"jsonrpc": "2.0", "method": "initialize", "id": 0}],
    # params not an object: the error named no request (`id: null`) though its id was 0
    {"jsonrpc": "2.0", "method": "initialize", "id": 0, "params": []},
    # a request whose id MCP does not allow was taken for a notification: 202, no answer, its client waits
    {"jsonrpc": "2.0", "id": None, "method": "tools/list"}, {"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 1.5, "method": "ping"},
    # an integer past 64 bits in store_memory's metadata: the answer was a protocol error with code 0
    {"jsonrpc": "2.0", "id": 0, "method": "tools/call", "params": {"name": "store_memory", "arguments": {
        "key": "k", "value": "v", "metadata": {"n": 2**70}}}},
    # a message over 1 MiB: the package's 413 was bare text, no JSON-RPC error
    {"jsonrpc": "2.0", "id": 0, "method": "tools/call", "params": {"name": "store_memory", "arguments": {
        "key": "k", "value": "v" * (1 << 20)}}},
]


@pytest.mark.parametrize("message", MCP_FOUND, ids=[f"mcp-{n}" for n in range(len(MCP_FOUND))])
async def test_what_the_mcp_fuzzing_found(mcp_proxy, message):
    proxy, b_memory = mcp_proxy
    headers = {"Authorization": f"Bearer {proxy.tokens['a']}", "Accept": ACCEPT_BOTH, "Content-Type": "application/json"}
    await check_mcp(proxy, b_memory, message, json.dumps(message).encode(), headers, True)

