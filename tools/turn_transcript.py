"""A transcript of scripted turns, to show a refactor of the turn changed nothing a user can see.

The same ~50 calls (three wire formats, streamed and whole, memory off, on and in the system
prompt, tool loops, a Responses chain, the store_memory tool, refused requests, provider errors) go
through whichever `proxy` package is first on the path, against the fake provider and a reference
memory service on loopback. Printed: each answer (status, headers, body), then every ledger line,
every request the provider received, every log event and the turn metrics, with random ids, times
and ports masked. Two checkouts' transcripts are diffed (docs/turn.md):

    PYTHONPATH=<old checkout> .venv/bin/python tools/turn_transcript.py > old.txt
    PYTHONPATH=<new checkout> .venv/bin/python tools/turn_transcript.py > new.txt
    diff old.txt new.txt

`--redis URL`: the same on the shared ledger (`--ledger redis`, a fresh key prefix each run).
"""

from __future__ import annotations

import asyncio
import io
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp.test_utils import TestServer

from manifests.agents import memory_manifest, write_agent
from memory_adapters.reference.app import build_reference_app
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from proxy.app import STATE, build_app
from proxy.config import ProxySettings
from proxy.ledger.files import Ledger
from proxy.testing.fake_provider import FakeProvider
from proxy.testing.fake_provider.model import ToolCall, ToolLoop

OA_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
AN_TOOLS = [{"name": "get_weather", "description": "w", "input_schema": {"type": "object"}}]
RS_TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
QUESTION = "Where does my sister live?"
LOOP_QUESTION = "Weather where my sister lives?"
MASKS = [  # (pattern, replacement), in order: what differs between two runs of the same code
    (r"turn_[0-9a-f]{24}", "turn_X"),
    (r"latency_ms[\"']?[=:] ?[0-9.]+", "latency_ms=N"),
    (r"\d{4}-\d\d-\d\dT[0-9:.]+Z?(\+00:00)?", "TS"),
    (r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "UUID"),
    (r"\b([a-z][a-z0-9]*)[-_][0-9a-zA-Z]{10,}\b", r"\1_X"),
    (r"\b[0-9a-f]{12,}\b", "HEX"),
    (r"\b\d{10,}(\.\d+)?\b", "EPOCH"),
    (r"\b\d+\.\d+\b", "F"),
    (r"127\.0\.0\.1:\d+", "HOST"),
    (r"/tmp/[^\"' ]+", "TMP"),
]


def mask(text: str) -> str:
    for pattern, replacement in MASKS:
        text = re.sub(pattern, replacement, text)
    return text


def dumps(doc: Any) -> str:
    return mask(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS).decode())


class Client:
    def __init__(self, session: aiohttp.ClientSession, url: str, tokens: dict[str, str], app: Any) -> None:
        self.session, self.url, self.tokens, self.app, self.out = session, url, tokens, app, []

    async def call(self, label: str, agent: str, path: str, body: Any = None, *, raw: bytes | None = None,
                   headers: dict[str, str] | None = None) -> Any:
        token = self.tokens.get(agent, agent)
        sent = {"Authorization": f"Bearer {token}", "x-api-key": token, "anthropic-version": "2023-06-01",
                "Content-Type": "application/json", **(headers or {})}
        async with self.session.post(self.url + path, data=orjson.dumps(body) if raw is None else raw,
                                     headers=sent) as r:
            data = await r.read()
            kept = sorted((k, v) for k, v in r.headers.items() if k.lower() not in ("date", "server"))
            self.out.append(f"== {label} {agent} {path} -> {r.status}\n{mask(str(kept))}\n"
                            f"{mask(data.decode('utf-8', 'replace'))}")
        await self.app[STATE].settle(30)  # each retain lands before the next recall: one order every run
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            return None


async def plain_turns(c: Client) -> None:
    for agent in ("mem", "sys", "tool"):
        await c.call("teach", agent, "/v1/chat/completions", {"model": "m", "messages": [
            {"role": "user", "content": f"My sister Ana lives in Porto. ({agent})"}]})
    for agent in ("plain", "mem", "sys"):
        for stream in (False, True):
            await c.call(f"chat s={stream}", agent, "/v1/chat/completions",
                         {"model": "m", "stream": stream, "messages": [{"role": "user", "content": QUESTION}]})
            await c.call(f"msgs s={stream}", agent, "/v1/messages", {
                "model": "c", "max_tokens": 50, "stream": stream, "messages": [{"role": "user", "content": QUESTION}]})
            await c.call(f"resp s={stream}", agent, "/v1/responses",
                         {"model": "r", "stream": stream, "input": QUESTION})


async def tool_loops(c: Client, stream: bool) -> None:
    """A loop's second call continues its user turn: the first call's block again."""
    msgs: list[Any] = [{"role": "user", "content": LOOP_QUESTION}]
    a = await c.call("loop1", "mem", "/v1/chat/completions", {"model": "m", "tools": OA_TOOLS, "messages": msgs})
    msg = a["choices"][0]["message"]
    msgs += [msg, {"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"], "content": "21C"}]
    await c.call(f"loop2 s={stream}", "mem", "/v1/chat/completions",
                 {"model": "m", "stream": stream, "tools": OA_TOOLS, "messages": msgs})
    r1 = await c.call("chain1", "mem", "/v1/responses", {"model": "r", "tools": RS_TOOLS, "input": LOOP_QUESTION})
    call = next(o for o in r1["output"] if o.get("type") == "function_call")
    await c.call(f"chain2 s={stream}", "mem", "/v1/responses", {
        "model": "r", "tools": RS_TOOLS, "stream": stream, "previous_response_id": r1["id"],
        "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "21C"}]})
    am: list[Any] = [{"role": "user", "content": LOOP_QUESTION}]
    a1 = await c.call("aloop1", "mem", "/v1/messages", {"model": "c", "max_tokens": 50, "tools": AN_TOOLS,
                                                        "messages": am})
    use = next(b for b in a1["content"] if b["type"] == "tool_use")
    am += [{"role": "assistant", "content": a1["content"]},
           {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "21C"}]}]
    await c.call(f"aloop2 s={stream}", "mem", "/v1/messages", {"model": "c", "max_tokens": 50, "tools": AN_TOOLS,
                                                               "stream": stream, "messages": am})


