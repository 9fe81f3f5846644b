"""A sick memory service never breaks or slows the agent beyond the recall timeout."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from memplane_cli.runner import free_port
from tests.conftest import url_of


def memory_service(*, recall_delay: float = 0.0, retain_status: int = 202, recall_body: bytes | None = None):
    seen: list[str] = []
    status = {"retain": retain_status}

    async def recall(request: web.Request) -> web.Response:
        seen.append("recall")
        await asyncio.sleep(recall_delay)
        return web.Response(body=recall_body or b'{"memories": []}', content_type="application/json")

    async def retain(request: web.Request) -> web.Response:
        seen.append("retain")
        return web.json_response({"status": "ok" if status["retain"] < 300 else "boom"}, status=status["retain"])

    app = web.Application()
    app.router.add_post("/recall", recall)
    app.router.add_post("/retain", retain)
    return app, seen, status


async def test_slow_recall_times_out_and_the_call_still_succeeds(stack, aiohttp_server):
    app, _, _ = memory_service(recall_delay=5.0)
    server = await aiohttp_server(app)
    stack.add_agent("patient", url_of(server))
    started = time.perf_counter()
    reply = await stack.openai("patient").chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hello"}])
    elapsed = time.perf_counter() - started
    assert reply.choices[0].message.content == "Noted."
    assert elapsed < 2.5  # the service sleeps 5 s; the proxy gave up after its 300 ms budget
    [ev] = stack.events("recall")
    assert ev["memory_status"] == "timed_out"
    assert stack.provider.received[-1].memories_block is None


async def test_memory_service_down_is_logged_as_failed(stack):
    stack.add_agent("orphan", f"http://127.0.0.1:{free_port()}")
    reply = await stack.openai("orphan").chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert reply.choices[0].message.content == "Noted."
    await stack.settle()
    assert stack.events("recall")[0]["memory_status"] == "failed"
    assert stack.events("retain")[0]["memory_status"] == "failed"
    assert len(stack.ledger("orphan")) == 1  # the turn is durable anyway


async def test_retain_500_does_not_change_the_response(stack, aiohttp_server):
    app, seen, status = memory_service(retain_status=500)
    server = await aiohttp_server(app)
    stack.add_agent("a", url_of(server))
    stack.add_agent("b")
    stack.state.retain.backoff_s = 0.01
    with_memory = await stack.openai("a").chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    without = await stack.openai("b").chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert with_memory.choices[0].message == without.choices[0].message
    for _ in range(200):  # the proxy keeps retrying with backoff ...
        if seen.count("retain") >= 3:
            break
        await asyncio.sleep(0.02)
    failed = stack.events("retain", memory_status="failed")
    assert len(failed) >= 3 and failed[0]["will_retry"] is True and failed[0]["entry_id"].startswith("hist1_")
    status["retain"] = 202  # ... and delivers once the service recovers
    for _ in range(300):
        if stack.events("retain", memory_status="succeeded"):
            break
        await asyncio.sleep(0.02)
    [ok] = stack.events("retain", memory_status="succeeded")
    assert ok["entry_id"] == failed[0]["entry_id"]


async def test_oversized_or_invalid_recall_answers_inject_nothing(stack, aiohttp_server):
    big = b'{"memories": [{"text": "' + b"x" * 20000 + b'"}]}'
    for body, reason in ((big, "over"), (b"not json", "invalid JSON")):
        app, _, _ = memory_service(recall_body=body)
        server = await aiohttp_server(app)
        agent = f"agent-{len(reason)}"
        stack.add_agent(agent, url_of(server))
        await stack.openai(agent).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        assert stack.provider.received[-1].memories_block is None
        assert reason in stack.events("recall", claw_id=agent)[0]["error"]
