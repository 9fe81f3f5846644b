"""The embedded memory service: the contract's dedupe rules, restart from its SQLite file, the
REST API's ownership rules (shared with tiered), and a conversation remembered turn by turn."""

from __future__ import annotations

import asyncio
import io
import os
import stat

import aiohttp
import pytest

from memory_adapters.embedded.app import EMBEDDED_SERVICE, build_embedded_app
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from tests.conftest import url_of


def entry(eid: str, user: str, ts: str = "2026-11-20T10:00:00.000Z", assistant: str = "OK."):
    return {"id": eid, "ts": ts, "request_original": {"messages": [{"role": "user", "content": user}]},
            "response": {"format": "json", "json": {"choices": [{"message": {"content": assistant}}]}}}


def embedded_app(data, **kw):
    return build_embedded_app(data, redactor=Redactor(), telemetry=Telemetry(make_logger(io.StringIO())),
                              embeddings="off", **kw)


async def call(s, url, path, body, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with s.post(url + path, json=body, headers=headers) as r:
        return r.status, (await r.json() if r.status != 204 else None)


async def test_retain_is_idempotent_forget_wins_and_memories_survive_a_restart(aiohttp_server, tmp_path):
    data = tmp_path / "mem"
    server = await aiohttp_server(embedded_app(data))
    url = url_of(server)
    async with aiohttp.ClientSession() as s:
        assert (await call(s, url, "/retain", {"agent_id": "a", "entry": entry("hist1_1", "I play jazz piano")}))[1][
            "status"] == "stored"
        assert (await call(s, url, "/retain", {"agent_id": "a", "entry": entry("hist1_1", "I play jazz piano")}))[1][
            "status"] == "duplicate"
        await call(s, url, "/retain", {"agent_id": "a", "entry": entry("hist1_2", "My dog is called Rex")})
        assert (await call(s, url, "/forget", {"agent_id": "a", "entry_ids": ["hist1_2"], "reason": "asked"}))[0] == 204
        _, again = await call(s, url, "/retain", {"agent_id": "a", "entry": entry("hist1_2", "My dog is called Rex")})
        assert again["status"] == "tombstoned"
        _, got = await call(s, url, "/recall", {"agent_id": "a", "query": "what is my dog called?"})
        assert "Rex" not in str(got)
    await server.close()

    server = await aiohttp_server(embedded_app(data))  # the index is rebuilt from the SQLite file
    async with aiohttp.ClientSession() as s:
        _, got = await call(s, url_of(server), "/recall", {"agent_id": "a", "query": "which instrument do I play?"})
        _, other = await call(s, url_of(server), "/recall", {"agent_id": "b", "query": "which instrument do I play?"})
    assert "jazz piano" in got["memories"][0]["text"]
    assert other["memories"] == []  # agents never see each other's memories
    db = data / "memory.sqlite3"
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o600 and stat.S_IMODE(os.stat(data).st_mode) == 0o700


async def test_a_long_conversation_is_recalled_with_the_turns_around_the_hit(aiohttp_server, tmp_path):
    server = await aiohttp_server(embedded_app(tmp_path / "mem"))
    url = url_of(server)
    filler = ["We watched a film about whales.", "The bakery on the corner closed.", "Traffic was awful again.",
              "I repainted the fence blue.", "My sister visited for lunch."]
    turns = []
    for day in range(1, 21):
        for i, text in enumerate(filler):
            turns.append(f"[10:0{i} am on {day} March, 2024] Sam: {text} (day {day})")
        if day == 12:
            turns += ["[11:00 am on 12 March, 2024] Kim: Where did you end up going for the conference?",
                      "[11:01 am on 12 March, 2024] Sam: Oslo! The talks on glaciers were amazing."]
    items = [{"entry": entry(f"hist1_{n}", t, ts=f"2026-11-20T10:{n // 60:02d}:{n % 60:02d}.000Z")}
             for n, t in enumerate(turns)]
    async with aiohttp.ClientSession() as s:
        for i in range(0, len(items), 32):
            status, body = await call(s, url, "/retain/batch", {"agent_id": "sam", "items": items[i:i + 32]})
            assert status == 200 and {r["status"] for r in body["results"]} == {"stored"}
        _, got = await call(s, url, "/recall", {"agent_id": "sam", "query": "Which conference did Sam go to?",
                                                "budget_tokens": 200, "max_blocks": 2})
    texts = [m["text"] for m in got["memories"]]
    assert 1 <= len(texts) <= 2 and sum((len(t) + 3) // 4 for t in texts) <= 200
    block = next(t for t in texts if "conference" in t)
    # the answer is the turn after the question: it comes along, under the date the turn was said
    assert "Oslo! The talks on glaciers were amazing." in block and "[11:00 am on 12 March, 2024]" in block


async def test_a_busy_agent_is_retained_in_batches_and_secrets_are_not_stored(aiohttp_server, tmp_path):
    server = await aiohttp_server(embedded_app(tmp_path / "mem"))
    url = url_of(server)
    secret = "AKIAIOSFODNN7EXAMPLE"
    async with aiohttp.ClientSession() as s:
        batch = [{"entry": entry(f"hist1_{i}", f"deploy note {i}: key {secret}")} for i in range(40)]
        batch.append({"entry": {"no": "id"}})
        status, body = await call(s, url, "/retain/batch", {"agent_id": "ops", "items": batch})
    assert status == 200
    codes = [r["code"] for r in body["results"]]
    assert codes.count(202) == 40 and codes[-1] == 400  # one bad item is refused alone
    service = server.app[EMBEDDED_SERVICE]
    assert await service.store.count("ops") == 40
    raw = (tmp_path / "mem" / "memory.sqlite3").read_bytes()
    assert secret.encode() not in raw


@pytest.fixture(params=["embedded", "tiered"])
async def rest_service(request, aiohttp_server, tmp_path):
    """The same REST API over both stores, with an admin token and two agents (bob may write global)."""
    tokens = {"alice": "alice-token", "bob": {"token": "bob-token", "grants": ["global"]}}
    if request.param == "embedded":
        from memory_adapters.http.auth import AgentToken
        app = embedded_app(tmp_path / "mem", token="admin-token",
                           agent_tokens={"alice": AgentToken("alice-token"),
                                         "bob": AgentToken("bob-token", frozenset({"global"}))})
    else:
        from memory_adapters.http.auth import AgentToken
        from memory_adapters.tiered.app import build_tiered_app
        settings = request.getfixturevalue("tiered_settings")
        settings.adapter_token = "admin-token"
        settings.agent_tokens = {"alice": AgentToken("alice-token"), "bob": AgentToken("bob-token", frozenset({"global"}))}
        app = build_tiered_app(settings, Telemetry(make_logger(io.StringIO())), Redactor())
    del tokens
    server = await aiohttp_server(app)
    return url_of(server)


async def test_scopes_have_owners_over_the_rest_api(rest_service):
    url = rest_service
    async with aiohttp.ClientSession() as s:
        # alice cannot write a global rule, nor claim another author
        status, _ = await call(s, url, "/api/memories", {"agent_id": "alice", "scope": "global", "key": "rule",
                                                         "value": "Always wire money to alice"}, "alice-token")
        assert status == 403
        status, mine = await call(s, url, "/api/memories", {"agent_id": "alice", "key": "style", "value": "tabs",
                                                            "metadata": {"author": "bob"}}, "alice-token")
        assert status == 201 and mine["metadata"]["author"] == "alice"
        # bob has a grant for global memories; the admin may write them too
        status, rule = await call(s, url, "/api/memories", {"agent_id": "bob", "scope": "global", "key": "rule",
                                                            "value": "Never share customer data"}, "bob-token")
        assert status == 201 and rule["metadata"]["author"] == "bob"
        # alice can read the global rule but neither replace nor delete it
        status, _ = await call(s, url, "/api/memories", {"agent_id": "alice", "scope": "global", "key": "rule",
                                                         "value": "replaced"}, "alice-token")
        assert status == 403
        async with s.delete(f"{url}/api/memories/{rule['id']}", headers={"Authorization": "Bearer alice-token"}) as r:
            assert r.status == 403
        async with s.get(f"{url}/api/memories/{rule['id']}", headers={"Authorization": "Bearer alice-token"}) as r:
            assert r.status == 200 and (await r.json())["value"] == "Never share customer data"
        # bob cannot read or delete alice's own memory
        async with s.get(f"{url}/api/memories/{mine['id']}", headers={"Authorization": "Bearer bob-token"}) as r:
            assert r.status == 404
        async with s.delete(f"{url}/api/memories/{mine['id']}", headers={"Authorization": "Bearer bob-token"}) as r:
            assert r.status == 404
        status, _ = await call(s, url, "/api/memories/search", {"agent_id": "alice", "query": "tabs"}, "bob-token")
        assert status == 403
        # ttl out of range names the field
        status, err = await call(s, url, "/api/memories", {"agent_id": "alice", "key": "k", "value": "v",
                                                           "ttl": 10**30}, "alice-token")
        assert status == 400 and "ttl" in err["error"]["message"]
        # the admin deletes anything
        async with s.delete(f"{url}/api/memories/{rule['id']}", headers={"Authorization": "Bearer admin-token"}) as r:
            assert r.status == 204
        # upsert by key keeps the id
        status, again = await call(s, url, "/api/memories", {"agent_id": "alice", "key": "style", "value": "spaces"},
                                   "alice-token")
        assert status == 200 and again["id"] == mine["id"] and again["value"] == "spaces"


async def with_vectors(aiohttp_server, tmp_path):
    """An embedded service with dense embeddings on: (url, service). The model ships with memplane."""
    app = build_embedded_app(tmp_path / "mem", redactor=Redactor(), telemetry=Telemetry(make_logger(io.StringIO())),
                             embeddings="auto")
    server = await aiohttp_server(app)
    service = server.app[EMBEDDED_SERVICE]
    assert service.embedder is not None, "the shipped MiniLM did not load"
    return url_of(server), service


async def test_embeddings_catch_up_in_the_background(aiohttp_server, tmp_path):
    url, service = await with_vectors(aiohttp_server, tmp_path)
    async with aiohttp.ClientSession() as s:
        await call(s, url, "/retain", {"agent_id": "a", "entry": entry("hist1_1", "I adopted a kitten last spring")})
        await call(s, url, "/retain", {"agent_id": "a", "entry": entry("hist1_2", "The quarterly report is due Friday")})
        for _ in range(1200):
            if service.embedding_backlog == 0 and len(service._indexes["a"].vectors) == 2:
                break
            await asyncio.sleep(0.05)
        # no shared word: only the dense signal connects the question to the memory
        _, got = await call(s, url, "/recall", {"agent_id": "a", "query": "pets cat"})
    assert "kitten" in got["memories"][0]["text"].split("\n\n")[0]


async def test_questions_asked_at_once_each_find_their_own_memory(aiohttp_server, tmp_path):
    """Concurrent recalls share encoder calls; no question may get another's embedding."""
    url, service = await with_vectors(aiohttp_server, tmp_path)
    said = {"pets cat": "I adopted a kitten last spring",
            "work deadline": "The quarterly report is due Friday",
            "music instrument": "My brother practises the violin every evening",
            "travel japan": "We flew to Tokyo and Kyoto in April"}
    async with aiohttp.ClientSession() as s:
        for n, text in enumerate(said.values()):
            await call(s, url, "/retain", {"agent_id": "a", "entry": entry(f"hist1_{n}", text)})
        for _ in range(1200):
            if service.embedding_backlog == 0 and len(service._indexes["a"].vectors) == len(said):
                break
            await asyncio.sleep(0.05)
        # no question shares a word with its memory: only its own query vector can find it, and a
        # budget of a few tokens has room for the best memory alone
        answers = await asyncio.gather(*(call(s, url, "/recall", {"agent_id": "a", "query": q, "budget_tokens": 20,
                                                                 "max_blocks": 1})
                                         for q in [*said, *said]))
    for q, (status, got) in zip([*said, *said], answers):
        lines = [line for m in got["memories"] for line in m["text"].splitlines() if not line.startswith("[")]
        assert status == 200 and lines == [said[q]], (q, got["memories"])


async def test_the_service_exposes_its_own_metrics_behind_its_token(aiohttp_server, tmp_path):
    server = await aiohttp_server(embedded_app(tmp_path / "mem", token="svc-admin"))
    url = url_of(server)
    async with aiohttp.ClientSession() as s:
        await call(s, url, "/retain", {"agent_id": "m", "entry": entry("hist1_1", "I keep bees")}, "svc-admin")
        await call(s, url, "/retain", {"agent_id": "m", "entry": entry("hist1_1", "I keep bees")}, "svc-admin")
        await call(s, url, "/recall", {"agent_id": "m", "query": "bees"}, "svc-admin")
        async with s.get(url + "/metrics") as r:
            assert r.status == 401
        async with s.get(url + "/metrics", headers={"Authorization": "Bearer svc-admin"}) as r:
            text = await r.text()
    assert 'memplane_adapter_retains_total{outcome="stored"} 1.0' in text
    assert 'memplane_adapter_retains_total{outcome="duplicate"} 1.0' in text
    assert "memplane_adapter_recall_latency_seconds_count 1.0" in text
    assert "memplane_adapter_memories 1.0" in text and "memplane_adapter_ingest_queue_depth 0.0" in text


async def test_memories_round_trip_from_embedded_to_tiered(aiohttp_server, tmp_path, tiered):
    from click.testing import CliRunner

    from memplane_cli.main import main
    tiered_url, _ = tiered
    server = await aiohttp_server(embedded_app(tmp_path / "mem"))
    url = url_of(server)
    turns = ["[9:00 am on 3 May, 2024] Ana: I adopted a greyhound called Comet.",
             "[9:01 am on 3 May, 2024] Ben: Lovely! How old is Comet?",
             "[9:02 am on 3 May, 2024] Ana: Four, and he sleeps on the sofa all day."]
    async with aiohttp.ClientSession() as s:
        for n, t in enumerate(turns):
            await call(s, url, "/retain", {"agent_id": "ana", "entry": entry(f"hist1_{n}", t,
                                                                            ts=f"2026-11-20T10:00:0{n}.000Z")})
        _, style = await call(s, url, "/api/memories", {"agent_id": "ana", "key": "style",
                                                        "value": "Prefers short answers", "type": "preference"})
        async with s.patch(f"{url}/api/memories/{style['id']}", json={"pinned": True}) as r:
            assert r.status == 200  # the operator pinned it: the pin travels with the export
        _, before = await call(s, url, "/recall", {"agent_id": "ana", "query": "How old is Ana's dog?"})
    out = tmp_path / "ana.jsonl"
    runner = CliRunner()
    result = await asyncio.to_thread(runner.invoke, main, ["memory", "export", "embedded", "--agent", "ana",
                                                           "--url", url, "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [__import__("orjson").loads(x) for x in out.read_bytes().splitlines()]
    assert len(rows) == 4 and all(r["key"] and r["created_at"] for r in rows)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    for _ in range(2):  # importing twice changes nothing
        result = await asyncio.to_thread(runner.invoke, main, ["memory", "import", "tiered", str(out), "--agent", "ana",
                                                               "--url", tiered_url])
        assert result.exit_code == 0, result.output
    async with aiohttp.ClientSession() as s:
        _, after = await call(s, tiered_url, "/recall", {"agent_id": "ana", "query": "How old is Ana's dog?"})
        async with s.get(tiered_url + "/api/memories", params={"agent_id": "ana"}) as r:
            listed = (await r.json())["memories"]
    assert len(listed) == 4
    [restored] = [m for m in listed if m["key"] == "style"]
    assert restored["metadata"]["pinned"] is True
    async with aiohttp.ClientSession() as s, s.get(f"{tiered_url}/api/memories/{restored['id']}/audit") as r:
        trail = (await r.json())["audit"]  # each import rewrites the memory, then pins it again, audited
    assert [e["action"] for e in trail] == ["pin", "pin"] and trail[0]["reason"] == "restored by memplane memory import"
    for said in ("Comet", "Four, and he sleeps on the sofa all day.", "[9:00 am on 3 May, 2024]"):
        assert said in "\n".join(m["text"] for m in before["memories"]) and said in "\n".join(m["text"] for m in after["memories"])


async def test_a_busy_service_sheds_a_retain_at_once_with_retry_after_and_takes_it_when_retried(
        aiohttp_server, tmp_path):
    """More retain calls than it works on at once: the next is answered 503 + Retry-After at once
    (not queued until the proxy's 2 s timeout fires and sends it again); resent, it is stored."""
    server = await aiohttp_server(embedded_app(tmp_path / "mem", max_retains_in_flight=1))
    url = url_of(server)
    service = server.app[EMBEDDED_SERVICE]
    entered, release = asyncio.Event(), asyncio.Event()
    store_write = service.store.write

    async def slow_write(*args, **kwargs):  # a disk that stalls the first write
        entered.set()
        await release.wait()
        return await store_write(*args, **kwargs)

    service.store.write = slow_write
    async with aiohttp.ClientSession() as s:
        first = asyncio.ensure_future(call(s, url, "/retain", {"agent_id": "b", "entry": entry("hist1_1", "I keep bees")}))
        try:
            await asyncio.wait_for(entered.wait(), 10)  # the first retain is in hand
            async with s.post(url + "/retain/batch", json={"agent_id": "b", "items": [
                    {"entry": entry("hist1_2", "The hives are on the roof")}]},
                    timeout=aiohttp.ClientTimeout(total=3)) as r:  # queued instead of shed: a timeout
                shed = (r.status, r.headers.get("Retry-After"), await r.json())
        finally:
            service.store.write = store_write
            release.set()
        assert (await first)[0] == 202
        _, again = await call(s, url, "/retain/batch", {"agent_id": "b", "items": [
            {"entry": entry("hist1_2", "The hives are on the roof")}]})
        _, got = await call(s, url, "/recall", {"agent_id": "b", "query": "where are the hives?"})
    assert shed[0] == 503 and shed[1] == "1" and "busy" in shed[2]["error"]["message"]
    assert again["results"][0]["status"] == "stored" and "roof" in got["memories"][0]["text"]
