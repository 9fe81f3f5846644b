"""The tiered adapter against a real Redis and a real Mongo-wire server over TCP."""

from __future__ import annotations

import asyncio
import io
import time

import aiohttp
import redis.asyncio as aioredis

from memory_adapters.engine.record import StoredMemory
from memory_adapters.tiered.app import TIERED_SERVICE, build_service, build_tiered_app
from memory_adapters.tiered.consolidate import consolidate
from memplane_core.contract import ForgetRequest, RecallRequest, RetainRequest
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from memplane_cli.runner import free_port
from tests.conftest import url_of


async def api(session, method, url, **kw):
    async with session.request(method, url, **kw) as r:
        return r.status, (await r.json() if r.status != 204 else None)


def entry(eid, user, ts="2026-11-20T10:00:00.000Z", session_id=None):
    e = {"id": eid, "ts": ts, "request_original": {"messages": [{"role": "user", "content": user}]},
         "response": {"format": "json", "json": {"choices": [{"message": {"content": "OK."}}]}}}
    if session_id:
        e["session_id"] = session_id
    return e


async def test_upsert_by_agent_scope_key_updates_instead_of_duplicating(tiered):
    url, service = tiered
    async with aiohttp.ClientSession() as s:
        st, first = await api(s, "POST", url + "/api/memories", json={"agent_id": "a", "key": "editor", "value": "Uses vim"})
        st2, second = await api(s, "POST", url + "/api/memories", json={"agent_id": "a", "key": "editor", "value": "Uses helix now",
                                                                       "importance": 0.9, "type": "preference"})
        assert (st, st2) == (201, 200) and first["id"] == second["id"]
        assert second["value"] == "Uses helix now" and second["importance"] == 0.9
        _, page = await api(s, "GET", url + "/api/memories", params={"agent_id": "a"})
        assert [m["value"] for m in page["memories"]] == ["Uses helix now"]
        _, one = await api(s, "GET", url + f"/api/memories/{first['id']}")
        assert one["type"] == "preference"


async def test_caps_on_both_tiers(aiohttp_server, tiered_settings):
    tiered_settings.ltm_max_entries = 5
    tiered_settings.stm_max_entries = 3
    app = build_tiered_app(tiered_settings, Telemetry(make_logger(io.StringIO())), Redactor())
    server = await aiohttp_server(app)
    service = app[TIERED_SERVICE]
    async with aiohttp.ClientSession() as s:
        for i in range(8):
            await api(s, "POST", url_of(server) + "/api/memories", json={"agent_id": "cap", "key": f"k{i}", "value": f"fact {i}"})
        _, page = await api(s, "GET", url_of(server) + "/api/memories", params={"agent_id": "cap", "limit": 100})
    assert sorted(m["key"] for m in page["memories"]) == ["k3", "k4", "k5", "k6", "k7"]  # oldest removed
    cached = await service.stm.newest("cap")
    assert [m.key for m in cached] == ["k7", "k6", "k5"]
    r = aioredis.Redis.from_url(tiered_settings.redis_url)
    assert await r.zcard(f"{tiered_settings.key_prefix}:stm:cap:ids") == 3
    assert await r.hlen(f"{tiered_settings.key_prefix}:stm:cap:docs") == 3
    await r.aclose()


async def test_ttl_expired_memories_are_never_returned(tiered):
    url, service = tiered
    async with aiohttp.ClientSession() as s:
        await api(s, "POST", url + "/api/memories", json={"agent_id": "t", "key": "promo", "value": "promo code SPRING", "ttl": 1})
        await api(s, "POST", url + "/api/memories", json={"agent_id": "t", "key": "city", "value": "lives in spring valley"})
        await asyncio.sleep(1.2)
        _, recalled = await api(s, "POST", url + "/recall", json={"agent_id": "t", "query": "spring promo code"})
        _, searched = await api(s, "POST", url + "/api/memories/search", json={"agent_id": "t", "query": "spring promo"})
        _, page = await api(s, "GET", url + "/api/memories", params={"agent_id": "t"})
    for found in (recalled["memories"], searched["results"], page["memories"]):
        assert all("promo code" not in (m.get("text") or m.get("value")) for m in found)
    assert len(recalled["memories"]) == 1 and "lives in spring valley" in recalled["memories"][0]["text"]
    assert (await service.stm.newest("t"))  # the expired one may sit in Redis, but it is filtered


