"""`make bench-quality`: replay generated conversations through the real proxy into each adapter,
ask every question in a fresh conversation, and score the `<memories>` block the provider got.

Everything goes through the real path: each user turn is a chat completion through the proxy
(aiohttp client, fake provider on loopback), retained by the adapter; each question is a new
conversation; the score is read from what the provider received. Baselines (newest 8 turns,
8 random turns) are scored in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import random
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

from manifests.agents import memory_manifest, write_agent
from memplane_core.contract import RETAIN_BATCH_PATH
from memplane_core.telemetry import Telemetry, make_logger
from proxy.app import STATE, build_app
from proxy.config import ProxySettings
from proxy.runner import Site, start_site
from proxy.testing.fake_provider import FakeProvider

from ..harness import fmt, mongo, redis_url, table, write_results
from .generator import CATEGORIES, Conversation, generate
from .scoring import baseline_newest, baseline_random, score


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


async def replay(convs: list[Conversation], adapter_app, tmp: Path, label: str, parallel: int = 10) -> dict:
    provider = FakeProvider()
    log = io.StringIO()
    runners = []
    prov_runner, prov_port = await start_site(Site(provider.app(), "127.0.0.1", 0))
    ad_runner, ad_port = await start_site(Site(adapter_app, "127.0.0.1", 0))
    settings = ProxySettings(context_root=tmp / label / "ctx", history_root=tmp / label / "hist",
                             openai_base_url=f"http://127.0.0.1:{prov_port}/v1", openai_api_key="sk-quality")
    app = build_app(settings, Telemetry(make_logger(log)))
    px_runner, px_port = await start_site(Site(app, "127.0.0.1", 0))
    runners = [px_runner, ad_runner, prov_runner]
    tokens = {c.id: write_agent(settings.context_root, c.id, memory=memory_manifest(
        label, f"http://127.0.0.1:{ad_port}", retain_batch_path=RETAIN_BATCH_PATH if label == "reference" else None))[0]
              for c in convs}
    url = f"http://127.0.0.1:{px_port}/v1/chat/completions"
    started = time.perf_counter()
    try:
        async with aiohttp.ClientSession() as http:
            async def post(conv_id: str, messages: list, session_id: str) -> None:
                headers = {"Authorization": f"Bearer {tokens[conv_id]}", "X-Session-Id": session_id}
                async with http.post(url, json={"model": "quality", "messages": messages}, headers=headers) as r:
                    assert r.status == 200, await r.text()
                    await r.read()

            async def play(conv: Conversation) -> None:
                for s in conv.sessions:
                    history = [{"role": "system", "content": f"Today is {s.date}."}]
                    for turn in s.turns:
                        history.append({"role": "user", "content": turn.text})
                        await post(conv.id, history, f"{conv.id}-s{s.index}")
                        history.append({"role": "assistant", "content": "Noted."})

            sem = asyncio.Semaphore(parallel)

            async def bounded(conv):
                async with sem:
                    await play(conv)
            await asyncio.gather(*(bounded(c) for c in convs))
            state = app[STATE]
            await state.settle(timeout=600)
            deadline = time.monotonic() + 900
            while not state.retain.caught_up() and time.monotonic() < deadline:
                await asyncio.sleep(0.2)  # lanes backing off after a refused retain retry on their own
            ingest_s = time.perf_counter() - started
            failures = [orjson.loads(line) for line in log.getvalue().splitlines()
                        if '"memory_op":"retain"' in line and '"failed"' in line]
            if failures:
                print(f"{label}: {len(failures)} retain attempts failed during ingest (retried), first: "
                      f"{failures[0].get('error')}")
            mark = len(log.getvalue())
            results = []
            for conv in convs:
                last = conv.sessions[-1].date
                for q in conv.questions:
                    messages = [{"role": "system", "content": f"Today is {last}."}, {"role": "user", "content": q.text}]
                    await post(conv.id, messages, f"{conv.id}-q")
                    results.append((q, provider.received[-1].memories_block))
        recalls = [orjson.loads(line) for line in log.getvalue()[mark:].splitlines() if '"memory_op":"recall"' in line]
        lat = [r["latency_ms"] for r in recalls]
        unanswered = [r for r in recalls if r["memory_status"] != "succeeded"]
        if unanswered:  # a question whose recall failed or timed out gets no block: say so, it is not ranking
            print(f"{label}: {len(unanswered)} of {len(recalls)} question recalls got no answer in time, first: "
                  f"{unanswered[0]['memory_status']} after {unanswered[0]['latency_ms']} ms")
    finally:
        for r in runners:
            await r.cleanup()
    from .scoring import answered
    misses = [{"question": q.text, "category": q.category, "needles": q.needles, "block": (b or "")[:3000]}
              for q, b in results if not answered(b, q)]
    return {"scores": score(results), "recall_p50_ms": pct(lat, 50), "recall_p99_ms": pct(lat, 99),
            "ingest_s": round(ingest_s, 1), "turns": sum(len(c.turns()) for c in convs), "misses": misses,
            "recalls_unanswered": len(unanswered)}


def baselines(convs: list[Conversation]) -> dict[str, dict]:
    rng = random.Random(1)
    newest = [(q, baseline_newest(c)) for c in convs for q in c.questions]
    rand = [(q, baseline_random(c, rng)) for c in convs for q in c.questions]
    return {"baseline: newest 8 turns": {"scores": score(newest)}, "baseline: 8 random turns": {"scores": score(rand)}}


async def main_async(args) -> dict:
    convs = generate(seed=args.seed, conversations=args.conversations, sessions=args.sessions)
    tmp = Path(tempfile.mkdtemp(prefix="memplane-quality-"))
    rows: dict[str, dict] = {}
    notes = []
    if "reference" in args.adapters:
        from memory_adapters.reference.app import build_reference_app
        rows["reference"] = await replay(convs, build_reference_app(tmp / "ref-data"), tmp, "reference")
    variants = [("tiered", None)]
    if args.ablation:
        variants = [("tiered: lexical only", "lexical"),
                    ("tiered: + embeddings", "lexical,embeddings"),
                    ("tiered: + importance", "lexical,embeddings,importance"),
                    ("tiered: + dates", "lexical,embeddings,importance,dates"),
                    ("tiered: + expansion (all)", "lexical,embeddings,importance,dates,expansion")]
    for n, (label, ranking) in enumerate(variants if "tiered" in args.adapters else []):
        rurl = redis_url()
        with mongo(tmp) as murl:
            if not (rurl and murl):
                notes.append("tiered skipped: no Redis or Mongo-wire server")
            else:
                import redis as redis_sync

                from memory_adapters.tiered.app import build_tiered_app
                from memory_adapters.tiered.config import TieredSettings
                redis_sync.Redis.from_url(rurl).flushdb()
                db_url = murl.rsplit("/", 1)[0] + f"/quality_{n}"  # each variant starts empty
                settings = TieredSettings.from_env(redis_url=rurl, mongo_url=db_url, ltm_max_entries=0)
                settings.ltm_max_entries = 0  # keep every memory: the questions reach back weeks
                if ranking:
                    settings.ranking = ranking
                rows[label] = await replay(convs, build_tiered_app(settings, Telemetry(make_logger(io.StringIO()))),
                                           tmp, f"tiered-{n}")
    rows.update(baselines(convs))
    heads = ["adapter", *CATEGORIES, "all", "recall_p50_ms", "recall_p99_ms"]
    print(table(heads, [[name, *[r["scores"][c] for c in (*CATEGORIES, "all")], r.get("recall_p50_ms"),
                         r.get("recall_p99_ms")] for name, r in rows.items()]))
    for n in notes:
        print(n)
    path = write_results("quality", {"seed": args.seed, "conversations": args.conversations, "rows": rows,
                                     "notes": notes})
    summary = " | ".join(f"{name} {fmt(r['scores']['all'])}" for name, r in rows.items())
    print(f"quality (share of questions with all evidence injected): {summary} ({path.name})")
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--conversations", type=int, default=int(os.environ.get("QUALITY_CONVERSATIONS", 10)))
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--adapters", default="reference,tiered")
    p.add_argument("--ablation", action="store_true", help="tiered with each ranking component added in turn")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
