"""One behavioural suite for both stores behind the engine (embedded and tiered), driven over HTTP
as the proxy and operators drive them: idempotent retain, tombstones, upsert, TTL, scopes,
isolation, knowledge updates, and a restart that rebuilds the index from storage."""

from __future__ import annotations

import asyncio
import io

import aiohttp
import pytest

from memory_adapters.embedded.app import build_embedded_app
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from tests.conftest import url_of


def entry(eid: str, user: str, ts: str):
    return {"id": eid, "ts": ts, "request_original": {"messages": [{"role": "user", "content": user}]},
            "response": {"format": "json", "json": {"choices": [{"message": {"content": "OK."}}]}}}


def app_factory(request, tmp_path, embeddings: str):
    """A factory for the store's app; calling it again is a restart on the same storage."""
    quiet = Telemetry(make_logger(io.StringIO()))
    if request.param == "embedded":
        return lambda: build_embedded_app(tmp_path / "mem", redactor=Redactor(), telemetry=quiet,
                                          embeddings=embeddings)
    from memory_adapters.tiered.app import build_tiered_app
    settings = request.getfixturevalue("tiered_settings")
    settings.embeddings = embeddings
    return lambda: build_tiered_app(settings, quiet, Redactor())


@pytest.fixture(params=["embedded", "tiered"])
def store_app(request, tmp_path):
    return app_factory(request, tmp_path, "off")


async def post(s, url, path, body):
    async with s.post(url + path, json=body) as r:
        return r.status, (await r.json() if r.status != 204 else None)


def text_of(recalled) -> str:
    return "\n".join(m["text"] for m in recalled["memories"])


async def test_both_stores_keep_the_same_promises(store_app, aiohttp_server):
    server = await aiohttp_server(store_app())
    url = url_of(server)
    async with aiohttp.ClientSession() as s:
        # idempotent retain, in batches
        items = [{"entry": entry("hist1_a", "I moved to Lisbon last spring.", "2026-01-10T10:00:00.000Z")},
                 {"entry": entry("hist1_b", "My sister Ines studies marine biology.", "2026-01-10T10:00:01.000Z")},
                 {"entry": entry("hist1_c", "I just moved to Vienna for a new job.", "2026-05-02T10:00:00.000Z")}]
        status, first = await post(s, url, "/retain/batch", {"agent_id": "p", "items": items})
        assert status == 200 and [r["status"] for r in first["results"]] == ["stored"] * 3
        _, again = await post(s, url, "/retain/batch", {"agent_id": "p", "items": items})
        assert [r["status"] for r in again["results"]] == ["duplicate"] * 3
        # tombstones win over later retains
        assert (await post(s, url, "/forget", {"agent_id": "p", "entry_ids": ["hist1_b"]}))[0] == 204
        _, late = await post(s, url, "/retain", {"agent_id": "p", "entry": items[1]["entry"]})
        assert late["status"] == "tombstoned"
        _, sister = await post(s, url, "/recall", {"agent_id": "p", "query": "What does Ines study?"})
        assert "marine biology" not in text_of(sister)
        # knowledge updates: both statements come back in the order they were said, the earlier
        # marked as since changed, and the current value leads
        _, home = await post(s, url, "/recall", {"agent_id": "p", "query": "Where did I move to?"})
        text = text_of(home)
        assert text.index("I moved to Lisbon") < text.index("I just moved to Vienna")
        assert "[since changed, see Current facts] I moved to Lisbon" in text
        assert text.startswith("fact: Current home city: Vienna.") and "Current home city: Lisbon" not in text
        # isolation between agents
        _, other = await post(s, url, "/recall", {"agent_id": "q", "query": "Where did I move to?"})
        assert "Vienna" not in text_of(other)
        # upsert by key, TTL, scopes
        _, v1 = await post(s, url, "/api/memories", {"agent_id": "p", "key": "editor", "value": "uses vim daily"})
        _, v2 = await post(s, url, "/api/memories", {"agent_id": "p", "key": "editor", "value": "uses helix daily"})
        assert v1["id"] == v2["id"]
        await post(s, url, "/api/memories", {"agent_id": "p", "key": "promo", "value": "promo code WINTER",
                                             "ttl": 1})
        await post(s, url, "/api/memories", {"agent_id": "p", "scope": "session", "session_id": "s1", "key": "draft",
                                             "value": "the draft editor note"})
        await asyncio.sleep(1.2)
        _, s2 = await post(s, url, "/recall", {"agent_id": "p", "query": "which editor and promo code?",
                                               "metadata": {"session_id": "s2"}})
        _, s1 = await post(s, url, "/recall", {"agent_id": "p", "query": "which editor draft?",
                                               "metadata": {"session_id": "s1"}})
        assert "helix" in text_of(s2) and "vim" not in text_of(s2)
        assert "WINTER" not in text_of(s2) and "draft editor note" not in text_of(s2)
        assert "draft editor note" in text_of(s1)
    await server.close()

    restarted = await aiohttp_server(store_app())  # the index is rebuilt from storage
    async with aiohttp.ClientSession() as s:
        _, home = await post(s, url_of(restarted), "/recall", {"agent_id": "p", "query": "Where did I move to?"})
        _, sister = await post(s, url_of(restarted), "/recall", {"agent_id": "p", "query": "What does Ines study?"})
        _, dup = await post(s, url_of(restarted), "/retain", {"agent_id": "p", "entry": items[0]["entry"]})
    assert "Vienna" in text_of(home) and "marine biology" not in text_of(sister) and dup["status"] == "duplicate"