async def test_scope_isolation_between_agents_and_sessions(tiered):
    url, _ = tiered
    async with aiohttp.ClientSession() as s:
        await api(s, "POST", url + "/api/memories", json={"agent_id": "alice", "key": "pet", "value": "has a parrot named Kiwi"})
        await api(s, "POST", url + "/api/memories", json={"agent_id": "alice", "scope": "session", "session_id": "s1",
                                                         "key": "draft", "value": "the parrot draft is in progress"})
        await api(s, "POST", url + "/api/memories", json={"agent_id": "bob", "scope": "global", "key": "office",
                                                         "value": "the parrot statue is in the lobby"})
        _, bob = await api(s, "POST", url + "/recall", json={"agent_id": "bob", "query": "parrot"})
        _, s1 = await api(s, "POST", url + "/recall", json={"agent_id": "alice", "query": "parrot", "metadata": {"session_id": "s1"}})
        _, s2 = await api(s, "POST", url + "/recall", json={"agent_id": "alice", "query": "parrot", "metadata": {"session_id": "s2"}})
        _, bob_search = await api(s, "POST", url + "/api/memories/search", json={"agent_id": "bob", "query": "parrot Kiwi"})
    bob_text = "\n".join(m["text"] for m in bob["memories"])
    assert "the parrot statue is in the lobby" in bob_text and "Kiwi" not in bob_text  # only global
    s1_text = "\n".join(m["text"] for m in s1["memories"])
    for said in ("has a parrot named Kiwi", "the parrot draft is in progress", "the parrot statue is in the lobby"):
        assert said in s1_text
    assert "the parrot draft is in progress" not in "\n".join(m["text"] for m in s2["memories"])
    assert all("Kiwi" not in r["value"] for r in bob_search["results"])


async def test_redis_down_falls_back_to_mongo_and_says_so(tiered_settings, aiohttp_server):
    log = io.StringIO()
    tiered_settings.redis_url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    app = build_tiered_app(tiered_settings, Telemetry(make_logger(log)), Redactor())
    server = await aiohttp_server(app)
    async with aiohttp.ClientSession() as s:
        st, _ = await api(s, "POST", url_of(server) + "/api/memories", json={"agent_id": "r", "key": "k", "value": "still works without redis"})
        _, recalled = await api(s, "POST", url_of(server) + "/recall", json={"agent_id": "r", "query": "what still works?"})
        _, health = await api(s, "GET", url_of(server) + "/health")
    assert st == 201 and "still works without redis" in recalled["memories"][0]["text"]
    assert '"stm_unavailable"' in log.getvalue() and health["redis"] is False and health["mongo"] is True


async def test_mongo_down_is_a_clear_503_and_nothing_reaches_redis(tiered_settings, aiohttp_server):
    tiered_settings.mongo_url = f"mongodb://127.0.0.1:{free_port()}/memplane"
    service = build_service(tiered_settings, Telemetry(make_logger(io.StringIO())), Redactor())
    service.ltm.client = type(service.ltm.client)(tiered_settings.mongo_url, serverSelectionTimeoutMS=300)
    db = service.ltm.client.get_default_database()
    service.ltm.memories, service.ltm.retained, service.ltm.tombstones = db["memories"], db["retained_entries"], db["tombstones"]
    app = build_tiered_app(tiered_settings, Telemetry(), Redactor(), service=service)
    app.on_startup.clear()
    server = await aiohttp_server(app)
    async with aiohttp.ClientSession() as s:
        st, body = await api(s, "POST", url_of(server) + "/api/memories", json={"agent_id": "m", "key": "k", "value": "v"})
        async with s.post(url_of(server) + "/retain", json={"agent_id": "m", "entry": entry("hist1_a", "hello there")}) as r:
            st2, retry_after = r.status, r.headers.get("Retry-After")
    assert st == 503 and "MongoDB" in body["error"]["message"] and st2 == 503
    assert retry_after is not None and int(retry_after) >= 1  # delivery waits, then sends again
    assert await service.stm.newest("m") == []


