"""A fact that changed, recalled with the curator on (engine/curator/recall.py): the current fact
leads with the turn that changed it, and the old turn that stated the old value, if it still ranks,
says it is out of date. Embedded and tiered answer alike: they share the engine."""

from __future__ import annotations

import io

import aiohttp
import pytest

from memory_adapters.engine.packing import PAST_MARK
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from tests.conftest import url_of
from tests.test_curator import Clock, embedded, entry, llm, post, retain, settings  # noqa: F401 - llm: a fixture

BEFORE = ["I live in Lisbon, near the river.", "Nice weather.", "Lunch was good.", "See you."]
AFTER = ["Big news: we finally got the keys in Porto and unpacked last week.", "Boxes everywhere.", "Tired.",
         "Bye."]


def porto_model(body):
    """The curator's model: reads where the user lives, under one topic, so the newer fact wins."""
    import orjson

    from tests.test_curator import excerpt, reader
    if body["response_format"]["json_schema"]["name"] == "memplane_extraction":
        for label, text in excerpt(body):
            if "Porto" in text:
                return orjson.dumps({"summary": "moved", "directives": [], "facts": [
                    {"topic": "home city", "text": "The user lives in Porto.", "sources": [label],
                     "importance": 0.8}]}).decode()
    return reader(body)


async def moved(s: aiohttp.ClientSession, url: str, service) -> list[dict]:
    await retain(s, url, "ana", [entry(f"hist1_{i}", t) for i, t in enumerate(BEFORE)])
    await service.curator.run_once()
    service.curator.clock.now += 3600
    await retain(s, url, "ana", [entry(f"hist1_{i}", t, session="s2") for i, t in enumerate(AFTER, 4)])
    await service.curator.run_once()
    status, got = await post(s, url, "/recall", {"agent_id": "ana", "query": "Where do I live, and near what?"})
    assert status == 200, got
    return got["memories"]


def assert_current_fact_leads_with_its_change_and_the_old_turn_is_past(blocks: list[dict]) -> None:
    lead, rest = blocks[0]["text"], "\n".join(b["text"] for b in blocks[1:])
    assert lead.startswith("Current facts:\n- The user lives in Porto.")
    # the turn that changed it shares no word with the question, and still comes with the fact
    assert "changed when the user said" in lead and AFTER[0] in lead
    assert AFTER[0] not in rest  # not shown twice
    # the old turn matches the question best of all the episodes: it is there, and says it is past
    assert f"{PAST_MARK}I live in Lisbon, near the river." in rest
    assert "The user lives in Lisbon." not in lead + rest


async def test_a_changed_fact_leads_with_the_turn_that_changed_it_and_the_old_turn_is_marked_past(
        aiohttp_server, tmp_path, llm):
    fake, base = llm
    fake.script = porto_model
    url, service, _ = await embedded(aiohttp_server, tmp_path, settings(base))
    async with aiohttp.ClientSession() as s:
        blocks = await moved(s, url, service)
    assert_current_fact_leads_with_its_change_and_the_old_turn_is_past(blocks)


async def test_tiered_recalls_a_changed_fact_the_same_way(aiohttp_server, tiered_settings, llm):
    from memory_adapters.tiered.app import TIERED_SERVICE, build_tiered_app

    fake, base = llm
    fake.script = porto_model
    tiered_settings.embeddings = "off"
    app = build_tiered_app(tiered_settings, Telemetry(make_logger(io.StringIO())), Redactor(), curator=settings(base))
    server = await aiohttp_server(app)
    service = app[TIERED_SERVICE]
    service.curator.clock = service.curator.budget.clock = Clock()
    async with aiohttp.ClientSession() as s:
        blocks = await moved(s, url_of(server), service)
    assert_current_fact_leads_with_its_change_and_the_old_turn_is_past(blocks)


async def test_without_a_change_nothing_is_marked_past(aiohttp_server, tmp_path, llm):
    fake, base = llm
    fake.script = porto_model
    url, service, _ = await embedded(aiohttp_server, tmp_path, settings(base))
    async with aiohttp.ClientSession() as s:
        await retain(s, url, "ana", [entry(f"hist1_{i}", t) for i, t in enumerate(BEFORE)])
        await service.curator.run_once()
        _, got = await post(s, url, "/recall", {"agent_id": "ana", "query": "Where do I live, and near what?"})
    texts = "\n".join(b["text"] for b in got["memories"])
    assert "The user lives in Lisbon." in got["memories"][0]["text"] and "changed when" not in texts
    assert PAST_MARK not in texts and "I live in Lisbon, near the river." in texts
