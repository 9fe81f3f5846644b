"""A busy agent's turns reach a memory service that takes batches in few calls, each turn
exactly once, and a service without batches still gets every turn one by one."""

from __future__ import annotations

import asyncio
from collections import Counter

import aiohttp
from aiohttp import web

from memory_adapters.reference.app import REFERENCE_STORE, build_reference_app
from memory_adapters.reference.store import ReferenceStore
from memory_adapters.http.server import build_adapter_app
from memplane_core.contract import RETAIN_BATCH_PATH
from memplane_core.redact import Redactor
from tests.conftest import url_of

BATCHED = {"path": "/retain", "timeout_ms": 2000, "batch_path": RETAIN_BATCH_PATH}


def counting(app: web.Application, retain_takes: float = 0.0) -> Counter:
    """Calls per path; each retain call takes at least `retain_takes` seconds, as a busy service's do."""
    calls: Counter = Counter()

    @web.middleware
    async def count(request, handler):
        calls[request.path] += 1
        if request.path in ("/retain", RETAIN_BATCH_PATH):
            await asyncio.sleep(retain_takes)
        return await handler(request)

    app.middlewares.insert(0, count)
    return calls


async def test_a_busy_agent_is_retained_in_batches_each_turn_exactly_once(make_stack, aiohttp_server, tmp_path):
    app = build_reference_app(tmp_path / "ref", redactor=Redactor())
    calls = counting(app, retain_takes=0.1)  # turns arrive while a call is out: they wait and go together
    url = url_of(await aiohttp_server(app))
    stack = await make_stack()
    stack.add_agent("busy", url, retain=BATCHED)
    client = stack.openai("busy")
    await asyncio.gather(*(client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"fact {i}"}])
                           for i in range(60)))
    await stack.settle()
    ids = [e["id"] for e in stack.ledger("busy")]
    assert len(ids) == 60 and app[REFERENCE_STORE].count("busy") == 60
    assert calls[RETAIN_BATCH_PATH] >= 1 and calls[RETAIN_BATCH_PATH] + calls["/retain"] < 60
    retained = stack.events("retain", memory_status="succeeded")
    assert sorted(e["entry_id"] for e in retained) == sorted(ids)  # one memory_op line per turn
    assert max(e.get("batch_size", 1) for e in retained) > 1


async def test_a_service_without_a_batch_endpoint_gets_every_turn_one_by_one(make_stack, aiohttp_server, tmp_path):
    store = ReferenceStore(tmp_path / "plain", Redactor())
    plain = build_adapter_app(store, {"version": 2, "memory": {"retain": {"path": "/retain"},
                                                               "recall": {"path": "/recall"}}})
    calls = counting(plain)
    url = url_of(await aiohttp_server(plain))
    stack = await make_stack()
    stack.add_agent("plain", url, retain=BATCHED)  # the manifest claims batches the service lacks
    client = stack.openai("plain")
    await asyncio.gather(*(client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"note {i}"}])
                           for i in range(30)))
    await stack.settle()
    assert store.count("plain") == 30
    assert calls["/retain"] == 30
    assert [line["event"] for line in stack.log_lines()].count("retain_batch_unsupported") == 1


async def test_one_bad_item_is_refused_alone_and_the_rest_are_stored(reference):
    url, store = reference
    good = {"id": "hist1_good", "ts": "2026-11-20T10:00:00.000Z",
            "request_original": {"messages": [{"role": "user", "content": "I play the cello"}]}}
    body = {"agent_id": "cellist", "items": [{"entry": good}, {"entry": {"ts": "no id"}},
                                             {"entry": good, "agent_id": "someone-else"}]}
    async with aiohttp.ClientSession() as s, s.post(url + RETAIN_BATCH_PATH, json=body) as r:
        assert r.status == 200
        results = (await r.json())["results"]
    assert [x["code"] for x in results] == [202, 400, 202]
    assert [x.get("status") for x in results] == ["stored", None, "duplicate"]
    assert results[1]["field"].startswith("items.1.entry")
    assert store.count("cellist") == 1 and store.count("someone-else") == 0  # an item cannot name another agent