async def refusals(c: Client, provider: FakeProvider) -> None:
    ask = [{"role": "user", "content": QUESTION}]
    await c.call("401", "nobody:secret", "/v1/chat/completions", {"model": "m", "messages": []})
    await c.call("bad json", "mem", "/v1/chat/completions", raw=b"{not json")
    await c.call("empty", "mem", "/v1/chat/completions", raw=b"")
    await c.call("array", "mem", "/v1/messages", raw=b"[1]")
    await c.call("invalid", "mem", "/v1/chat/completions", {"model": "m"})
    await c.call("no max_tokens", "mem", "/v1/messages", {"model": "c", "messages": ask})
    provider.fail_with = [500, 429]
    await c.call("upstream 500", "mem", "/v1/chat/completions", {"model": "m", "messages": ask})
    await c.call("upstream 429", "mem", "/v1/messages", {"model": "c", "max_tokens": 5, "stream": True,
                                                         "messages": ask})
    await c.call("session", "mem", "/v1/chat/completions", {"model": "m", "metadata": {"session_id": "s1"},
                                                            "messages": ask}, headers={"X-Session-Id": "abc"})


async def turns(c: Client, provider: FakeProvider) -> None:
    await plain_turns(c)
    provider.model = ToolLoop([ToolCall("get_weather", {"city": "Porto"})], say="Let me check.")
    for stream in (False, True):
        await tool_loops(c, stream)
    provider.model = None  # the default model calls the first tool on offer: store_memory
    for stream in (False, True):
        for path, body in (("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "x"}]}),
                           ("/v1/messages", {"model": "c", "max_tokens": 50,
                                             "messages": [{"role": "user", "content": "x"}]}),
                           ("/v1/responses", {"model": "r", "input": "x"})):
            await c.call(f"store_memory s={stream}", "tool", path, {**body, "stream": stream})
    await refusals(c, provider)


def agents(root: Path, memory_url: str) -> dict[str, str]:
    tool = memory_manifest("ref", memory_url)
    tool["tools"] = ["store_memory"]
    return {"plain": write_agent(root, "plain", pod="p")[0],
            "mem": write_agent(root, "mem", pod="p", memory=memory_manifest("ref", memory_url))[0],
            "sys": write_agent(root, "sys", pod="p", memory=memory_manifest("ref", memory_url, placement="system"))[0],
            "tool": write_agent(root, "tool", pod="p", memory=tool)[0]}


def afterwards(app: Any, settings: ProxySettings, provider: FakeProvider, log: io.StringIO) -> list[str]:
    ledger = app[STATE].ledger if settings.ledger == "redis" else Ledger(settings.history_root)
    out = [f"== ledger {agent}\n" + dumps(ref.entry)
           for agent in ("plain", "mem", "sys", "tool") for ref in ledger.read(agent)]
    out += [f"== provider {r.path} {r.query}\n{dumps(r.body)}\n" + mask(str(sorted(
        (k, v) for k, v in r.headers.items() if k.lower() not in ("host", "date")))) for r in provider.received]
    out += ["== log " + dumps(orjson.loads(line)) for line in log.getvalue().splitlines()]
    metrics = app[STATE].metrics.render().decode().splitlines()
    out.append("== metrics\n" + "\n".join(line for line in metrics if line.startswith(
        ("memplane_turns_total", "memplane_upstream_latency_seconds_count"))))
    return out


async def main() -> None:
    import proxy

    print(f"proxy from {Path(proxy.__file__).parent}", file=sys.stderr)  # which checkout is being run
    tmp = Path(tempfile.mkdtemp(prefix="memplane-transcript-"))
    shared: dict[str, Any] = {}
    if "--redis" in sys.argv:  # the shared ledger, under a prefix of this run's own
        shared = {"ledger": "redis", "redis_url": sys.argv[sys.argv.index("--redis") + 1],
                  "ledger_prefix": f"transcript{tmp.name.rsplit('-', 1)[-1]}"}
    provider, log = FakeProvider(), io.StringIO()
    servers = [TestServer(provider.app()), TestServer(build_reference_app(tmp / "ref", redactor=Redactor()))]
    for server in servers:
        await server.start_server()
    provider_url, memory_url = (f"http://127.0.0.1:{s.port}" for s in servers)
    settings = ProxySettings(context_root=tmp / "ctx", history_root=tmp / "hist",
                             openai_base_url=f"{provider_url}/v1", openai_api_key="sk-op",
                             anthropic_base_url=provider_url, anthropic_api_key="sk-ant-op", **shared)
    app = build_app(settings, Telemetry(make_logger(log)))
    servers.append(TestServer(app))
    await servers[-1].start_server()
    async with aiohttp.ClientSession() as session:
        client = Client(session, f"http://127.0.0.1:{servers[-1].port}", agents(settings.context_root, memory_url),
                        app)
        await turns(client, provider)
    print("\n".join(client.out + afterwards(app, settings, provider, log)))
    for server in servers:
        await server.close()


if __name__ == "__main__":
    asyncio.run(main())
