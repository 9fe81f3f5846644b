"""Two proxies on one Redis (`--ledger redis`), in one process: what a user notices when a load
balancer sends an agent's calls to either — one ledger, one rate limit, explanations and tool
loops that continue on the other proxy — plus `memplane ledger export` and the tiered replica's
index cache."""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
import orjson
import pytest
from click.testing import CliRunner

from memplane_cli.main import main as cli
from proxy.ledger.files import Ledger, build_entry
from proxy.ledger.redis_streams import RedisLedger


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory):
    """A redis-server of this module's own (the shared test Redis is flushed by other suites' tests)."""
    import shutil
    import subprocess
    import time

    import redis as redis_sync

    from memplane_cli.runner import free_port

    binary = shutil.which("redis-server")
    if not binary:
        pytest.skip("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path_factory.mktemp("redis"))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            redis_sync.Redis(port=port).ping()
            break
        except redis_sync.ConnectionError:
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(10)


@pytest.fixture
async def pair(make_stack, own_redis):
    redis_url = own_redis
    prefix = f"mp{uuid.uuid4().hex[:6]}"
    shared = dict(ledger="redis", redis_url=redis_url, ledger_prefix=prefix, retain_claim_idle_s=2.0)
    a = await make_stack(**shared, rate_limit_per_agent=1.0, rate_limit_burst=3)
    b = await make_stack(**shared, rate_limit_per_agent=1.0, rate_limit_burst=3)
    return a, b, RedisLedger(redis_url, a.history_root, prefix=prefix)


@pytest.fixture
def unlimited(pair):
    """The pair without a rate limit (for the tests that are not about it)."""
    a, b, ledger = pair
    for s in (a, b):
        s.state.rate_limiter.rate = 0.0
    return a, b, ledger


async def _chat(url: str, token: str, body: dict) -> tuple[int, dict, dict]:
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{url}/v1/chat/completions", data=orjson.dumps(body),
                          headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}) as r:
            return r.status, dict(r.headers), orjson.loads(await r.read())


async def _eventually(check, timeout: float = 20.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        got = await check()
        if got or asyncio.get_running_loop().time() > deadline:
            return got
        await asyncio.sleep(0.05)


async def test_turns_through_either_proxy_land_in_one_ledger_and_one_memory(unlimited, reference):
    a, b, ledger = unlimited
    url, store = reference
    token = a.add_agent("alice", url)
    for i, stack in enumerate([a, b, a, b]):
        status, _, _ = await _chat(stack.proxy_url, token, {"model": "m", "messages": [
            {"role": "user", "content": f"note {i}: the launch moved to Thursday"}]})
        assert status == 200
    entries = [ref.entry for ref in ledger.read("alice")]
    assert [e["request_original"]["messages"][0]["content"][:6] for e in entries] == \
        ["note 0", "note 1", "note 2", "note 3"]
    assert all(e["id"].startswith("hist1_") for e in entries)
    nothing_on_disk = not (a.history_root / "alice").exists()
    assert nothing_on_disk  # the ledger is Redis's, not either proxy's disk
    await _eventually(lambda: _all_acknowledged(ledger))
    assert await _all_acknowledged(ledger)


async def _all_acknowledged(ledger: RedisLedger) -> bool:
    for q in ledger.keys.queues():
        for g in ledger.sync.xinfo_groups(q):
            if g["pending"] or (g.get("lag") or 0):
                return False
    return True


async def test_explain_answers_from_the_proxy_that_did_not_serve_the_turn(unlimited, reference):
    a, b, _ = unlimited
    url, _store = reference
    token = a.add_agent("alice", url)
    status, headers, _ = await _chat(a.proxy_url, token, {"model": "m", "messages": [
        {"role": "user", "content": "where is the launch?"}]})
    assert status == 200
    turn_id = headers["X-Memplane-Turn-Id"]

    async def from_b():
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{b.proxy_url}/memplane/turns/{turn_id}") as r:
                return orjson.loads(await r.read()) if r.status == 200 else None
    doc = await _eventually(from_b)
    assert doc and doc["turn_id"] == turn_id and doc["agent_id"] == "alice"
    assert doc["entry_id"].startswith("hist1_")
    assert doc["retain_state"] in {"pending", "pending (being delivered)", "delivered"}


async def test_one_agent_rate_limit_holds_across_both_proxies(pair):
    a, b, _ = pair
    token = a.add_agent("bursty")
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    started = asyncio.get_running_loop().time()
    codes = [(await _chat(s.proxy_url, token, body))[0] for s in [a, b] * 5]
    elapsed = asyncio.get_running_loop().time() - started
    assert set(codes) <= {200, 429}
    # a burst of 3 and 1/s for both proxies together (each alone would allow 3 more)
    assert 3 - 1 <= codes.count(200) <= 3 + elapsed + 1, (codes, elapsed)


async def test_a_tool_loop_started_on_one_proxy_continues_on_the_other_with_the_same_block(unlimited, reference):
    a, b, _ = unlimited
    url, store = reference
    token = a.add_agent("alice", url)
    await _chat(a.proxy_url, token, {"model": "m", "messages": [
        {"role": "user", "content": "Remember: my locker number is 4471."}]})
    await _eventually(lambda: _all_acknowledged(RedisLedger(a.state.settings.redis_url, a.history_root,
                                                            prefix=a.state.settings.ledger_prefix)))
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]
    question = {"role": "user", "content": "What is my locker number?"}
    status, _, first = await _chat(a.proxy_url, token, {"model": "m", "tools": tools, "messages": [question]})
    assert status == 200
    sent_first = a.provider.received[-1].body["messages"]
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]}
    result = {"role": "tool", "tool_call_id": "call_1", "content": "no result"}
    await asyncio.sleep(0.2)  # the first proxy's write-through to Redis
    status, headers, _ = await _chat(b.proxy_url, token, {"model": "m", "tools": tools,
                                                          "messages": [question, call, result]})
    assert status == 200
    sent_next = b.provider.received[-1].body["messages"]
    injected = [m for m in sent_first if "<memories" in str(m.get("content"))]
    assert injected, "the first call got a memory block"
    # the continuation on the other proxy carries the first call's block byte for byte, without a recall of its own
    assert [e["memory_status"] for e in b.events("recall")] == ["skipped"]  # replayed, not recalled
    assert [m for m in sent_next if "<memories" in str(m.get("content"))] == injected


