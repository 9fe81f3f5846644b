"""Prompt caching through memplane: cached tokens per turn, per placement, with and without memory.

    python -m bench.prompt_cache [--json]

Three turns of one conversation with a long system prompt, run through memplane against the fake
provider, whose prompt-cache simulation follows the documented rules (Anthropic: explicit
`cache_control` breakpoints, the client's sliding breakpoint on its newest message; OpenAI:
automatic prefix caching from 1024 tokens in 128-token steps). "no memory" is the same
conversation for an agent without a memory service: the cache the provider would keep without
memplane's block. Tokens are the simulation's deterministic estimate (chars / 4).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
from aiohttp.test_utils import TestServer

SYSTEM = ("You are the support assistant of a bicycle repair shop. Answer briefly and precisely, cite the "
          "workshop manual where it applies, never invent prices, and ask before booking anything. ") * 24
QUESTIONS = [
    "My rear derailleur skips under load on the two smallest cogs after I replaced the chain last week. "
    "The cable looks fine and the hanger was aligned at the shop in spring. " * 12,
    "Thanks. While you are at it: the front brake squeals when it is wet, only for the first few stops, "
    "and the pads are about half worn. Is that the rotor or the pads? " * 12,
    "Last one: can you remind me which tyre pressure I said I prefer for gravel rides, and whether the "
    "tubeless sealant needs topping up before a long trip next month? " * 12,
]
FACT = "Remember: for gravel rides I prefer 2.1 bar in front and 2.3 bar at the back."
APIS = ("anthropic", "openai", "responses", "responses_stored")
PLACEMENTS = {"anthropic": ("system", "latest", "search_results", "trailing", None),
              "openai": ("system", "latest", "trailing", None),
              "responses": ("system", "latest", "trailing", None),
              "responses_stored": ("system", "latest", "trailing", None)}


async def measure(api: str, placement: str | None, memory: bool, root: Path) -> dict[str, Any]:
    """Cached input tokens the provider reports on each of three turns (`cached`), and whether
    the last turn's prompt carried the remembered fact (`remembered`). `placement=None` is the
    default a new agent gets."""
    from manifests.agents import memory_manifest, write_agent
    from memory_adapters.reference.app import build_reference_app
    from memplane_core.redact import Redactor
    from memplane_core.telemetry import Telemetry, make_logger
    from proxy.app import STATE, build_app
    from proxy.config import ProxySettings
    from proxy.testing.fake_provider import FakeProvider

    provider = FakeProvider()
    servers = [TestServer(provider.app()),
               TestServer(build_reference_app(root / "memory", redactor=Redactor()))]
    for s in servers:
        await s.start_server()
    provider_url, memory_url = (f"http://{s.host}:{s.port}" for s in servers)
    settings = ProxySettings(context_root=root / "context", history_root=root / "history",
                             openai_base_url=f"{provider_url}/v1", openai_api_key="sk-operator",
                             anthropic_base_url=provider_url, anthropic_api_key="sk-ant-operator")
    app = build_app(settings, Telemetry(make_logger(io.StringIO())))
    proxy = TestServer(app)
    await proxy.start_server()
    servers.append(proxy)
    try:
        manifest = None
        if memory:
            manifest = memory_manifest("mem-svc", memory_url)
            if placement:
                manifest["placement"] = placement
        token, _ = write_agent(settings.context_root, "cyclist", memory=manifest)
        base = f"http://{proxy.host}:{proxy.port}"
        if memory:
            await _chat(base, token, [{"role": "user", "content": FACT}])
            await app[STATE].settle(30)
        cached = []
        history: list[dict[str, Any]] = []
        for question in QUESTIONS:
            answer, hit = await TURN[api](base, token, history, question)
            history += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
            cached.append(hit)
            await app[STATE].settle(30)
        last = orjson.dumps(provider.received[-1].body).decode()
        return {"cached": cached, "remembered": "2.1 bar" in last}
    finally:
        for s in reversed(servers):
            await s.close()


async def _chat(base: str, token: str, messages: list[dict[str, Any]]) -> Any:
    from openai import AsyncOpenAI
    client = AsyncOpenAI(base_url=f"{base}/v1", api_key=token, max_retries=0)
    try:
        return await client.chat.completions.create(model="gpt-4o", messages=messages)
    finally:
        await client.close()


async def _anthropic_turn(base: str, token: str, history: list[dict[str, Any]], question: str) -> tuple[str, int]:
    """The sliding breakpoint of Anthropic's prompt-caching docs: one on the system prompt, one on
    the newest user message, moved forward every turn."""
    from anthropic import AsyncAnthropic
    eph = {"type": "ephemeral"}
    client = AsyncAnthropic(base_url=base, api_key=token, max_retries=0)
    try:
        reply = await client.messages.create(
            model="claude-sonnet-4-6", max_tokens=512,
            system=[{"type": "text", "text": SYSTEM, "cache_control": eph}],
            messages=[*history, {"role": "user", "content": [{"type": "text", "text": question,
                                                               "cache_control": eph}]}])
    finally:
        await client.close()
    text = "".join(b.text for b in reply.content if b.type == "text")
    return text, reply.usage.cache_read_input_tokens or 0


async def _openai_turn(base: str, token: str, history: list[dict[str, Any]], question: str) -> tuple[str, int]:
    reply = await _chat(base, token, [{"role": "system", "content": SYSTEM}, *history,
                                      {"role": "user", "content": question}])
    return reply.choices[0].message.content, reply.usage.prompt_tokens_details.cached_tokens


async def _responses_turn(base: str, token: str, history: list[dict[str, Any]], question: str, *,
                          store: bool = False) -> tuple[str, int]:
    """The client resends its history; `store: false` (responses) or the API's default, stored
    (responses_stored)."""
    from openai import AsyncOpenAI
    client = AsyncOpenAI(base_url=f"{base}/v1", api_key=token, max_retries=0)
    try:
        response = await client.responses.create(model="gpt-5", instructions=SYSTEM,
                                                 **({} if store else {"store": False}),
                                                 input=[*history, {"role": "user", "content": question}])
    finally:
        await client.close()
    return response.output_text, response.usage.input_tokens_details.cached_tokens


async def _responses_stored_turn(base: str, token: str, history: list[dict[str, Any]],
                                 question: str) -> tuple[str, int]:
    return await _responses_turn(base, token, history, question, store=True)


TURN = {"anthropic": _anthropic_turn, "openai": _openai_turn, "responses": _responses_turn,
        "responses_stored": _responses_stored_turn}


async def table() -> list[dict[str, Any]]:
    rows = []
    for api in APIS:
        with tempfile.TemporaryDirectory() as tmp:
            rows.append({"api": api, "placement": "no memory", **await measure(api, None, False, Path(tmp))})
        for placement in PLACEMENTS[api]:
            with tempfile.TemporaryDirectory() as tmp:
                rows.append({"api": api, "placement": placement or "default",
                             **await measure(api, placement, True, Path(tmp))})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    rows = asyncio.run(table())
    if args.json:
        sys.stdout.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    print("| API | placement | turn 1 | turn 2 | turn 3 | turns 2+3 vs no memory | fact in turn 3 |")
    print("|---|---|---:|---:|---:|---:|---|")
    base: dict[str, int] = {}
    for row in rows:
        t = row["cached"]
        if row["placement"] == "no memory":
            base[row["api"]] = t[1] + t[2]
        share = (t[1] + t[2]) / base[row["api"]] if base.get(row["api"]) else 0.0
        fact = "yes" if row["remembered"] else "no"
        print(f"| {row['api']} | {row['placement']} | {t[0]} | {t[1]} | {t[2]} | {share:.0%} | {fact} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
