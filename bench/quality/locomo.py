"""`make bench-quality`: LoCoMo's development conversations through the real proxy, scored as the
acceptance protocol scores them (../shared/datasets/locomo-dev/README.md).

Every dialogue turn is one chat completion through the proxy whose only message is
`[<session date time>] <Speaker>: <text>` (` [shares <caption>]` when an image was shared); all
conversations are fed at once, one agent each, as fast as the proxy answers. The provider replies
to each turn as an ordinary chat assistant would (`--replies assistant`, the default: the speaker's
name, the message's topic said back, a generic remark or tip in new words, often a question back),
with the held-out replier written apart from the engine (`assistant-b`, report it first), with
bare small talk (`small-talk`), or with the published protocol's bare "OK." (`ok`). When every turn is
retained, each question (categories 1-4) is asked in a fresh conversation, and it counts when
every evidence turn has >= 60 % of its content words inside one `<memory>` element of the block
the provider received. A plain BM25 over the raw turns (top 8) is scored beside it. Skipped with
a message when the data set is absent. Nothing here knows the conversations' names or topics.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import io
import json
import math
import os
import re
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import aiohttp
import orjson

from manifests.agents import memory_manifest, write_agent
from memplane_core.contract import RETAIN_BATCH_PATH
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from proxy.app import STATE, build_app
from proxy.config import ProxySettings
from memplane_cli.runner import Site, start_site
from proxy.testing.fake_provider import FakeProvider
from proxy.testing.fake_provider.repliers import REPLIERS, body_replier, reply_to

from ..harness import mongo, redis_url, table, write_results

DATASET = Path(os.environ.get("LOCOMO_DIR", Path(__file__).resolve().parents[3] / "shared/datasets/locomo-dev"))
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
STOP = frozenset(
    "a about above after again against all am an and any are aren't as at be because been before being below "
    "between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each "
    "few for from further had hadn't has hasn't have haven't having he he'd he'll he's her here here's hers herself "
    "him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself let's me more most "
    "mustn't my myself no nor not of off on once only or other ought our ours ourselves out over own same shan't "
    "she she'd she'll she's should shouldn't so some such than that that's the their theirs them themselves then "
    "there there's these they they'd they'll they're they've this those through to too under until up very was "
    "wasn't we we'd we'll we're we've were weren't what what's when when's where where's which while who who's "
    "whom why why's with won't would wouldn't you you'd you'll you're you've your yours yourself yourselves".split())
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
_MEMORY = re.compile(r"<memory\b[^>]*>(.*?)</memory>", re.S)


# What the provider answers each fed turn: ordinary small talk by default, as every real conversation
# has replies beside the person's words (fake_provider/repliers.py: how each replier answers),
# or the published protocol's bare "OK." for comparison.
REPLIES = tuple(REPLIERS)


def protocol_reply(message: str, replies: str = "assistant") -> str:
    """The provider's answer to one fed turn under `replies` (one of REPLIES)."""
    return reply_to(replies, message)


def content_words(text: str) -> set[str]:
    words = [w for w in _WORD.findall(text.lower()) if len(w) >= 3]
    if len(words) < 4:
        return set(words)
    return {w for w in words if w not in STOP}


def evidence_found(turn_text: str, elements: list[str]) -> bool:
    need = content_words(turn_text)
    if not need:
        return True
    return any(len(need & set(_WORD.findall(e))) >= 0.6 * len(need) for e in elements)


def memory_elements(block: str | None) -> list[str]:
    return [html.unescape(m).lower() for m in _MEMORY.findall(block or "")]


def load(directory: Path) -> list[dict]:
    convs = []
    for path in sorted(directory.glob("conversation_*.json")):
        doc = json.loads(path.read_text())
        turns, n = [], 1
        while f"session_{n}_date_time" in doc:
            date = doc[f"session_{n}_date_time"]
            for t in doc.get(f"session_{n}") or []:
                message = f"[{date}] {t['speaker']}: {t['text']}"
                if t.get("blip_caption"):
                    message += f" [shares {t['blip_caption']}]"
                turns.append({"id": t["dia_id"], "text": t["text"], "message": message})
            n += 1
        questions = [q for q in doc.get("qa", []) if q.get("category") in CATEGORIES]
        convs.append({"name": path.stem, "turns": turns, "questions": questions})
    return convs


def scores(results: list[tuple[int, bool]]) -> dict[str, float]:
    per: dict[str, list[bool]] = defaultdict(list)
    for category, ok in results:
        per[CATEGORIES[category]].append(ok)
        per["all"].append(ok)
    return {k: round(sum(v) / len(v), 3) for k, v in per.items()}