def test_ledger_export_moves_a_file_ledger_into_redis_and_back_unchanged(tmp_path, own_redis):
    redis_url = own_redis
    src = Ledger(tmp_path / "hist")
    for i in range(3):
        src.append_blocking("alice", build_entry(
            agent_id="alice", path="/v1/chat/completions", requested_model="m", provider="openai",
            effective_model="m", status_code=200, stream=False,
            request_original={"model": "m", "messages": [{"role": "user", "content": f"turn {i}"}]},
            request_effective={}, response={"id": f"r{i}"}, usage=None))
    src.close()
    src.add_tombstones("alice", [next(src.read("alice")).entry["id"]], "test")
    prefix = f"mp{uuid.uuid4().hex[:6]}"
    env = {"MEMPLANE_REDIS_URL": redis_url, "MEMPLANE_LEDGER_PREFIX": prefix}
    run = CliRunner().invoke
    out = run(cli, ["ledger", "export", "--from", "file", "--to", "redis", "--history-root", str(tmp_path / "hist")],
              env=env)
    assert out.exit_code == 0, out.output
    again = run(cli, ["ledger", "export", "--from", "file", "--to", "redis", "--history-root", str(tmp_path / "hist")],
                env=env)
    assert "0 entries" in again.output  # run twice: nothing copied twice
    shared = RedisLedger(redis_url, tmp_path, prefix=prefix)
    assert [r.entry for r in shared.read("alice")] == [r.entry for r in Ledger(tmp_path / "hist").read("alice")]
    assert shared.tombstones("alice") == Ledger(tmp_path / "hist").tombstones("alice")
    back = run(cli, ["ledger", "export", "--from", "redis", "--to", "file", "--history-root", str(tmp_path / "back")],
               env=env)
    assert back.exit_code == 0, back.output
    assert (tmp_path / "back/alice/history.jsonl").read_bytes() == (tmp_path / "hist/alice/history.jsonl").read_bytes()


async def test_a_replica_under_an_index_budget_forgets_cold_agents_but_never_their_memories(
        aiohttp_server, tiered_settings):
    import io

    from memory_adapters.engine.record import StoredMemory
    from memory_adapters.tiered.app import TIERED_SERVICE, build_tiered_app
    from memplane_core.redact import Redactor
    from memplane_core.telemetry import Telemetry, make_logger

    tiered_settings.index_cache_mb = 1  # ~250 memories
    tiered_settings.embeddings = "off"
    app = build_tiered_app(tiered_settings, Telemetry(make_logger(io.StringIO())), Redactor())
    await aiohttp_server(app)
    svc = app[TIERED_SERVICE]
    for agent in ("a", "b", "c"):
        for i in range(150):
            await svc.store_memory(StoredMemory(agent_id=agent, scope="agent", key=f"k{i}",
                                                value=f"{agent} fact {i}: the blue door code is {agent}{i}"))
    for agent in ("a", "b", "c"):
        await svc.search(agent, "blue door code", top_k=3)
    cache = svc.indexes._indexes
    assert cache.evictions >= 1 and cache.total <= 1024 * 1024 or len(cache) == 1
    assert "a" not in cache  # the coldest agent's index went
    found = await svc.search("a", "door code a7", top_k=3)  # ... and came back from MongoDB
    assert any("a7" in str(getattr(m, "value", m)) for m in found), found


