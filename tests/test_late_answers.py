"""A memory service whose answers come back late is told less time: on a host whose cores are all
taken, the answer's way back can cost more than the half of the recall timeout the proxy keeps for
it, and an answer the service made "in time" reaches the proxy after its timeout — no memories at
all. The proxy learns how late each service's answers arrive and lowers the `deadline_ms` it sends,
so the service answers with what it has (words, say) early enough; once answers come in time again,
the deadline goes back to half the timeout.

The memory service here is a real loopback server that keeps the deadline it is told and then
takes `late` more seconds (the way back on a starved host); the proxy is the real one."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from proxy.memory_service import RecallDeadlines
from tests.conftest import url_of

KEY = RecallDeadlines.key_of("ann", "http://svc/recall")


def test_late_answers_lower_the_next_deadline_and_timely_ones_restore_it():
    d = RecallDeadlines()
    assert d.deadline_ms(KEY, 300) == 150  # half the timeout, as before
    d.observe(KEY, sent_ms=150, latency_ms=120, timed_out=False)  # early: nothing to learn
    assert d.deadline_ms(KEY, 300) == 150
    d.observe(KEY, sent_ms=150, latency_ms=290, timed_out=False)  # 140 ms past what it was told
    assert d.deadline_ms(KEY, 300) == 300 - 20 - 140
    d.observe(KEY, sent_ms=140, latency_ms=300, timed_out=True)  # later than that, by how much unknown
    lowered = d.deadline_ms(KEY, 300)
    assert 60 <= lowered < 140
    for _ in range(5):
        d.observe(KEY, sent_ms=lowered, latency_ms=300, timed_out=True)
    assert d.deadline_ms(KEY, 300) == 60  # a fifth of the timeout at the least: time to rank by words
    assert d.deadline_ms(RecallDeadlines.key_of("bob", "http://svc/recall"), 300) == 150  # bob on his own
    for _ in range(100):
        d.observe(KEY, sent_ms=60, latency_ms=4, timed_out=False)
    assert d.deadline_ms(KEY, 300) == 150  # forgotten


class LateService:
    """Keeps the deadline it is told, then takes `late` seconds more before the answer arrives."""

    def __init__(self) -> None:
        self.late = 0.55
        self.deadlines: list[int] = []

    def app(self) -> web.Application:
        async def recall(request: web.Request) -> web.Response:
            body = await request.json()
            self.deadlines.append(body["deadline_ms"])
            if self.late:
                await asyncio.sleep(body["deadline_ms"] / 1000 + self.late)
            return web.json_response({"memories": [{"text": "My sister Lena lives in Porto.", "kind": "fact"}],
                                      "ranking": "lexical: deadline"})

        async def retain(request: web.Request) -> web.Response:
            return web.json_response({"status": "ok"})

        app = web.Application()
        app.router.add_post("/recall", recall)
        app.router.add_post("/retain", retain)
        app.router.add_post("/retain/batch", retain)
        return app


async def test_an_agent_whose_memory_answers_late_gets_its_memories_after_the_first_turn(aiohttp_server, stack):
    service = LateService()
    server = await aiohttp_server(service.app())
    stack.add_agent("ann", url_of(server), recall={"path": "/recall", "timeout_ms": 1000})
    client = stack.openai("ann")

    async def ask(n: int) -> tuple[str, str]:
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=[{"role": "user", "content": f"Where does my sister live? ({n})"}])
        return raw.headers["X-Memplane-Recall"], raw.headers["X-Memplane-Turn-Id"]

    # told 500 ms, the answer comes long after the 1 s timeout
    service.late = 1.0
    first, _ = await ask(0)
    assert first.startswith("timed_out")
    service.late = 0.55  # from now on at ~1,050 ms if told 500 ms again: past the timeout every turn
    # told less from then on, the same service's answers arrive in time
    later = [await ask(n) for n in range(1, 4)]
    assert all(header.startswith("succeeded") and "blocks=1" in header for header, _ in later), later
    assert "Porto" in stack.provider.received[-1].memories_block
    assert service.deadlines[0] == 500 and all(d < 400 for d in service.deadlines[1:]), service.deadlines
    async with aiohttp.ClientSession() as s:  # the turn says what the service was told
        async with s.get(f"{stack.proxy_url}/memplane/turns/{later[-1][1]}") as r:
            explained = await r.json()
    assert explained["deadline_ms"] == service.deadlines[-1]
    # another agent of the same service is judged on its own answers, not on ann's
    stack.add_agent("bob", url_of(server), recall={"path": "/recall", "timeout_ms": 1000})
    await stack.openai("bob").chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}])
    assert service.deadlines[-1] == 500

    # the host is quiet again: answers come at once, and the deadline goes back to half the timeout
    service.late = 0
    for n in range(4, 16):
        header, _ = await ask(n)
        assert header.startswith("succeeded")
    assert service.deadlines[-1] == 500
