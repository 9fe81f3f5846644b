"""The reference adapter follows the dedupe contract and survives restarts."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson

from memory_adapters.reference.app import build_reference_app
from memory_adapters.reference.store import ReferenceStore
from memplane_core.contract import RETAIN_BATCH_PATH, RecallRequest
from memplane_core.redact import Redactor
from tests.conftest import url_of


def entry(eid: str, user: str, assistant: str = "OK.", ts: str = "2026-11-20T10:00:00.000Z"):
    return {"id": eid, "ts": ts, "request_original": {"messages": [{"role": "user", "content": user}]},
            "response": {"format": "json", "json": {"choices": [{"message": {"content": assistant}}]}}}


async def call(session, url, path, body):
    async with session.post(url + path, json=body) as r:
        return r.status, (await r.json() if r.status != 204 else None)


async def test_retain_is_idempotent_forget_is_a_tombstone_and_data_survives_restart(aiohttp_server, tmp_path):
    data = tmp_path / "ref"
    server = await aiohttp_server(build_reference_app(data, redactor=Redactor()))
    url = url_of(server)
    async with aiohttp.ClientSession() as s:
        assert (await call(s, url, "/retain", {"agent_id": "a", "entry": entry("hist1_1", "I like jazz")}))[0] == 202
        status, body = await call(s, url, "/retain", {"agent_id": "a", "entry": entry("hist1_1", "I like jazz")})
        assert status == 202 and body["status"] == "duplicate"
        await call(s, url, "/retain", {"agent_id": "a", "entry": entry("hist1_2", "My dog is Rex")})
        assert (await call(s, url, "/forget", {"agent_id": "a", "entry_ids": ["hist1_2"], "reason": "asked"}))[0] == 204
        _, again = await call(s, url, "/retain", {"agent_id": "a", "entry": entry("hist1_2", "My dog is Rex")})
        assert again["status"] == "tombstoned"
        _, recalled = await call(s, url, "/recall", {"agent_id": "a", "messages": [{"role": "user", "content": "dog?"}]})
        assert [m["id"] for m in recalled["memories"]] == ["hist1_1"]
    await server.close()

    server = await aiohttp_server(build_reference_app(data, redactor=Redactor()))
    async with aiohttp.ClientSession() as s:
        _, recalled = await call(s, url_of(server), "/recall", {"agent_id": "a", "query": "jazz"})
    assert [m["text"] for m in recalled["memories"]] == ["User: I like jazz"]
    lines = (data / "a" / "entries.jsonl").read_text().splitlines()
    assert len(lines) == 2  # hist1_1 once, hist1_2 once; duplicates never written


async def test_the_person_s_words_are_theirs_and_a_reply_is_kept_only_for_what_it_states(reference):
    # an assistant's small talk is nobody's memory: it neither matches a question nor takes the
    # block; a reply that names something is kept beside the user's words, labelled as the model's
    url, _ = reference
    async with aiohttp.ClientSession() as s:
        await call(s, url, "/retain", {"agent_id": "p", "entry": entry(
            "hist1_a", "I finally finished the kiln course",
            "That sounds really meaningful. How are you feeling about it now?")})
        await call(s, url, "/retain", {"agent_id": "p", "entry": entry(
            "hist1_b", "What temperature does a kiln reach?", "Kilns fire to about 1,200 degrees.")})
        _, feeling = await call(s, url, "/recall", {"agent_id": "p", "query": "feeling meaningful"})
        _, kiln = await call(s, url, "/recall", {"agent_id": "p", "query": "kiln temperature degrees"})
    by_id = {m["id"]: m for m in kiln["memories"]}
    assert by_id["hist1_a"]["text"] == "User: I finally finished the kiln course"
    assert by_id["hist1_a"]["origin"] == "user"
    assert by_id["hist1_b"]["text"] == "User: What temperature does a kiln reach? | Assistant: Kilns fire to about 1,200 degrees."
    assert by_id["hist1_b"]["origin"] == "user model"
    # the small talk matched nothing: the turn comes back only as one of the newest, never first by its words
    assert all("meaningful" not in m["text"] for m in feeling["memories"])


async def test_recall_prefers_matching_then_recent_and_caps_at_four(reference):
    url, _ = reference
    async with aiohttp.ClientSession() as s:
        for i in range(6):
            await call(s, url, "/retain", {"agent_id": "b", "entry": entry(f"hist1_{i}", f"note {i} about weather",
                                                                          ts=f"2026-11-20T10:00:0{i}.000Z")})
        await call(s, url, "/retain", {"agent_id": "b", "entry": entry("hist1_x", "my violin teacher is Olga",
                                                                      ts="2026-11-19T10:00:00.000Z")})
        _, got = await call(s, url, "/recall", {"agent_id": "b", "query": "who teaches violin"})
    ids = [m["id"] for m in got["memories"]]
    assert ids == ["hist1_x", "hist1_5", "hist1_4", "hist1_3"]
    assert all(len(m["text"]) <= 280 for m in got["memories"])


async def test_concurrent_retains_never_corrupt_the_file(reference, tmp_path):
    url, store = reference
    async with aiohttp.ClientSession() as s:
        await asyncio.gather(*(call(s, url, "/retain", {"agent_id": "c", "entry": entry(f"hist1_{i % 50}", "x" * 500)})
                               for i in range(200)))
    path = store.data_dir / "c" / "entries.jsonl"
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert len(rows) == 50 and len({r["id"] for r in rows}) == 50


async def test_bad_bodies_get_400_naming_the_field(reference):
    url, _ = reference
    async with aiohttp.ClientSession() as s:
        status, body = await call(s, url, "/retain", {"agent_id": "a", "entry": {"no": "id"}})
        assert status == 400 and body["error"]["field"] == "entry.id"  # the field it lacks
        status, body = await call(s, url, "/recall", {"agent_id": "../etc"})
        assert status == 400 and body["error"]["field"] == "agent_id"
        async with s.get(url + "/.claw-describe.json") as r:
            assert (await r.json())["memory"]["recall"] == {"path": "/recall"}


async def test_proxy_retains_each_ledger_id_once_even_when_sent_twice(stack, reference):
    ref_url, store = reference
    stack.add_agent("twice", ref_url)
    await stack.openai("twice").chat.completions.create(model="m", messages=[{"role": "user", "content": "I am left-handed."}])
    await stack.settle()
    [entry_line] = stack.ledger("twice")
    from proxy.memory_service import MemoryService
    ctx = stack.state.contexts.get("twice")
    assert await MemoryService.of(stack.state.session, ctx.memory, "twice", "test-pod").retain({}, entry_line) == 202
    assert store.count("twice") == 1


def _ranked_as_defined(store, agent_id: str, query: str, limit: int = 4) -> list[str]:
    """Recall's order as the module docstring defines it, written the plain way: most shared words
    among each word's newest 256 memories, ties to the newest (by stamp, then the later stored:
    the memories' stored order), then the most recent memories."""
    import itertools

    from memory_adapters.reference.store import COMMON_WORD_MIN_RECORDS, POSTINGS_SCANNED, tokens
    agent = store._agents[agent_id]
    newest = {eid: i for i, eid in enumerate(agent.order)}
    assert [agent.records[e]["ts"] for e in agent.order] == sorted(agent.records[e]["ts"] for e in agent.order)
    common = len(agent.records) // 2 if len(agent.records) >= COMMON_WORD_MIN_RECORDS else len(agent.records)
    overlap: dict[str, int] = {}
    for w in tokens(query):
        ids = agent.postings.get(w, {})
        if len(ids) > common:
            continue
        for eid in itertools.islice(reversed(ids), POSTINGS_SCANNED):
            overlap[eid] = overlap.get(eid, 0) + 1
    best = sorted(overlap, key=lambda e: (overlap[e], newest[e]), reverse=True)[:limit]
    return best + [eid for eid in reversed(agent.order) if eid not in best][:limit - len(best)]