async def test_forget_and_backfill_read_the_shared_ledger_from_any_machine(unlimited, reference, aiohttp_server,
                                                                          tmp_path, monkeypatch):
    from memory_adapters.reference.app import REFERENCE_STORE, build_reference_app
    from memplane_core.redact import Redactor
    from memplane_core.telemetry import Telemetry
    from proxy.context_store import ContextStore
    from proxy.operator.memory_ops import backfill, forget

    a, b, ledger = unlimited
    ref_url, store = reference
    token = a.add_agent("ops", ref_url)
    for i, stack in enumerate([a, b, a]):
        await _chat(stack.proxy_url, token, {"model": "m", "messages": [
            {"role": "user", "content": ["My PIN hint is birds", "I like chess", "I live in Oslo"][i]}]})
    await _eventually(lambda: _all_acknowledged(ledger))
    entries = [r.entry for r in ledger.read("ops")]
    assert len(entries) == 3 and store.count("ops") == 3
    # an operator on a third machine: no ledger files at all, only the shared Redis
    monkeypatch.setenv("MEMPLANE_LEDGER", "redis")
    monkeypatch.setenv("MEMPLANE_REDIS_URL", a.state.settings.redis_url)
    monkeypatch.setenv("MEMPLANE_LEDGER_PREFIX", a.state.settings.ledger_prefix)
    contexts = ContextStore(a.context_root, Telemetry())
    elsewhere = tmp_path / "no-ledger-here"
    [outcome] = await forget(contexts, elsewhere, "mem-svc", [entries[0]["id"]], "user asked", telemetry=Telemetry())
    assert outcome.remote == "ok" and store.count("ops") == 2
    assert ledger.tombstones("ops") == {entries[0]["id"]}
    fresh_app = build_reference_app(tmp_path / "fresh", redactor=Redactor())
    fresh = await aiohttp_server(fresh_app)
    stats = await backfill(contexts, elsewhere, "mem-svc", url=f"http://{fresh.host}:{fresh.port}/retain",
                           redactor=Redactor(), telemetry=Telemetry())
    assert (stats.sent, stats.skipped_tombstoned, stats.failed) == (2, 1, 0)
    assert fresh_app[REFERENCE_STORE].count("ops") == 2


async def test_two_memory_replicas_recall_each_others_writes_at_once(aiohttp_server, own_redis, mongo_url):
    import io

    from memory_adapters.tiered.app import build_tiered_app
    from memory_adapters.tiered.config import TieredSettings
    from memplane_core.redact import Redactor
    from memplane_core.telemetry import Telemetry, make_logger

    def replica(cache_mb: int):
        settings = TieredSettings(redis_url=own_redis, mongo_url=mongo_url, key_prefix="rep", embeddings="off",
                                  index_cache_mb=cache_mb)
        return build_tiered_app(settings, Telemetry(make_logger(io.StringIO())), Redactor())

    one, two = await aiohttp_server(replica(0)), await aiohttp_server(replica(1))
    urls = [f"http://{s.host}:{s.port}" for s in (one, two)]

    async def recall(s, url, query):
        async with s.post(f"{url}/recall", json={"agent_id": "alice", "query": query}) as r:
            assert r.status == 200
            return " ".join(m["text"] for m in (await r.json())["memories"])

    async with aiohttp.ClientSession() as s:
        assert "Lisbon" not in await recall(s, urls[1], "where does my sister live")  # replica 2 loads alice
        async with s.post(f"{urls[0]}/api/memories", json={"agent_id": "alice", "key": "sister",
                                                            "value": "my sister lives in Lisbon"}) as r:
            assert r.status in (200, 201)
        assert "Lisbon" in await recall(s, urls[1], "where does my sister live")  # written on 1, recalled on 2
        async with s.post(f"{urls[1]}/api/memories", json={"agent_id": "alice", "key": "sister",
                                                            "value": "my sister moved to Porto"}) as r:
            assert r.status in (200, 201)
        said = await recall(s, urls[0], "where does my sister live")
        assert "Porto" in said and "Lisbon" not in said  # and back: 1 sees 2's update at once