def bm25_baseline(convs: list[dict], k: int = 8) -> dict[str, float]:
    """Plain BM25 (k1 1.2, b 0.75) over the raw turn messages; the top `k` turns, each its own element."""
    tok = re.compile(r"[a-z0-9]+")
    results = []
    for conv in convs:
        docs = [tok.findall(t["message"].lower()) for t in conv["turns"]]
        n, avg = len(docs), sum(map(len, docs)) / max(1, len(docs))
        df = Counter(w for d in docs for w in set(d))
        tfs = [Counter(d) for d in docs]
        by_id = {t["id"]: t for t in conv["turns"]}
        for q in conv["questions"]:
            qs = set(tok.findall(q["question"].lower()))
            ranked = sorted(range(n), key=lambda i: -sum(
                math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5)) * tfs[i][w] * 2.2 /
                (tfs[i][w] + 1.2 * (0.25 + 0.75 * len(docs[i]) / avg)) for w in qs if tfs[i][w]))[:k]
            elements = [conv["turns"][i]["message"].lower() for i in ranked]
            ok = all(evidence_found(by_id[e]["text"], elements) for e in q["evidence"] if e in by_id)
            results.append((q["category"], ok))
    return scores(results)


async def feed_conversations(ask, convs: list[dict]) -> float:
    """Each conversation's turns in order, the conversations side by side (one agent each, as the
    protocol feeds them); `ask(agent, text)` sends one turn. Returns the seconds it took."""
    async def feed(conv: dict) -> None:
        for t in conv["turns"]:
            await ask(conv["name"], t["message"])

    started = time.perf_counter()
    await asyncio.gather(*(feed(c) for c in convs))
    return time.perf_counter() - started

