"""The LoCoMo protocol on a busy machine: does every question still get its memories in time?

    python -m bench.busy [--adapters embedded,tiered] [--burners 0,1,2] [--in-flight 8]
                         [--idle-c1] [--questions N] [--ask-when retained|embedded] [--agents N] [--replies NAME]

Each part runs as its own process, as users run them: the proxy (`bench.servers memplane`), the
memory service (`bench.servers embedded|tiered`), and this process, which holds the fake provider
(it answers "OK." and keeps what it received, to score the block) and plays the agents. For every
burner count, `burner.py` keeps that many cores busy for the whole run (feed and questions); the
three dev conversations are fed through the proxy at once as fast as it answers, and once every
turn is retained (by default not waiting for the vectors: users do not) each question is asked
in a fresh conversation, `--in-flight` at a time. Reported: questions without memories (recall
not in time, or nothing), recall p50/p99 as the proxy measured it (`X-Memplane-Recall`), which
ranking answered (the turn's explanation), how long the embedding backlog took to catch up after
the feed, and the acceptance scoring per category and per conversation. `--idle-c1` adds a row:
no burner, one question at a time (the p50 ≤ 5 ms target). Load average is printed with each row:
the machine is shared, so compare rows of one run.

`--agents 10` runs the acceptance protocol's scale (ten agents, ~6,000 turns, ~1,300 questions):
the three dev conversations are fed again as further agents. Each copy's messages end in a
different number of zero-width spaces: the encoder and the word ranking see the same text, but no
agent is served from the query-vector cache another agent filled, as distinct conversations are not.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp

from manifests.agents import memory_manifest, write_agent
from memplane_core.contract import RETAIN_BATCH_PATH
from memplane_cli.runner import Site, start_site
from proxy.testing.fake_provider import FakeProvider
from proxy.testing.fake_provider.repliers import REPLIERS, body_replier

from .burner import burners, load_average
from .harness import PIDS, cpu_seconds, mongo, redis_url, role, table, write_results
from .quality.locomo import CATEGORIES, DATASET, evidence_found, feed_conversations, load, memory_elements, scores

_RECALL = re.compile(r"^(\w+); blocks=(\d+); removed=\d+; latency_ms=([\d.]+)")


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(len(values) * q))], 1)


async def metric(http: aiohttp.ClientSession, url: str, name: str) -> float:
    async with http.get(url + "/metrics") as r:
        text = await r.text()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def as_agents(convs: list[dict], n: int) -> list[dict]:
    """`n` agents from the dev conversations: the first len(convs) as they are, then copies
    (`conversation_26-2`, ...) whose messages (after their `[stamp] `) and questions start with k
    U+0001 characters: other texts to the query cache, as ten different conversations are, yet the
    same words to BM25 and the same tokens to MiniLM (its normalizer drops control characters).
    Zero-width spaces at the end, the earlier mark, are dropped by the engine as invisible, which
    let the copies share the originals' cached vectors; a visible mark changed the copies' vectors."""
    out = list(convs)
    for k in range(len(convs), max(n, len(convs))):
        conv, copy = convs[k % len(convs)], k // len(convs) + 1
        mark = "\u0001" * copy
        out.append({**conv, "name": f"{conv['name']}-{copy}",
                    "turns": [{**t, "message": t["message"].replace("] ", "] " + mark, 1)} for t in conv["turns"]],
                    "questions": [{**q, "question": mark + q["question"]} for q in conv["questions"]]})
    return out


async def run_one(convs: list[dict], adapter: str, adapter_args: list[str], n_burners: int, in_flight: int,
                  ask_when: str, tmp: Path, questions_limit: int | None, replies: str = "ok",
                  store_pids: tuple[int, ...] = (), batch: bool = False) -> dict:
    provider = FakeProvider(reply=body_replier(replies))
    prov_runner, prov_port = await start_site(Site(provider.app(), "127.0.0.1", 0))
    label = f"{adapter}-b{n_burners}-c{in_flight}"
    ctx, hist = tmp / label / "ctx", tmp / label / "hist"
    try:
        with burners(n_burners), role(adapter, *adapter_args) as ad_port, \
                role("memplane", "--upstream", f"http://127.0.0.1:{prov_port}/v1", "--context-root", str(ctx),
                     "--history-root", str(hist)) as px_port:
            ad_url, px_url = f"http://127.0.0.1:{ad_port}", f"http://127.0.0.1:{px_port}"
            tokens = {c["name"]: write_agent(ctx, c["name"], memory=memory_manifest(
                adapter, ad_url, retain_batch_path=RETAIN_BATCH_PATH if adapter == "embedded" or batch else None))[0]
                for c in convs}
            # the memory service, and the store it runs on (tiered: the Mongo-wire server)
            return await drive(convs, provider, px_url, ad_url, tokens, in_flight, ask_when, questions_limit,
                               lambda: (cpu_seconds([PIDS[ad_port]]), cpu_seconds(list(store_pids))))
    finally:
        await prov_runner.cleanup()


def _quarters(values: list[float]) -> list[list[float]]:
    n = len(values)
    return [values[i * n // 4:(i + 1) * n // 4] for i in range(4)] if n >= 4 else []


async def drive(convs, provider, px_url, ad_url, tokens, in_flight, ask_when, questions_limit, service_cpu) -> dict:
    url = px_url + "/v1/chat/completions"
    turns = sum(len(c["turns"]) for c in convs)
    load_samples: list[str] = [load_average()]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        async def ask(name: str, text: str, user: str | None = None) -> aiohttp.typedefs.CIMultiDictProxy:
            body = {"model": "locomo", "messages": [{"role": "user", "content": text}]}
            if user:
                body["user"] = user  # how this process finds the request the provider received
            async with http.post(url, json=body, headers={"Authorization": f"Bearer {tokens[name]}"}) as r:
                assert r.status == 200, await r.text()
                await r.read()
                return r.headers

        cpu0 = service_cpu()
        started = time.perf_counter()
        fed_s = await feed_conversations(ask, convs)
        fed_at = time.perf_counter()  # the feed's end: the lag the target speaks of counts from here
        while (await metric(http, px_url, 'memplane_memory_ops_total{op="retain",status="succeeded"}') < turns
               or await metric(http, px_url, "memplane_retain_backlog_entries") > 0):
            await asyncio.sleep(0.2)
        retained_s = time.perf_counter() - started
        shed = await metric(http, ad_url, 'memplane_adapter_retains_total{outcome="busy"}')  # 503 + Retry-After
        cpu_fed = service_cpu()

        async def backlog() -> int:
            async with http.get(ad_url + "/health") as r:
                return int((await r.json()).get("embedding_backlog") or 0)

        async with http.get(ad_url + "/health") as r:  # how the turns got their vectors so far
            got = await r.json()
            backlog_at_retained = int(got.get("embedding_backlog") or 0)
            vectors_at_retained = {k: got.get(k) for k in ("embedded", "embedded_from_queries")}
        caught_up: list[float] = []

        async def watch_backlog() -> None:
            while await backlog():
                await asyncio.sleep(0.1)
            caught_up.append(time.perf_counter() - started)

        watcher = asyncio.create_task(watch_backlog())
        if ask_when == "embedded":
            await watcher
        load_samples.append(load_average())
        async with http.get(ad_url + "/health") as r:
            got = await r.json()
            before = {**(got.get("recall_scheduling") or {}), **{
                "encoder_" + k: v for k, v in (got.get("query_encoder") or {}).items()},
                **{"gc_" + k: v for k, v in (got.get("gc") or {}).items()}}
        slots = asyncio.Semaphore(in_flight)
        asked: list[tuple[dict, dict, str, object]] = []

        async def question(conv: dict, i: int, q: dict) -> None:
            async with slots:
                user = f"q-{conv['name']}-{i}"
                headers = await ask(conv["name"], q["question"], user)
                asked.append((conv, q, user, headers))

        todo = [(c, i, q) for c in convs for i, q in enumerate(c["questions"][:questions_limit])]
        todo.sort(key=lambda t: (t[1], t[0]["name"]))  # conversations interleaved, as agents ask at once
        q_started = time.perf_counter()
        await asyncio.gather(*(question(c, i, q) for c, i, q in todo))
        asked_s = time.perf_counter() - q_started
        cpu_asked = service_cpu()
        load_samples.append(load_average())
        async with http.get(ad_url + "/health") as r:  # where the service's recall time went
            got = await r.json()
            index_loads = got.get("index_loads")  # tiered: agents loaded from MongoDB, reloads included
            retain_groups = got.get("retain_groups")  # tiered: writes made for the retain calls
            access_counts = got.get("access_counts")  # tiered: recalled memories counted / written to MongoDB
            after = {**(got.get("recall_scheduling") or {}), **{
                "encoder_" + k: v for k, v in (got.get("query_encoder") or {}).items()},
                **{"gc_" + k: v for k, v in (got.get("gc") or {}).items()}}
        scheduling = {k: round(v - before.get(k, 0), 3) for k, v in after.items()}  # the questions' own
        rankings: Counter = Counter()
        ranking_latency: dict[str, list[float]] = {}
        for _, _, _, headers in asked:  # the turn's explanation says which ranking answered
            async with http.get(f"{px_url}/memplane/turns/{headers['X-Memplane-Turn-Id']}") as r:
                doc = await r.json() if r.status == 200 else {"ranking": "(explanation no longer kept)"}
            ranking = doc.get("ranking") or doc.get("recall", {}).get("status", "?")
            rankings[ranking] += 1
            ranking_latency.setdefault(ranking, []).append(float(doc.get("recall", {}).get("latency_ms") or 0))
        try:
            await asyncio.wait_for(watcher, 900)
        except asyncio.TimeoutError:
            pass
    by_user = {}
    for rec in provider.received:
        if isinstance(rec.body, dict) and isinstance(rec.body.get("user"), str):
            by_user[rec.body["user"]] = rec
    results, per_conv, latencies, without = [], {}, [], 0
    statuses: Counter = Counter()
    for conv, q, user, headers in asked:
        m = _RECALL.match(headers.get("X-Memplane-Recall", ""))
        status, blocks, latency = (m.group(1), int(m.group(2)), float(m.group(3))) if m else ("?", 0, None)
        statuses[status] += 1
        if latency is not None:
            latencies.append(latency)
        if status not in ("succeeded", "degraded") or not blocks:  # degraded: a lesser ranking, memories injected
            without += 1
        by_id = {t["id"]: t for t in conv["turns"]}
        elements = memory_elements(by_user[user].memories_block if user in by_user else None)
        ok = all(evidence_found(by_id[e]["text"], elements) for e in q["evidence"] if e in by_id)
        results.append((q["category"], ok))
        per_conv.setdefault(conv["name"], []).append((q["category"], ok))
    return {"turns": turns, "questions": len(asked), "without_memories": without, "statuses": dict(statuses),
            "rankings": dict(rankings),
            "latency_by_ranking_p50_p99": {k: [pct(v, 0.5), pct(v, 0.99)] for k, v in ranking_latency.items()},
            "recall_p50_ms": pct(latencies, 0.5), "recall_p99_ms": pct(latencies, 0.99),
            # in the order the answers came: is the tail the phase's start (cold indexes, the feed's
            # background work still running) or spread over it?
            "recall_p50_p99_by_quarter": [[pct(q, 0.5), pct(q, 0.99)] for q in _quarters(latencies)],
            "fed_s": round(fed_s, 1), "retained_s": round(retained_s, 1), "asked_s": round(asked_s, 1),
            "backlog_at_retained": backlog_at_retained, "vectors_at_retained": vectors_at_retained,
            "feed_scheduling": before,  # the feed's recalls (the service's counters when it ended)
            "backlog_caught_up_s": round(caught_up[0] - retained_s, 1) if caught_up else None,
            # seconds from the feed's end until every turn was retained (acknowledged: stored and
            # searchable by its words) and until every one was also embedded (found by meaning too)
            "retained_after_feed_s": round(started + retained_s - fed_at, 1),
            "indexed_after_feed_s": round(started + caught_up[0] - fed_at, 1) if caught_up else None,
            "index_loads": index_loads, "retain_calls_shed": int(shed),
            # CPU of the memory service (and, for tiered, its Mongo-wire server) a fed turn (feed,
            # its recalls and retains, until all retained) and a question: robust where wall time is not
            "service_cpu_ms_per_turn": round(1000 * (cpu_fed[0] - cpu0[0]) / max(turns, 1), 2),
            "service_cpu_ms_per_question": round(1000 * (cpu_asked[0] - cpu_fed[0]) / max(len(asked), 1), 2),
            "store_cpu_ms_per_turn": round(1000 * (cpu_fed[1] - cpu0[1]) / max(turns, 1), 2),
            "store_cpu_ms_per_question": round(1000 * (cpu_asked[1] - cpu_fed[1]) / max(len(asked), 1), 2),
            "retain_groups": retain_groups, "access_counts": access_counts,
            "recall_scheduling": scheduling, "scores": scores(results), "per_conversation": {k: scores(v)["all"] for k, v in per_conv.items()},
            "load_average": load_samples}


def _nx_pid(run_dir: Path) -> tuple[int, ...]:
    """The Mongo-wire server bench.harness.mongo started for this run, if it did."""
    try:
        return (int((run_dir / "nx.pid").read_text().split()[0]),)
    except (OSError, ValueError, IndexError):
        return ()


async def main_async(args) -> None:
    if not DATASET.is_dir() or not any(DATASET.glob("conversation_*.json")):
        print(f"busy bench skipped: no data set at {DATASET} (set LOCOMO_DIR)")
        return
    convs = as_agents(load(DATASET), args.agents)
    tmp = Path(tempfile.mkdtemp(prefix="memplane-busy-"))
    plan = [(b, args.in_flight) for b in args.burners]
    if args.idle_c1:
        plan.insert(0, (0, 1))
    rows: dict[str, dict] = {}
    for adapter in args.adapters:
        for n_burners, in_flight in plan:
            name = f"{adapter}, {n_burners} busy, {in_flight} in flight"
            run_dir = tmp / f"{adapter}-{n_burners}-{in_flight}"
            run_dir.mkdir(parents=True, exist_ok=True)
            if adapter == "embedded":
                rows[name] = await run_one(convs, adapter, ["--data-dir", str(run_dir / "data")], n_burners,
                                           in_flight, args.ask_when, tmp, args.questions, args.replies)
            else:
                rurl = redis_url()
                with mongo(run_dir) as murl:
                    if not (rurl and murl):
                        print("tiered skipped: no Redis or Mongo-wire server")
                        continue
                    import redis as redis_sync
                    redis_sync.Redis.from_url(rurl).flushdb()
                    rows[name] = await run_one(convs, adapter, ["--redis-url", rurl, "--mongo-url",
                                                                murl.rsplit("/", 1)[0] + "/busy"],
                                               n_burners, in_flight, args.ask_when, tmp, args.questions, args.replies,
                                               store_pids=_nx_pid(run_dir), batch=args.tiered_batch)
            r = rows[name]
            print(f"{name}: {r['without_memories']}/{r['questions']} without memories, p50 {r['recall_p50_ms']} "
                  f"p99 {r['recall_p99_ms']} ms, all {r['scores'].get('all')}, fed in {r['fed_s']} s, retained "
                  f"+{r['retained_after_feed_s']} s, indexed +{r['indexed_after_feed_s']} s, index loads "
                  f"{r['index_loads']}, retain calls shed {r['retain_calls_shed']}, retain groups {r['retain_groups']}, "
                  f"access counts {r['access_counts']}, "
                  f"CPU ms a fed turn / a question: service {r['service_cpu_ms_per_turn']} / {r['service_cpu_ms_per_question']}, "
                  f"store {r['store_cpu_ms_per_turn']} / {r['store_cpu_ms_per_question']}, "
                  f"load {r['load_average']}; "
                  f"service {r['recall_scheduling']}", flush=True)
    cats = [*CATEGORIES.values(), "all"]
    print(table(["run", "no memories", "p50 ms", "p99 ms", *cats, "per conversation", "fed s", "retained +s",
                 "indexed +s", "backlog s", "rankings"],
                [[name, f"{r['without_memories']}/{r['questions']}", r["recall_p50_ms"], r["recall_p99_ms"],
                  *[r["scores"].get(c) for c in cats], " ".join(f"{v:.2f}" for v in r["per_conversation"].values()),
                  r["fed_s"], r["retained_after_feed_s"], r["indexed_after_feed_s"],
                  r["backlog_caught_up_s"], ", ".join(f"{k} {v}" for k, v in sorted(r["rankings"].items()))]
                 for name, r in rows.items()]))
    path = write_results("busy", {"args": vars(args), "rows": rows})
    print(f"LoCoMo dev on a busy machine ({path.name}); 'retained +s' / 'indexed +s': seconds after the feed's "
          f"end until every turn was retained / also embedded (searchable by meaning); 'backlog s': embedding "
          f"caught up this long after every turn was retained")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--adapters", type=lambda s: s.split(","), default=["embedded", "tiered"])
    p.add_argument("--burners", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2])
    p.add_argument("--in-flight", type=int, default=8)
    p.add_argument("--idle-c1", action="store_true", help="add a run with no burner and one question at a time")
    p.add_argument("--questions", type=int, default=None, help="at most this many questions per conversation")
    p.add_argument("--ask-when", choices=["retained", "embedded"], default="retained")
    p.add_argument("--replies", choices=tuple(REPLIERS), default="ok",
                   help="how the provider answers each fed turn (fake_provider/repliers.py)")
    p.add_argument("--tiered-batch", action="store_true",
                   help="tiered gets the batch endpoint its descriptor offers, as a compiled pod does (default: "
                        "one retain call a turn, as `memplane agent add --memory-url` and earlier runs)")
    p.add_argument("--agents", type=int, default=3, help="agents fed at once (10: the acceptance protocol's scale)")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