async def test_an_anthropic_message_thread_continues_on_the_other_proxy(unlimited, reference):
    a, b, _ = unlimited
    url, _store = reference
    b.tokens["threader"] = a.add_agent("threader", url)
    thread: dict = {"type": "create"}
    for n, (stack, text) in enumerate([(a, "My locker number is 4471."), (b, "And my bike is blue."),
                                       (a, "What is my locker number?")]):
        client = stack.anthropic("threader")
        extra = {"system": "Be brief."} if n == 0 else {}
        reply = await client.beta.messages.create(model="claude-sonnet-4-6", max_tokens=100, **extra,
                                                  messages=[{"role": "user", "content": text}],
                                                  extra_body={"thread": thread}, betas=["message-threads-2026-08-12"])
        thread = {"type": "continue", "previous_message_id": reply.id}
        await asyncio.sleep(0.1)  # the write-through to Redis
    # the third call, on the first proxy again, went upstream as the whole conversation of all three
    sent = a.provider.received[-1].body
    said = orjson.dumps(sent["messages"]).decode()
    assert "4471" in said and "bike is blue" in said and sent.get("system")


async def test_an_undeliverable_entry_goes_to_the_dead_letter_stream_and_backfill_replays_it(
        unlimited, reference, monkeypatch, tmp_path):
    from memplane_core.redact import Redactor
    from memplane_core.telemetry import Telemetry
    from proxy.context_store import ContextStore
    from proxy.operator.memory_ops import backfill

    a, b, ledger = unlimited
    url, store = reference
    token = a.add_agent("lane", url)
    for s in (a, b):  # whichever proxy picks the entry up cannot prepare it (as a body the redactor cannot walk)
        real = s.state.retain.sender._job

        def broken(lane, ctx, manifest, entry, real=real):
            if "poison" in orjson.dumps(entry).decode():
                raise RecursionError("maximum recursion depth exceeded")
            return real(lane, ctx, manifest, entry)
        monkeypatch.setattr(s.state.retain.sender, "_job", broken)
    for text, s in (("first", a), ("poison", b), ("third", a)):
        assert (await _chat(s.proxy_url, token, {"model": "m", "messages": [{"role": "user", "content": text}]}))[0] == 200
    await _eventually(lambda: _all_acknowledged(ledger))
    entries = [r.entry for r in ledger.read("lane")]
    assert store.count("lane") == 2  # the entries after the poisoned one went on
    assert ledger.dead_letters("lane") == {entries[1]["id"]}
    [(_, parked)] = ledger.sync.xrange(ledger.keys.dead())
    assert parked[b"i"].decode() == entries[1]["id"] and b"RecursionError" in parked[b"r"]
    # fixed (here: the replay scrubs as usual), `memplane memory backfill --dead-letters` sends just that one
    monkeypatch.setenv("MEMPLANE_LEDGER", "redis")
    monkeypatch.setenv("MEMPLANE_REDIS_URL", a.state.settings.redis_url)
    monkeypatch.setenv("MEMPLANE_LEDGER_PREFIX", a.state.settings.ledger_prefix)
    stats = await backfill(ContextStore(a.context_root, Telemetry()), tmp_path / "none", "mem-svc",
                           dead_letters=True, redactor=Redactor(), telemetry=Telemetry())
    assert (stats.sent, stats.failed) == (1, 0)
    assert store.count("lane") == 3


async def test_with_redis_away_a_turn_is_refused_clearly_never_answered_unrecorded(make_stack):
    from memplane_cli.runner import free_port

    dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    stack = await make_stack(ledger="redis", redis_url=dead, rate_limit_per_agent=1.0, rate_limit_burst=3)
    token = stack.add_agent("alice")
    status, headers, body = await _chat(stack.proxy_url, token, {"model": "m", "messages": [
        {"role": "user", "content": "hello"}]})
    assert status == 503 and headers.get("Retry-After") == "1"
    assert body["error"]["code"] == "ledger_unavailable" and "ledger" in body["error"]["message"]
    # the rate limit failed open (the warning says so), the ledger did not
    assert any(line.get("event") == "rate_limit_unavailable" for line in stack.log_lines())


