"""A retain lane never dies: an entry that cannot be delivered is parked in a dead-letter file and
the agent's next turns are retained; a busy service's Retry-After is honoured."""

from __future__ import annotations

import asyncio
import os
import stat

import orjson
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.retain.files import DEAD_LETTER_FILE
from tests.conftest import url_of


def nested(depth: int):
    value: object = "deep"
    for _ in range(depth):
        value = [value]
    return value


async def test_a_body_too_deep_to_record_is_refused_before_the_provider_sees_it(stack):
    import aiohttp
    token = stack.add_agent("deep")
    before = len(stack.provider.received)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as s:
        for depth in (251, 300, 1000):
            payload = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": nested(depth)}]}) \
                if depth < 250 else (b'{"model":"m","messages":[{"role":"user","content":' + b"[" * depth + b'"x"'
                                     + b"]" * depth + b"}]}")
            async with s.post(f"{stack.proxy_url}/v1/chat/completions", data=payload, headers=headers) as r:
                assert r.status == 400, depth
                assert "nested too deeply" in (await r.json())["error"]["message"]
        ok = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream_options": "yes"}
        async with s.post(f"{stack.proxy_url}/v1/chat/completions", json=ok, headers=headers) as r:
            assert r.status == 400 and (await r.json())["error"]["param"] == "stream_options"
    assert len(stack.provider.received) == before


class Recorder:
    """A memory service that records retains; it can answer 503 with Retry-After first."""

    def __init__(self, busy: int = 0) -> None:
        self.ids: list[str] = []
        self.busy = busy
        self.times: list[float] = []

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)

        async def retain(request: web.Request) -> web.Response:
            self.times.append(asyncio.get_running_loop().time())
            if self.busy:
                self.busy -= 1
                return web.json_response({"error": "busy"}, status=503, headers={"Retry-After": "1"})
            doc = orjson.loads(await request.read())
            self.ids.append(doc["entry"]["id"])
            return web.json_response({"status": "stored"}, status=202)

        async def recall(request: web.Request) -> web.Response:
            return web.json_response({"memories": []})

        app.router.add_post("/retain", retain)
        app.router.add_post("/recall", recall)
        return app


async def wait_for(cond, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_an_entry_that_cannot_be_serialised_is_dead_lettered_and_later_turns_go_on(stack, aiohttp_server,
                                                                                        monkeypatch):
    rec = Recorder()
    server = await aiohttp_server(rec.app())
    stack.add_agent("lane", url_of(server))
    client = stack.openai("lane")
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "first"}])
    await wait_for(lambda: len(rec.ids) == 1)
    # make the next entry impossible to scrub (as a body the redactor cannot walk would be)
    real = stack.state.retain.sender._job

    def broken(lane, ctx, manifest, entry):
        if "poison" in orjson.dumps(entry).decode():
            raise RecursionError("maximum recursion depth exceeded")
        return real(lane, ctx, manifest, entry)

    monkeypatch.setattr(stack.state.retain.sender, "_job", broken)
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "poison"}])
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "third"}])
    await wait_for(lambda: len(rec.ids) == 2)
    ledger = stack.ledger("lane")
    assert rec.ids == [ledger[0]["id"], ledger[2]["id"]]
    dead = stack.history_root / "lane" / DEAD_LETTER_FILE
    [parked] = [orjson.loads(x) for x in dead.read_bytes().splitlines()]
    assert parked["entry_id"] == ledger[1]["id"] and "RecursionError" in parked["reason"]
    assert stat.S_IMODE(os.stat(dead).st_mode) == 0o600
    [ev] = [e for e in stack.events("retain") if e.get("dead_letter")]
    assert ev["entry_id"] == ledger[1]["id"]


async def test_a_busy_service_is_asked_again_after_its_retry_after(stack, aiohttp_server):
    rec = Recorder(busy=1)
    server = await aiohttp_server(rec.app())
    stack.add_agent("busy", url_of(server))
    await stack.openai("busy").chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}])
    await wait_for(lambda: len(rec.ids) == 1)
    assert rec.times[1] - rec.times[0] >= 0.9  # not the 0.2 s first backoff: the service asked for 1 s


json_leaf = st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.floats(allow_nan=False, allow_infinity=False) \
    | st.text(max_size=30)
json_values = st.recursive(json_leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c,
                                                                                          max_size=3), max_leaves=20)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(content=json_values, extra=st.dictionaries(st.text(max_size=8), json_values, max_size=3))
async def test_no_turn_stops_later_retains(stack_for_property, content, extra):
    stack, rec = stack_for_property
    client_body = {**{k: v for k, v in extra.items() if k not in ("model", "messages", "stream")},
                   "model": "m", "messages": [{"role": "user", "content": content}]}
    import aiohttp
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{stack.proxy_url}/v1/chat/completions", json=client_body,
                          headers={"Authorization": f"Bearer {stack.tokens['prop']}"}) as r:
            await r.read()
        marker = f"marker-{len(rec.ids)}-{os.urandom(4).hex()}"
        async with s.post(f"{stack.proxy_url}/v1/chat/completions",
                          json={"model": "m", "messages": [{"role": "user", "content": marker}]},
                          headers={"Authorization": f"Bearer {stack.tokens['prop']}"}) as r:
            assert r.status == 200
    ids = {e["id"] for e in stack.ledger("prop") if marker in orjson.dumps(e).decode()}
    await wait_for(lambda: ids <= set(rec.ids))


@pytest.fixture
async def stack_for_property(stack, aiohttp_server):
    rec = Recorder()
    server = await aiohttp_server(rec.app())
    stack.add_agent("prop", url_of(server))
    return stack, rec


async def test_the_operator_caps_retains_in_flight_with_a_setting(make_stack, aiohttp_server):
    """`--retain-in-flight 1`: a slow memory service sees one retain at a time, across agents, and
    still gets every turn."""
    stack = await make_stack(retain_max_in_flight=1, retain_linger_s=0.0)
    seen: list[str] = []
    now = peak = 0

    async def retain(request: web.Request) -> web.Response:
        nonlocal now, peak
        now += 1
        peak = max(peak, now)
        await asyncio.sleep(0.2)
        seen.append(orjson.loads(await request.read())["entry"]["id"])
        now -= 1
        return web.json_response({"status": "stored"}, status=202)

    async def recall(request: web.Request) -> web.Response:
        return web.json_response({"memories": []})

    app = web.Application()
    app.router.add_post("/retain", retain)
    app.router.add_post("/recall", recall)
    server = await aiohttp_server(app)
    agents = [f"cap-{i}" for i in range(4)]
    for agent in agents:
        stack.add_agent(agent, url_of(server))
    await asyncio.gather(*(stack.openai(a).chat.completions.create(
        model="m", messages=[{"role": "user", "content": f"hello from {a}"}]) for a in agents))
    await wait_for(lambda: len(seen) == 4)
    assert peak == 1
    assert sorted(seen) == sorted(stack.ledger(a)[0]["id"] for a in agents)
