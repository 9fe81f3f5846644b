"""A provider's odd answer never corrupts the agent's stream or loses a paid answer: bytes are
relayed as they came, and whatever was relayed is ledgered."""

from __future__ import annotations

import io

import aiohttp
import orjson
import pytest
from aiohttp import web

from manifests.agents import write_agent
from memplane_core.telemetry import Telemetry, make_logger
from proxy.app import build_app
from proxy.config import ProxySettings
from proxy.ledger.files import Ledger
from tests.conftest import url_of

ODD_EVENTS = [b'{"choices":["x"]}', b'{"choices":[{"index":0,"delta":"not an object"}]}',
              b'{"choices":[{"index":0,"delta":{"content":7}}],"usage":"lots"}', b'"just a string"',
              b'{"type":"message_start","message":"s"}', b'{"type":"content_block_delta","delta":["x"]}',
              b'{"type":"response.completed","response":"s"}', b'{"choices":[],"usage":{"prompt_tokens":"x"}}']


def odd_provider(events: list[bytes], whole: bytes) -> web.Application:
    async def answer(request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        if not body.get("stream"):
            return web.Response(body=whole, content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for data in events:
            await resp.write(b"data: " + data + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    for path in ("/v1/chat/completions", "/v1/messages", "/v1/responses"):
        app.router.add_post(path, answer)
    return app


@pytest.fixture
async def odd_stack(aiohttp_server, tmp_path):
    async def make(events: list[bytes], whole: bytes):
        upstream = await aiohttp_server(odd_provider(events, whole))
        settings = ProxySettings(context_root=tmp_path / "ctx", history_root=tmp_path / "hist",
                                 openai_base_url=f"{url_of(upstream)}/v1", openai_api_key="sk-op",
                                 anthropic_base_url=url_of(upstream), anthropic_api_key="sk-ant-op")
        proxy = await aiohttp_server(build_app(settings, Telemetry(make_logger(io.StringIO()))))
        token, _ = write_agent(settings.context_root, "odd")
        return url_of(proxy), token, settings.history_root
    return make


BODIES = {
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/messages": {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses": {"model": "m", "input": "hi"},
}


@pytest.mark.parametrize("path", sorted(BODIES))
async def test_odd_stream_events_are_relayed_whole_and_ledgered(odd_stack, path):
    url, token, history = await odd_stack(ODD_EVENTS, b"{}")
    async with aiohttp.ClientSession() as s:
        async with s.post(url + path, json={**BODIES[path], "stream": True},
                          headers={"Authorization": f"Bearer {token}"}) as r:
            assert r.status == 200
            raw = await r.read()
        # the connection is still usable: one clean response, not a second one inside the first
        async with s.post(url + path, json={**BODIES[path], "stream": True},
                          headers={"Authorization": f"Bearer {token}"}) as r:
            assert r.status == 200
            await r.read()
    for data in ODD_EVENTS:
        if path != "/v1/chat/completions" or b'"choices":[]' not in data:
            assert data in raw
    assert b"Internal proxy error" not in raw and b"HTTP/1.1" not in raw
    entries = [ref.entry for ref in Ledger(history).read("odd")]
    assert len(entries) == 2 and entries[0]["response"]["format"] == "sse"
    assert "just a string" in entries[0]["response"].get("raw", "") or entries[0]["response"]["text"]


@pytest.mark.parametrize("whole", [b'{"choices":"x"}', b'{"choices":[null]}', b'{"content":"x","usage":[]}',
                                   b'{"output":"x"}', b"[1,2]"])
@pytest.mark.parametrize("path", sorted(BODIES))
async def test_a_200_answer_of_unexpected_shape_reaches_the_agent_and_the_ledger(odd_stack, path, whole):
    url, token, history = await odd_stack([], whole)
    async with aiohttp.ClientSession() as s:
        async with s.post(url + path, json=BODIES[path], headers={"Authorization": f"Bearer {token}"}) as r:
            assert r.status == 200 and await r.read() == whole
    [entry] = [ref.entry for ref in Ledger(history).read("odd")]
    assert entry["response"]["json"] == orjson.loads(whole)


@pytest.mark.parametrize("path", sorted(BODIES))
async def test_an_answer_nested_deeper_than_the_ledger_can_write_still_reaches_the_agent_and_the_ledger(
        odd_stack, path):
    """A paid answer 400 levels deep parses but cannot be written back as JSON inside a ledger
    line: the agent still gets it as it came, and the ledger keeps it as text."""
    whole = b'{"id":"x","x":' + b"[" * 400 + b"]" * 400 + b"}"
    url, token, history = await odd_stack([], whole)
    async with aiohttp.ClientSession() as s:
        async with s.post(url + path, json=BODIES[path], headers={"Authorization": f"Bearer {token}"}) as r:
            assert r.status == 200 and await r.read() == whole
    [entry] = [ref.entry for ref in Ledger(history).read("odd")]
    assert entry["response"] == {"format": "text", "text": whole.decode()}
