"""Restarts, shutdowns, floods and hostile callers never cost a turn, a memory or a leak."""

from __future__ import annotations

import asyncio
import io

import aiohttp
import anthropic
import openai
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from proxy.app import build_app
from proxy.config import ProxySettings
from memplane_cli.runner import free_port
from tests.conftest import url_of


async def test_undelivered_retains_resume_after_a_restart(make_stack, aiohttp_server, tmp_path):
    from memory_adapters.reference.app import REFERENCE_STORE, build_reference_app
    port = free_port()
    stack = await make_stack()
    stack.add_agent("durable", f"http://127.0.0.1:{port}")  # the service is down for now
    stack.state.retain.backoff_s = 0.01
    client = stack.openai("durable")
    for i in range(5):
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"fact {i} about owls"}])
    await stack.settle()
    assert len(stack.ledger("durable")) == 5
    await stack.state.retain.close(1.0)  # the proxy stops; nothing was acknowledged

    ref_app = build_reference_app(tmp_path / "ref", redactor=Redactor())
    await aiohttp_server(ref_app, port=port)  # the service comes back on its address
    settings = stack.state.settings
    log = io.StringIO()
    app = build_app(settings, Telemetry(make_logger(log)))
    await aiohttp_server(app)  # a new proxy process on the same dirs: no new turns at all
    store = ref_app[REFERENCE_STORE]
    for _ in range(300):
        if store.count("durable") == 5:
            break
        await asyncio.sleep(0.02)
    assert store.count("durable") == 5
    assert (stack.history_root / "durable" / "retain.cursor").exists()


async def test_buffer_overflow_falls_back_to_the_ledger_and_loses_nothing(make_stack, reference):
    ref_url, store = reference
    stack = await make_stack(retain_queue_size=2)
    stack.add_agent("flood", ref_url)
    client = stack.openai("flood")
    await asyncio.gather(*(client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"note {i}"}])
                           for i in range(40)))
    await stack.settle()
    assert store.count("flood") == 40 == len(stack.ledger("flood"))


async def test_per_agent_rate_limit_answers_429_with_retry_after(make_stack):
    stack = await make_stack(rate_limit_per_agent=1.0, rate_limit_burst=2)
    stack.add_agent("busy")
    stack.add_agent("calm")
    client = stack.openai("busy")
    for _ in range(2):
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.RateLimitError) as exc:
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert int(exc.value.response.headers["Retry-After"]) >= 1
    # one agent's flood does not starve another
    await stack.openai("calm").chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(anthropic.RateLimitError):
        for _ in range(3):
            await stack.anthropic("busy").messages.create(model="c", max_tokens=5, messages=[{"role": "user", "content": "x"}])


async def test_client_disconnect_mid_stream_cancels_upstream_and_records_what_arrived(stack):
    stack.provider.chunks = 40
    stack.provider.chunk_delay_s = 0.05
    stack.provider.reply = lambda body: "word " * 200
    stack.add_agent("impatient")
    headers = {"Authorization": f"Bearer {stack.tokens['impatient']}"}
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "tell me a long story please"}]}
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{stack.proxy_url}/v1/chat/completions", json=body, headers=headers) as r:
            await r.content.readany()
            await asyncio.sleep(0.2)
        # leaving the block closes the connection mid-stream
    for _ in range(100):
        await asyncio.sleep(0.05)
        if stack.ledger("impatient"):
            break
    [entry] = stack.ledger("impatient")
    assert entry["response"]["incomplete"] == "client_disconnected"
    assert 0 < len(entry["response"]["text"]) < len("word " * 200)
    await asyncio.sleep(0.3)
    sent = len(stack.provider.received)
    assert sent == 1  # and the upstream stream was closed, not drained in the background


async def test_graceful_shutdown_finishes_inflight_streams(make_stack, tmp_path, provider_server):
    provider, provider_url = provider_server
    provider.chunks, provider.chunk_delay_s = 20, 0.05
    settings = ProxySettings(context_root=tmp_path / "c", history_root=tmp_path / "h", openai_base_url=f"{provider_url}/v1",
                             shutdown_grace_s=10)
    from manifests.agents import write_agent
    from memplane_cli.runner import Site, start_site
    token, _ = write_agent(settings.context_root, "steady")
    app = build_app(settings, Telemetry(make_logger(io.StringIO())))
    runner, port = await start_site(Site(app, "127.0.0.1", 0), grace_s=10)
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=token, max_retries=0)
    stream = await client.chat.completions.create(model="m", stream=True, messages=[{"role": "user", "content": "go"}])
    pieces = []
    first = await stream.__anext__()
    pieces.append(first.choices[0].delta.content or "")
    shutdown = asyncio.create_task(runner.cleanup())  # what SIGTERM does
    async for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
    await shutdown
    assert "".join(pieces) == "Noted."
    from proxy.ledger.files import Ledger
    [entry] = [r.entry for r in Ledger(settings.history_root).read("steady")]
    assert entry["response"]["text"] == "Noted." and "incomplete" not in entry["response"]
    with pytest.raises(openai.APIConnectionError):
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "late"}])


# -- isolation --