async def test_warm_up_loads_newest_memories_into_redis(tiered_settings):
    service = build_service(tiered_settings, Telemetry(make_logger(io.StringIO())), Redactor())
    await service.ltm.ensure_indexes()
    for i in range(25):
        await service.ltm.upsert(StoredMemory(agent_id="w", scope="agent", key=f"k{i}", value=f"v{i}",
                                        created_at=1000.0 + i, updated_at=1000.0 + i))
    assert await service.stm.newest("w") == []
    loaded = await service.warm_up()
    cached = await service.stm.newest("w")
    assert loaded == 20 and [m.key for m in cached][:3] == ["k24", "k23", "k22"] and len(cached) == 20
    await service.close()


async def test_retain_is_idempotent_and_forget_removes_from_both_tiers(tiered):
    _, service = tiered
    req = RetainRequest(agent_id="f", entry=entry("hist1_x", "Remember that my locker code is 4471."))
    assert await service.retain(req) == "stored"
    assert await service.retain(req) == "duplicate"
    stored = await service.ltm.all_for("f")
    assert {m.type for m in stored} == {"episode", "fact"}
    assert len(stored) == 2 and all(m.source_entry_ids == ["hist1_x"] for m in stored)
    await service.forget(ForgetRequest(agent_id="f", entry_ids=["hist1_x"], reason="asked"))
    assert await service.ltm.all_for("f") == [] and await service.stm.newest("f") == []
    assert await service.retain(req) == "tombstoned"
    assert await service.recall(RecallRequest(agent_id="f", query="locker code")) == []


async def test_search_ranks_relevance_importance_and_filters(tiered):
    url, _ = tiered
    async with aiohttp.ClientSession() as s:
        for key, value, kind, imp in [("db", "Production database is Postgres 16", "fact", 0.9),
                                      ("db-old", "The old database was MySQL", "fact", 0.2),
                                      ("style", "Prefers tabs over spaces", "preference", 0.5),
                                      ("lunch", "Had ramen for lunch", "episode", 0.3)]:
            await api(s, "POST", url + "/api/memories", json={"agent_id": "s", "key": key, "value": value, "type": kind,
                                                             "importance": imp})
        _, res = await api(s, "POST", url + "/api/memories/search", json={"agent_id": "s", "query": "which database do we use"})
        _, only = await api(s, "POST", url + "/api/memories/search", json={"agent_id": "s", "query": "database",
                                                                          "min_importance": 0.5, "type_filter": ["fact"]})
        st, bad = await api(s, "POST", url + "/api/memories/search", json={"agent_id": "s", "query": "x", "top_k": 0})
        st404, _ = await api(s, "GET", url + "/api/memories/mem_nope")
        st_del, _ = await api(s, "DELETE", url + f"/api/memories/{res['results'][0]['id']}")
        st_del2, _ = await api(s, "DELETE", url + f"/api/memories/{res['results'][0]['id']}")
    assert [r["key"] for r in res["results"][:2]] == ["db", "db-old"]
    assert [r["key"] for r in only["results"]] == ["db"]
    assert st == 400 and bad["error"]["field"] == "top_k"
    assert (st404, st_del, st_del2) == (404, 204, 404)


async def test_rest_validation_names_the_field_and_pages_with_cursors(tiered):
    url, _ = tiered
    async with aiohttp.ClientSession() as s:
        st, body = await api(s, "POST", url + "/api/memories", json={"agent_id": "v", "key": "k", "value": "x", "importance": 3})
        assert st == 400 and body["error"]["field"] == "importance"
        st, body = await api(s, "POST", url + "/api/memories", json={"agent_id": "v", "scope": "session", "key": "k", "value": "x"})
        assert st == 400 and "session_id" in body["error"]["message"]
        st, body = await api(s, "POST", url + "/api/memories", json={"agent_id": "v", "key": "k", "value": "x", "type": "gossip"})
        assert st == 400 and body["error"]["field"] == "type"
        for i in range(7):
            await api(s, "POST", url + "/api/memories", json={"agent_id": "v", "key": f"k{i}", "value": f"v{i}"})
        seen, cursor = [], None
        while True:
            params = {"agent_id": "v", "limit": 3, **({"cursor": cursor} if cursor else {})}
            _, page = await api(s, "GET", url + "/api/memories", params=params)
            seen += [m["key"] for m in page["memories"]]
            cursor = page["next_cursor"]
            if not cursor:
                break
        assert sorted(seen) == [f"k{i}" for i in range(7)] and len(seen) == 7