@pytest.fixture(params=["embedded", "tiered"])
def meaning_app(request, tmp_path):
    """Like store_app, with dense embeddings on (the model ships with memplane: it must load)."""
    return app_factory(request, tmp_path, "auto")


async def caught_up(s, url) -> dict:
    for _ in range(1200):
        async with s.get(url + "/health") as r:
            health = await r.json()
        if not health.get("embedding_backlog"):
            return health
        await asyncio.sleep(0.05)
    raise AssertionError(f"embeddings never caught up: {health}")


async def only_line(s, url, query: str) -> list[str]:
    """The memory lines a recall with room for one short memory returns."""
    _, got = await post(s, url, "/recall", {"agent_id": "m", "query": query, "budget_tokens": 20, "max_blocks": 1})
    return [line for b in got["memories"] for line in b["text"].splitlines() if not line.startswith("[")]


async def test_a_retained_turn_is_found_by_its_words_at_once_and_by_its_meaning_once_embedded(meaning_app,
                                                                                           aiohttp_server):
    """Retains are acknowledged before their vectors exist (ingest keeps up with talk); the vectors
    follow in the background, are stored, and come back with a restart."""
    server = await aiohttp_server(meaning_app())
    url = url_of(server)
    items = [{"entry": entry("hist1_k", "I adopted a kitten last spring", "2026-01-10T10:00:00.000Z")},
             {"entry": entry("hist1_r", "The quarterly report is due Friday", "2026-01-10T10:00:01.000Z")}]
    async with aiohttp.ClientSession() as s:
        health = await caught_up(s, url)
        assert health.get("embeddings"), health
        # which shipped graph this CPU runs (engine/onnx_encoder.py, graph_for_cpu)
        assert health["encoder"] in ("onnxruntime-int8-blocked", "onnxruntime-int8-smooth"), health
        status, done = await post(s, url, "/retain/batch", {"agent_id": "m", "items": items})
        assert status == 200 and [r["status"] for r in done["results"]] == ["stored", "stored"]
        assert await only_line(s, url, "kitten") == ["I adopted a kitten last spring"]  # words: at once
        await caught_up(s, url)
        # no shared word: only the vectors connect these questions to their memories
        assert await only_line(s, url, "pets cat") == ["I adopted a kitten last spring"]
        assert await only_line(s, url, "work deadline") == ["The quarterly report is due Friday"]
    await server.close()

    restarted = await aiohttp_server(meaning_app())  # vectors come back from storage
    async with aiohttp.ClientSession() as s:
        await caught_up(s, url_of(restarted))
        assert await only_line(s, url_of(restarted), "pets cat") == ["I adopted a kitten last spring"]


async def test_tiered_embeds_at_start_what_a_stopped_process_left_without_a_vector(aiohttp_server, tiered_settings):
    from pymongo import MongoClient

    from memory_adapters.tiered.app import build_tiered_app
    tiered_settings.embeddings = "auto"
    quiet = Telemetry(make_logger(io.StringIO()))
    server = await aiohttp_server(build_tiered_app(tiered_settings, quiet, Redactor()))
    async with aiohttp.ClientSession() as s:
        assert (await caught_up(s, url_of(server))).get("embeddings")
        await post(s, url_of(server), "/retain", {"agent_id": "m", "entry": entry(
            "hist1_k", "I adopted a kitten last spring", "2026-01-10T10:00:00.000Z")})
    await server.close()
    with MongoClient(tiered_settings.mongo_url) as client:  # as if the process stopped before embedding
        client.get_default_database()["memories"].update_many({}, {"$set": {"embedding": None}})

    restarted = await aiohttp_server(build_tiered_app(tiered_settings, quiet, Redactor()))
    async with aiohttp.ClientSession() as s:
        await caught_up(s, url_of(restarted))
        assert await only_line(s, url_of(restarted), "pets cat") == ["I adopted a kitten last spring"]


async def test_a_batch_whose_embedding_fails_does_not_stop_the_next(meaning_app, aiohttp_server):
    from memory_adapters.embedded.app import EMBEDDED_SERVICE
    from memory_adapters.tiered.app import TIERED_SERVICE
    app = meaning_app()
    server = await aiohttp_server(app)
    url = url_of(server)
    service = app[EMBEDDED_SERVICE] if EMBEDDED_SERVICE in app else app[TIERED_SERVICE]
    async with aiohttp.ClientSession() as s:
        assert (await caught_up(s, url)).get("embeddings")
        embed, calls = service.embedder.embed, []

        def broken_once(texts):  # the model fails on the first batch only
            calls.append(texts)
            if len(calls) == 1:
                raise RuntimeError("model crashed")
            return embed(texts)

        service.embedder.embed = broken_once
        await post(s, url, "/retain", {"agent_id": "m", "entry": entry(
            "hist1_k", "I adopted a kitten last spring", "2026-01-10T10:00:00.000Z")})
        await caught_up(s, url)
        await post(s, url, "/retain", {"agent_id": "m", "entry": entry(
            "hist1_r", "The quarterly report is due Friday", "2026-01-10T10:00:01.000Z")})
        await caught_up(s, url)
        assert len(calls) == 2
        assert await only_line(s, url, "work deadline") == ["The quarterly report is due Friday"]  # by meaning
        assert await only_line(s, url, "kitten") == ["I adopted a kitten last spring"]  # still by its words
