"""What the optional LLM curator costs: model calls and tokens per 1,000 turns on the LoCoMo dev
set, with the default thresholds (every ~45 messages or ~1,000 tokens, ≥ 4 messages apart), and
what it costs the retain path (none: retain only counts; ratio to a curator-off run of the same
turns in the same process).

The model is `proxy.testing.fake_curator_llm` answering fixed-size answers (a ~30-word summary
and one ~30-word fact per call) over real HTTP on loopback, so the numbers are the curator's own
prompt sizes and call counts, not a model's verbosity. Embeddings are off: they do not change
what the curator sends.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import tempfile
import time
from pathlib import Path

import aiohttp

from memory_adapters.embedded.app import EMBEDDED_SERVICE, build_embedded_app
from memory_adapters.engine.curator import CuratorSettings
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from proxy.runner import Site, start_site
from proxy.testing.fake_curator_llm import FakeCuratorLLM

from .harness import QUICK, table, write_results
from .quality.locomo import DATASET, load

BATCH = 16  # turns per retain call, like the proxy's retain lane batches


def entry(turn: dict) -> dict:
    return {"id": turn["id"], "ts": "2026-11-20T10:00:00.000Z", "session_id": "locomo",
            "request_original": {"messages": [{"role": "user", "content": turn["message"]}]},
            "response": {"format": "json", "json": {"choices": [{"message": {"content": "OK."}}]}}}


async def feed(convs: list[dict], tmp: Path, curator: CuratorSettings | None, label: str) -> dict:
    app = build_embedded_app(tmp / label, redactor=Redactor(), telemetry=Telemetry(make_logger(io.StringIO())),
                             embeddings="off", curator=curator)
    runner, port = await start_site(Site(app, "127.0.0.1", 0))
    service = app[EMBEDDED_SERVICE]
    url = f"http://127.0.0.1:{port}"
    retain_s = 0.0
    turns = 0
    try:
        async with aiohttp.ClientSession() as http:
            for conv in convs:
                items = [{"entry": entry(t)} for t in conv["turns"]]
                for i in range(0, len(items), BATCH):
                    started = time.perf_counter()
                    async with http.post(url + "/retain/batch", json={"agent_id": conv["name"],
                                                                      "items": items[i:i + BATCH]}) as r:
                        assert r.status == 200, await r.text()
                        await r.read()
                    retain_s += time.perf_counter() - started
                    turns += len(items[i:i + BATCH])
                    if service.curator is not None:  # the worker's tick, between batches
                        await service.curator.run_once()
            usage = None
            if service.curator is not None:
                for conv in convs:  # one consolidation per agent at the end (the default runs every 10 min)
                    await service.curator.consolidate(conv["name"])
                async with http.get(url + "/curator/usage") as r:
                    usage = await r.json()
    finally:
        await runner.cleanup()
    return {"turns": turns, "retain_s": retain_s, "usage": usage}


async def main_async(args) -> dict:
    convs = load(Path(args.dataset))
    if QUICK:
        convs = convs[:1]
    fake = FakeCuratorLLM()
    llm_runner, llm_port = await start_site(Site(fake.app(), "127.0.0.1", 0))
    settings = CuratorSettings.from_env({}, base_url=f"http://127.0.0.1:{llm_port}/v1", model="fixed-size",
                                        api_key="sk-bench", interval_s=3600)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            off = await feed(convs, Path(tmp), None, "off")
            on = await feed(convs, Path(tmp), settings, "on")
    finally:
        await llm_runner.cleanup()
    turns = on["turns"]
    per_k = 1000 / turns
    kinds = {"extract": 0, "consolidate": 0}
    for body in fake.requests:
        kinds["extract" if body["response_format"]["json_schema"]["name"] == "memplane_extraction"
              else "consolidate"] += 1
    agents = on["usage"]["agents"]
    prompt = sum(a["prompt_tokens_total"] for a in agents.values())
    completion = sum(a["completion_tokens_total"] for a in agents.values())
    rows = [["extraction calls", kinds["extract"], round(kinds["extract"] * per_k, 1)],
            ["consolidation calls", kinds["consolidate"], round(kinds["consolidate"] * per_k, 1)],
            ["prompt tokens", prompt, round(prompt * per_k)],
            ["completion tokens", completion, round(completion * per_k)],
            ["tokens (all)", prompt + completion, round((prompt + completion) * per_k)]]
    print(table(["", f"total ({turns} turns, {len(convs)} agents)", "per 1,000 turns"], rows))
    ratio = on["retain_s"] / off["retain_s"] if off["retain_s"] else None
    print(f"retain time with the curator on / off (same turns, same run): {ratio:.2f} "
          f"({on['retain_s']:.2f} s / {off['retain_s']:.2f} s; the curator's calls are between batches, not in them)")
    doc = {"turns": turns, "agents": len(convs), "calls": kinds, "prompt_tokens": prompt,
           "completion_tokens": completion, "per_1000_turns": {r[0]: r[2] for r in rows},
           "retain_ratio_on_off": ratio, "settings": {"every_messages": settings.every_messages,
                                                      "every_tokens": settings.every_tokens,
                                                      "min_messages": settings.min_messages}}
    path = write_results("curator_cost", doc)
    print(f"curator: {doc['per_1000_turns']['extraction calls']} extraction calls and "
          f"{doc['per_1000_turns']['tokens (all)']} tokens per 1,000 turns; results {path}")
    return doc


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default=str(DATASET))
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