async def replay(convs: list[dict], adapter_app, tmp: Path, label: str, *, batch: bool,
                 replies: str = "assistant") -> dict:
    provider = FakeProvider(reply=body_replier(replies))
    log = io.StringIO()
    prov_runner, prov_port = await start_site(Site(provider.app(), "127.0.0.1", 0))
    ad_runner, ad_port = await start_site(Site(adapter_app, "127.0.0.1", 0))
    settings = ProxySettings(context_root=tmp / label / "ctx", history_root=tmp / label / "hist",
                             openai_base_url=f"http://127.0.0.1:{prov_port}/v1", openai_api_key="sk-quality")
    app = build_app(settings, Telemetry(make_logger(log)))
    px_runner, px_port = await start_site(Site(app, "127.0.0.1", 0))
    tokens = {c["name"]: write_agent(settings.context_root, c["name"], memory=memory_manifest(
        label, f"http://127.0.0.1:{ad_port}", retain_batch_path=RETAIN_BATCH_PATH if batch else None))[0]
        for c in convs}
    url = f"http://127.0.0.1:{px_port}/v1/chat/completions"
    results: list[tuple[int, bool]] = []
    misses: list[dict] = []
    try:
        async with aiohttp.ClientSession() as http:
            async def ask(name: str, text: str) -> None:
                headers = {"Authorization": f"Bearer {tokens[name]}"}
                body = {"model": "locomo", "messages": [{"role": "user", "content": text}]}
                async with http.post(url, json=body, headers=headers) as r:
                    assert r.status == 200, await r.text()
                    await r.read()

            started = time.perf_counter()
            fed_s = await feed_conversations(ask, convs)
            state = app[STATE]
            await state.settle(timeout=900)
            while not state.retain.caught_up():
                await asyncio.sleep(0.1)
            retained_s = time.perf_counter() - started
            health = {}
            async with http.get(f"http://127.0.0.1:{ad_port}/health") as r:
                health = await r.json()
            while health.get("embedding_backlog"):  # embedded: let the vectors catch up before asking
                await asyncio.sleep(0.5)
                async with http.get(f"http://127.0.0.1:{ad_port}/health") as r:
                    health = await r.json()
            indexed_s = time.perf_counter() - started
            mark = len(log.getvalue())
            for conv in convs:
                by_id = {t["id"]: t for t in conv["turns"]}
                for q in conv["questions"]:
                    await ask(conv["name"], q["question"])
                    elements = memory_elements(provider.received[-1].memories_block)
                    ok = all(evidence_found(by_id[e]["text"], elements) for e in q["evidence"] if e in by_id)
                    results.append((q["category"], ok))
                    if not ok and len(misses) < 50:
                        misses.append({"question": q["question"], "evidence": q["evidence"],
                                       "block": provider.received[-1].memories_block})
        recalls = [orjson.loads(line) for line in log.getvalue()[mark:].splitlines() if '"memory_op":"recall"' in line]
    finally:
        for r in (px_runner, ad_runner, prov_runner):
            await r.cleanup()
    lat = sorted(r["latency_ms"] for r in recalls)
    turns = sum(len(c["turns"]) for c in convs)
    return {"scores": scores(results), "turns": turns, "fed_s": round(fed_s, 1), "retained_s": round(retained_s, 1),
            "indexed_s": round(indexed_s, 1), "turns_per_s": round(turns / retained_s, 1),
            "recall_p50_ms": lat[len(lat) // 2] if lat else None,
            "recall_p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else None,
            "recalls_unanswered": sum(r["memory_status"] != "succeeded" for r in recalls),
            "rankings": dict(Counter(str(r.get("ranking")) for r in recalls)),  # which ranking answered
            "policy_removed": sum(int(r.get("memory_removed") or 0) for r in recalls), "misses": misses}


async def main_async(args) -> dict | None:
    if not DATASET.is_dir() or not any(DATASET.glob("conversation_*.json")):
        print(f"LoCoMo quality skipped: no data set at {DATASET} (set LOCOMO_DIR)")
        return None
    convs = load(DATASET)
    tmp = Path(tempfile.mkdtemp(prefix="memplane-locomo-"))
    rows: dict[str, dict] = {}
    quiet = Telemetry(make_logger(io.StringIO()))
    if "embedded" in args.adapters:
        from memory_adapters.embedded.app import build_embedded_app
        from memory_adapters.embedded.config import EmbeddedSettings  # MEMPLANE_EMBEDDINGS=off etc. apply
        rows["embedded"] = await replay(convs, build_embedded_app(tmp / "embedded", redactor=Redactor(),
                                                                  telemetry=quiet, settings=EmbeddedSettings.from_env()),
                                            tmp, "embedded", batch=True, replies=args.replies)
    if "reference" in args.adapters:
        from memory_adapters.reference.app import build_reference_app
        rows["reference"] = await replay(convs, build_reference_app(tmp / "reference", redactor=Redactor()), tmp,
                                         "reference", batch=True, replies=args.replies)
    if "tiered" in args.adapters:
        rurl = redis_url()
        with mongo(tmp) as murl:
            if rurl and murl:
                import redis as redis_sync

                from memory_adapters.tiered.app import build_tiered_app
                from memory_adapters.tiered.config import TieredSettings
                redis_sync.Redis.from_url(rurl).flushdb()
                settings = TieredSettings.from_env(redis_url=rurl, mongo_url=murl.rsplit("/", 1)[0] + "/locomo")
                rows["tiered"] = await replay(convs, build_tiered_app(settings, quiet, Redactor()), tmp, "tiered", batch=False,
                                         replies=args.replies)
            else:
                print("tiered skipped: no Redis or Mongo-wire server")
    rows["baseline: BM25 top 8 over raw turns"] = {"scores": bm25_baseline(convs)}
    cats = [*CATEGORIES.values(), "all"]
    print(table(["adapter", *cats, "turns/s", "recall p50 ms", "recall p99 ms"],
                [[name, *[r["scores"].get(c) for c in cats], r.get("turns_per_s"), r.get("recall_p50_ms"),
                  r.get("recall_p99_ms")] for name, r in rows.items()]))
    for name, r in rows.items():
        if r.get("rankings"):
            print(f"{name}: questions answered by {', '.join(f'{k} {v}' for k, v in sorted(r['rankings'].items()))}")
    path = write_results("locomo", {"dataset": str(DATASET), "conversations": [c["name"] for c in convs],
                                    "replies": args.replies, "rows": rows})
    print(f"LoCoMo dev ({len(convs)} conversations, {sum(len(c['questions']) for c in convs)} questions, "
          f"provider replies: {args.replies}): "
          f"share of questions with all evidence in one <memory> element each ({path.name})")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--adapters", default=os.environ.get("QUALITY_ADAPTERS", "embedded,reference,tiered"))
    p.add_argument("--replies", choices=REPLIES, default="assistant",
                   help='what the provider answers each fed turn (fake_provider/repliers.py): an ordinary chat '
                        'assistant\'s replies (assistant, the default), the held-out assistant-b, small-talk, or "OK."')
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