async def test_recall_ranks_by_shared_words_then_newest_over_a_random_store(tmp_path):
    """Stamps out of order and repeated, words shared by hundreds of memories, forgotten ones, a
    restart: recall answers what the definition answers, memory for memory."""
    import random

    from memplane_core.contract import ForgetRequest, RetainRequest
    rng = random.Random(7)
    vocab = [f"word{i}" for i in range(40)]
    store = ReferenceStore(tmp_path, Redactor())
    for i in range(1500):
        said = " ".join(rng.choice(vocab[:8] if rng.random() < 0.5 else vocab) for _ in range(6))
        ts = f"2026-11-{1 + rng.randrange(20):02d}T10:00:{rng.randrange(3):02d}.000Z"  # many equal stamps
        req = RetainRequest.model_validate({"agent_id": "r", "entry": entry(f"hist1_{i}", said, ts=ts)})
        assert await store.retain(req) == "stored"
    await store.forget(ForgetRequest(agent_id="r", entry_ids=[f"hist1_{i}" for i in range(0, 1500, 7)], reason="t"))
    for current in (store, ReferenceStore(tmp_path, Redactor())):
        for _ in range(200):
            query = " ".join(rng.sample(vocab, rng.randrange(1, 5)))
            got = await current.recall(RecallRequest(agent_id="r", query=query))
            assert [m.id for m in got] == _ranked_as_defined(current, "r", query), query


async def test_a_batch_is_stored_as_its_items_would_be_one_by_one(reference, tmp_path):
    """One call of many entries: each gets the outcome it would get alone, in order, and what is
    stored is on disk once, after a restart too."""
    url, store = reference
    tool_step = entry("hist1_tool", "run the tests")
    tool_step["response"] = {"format": "json", "json": {"choices": [{"message": {"tool_calls": [{"id": "c1"}]}}]}}
    async with aiohttp.ClientSession() as s:
        await call(s, url, "/retain", {"agent_id": "d", "entry": entry("hist1_gone", "forget this one")})
        await call(s, url, "/forget", {"agent_id": "d", "entry_ids": ["hist1_gone"], "reason": "asked"})
        items = [entry("hist1_a", "my cat is Tom"), entry("hist1_gone", "forget this one"), tool_step,
                 entry("hist1_b", "my sister is Ana"), entry("hist1_a", "my cat is Tom"), entry("hist1_c", "   ")]
        async with s.post(url + RETAIN_BATCH_PATH, json={"agent_id": "d", "items": [{"entry": e} for e in items]}) as r:
            results = (await r.json())["results"]
    # hist1_c: no words of the user's and a reply ("OK.") that states nothing: nothing to remember
    assert [x["status"] for x in results] == ["stored", "tombstoned", "empty", "stored", "duplicate", "empty"]
    lines = (store.data_dir / "d" / "entries.jsonl").read_text().splitlines()
    assert [orjson.loads(line)["id"] for line in lines] == ["hist1_gone", "hist1_a", "hist1_b"]
    again = ReferenceStore(store.data_dir, Redactor())
    got = await again.recall(RecallRequest(agent_id="d", query="cat sister"))
    assert {m.id for m in got} == {"hist1_a", "hist1_b"}  # the tombstoned one never comes back