async def test_adapter_token_is_required_when_configured(aiohttp_server, tiered_settings):
    tiered_settings.adapter_token = "adapter-secret-123"
    server = await aiohttp_server(build_tiered_app(tiered_settings, Telemetry(make_logger(io.StringIO())), Redactor()))
    async with aiohttp.ClientSession() as s:
        st, _ = await api(s, "GET", url_of(server) + "/api/memories", params={"agent_id": "x"})
        st2, _ = await api(s, "GET", url_of(server) + "/api/memories", params={"agent_id": "x"},
                           headers={"Authorization": "Bearer adapter-secret-123"})
        st3, _ = await api(s, "GET", url_of(server) + "/.claw-describe.json")
    assert (st, st2, st3) == (401, 200, 200)


async def test_consolidation_merges_a_duplicate_pair_and_prunes_faded(tiered):
    _, service = tiered
    old = time.time() - 60 * 86400
    a, _ = await service.store(StoredMemory(agent_id="c", scope="agent", key="k1", value="The user prefers dark mode in the editor",
                                      type="preference", source_entry_ids=["hist1_a"]))
    b, _ = await service.store(StoredMemory(agent_id="c", scope="agent", key="k2", value="In the editor, the user prefers dark mode.",
                                      type="preference", source_entry_ids=["hist1_b"]))
    for ids in ([a.id, b.id], [a.id, b.id], [b.id]):  # recalled a few times
        await service.ltm.bump_access(ids, time.time())
    await service.store(StoredMemory(agent_id="c", scope="agent", key="k3", value="Likes jazz", type="preference"))
    faded = StoredMemory(agent_id="c", scope="agent", key="k4", value="Mentioned a cloudy morning once", type="episode",
                   importance=0.0, created_at=old, updated_at=old)
    await service.ltm.upsert(faded)
    report = await consolidate(service, ["c"], threshold=0.1)
    assert len(report.merged) == 1 and report.merged[0]["kept"] == b.id and report.merged[0]["merged"] == [a.id]
    assert [p["value"] for p in report.pruned] == ["Mentioned a cloudy morning once"]
    left = {m.key: m for m in await service.ltm.all_for("c")}
    assert set(left) == {"k2", "k3"}
    assert left["k2"].access_count == 5 and left["k2"].source_entry_ids == ["hist1_a", "hist1_b"]
    assert left["k2"].value == "In the editor, the user prefers dark mode."


async def test_whole_loop_through_the_proxy_with_the_tiered_adapter(stack, tiered):
    url, service = tiered
    stack.add_agent("prod", url)
    client = stack.openai("prod")
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "I prefer answers in Portuguese."}])
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "My manager is called Rui Costa."}])
    await stack.settle()
    for _ in range(1200):  # the preference shares no word with the question: only its vector finds it
        if not service.embedding_backlog:
            break
        await asyncio.sleep(0.05)
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Who is my manager?"}])
    block = stack.provider.received[-1].memories_block
    assert "Rui Costa" in block and 'source="tiered"' in block
    first = block.split("<memory ")[1]
    assert "Rui Costa" in first  # the relevant memory ranks first
    assert "preference: I prefer answers in Portuguese." in block  # typed once, not stored twice
    await stack.settle()
    kinds = {m.type for m in await service.ltm.all_for("prod")}
    assert kinds == {"episode", "preference"}