async def test_shared_state_writes_each_key_once_with_its_last_value_in_few_round_trips(own_redis):
    """A turn's explanation is recorded, then updated when the ledger has it: Redis gets the last
    version (never an update overwritten by its older record), in batches, not a SET per change."""
    import io

    import redis.asyncio as aredis

    from memplane_core.telemetry import Telemetry, make_logger
    from proxy.scale.shared_state import shared_writer

    client = aredis.Redis.from_url(own_redis)
    writer = shared_writer(client, Telemetry(make_logger(io.StringIO())))
    prefix = f"w{uuid.uuid4().hex[:6]}"
    for turn in range(300):  # 300 turns arriving together, each recorded then updated
        writer.put(f"{prefix}:turn:{turn}", b'{"v": "recorded"}', 60)
    for turn in range(300):
        writer.put(f"{prefix}:turn:{turn}", b'{"v": "updated"}', 60)
    writer.put(f"{prefix}:gone", b"x", 60)
    writer.put(f"{prefix}:gone", None, 60)  # a delete after a set: the key ends up absent
    await writer.drain(10)
    values = await client.mget([f"{prefix}:turn:{t}" for t in range(300)])
    assert values == [b'{"v": "updated"}'] * 300
    assert await client.exists(f"{prefix}:gone") == 0
    assert 0 < await client.ttl(f"{prefix}:turn:7") <= 60
    assert writer.round_trips <= 3  # 301 keys, 256 a round trip
    await client.aclose()


async def test_ledger_appends_arriving_together_share_round_trips_each_still_whole(own_redis, tmp_path):
    """Group commit: 200 turns appended at once all land — each in the ledger and queued under one
    id, in the order they were appended — in a few round trips, not 200; after Redis lost its
    scripts (SCRIPT FLUSH, as after a restart) appends still land."""
    import redis as redis_sync

    ledger = RedisLedger(own_redis, tmp_path, prefix=f"g{uuid.uuid4().hex[:6]}")
    refs = await asyncio.gather(*(ledger.append("many", {"n": n}) for n in range(200)))
    assert ledger._group.round_trips <= 10
    ids = [start for start, end in refs]
    assert len(set(ids)) == 200 and all(start == end for start, end in refs)
    assert [r.entry["n"] for r in ledger.read("many")] == list(range(200))  # arrival order kept
    queued = ledger.sync.xrange(ledger.keys.queue(ledger.keys.shard("many")))
    assert [q.decode() for q, _ in queued] == ids
    redis_sync.Redis.from_url(own_redis).script_flush()
    again = await asyncio.gather(*(ledger.append("many", {"n": n}) for n in range(3)))
    assert ledger.size("many") == 203 and len({s for s, _ in again}) == 3
    await ledger.aio.aclose()
    ledger.close()


async def test_a_memory_off_agents_turns_are_ledgered_not_queued_for_retain(unlimited, reference):
    """The shared ledger queues for retain what the file ledger hands retain: entries of agents
    with a retain endpoint. A memory-off agent's turns are in its ledger (and `explain` says they
    are not retained); nothing is queued for a consumer to read and acknowledge for nothing. An
    agent that retains is queued as ever, its ids still growing after memory-off turns."""
    a, b, ledger = unlimited
    url, store = reference
    off = a.add_agent("quiet")
    on = a.add_agent("noted", url)
    for stack in (a, b, a):
        assert (await _chat(stack.proxy_url, off, {"model": "m", "messages": [
            {"role": "user", "content": "nothing to remember"}]}))[0] == 200
    status, headers, _ = await _chat(b.proxy_url, on, {"model": "m", "messages": [
        {"role": "user", "content": "remember: the launch moved to Thursday"}]})
    assert status == 200
    assert len(list(ledger.read("quiet"))) == 3 and len(list(ledger.read("noted"))) == 1
    # ever added to the retain queues (the consumers delete what they settle): the one retained turn
    assert sum(ledger.sync.xinfo_stream(q)["entries-added"] for q in ledger.keys.queues()) == 1
    await _eventually(lambda: _all_acknowledged(ledger))
    assert await _eventually(lambda: asyncio.sleep(0, store.count("noted") == 1))
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{b.proxy_url}/memplane/turns/{headers['X-Memplane-Turn-Id']}") as r:
            assert (await r.json())["retain_state"] in {"pending", "pending (being delivered)", "delivered"}


async def test_an_agent_retaining_after_memory_off_turns_is_queued_its_ids_growing(own_redis, tmp_path):
    ledger = RedisLedger(own_redis, tmp_path, prefix=f"l{uuid.uuid4().hex[:6]}")  # no consumer reads it
    ids = [(await ledger.append("later", {"n": n}, retain=n >= 2))[0] for n in range(4)]
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-")))) and len(set(ids)) == 4
    queued = ledger.sync.xrange(ledger.keys.queue(ledger.keys.shard("later")))
    assert [fields.get(b"l", qid).decode() for qid, fields in queued] == ids[2:]  # each names its entry
    assert [r.entry["n"] for r in ledger.read("later")] == [0, 1, 2, 3]
    await ledger.aio.aclose()
    ledger.close()