async def test_an_agent_token_only_ever_touches_its_own_memories(stack, aiohttp_server):
    from aiohttp import web
    seen = []

    async def record(request):
        seen.append(await request.json())
        return web.json_response({"memories": []}, status=200 if request.path == "/recall" else 202)
    app = web.Application()
    app.router.add_post("/recall", record)
    app.router.add_post("/retain", record)
    server = await aiohttp_server(app)
    stack.add_agent("alice", url_of(server))
    stack.add_agent("bob", url_of(server))
    # bob tries to pass as alice through every field a body or header could carry
    await stack.openai("bob").chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], extra_headers={"X-Agent-Id": "alice"},
        extra_body={"agent_id": "alice", "metadata": {"agent_id": "alice", "session_id": "s"}, "user": "alice"})
    await stack.settle()
    assert {b["agent_id"] for b in seen} == {"bob"}
    assert not (stack.history_root / "alice").exists()
    # a token for alice with bob's secret, or bob's id with alice's secret, gets nobody in
    a_secret = stack.tokens["alice"].split(":", 1)[1]
    for forged in (f"bob:{a_secret}", f"alice:{stack.tokens['bob'].split(':', 1)[1]}", f"alice:{a_secret}x"):
        c = openai.AsyncOpenAI(base_url=f"{stack.proxy_url}/v1", api_key=forged, max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])


async def test_adapters_with_per_agent_tokens_refuse_other_agents(aiohttp_server, tmp_path):
    from memory_adapters.reference.store import ReferenceStore
    from memory_adapters.http.server import build_adapter_app
    from memplane_core.contract import describe
    app = build_adapter_app(ReferenceStore(tmp_path / "r", Redactor()), describe(), token="ops-token",
                            agent_tokens={"alice": "alice-token", "bob": "bob-token"})
    server = await aiohttp_server(app)
    url = url_of(server)
    async with aiohttp.ClientSession() as s:
        async def call(path, body, token):
            async with s.post(url + path, json=body, headers={"Authorization": f"Bearer {token}"}) as r:
                return r.status
        entry = {"id": "hist1_a", "request_original": {"messages": [{"role": "user", "content": "secret plan"}]}}
        assert await call("/retain", {"agent_id": "alice", "entry": entry}, "alice-token") == 202
        assert await call("/recall", {"agent_id": "alice", "query": "plan"}, "bob-token") == 403
        assert await call("/forget", {"agent_id": "alice", "entry_ids": ["hist1_a"]}, "bob-token") == 403
        assert await call("/retain", {"agent_id": "alice", "entry": entry}, "nobody") == 401
        assert await call("/recall", {"agent_id": "alice", "query": "plan"}, "ops-token") == 200
        async with s.post(url + "/recall", json={"agent_id": "alice"}) as r:
            assert r.status == 401


async def test_tiered_rest_api_with_per_agent_tokens(aiohttp_server, tiered_settings):
    from memory_adapters.tiered.app import build_tiered_app
    tiered_settings.agent_tokens = {"alice": "alice-token", "bob": "bob-token"}
    server = await aiohttp_server(build_tiered_app(tiered_settings, Telemetry(make_logger(io.StringIO())), Redactor()))
    url = url_of(server)
    a, b = {"Authorization": "Bearer alice-token"}, {"Authorization": "Bearer bob-token"}
    async with aiohttp.ClientSession() as s:
        async with s.post(url + "/api/memories", json={"agent_id": "alice", "key": "k", "value": "alice private"}, headers=a) as r:
            mem = await r.json()
        async with s.post(url + "/api/memories", json={"agent_id": "alice", "key": "k2", "value": "x"}, headers=b) as r:
            assert r.status == 403
        async with s.get(url + "/api/memories", params={"agent_id": "alice"}, headers=b) as r:
            assert r.status == 403
        async with s.get(url + f"/api/memories/{mem['id']}", headers=b) as r:
            assert r.status == 404
        async with s.delete(url + f"/api/memories/{mem['id']}", headers=b) as r:
            assert r.status == 404
        async with s.post(url + "/api/memories/search", json={"agent_id": "alice", "query": "private"}, headers=b) as r:
            assert r.status == 403
        async with s.get(url + f"/api/memories/{mem['id']}", headers=a) as r:
            assert r.status == 200


# -- fuzzing: bad bodies get a 4xx, never a 5xx or a hang --

json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.floats(allow_nan=False) | st.text(max_size=20),
                           lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                           max_leaves=12)
bad_bodies = st.one_of(
    st.binary(max_size=200),
    json_values.filter(lambda v: not isinstance(v, dict)).map(lambda v: orjson.dumps(v)),
    st.dictionaries(st.sampled_from(["model", "stream", "input", "system", "max_tokens"]), json_values, max_size=4)
    .map(lambda d: orjson.dumps(d)),
    st.lists(json_values.filter(lambda v: not (isinstance(v, dict) and isinstance(v.get("role"), str))),
             max_size=3).map(lambda msgs: orjson.dumps({"model": "m", "messages": msgs})),
)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
async def test_fuzzed_bodies_get_4xx_never_5xx(stack, path):
    stack.add_agent("fuzz")
    token = stack.tokens["fuzz"]
    results = []

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(bad_bodies)
    def run(raw):
        results.append(raw)

    run()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s:
        for raw in results:
            async with s.post(stack.proxy_url + path, data=raw,
                              headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}) as r:
                body = await r.read()
                assert 400 <= r.status < 500, (raw, r.status, body)
                orjson.loads(body)  # a JSON error, never a traceback page
    assert stack.provider.received == []