async def test_recalled_memories_get_their_access_counted(tiered):
    _, service = tiered
    stored, _ = await service.store(StoredMemory(agent_id="acc", scope="agent", key="k", value="Prefers oat milk in coffee"))
    for _ in range(3):
        [block] = await service.recall(RecallRequest(agent_id="acc", query="what milk in my coffee"))
        assert block.id == stored.id
    await service.access.flush()  # what the adapter does within FLUSH_EVERY_S, and on shutdown
    fresh = await service.ltm.get(stored.id)
    assert fresh.access_count == 3 and fresh.last_accessed_at is not None


async def test_turns_retained_by_an_earlier_version_are_still_duplicates_after_an_upgrade(tiered_settings,
                                                                                          aiohttp_server):
    """Earlier versions keyed retained marks by a random id; the idempotency check now looks them
    up by (agent, entry), so they are rekeyed at start."""
    from pymongo import MongoClient
    tiered_settings.embeddings = "off"
    with MongoClient(tiered_settings.mongo_url) as client:
        client.get_default_database()["retained_entries"].insert_one(
            {"agent_id": "old", "entry_id": "hist1_before", "ts": 1.0})  # as the old version wrote it
    server = await aiohttp_server(build_tiered_app(tiered_settings, Telemetry(make_logger(io.StringIO())), Redactor()))
    async with aiohttp.ClientSession() as s:
        st, again = await api(s, "POST", url_of(server) + "/retain",
                              json={"agent_id": "old", "entry": entry("hist1_before", "resent after the upgrade")})
        _, fresh = await api(s, "POST", url_of(server) + "/retain",
                             json={"agent_id": "old", "entry": entry("hist1_after", "a new turn")})
    assert st == 202 and again["status"] == "duplicate" and fresh["status"] == "stored"


async def test_a_memory_a_person_stores_is_embedded_by_the_background_thread_and_found_by_meaning(tiered):
    """Storing through the REST API embeds on the backlog's low-priority thread (recalls first), not
    at recall's priority; the memory is stored with its vector and found by meaning at once."""
    import threading

    import pytest
    url, service = tiered
    if service.embedder is None:
        pytest.skip("embeddings are off in this environment")
    real, threads = service.embedder.encoder, []

    class Watched:  # the encoder, noting which thread runs it
        engine, dim = real.engine, real.dim

        def encode(self, texts):
            threads.append(threading.current_thread().name)
            return real.encode(texts)

    service.embedder.encoder = Watched()
    try:
        async with aiohttp.ClientSession() as s:
            st, stored = await api(s, "POST", url + "/api/memories",
                                   json={"agent_id": "m", "key": "pet", "value": "Adopted a grey kitten named Miso"})
            _, found = await api(s, "POST", url + "/api/memories/search",
                                 json={"agent_id": "m", "query": "which cat do I have"})  # no word in common
    finally:
        service.embedder.encoder = real
    assert st == 201 and threads[0].startswith("memplane-embed")  # the store's (the search's query is recall's)
    assert stored["id"] in service.indexes.current("m").vectors.rows
    assert (await service.ltm.get(stored["id"])).embedding is not None
    assert found["results"] and found["results"][0]["id"] == stored["id"]


async def test_a_burst_of_recalls_on_one_replica_shares_its_version_reads_and_sees_the_others_write(
        tiered, aiohttp_server, tiered_settings):
    """Two replicas of the service: a memory stored through one is found by twenty recalls asked at
    once on the other, which learn of the write with far fewer Redis reads than recalls."""
    _, first = tiered
    other_app = build_tiered_app(tiered_settings, Telemetry(make_logger(io.StringIO())), Redactor())
    await aiohttp_server(other_app)
    other = other_app[TIERED_SERVICE]
    await other.recall(RecallRequest(agent_id="burst", query="warm the index"))  # loaded before the write
    stored, _ = await first.store(StoredMemory(agent_id="burst", scope="agent", key="k",
                                               value="The staging database lives in Frankfurt"))
    reads_before = other.versions.reads
    answers = await asyncio.gather(*(other.recall(RecallRequest(agent_id="burst", query="where is the staging database"))
                                     for _ in range(20)))
    assert all([b.id for b in blocks] == [stored.id] for blocks in answers)
    assert other.versions.reads - reads_before < 20
    health = await other.health()
    assert health["version_reads"]["asked"] >= 40  # each recall asks for its agent's and the global version
