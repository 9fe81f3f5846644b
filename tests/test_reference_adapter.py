"""The reference adapter follows the dedupe contract and survives restarts."""

from __future__ import annotations

import asyncio

import aiohttp

from memory_adapters.reference.app import build_reference_app
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
    assert [m["text"] for m in recalled["memories"]] == ["User: I like jazz | Assistant: OK."]
    lines = (data / "a" / "entries.jsonl").read_text().splitlines()
    assert len(lines) == 2  # hist1_1 once, hist1_2 once; duplicates never written


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
    import orjson
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert len(rows) == 50 and len({r["id"] for r in rows}) == 50


async def test_bad_bodies_get_400_naming_the_field(reference):
    url, _ = reference
    async with aiohttp.ClientSession() as s:
        status, body = await call(s, url, "/retain", {"agent_id": "a", "entry": {"no": "id"}})
        assert status == 400 and body["error"]["field"] == "entry"
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
