"""Recall that answers in time on a busy machine: the proxy tells the service its deadline, a
service whose encoder is slow answers by words and says so, one agent's flood of recalls does not
cost another agent its memories, background embedding waits while recalls are in hand, and a
per-agent memory cap evicts the oldest episodes.

The encoder is the real MiniLM, made slow (as on a machine whose cores are busy) or held at a
gate; the services and the proxy are real servers on loopback."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time

import aiohttp
import pytest
from aiohttp import web

from memory_adapters.embedded.app import EMBEDDED_SERVICE, build_embedded_app
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from tests.conftest import url_of

pytest.importorskip("onnxruntime")


class SlowEncoder:
    """The real encoder on a machine that has no time for it: every call first waits for `gate`
    (up to `hold_s`), then sleeps `delay_s`, then encodes."""

    def __init__(self, real, *, delay_s: float = 0.0, hold_s: float = 0.0) -> None:
        self.real, self.delay_s, self.hold_s = real, delay_s, hold_s
        self.engine, self.dim = real.engine, real.dim
        self.gate = threading.Event()
        self.calls = 0
        self.batches: list[list[str]] = []  # the texts of each call, in the order they ran
        if not hold_s:
            self.gate.set()

    def encode(self, texts):
        self.calls += 1
        self.gate.wait(self.hold_s)
        self.batches.append(list(texts))
        time.sleep(self.delay_s)
        return self.real.encode(texts)


def slow_embedder(**kw):
    from memory_adapters.engine.dense import Embedder
    real = Embedder.load()
    encoder = SlowEncoder(real.encoder, **kw)
    return Embedder(encoder), encoder


def entry(eid: str, user: str, ts: str = "2026-11-20T10:00:00.000Z"):
    return {"id": eid, "ts": ts, "request_original": {"messages": [{"role": "user", "content": user}]},
            "response": {"format": "json", "json": {"choices": [{"message": {"content": "OK."}}]}}}


def embedded(data, embedder, **kw):
    return build_embedded_app(data, redactor=Redactor(), telemetry=Telemetry(make_logger(io.StringIO())),
                              embedder=embedder, **kw)


async def post(s, url, body):
    async with s.post(url, json=body) as r:
        return r.status, await r.json()


async def health(s, url):
    async with s.get(url + "/health") as r:
        return await r.json()


FACTS = ["My sister Lena lives in Porto and teaches chemistry.",
         "I adopted a grey cat called Miso last spring.",
         "Our team ships the billing service every second Tuesday."]


async def test_a_recall_with_a_tiny_deadline_answers_by_words_and_says_so(aiohttp_server, tmp_path):
    embedder, encoder = slow_embedder(hold_s=30)  # the encoder is stuck until the test opens it
    server = await aiohttp_server(embedded(tmp_path / "mem", embedder))
    url = url_of(server)
    async with aiohttp.ClientSession() as s:
        await post(s, url + "/retain/batch", {"agent_id": "ann", "items": [
            {"entry": entry(f"hist1_{i}", t)} for i, t in enumerate(FACTS)]})
        question = {"agent_id": "ann", "query": "Where does my sister live?", "deadline_ms": 60}
        status, got = await post(s, url + "/recall", question)
        assert status == 200
        assert got["ranking"] == "lexical: deadline" and got["degraded"] == "lexical"
        assert "Porto" in got["memories"][0]["text"]  # the best it had, in time

        encoder.gate.set()  # the encoder catches up: the late vector went to the cache
        for _ in range(200):
            if embedder.cached(question["query"]) is not None:
                break
            await asyncio.sleep(0.05)
        status, again = await post(s, url + "/recall", {**question, "query": "where does MY sister  live?"})
        assert status == 200 and again["ranking"] == "dense+lexical" and "degraded" not in again
        assert "Porto" in again["memories"][0]["text"]

        # a service told no deadline waits for its vector, as before
        status, patient = await post(s, url + "/recall", {"agent_id": "ann", "query": "Which pet did I adopt?"})
        assert patient["ranking"] == "dense+lexical" and "Miso" in patient["memories"][0]["text"]
        stats = (await health(s, url))["recall_scheduling"]
        assert stats["lexical_deadline"] == 1
        # a deadline that is not a number of milliseconds is the caller's mistake, named
        status, bad = await post(s, url + "/recall", {**question, "deadline_ms": "soon"})
        assert status == 400 and bad["error"]["field"] == "deadline_ms"


async def test_a_turn_answered_by_words_at_the_deadline_says_degraded_everywhere_an_operator_looks(
        aiohttp_server, tmp_path, stack):
    embedder, encoder = slow_embedder(hold_s=30)
    server = await aiohttp_server(embedded(tmp_path / "mem", embedder))
    url = url_of(server)
    # a generous timeout, so a loaded test machine cannot make this late: without the deadline the
    # stuck encoder would hold the recall past it; with it, words answer at ~600 ms
    stack.add_agent("ann", url, recall={"path": "/recall", "timeout_ms": 1000})
    async with aiohttp.ClientSession() as s:
        await post(s, url + "/retain/batch", {"agent_id": "ann", "items": [
            {"entry": entry(f"hist1_{i}", t)} for i, t in enumerate(FACTS)]})
    client = stack.openai("ann")
    raw = await client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Remind me where my sister lives?"}])
    turn_id = raw.headers["X-Memplane-Turn-Id"]
    # words in time, not a silent success: the header, the explanation, the event, /metrics, the inspector
    assert raw.headers["X-Memplane-Recall"].startswith("degraded; blocks=1;")
    assert "Porto" in stack.provider.received[-1].memories_block  # memories arrived in time, by words
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{stack.proxy_url}/memplane/turns/{turn_id}") as r:
            explained = await r.json()
        async with s.get(f"{stack.proxy_url}/metrics") as r:
            metrics = await r.text()
        async with s.get(f"{stack.proxy_url}/memplane/ui/agents/ann") as r:
            page = await r.text()
    assert explained["recall"]["status"] == "degraded" and explained["degraded"] == "lexical"
    assert explained["ranking"] == "lexical: deadline"
    event = stack.events("recall", claw_id="ann")[-1]
    assert event["ranking"] == "lexical: deadline" and event["degraded"] == "lexical"
    assert event["memory_status"] == "succeeded"  # CONTRACT §11's statuses: memories did arrive
    assert 'memplane_recalls_degraded_total{reason="lexical"} 1.0' in metrics
    assert "1 recalls: 0 succeeded, 1 degraded (words only or shed)" in page
    assert '<span class="badge degraded">degraded</span>' in page
    encoder.gate.set()

    # once the vector is there, the same question is ranked by meaning again: succeeded
    for _ in range(200):
        if embedder.cached("Remind me where my sister lives?") is not None:
            break
        await asyncio.sleep(0.05)
    raw = await client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Remind me where my sister lives?"}])
    assert raw.headers["X-Memplane-Recall"].startswith("succeeded; blocks=1;")
    assert stack.events("recall", claw_id="ann")[-1]["ranking"] == "dense+lexical"


async def test_one_agents_flood_of_recalls_does_not_cost_another_agent_its_memories(
        aiohttp_server, tmp_path, stack):
    # a machine whose encoder takes 60 ms more a call: in turn, the flood's 48 questions need > 300 ms of it
    embedder, encoder = slow_embedder(delay_s=0.06)
    server = await aiohttp_server(embedded(tmp_path / "mem", embedder, recalls_per_agent=2))
    url = url_of(server)
    stack.add_agent("greedy", url)
    # the quiet agent's recall may take 600 ms (deadline 300 ms): room for its own questions to be
    # encoded in their turn on a slow or shared machine (a CI worker beside others), yet far too
    # little to wait behind the flood's 48 questions, as it would without per-agent slots
    stack.add_agent("quiet", url, recall={"path": "/recall", "timeout_ms": 600})
    async with aiohttp.ClientSession() as s:
        words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()
        for start in range(0, 400, 200):
            await post(s, url + "/retain/batch", {"agent_id": "greedy", "items": [
                {"entry": entry(f"hist1_g{i}", f"note {i}: {' '.join(words[(i + j) % 13] for j in range(30))}")}
                for i in range(start, start + 200)]})
        await post(s, url + "/retain/batch", {"agent_id": "quiet", "items": [
            {"entry": entry(f"hist1_q{i}", t)} for i, t in enumerate(FACTS)]})
    quiet = stack.openai("quiet")

    async def flood(http, n):  # straight at the service, as fast as it answers, with the proxy's deadline
        # a later deadline than the quiet agent's: the flood's questions hold the line past it
        status, got = await post(http, url + "/recall", {"agent_id": "greedy", "deadline_ms": 1000,
                                                         "query": f"what did the note say about alpha bravo {n}?"})
        assert status == 200
        flooded.append(got)

    async def ask(q):
        raw = await quiet.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=[{"role": "user", "content": q}])
        return raw.headers["X-Memplane-Recall"]

    questions = ["Where does my sister live?", "What is my cat called?", "When does billing ship?"]
    flooded = []
    async with aiohttp.ClientSession() as http:
        for round_ in range(2):
            floods = [asyncio.create_task(flood(http, round_ * 100 + n)) for n in range(48)]
            await asyncio.sleep(0.02)  # the flood is in hand when the quiet agent asks
            answers = await asyncio.gather(*(ask(f"{q} (round {round_})") for q in questions))
            await asyncio.gather(*floods)
            # memories for every question: by meaning, or by words at the deadline and saying so
            assert all(a.startswith(("succeeded;", "degraded;")) and "blocks=0" not in a for a in answers), answers
    quiet_recalls = stack.events("recall", claw_id="quiet")
    assert len(quiet_recalls) == 6 and {e["memory_status"] for e in quiet_recalls} == {"succeeded"}
    # and not merely by words at the deadline: the quiet agent's questions were embedded in their turn
    # (without per-agent slots they wait behind the flood's 48 and at best 2 of 6 are)
    assert sum(e["ranking"] == "dense+lexical" for e in quiet_recalls) >= 4
    assert sum(e.get("degraded") == "lexical" for e in quiet_recalls) == 6 - sum(
        e["ranking"].startswith("dense+lexical") for e in quiet_recalls)
    stats = server.app[EMBEDDED_SERVICE].scheduler.stats
    assert stats.lexical_deadline + stats.shed_busy > 0  # the flood itself got less than the best
    # and each of its answers that got less says so, by kind: words only, or turned away
    kinds = {"lexical: deadline": "lexical", "none: agent busy": "shed"}
    assert all(got.get("degraded") == kinds.get(got["ranking"].split(";")[0]) for got in flooded)
    assert sum("degraded" in got for got in flooded) == stats.lexical_deadline + stats.shed_busy - sum(
        e.get("degraded") == "lexical" for e in quiet_recalls)


async def test_background_embedding_pauses_while_recalls_are_in_hand(aiohttp_server, tmp_path):
    embedder, encoder = slow_embedder(delay_s=0.01)
    server = await aiohttp_server(embedded(tmp_path / "mem", embedder))
    url = url_of(server)
    service = server.app[EMBEDDED_SERVICE]
    async with aiohttp.ClientSession() as s:
        for start in range(0, 240, 120):
            await post(s, url + "/retain/batch", {"agent_id": "ann", "items": [
                {"entry": entry(f"hist1_{i}", f"turn {i}: we talked about the garden and the {i}th tomato")}
                for i in range(start, start + 120)]})
        assert (await health(s, url))["embedding_backlog"] > 0
        # questions keep arriving while the backlog is being embedded
        for n in range(15):
            await asyncio.gather(*(post(s, url + "/recall", {"agent_id": "ann", "query": f"tomato number {n}{k}",
                                                             "deadline_ms": 250}) for k in range(4)))
        during = await health(s, url)
        # and it still catches up once they stop (240 texts: a few seconds here, longer on an AVX2-only
        # CPU beside other test workers)
        give_up = time.monotonic() + 180
        while (await health(s, url))["embedding_backlog"] and time.monotonic() < give_up:
            await asyncio.sleep(0.05)
        after = await health(s, url)
    assert during["recall_scheduling"]["background_pauses"] > 0
    assert after["embedding_backlog"] == 0 and after["embedded"] >= 240
    assert len(service._indexes["ann"].vectors) == 240


async def test_a_vector_that_is_ready_when_a_held_up_service_notices_its_deadline_is_used():
    """The service's event loop can be held up (a long ranking, the process off the CPU) past the
    moment the vector came and past the deadline: both are then due in one loop turn, and the
    vector is there — the recall ranks with it instead of by words."""
    from memory_adapters.engine.schedule import DENSE_LEXICAL, Deadline, RecallScheduler

    loop = asyncio.get_running_loop()

    class Encoder:  # the query's vector is ready 20 ms after it is asked for
        def submit(self, text):
            future = loop.create_future()
            loop.call_later(0.02, future.set_result, "the vector")
            return future

        def expected_wait(self):
            return 0.0

        def abandon(self, future):
            pass

    async def held_up():  # the loop busy from 10 ms to 150 ms: past the vector and the deadline
        await asyncio.sleep(0.01)
        time.sleep(0.14)

    stall = asyncio.create_task(held_up())
    scheduler = RecallScheduler()
    vector, ranking = await scheduler.vector(scheduler.ask(Encoder(), "where does my sister live?"), Deadline(60))
    await stall
    assert (vector, ranking) == ("the vector", DENSE_LEXICAL)


async def test_a_per_agent_memory_cap_evicts_the_oldest_episodes_and_nothing_else(aiohttp_server, tmp_path):
    app = build_embedded_app(tmp_path / "mem", redactor=Redactor(), telemetry=Telemetry(make_logger(io.StringIO())),
                             embeddings="off", max_memories_per_agent=50)
    server = await aiohttp_server(app)
    url = url_of(server)
    async with aiohttp.ClientSession() as s:
        async with s.post(url + "/api/memories", json={"agent_id": "ann", "key": "favourite-colour",
                                                       "value": "teal, since the first day"}) as r:
            assert r.status == 201, await r.text()
        items = [{"entry": entry(f"hist1_{i}", f"day {i}: I planted row {i} of the orchard",
                                 ts=f"2026-11-{1 + i // 24:02d}T{i % 24:02d}:00:00.000Z")} for i in range(80)]
        for start in range(0, 80, 20):
            await post(s, url + "/retain/batch", {"agent_id": "ann", "items": items[start:start + 20]})
        _, old = await post(s, url + "/recall", {"agent_id": "ann", "query": "day 3 row 3 of the orchard"})
        _, new = await post(s, url + "/recall", {"agent_id": "ann", "query": "day 79 row 79 of the orchard"})
        _, colour = await post(s, url + "/recall", {"agent_id": "ann", "query": "favourite colour"})
        assert (await health(s, url))["evicted"] == 31
    assert "row 3 of" not in str(old["memories"])  # the oldest are gone
    assert "row 79 of" in str(new["memories"])
    assert "teal" in str(colour["memories"])  # what a person wrote is not an episode: kept
    await server.close()
    server = await aiohttp_server(build_embedded_app(tmp_path / "mem", redactor=Redactor(),
                                                     telemetry=Telemetry(make_logger(io.StringIO())),
                                                     embeddings="off", max_memories_per_agent=50))
    async with aiohttp.ClientSession() as s:  # eviction was written to the file, not just the index
        _, old = await post(s, url_of(server) + "/recall", {"agent_id": "ann", "query": "day 3 row 3 of the orchard"})
    assert "row 3 of" not in str(old["memories"])
    assert len(server.app[EMBEDDED_SERVICE]._indexes["ann"]) == 50


async def test_tiered_answers_by_words_before_its_deadline_too(tiered):
    from memory_adapters.engine.dense import QueryBatcher
    url, service = tiered
    if service.embedder is None:
        pytest.skip("embeddings are off in this environment")
    embedder, encoder = slow_embedder(hold_s=30)
    service.queries = QueryBatcher(embedder)  # the same model, stuck: as on a machine with no time for it
    async with aiohttp.ClientSession() as s:
        for i, t in enumerate(FACTS):
            assert (await post(s, url + "/retain", {"agent_id": "ann", "entry": entry(f"hist1_{i}", t)}))[0] == 202
        status, got = await post(s, url + "/recall", {"agent_id": "ann", "query": "Which pet did I adopt?",
                                                      "deadline_ms": 80})
        encoder.gate.set()
    assert status == 200 and got["ranking"] == "lexical: deadline"
    assert "Miso" in got["memories"][0]["text"]
    service.queries.close()


async def test_tiered_encodes_the_question_while_it_checks_the_agents_version(tiered):
    """A tiered recall first asks Redis whether another replica wrote for the agent. When that
    round trip is slow (a loaded Redis, a far one) and so is the encoder, the two overlap: the
    question is still ranked with its vector, not by words alone at the deadline."""
    from memory_adapters.engine.dense import QueryBatcher
    url, service = tiered
    if service.embedder is None:
        pytest.skip("embeddings are off in this environment")
    embedder, _ = slow_embedder(delay_s=0.12)
    service.queries = QueryBatcher(embedder)
    service.queries.call_s = 0.12  # the encoder's pace, as the batcher would have learnt it
    real_versions = service.stm.versions

    async def slow_versions(agent_ids):
        await asyncio.sleep(0.12)
        return await real_versions(agent_ids)

    async with aiohttp.ClientSession() as s:
        for i, t in enumerate(FACTS):
            assert (await post(s, url + "/retain", {"agent_id": "ann", "entry": entry(f"hist1_{i}", t)}))[0] == 202
        await post(s, url + "/recall", {"agent_id": "ann", "query": "warm the index"})
        service.stm.versions = slow_versions
        status, got = await post(s, url + "/recall", {"agent_id": "ann", "query": "Which pet did I adopt?",
                                                      "deadline_ms": 200})
    service.queries.close()
    assert status == 200 and got["ranking"] == "dense+lexical"  # 120 + 120 ms in a row would not fit
    assert "Miso" in got["memories"][0]["text"]


async def test_a_stalled_moment_does_not_leave_later_recalls_without_memories(aiohttp_server, tmp_path):
    """A ranking the machine stalled for a second (a burst of other work) must not make the
    service think it never has time again: the next recalls still rank what they have."""
    embedder, encoder = slow_embedder()
    server = await aiohttp_server(embedded(tmp_path / "mem", embedder))
    url = url_of(server)
    async with aiohttp.ClientSession() as s:
        await post(s, url + "/retain/batch", {"agent_id": "ann", "items": [
            {"entry": entry(f"hist1_{i}", t)} for i, t in enumerate(FACTS)]})
        _, first = await post(s, url + "/recall", {"agent_id": "ann", "query": "Which cat did I adopt?", "deadline_ms": 180})
        assert first["memories"]
        for _ in range(20):
            server.app[EMBEDDED_SERVICE].scheduler.ranked(1.0)
        for q in ["Where does my sister live?", "When does billing ship?"]:
            status, got = await post(s, url + "/recall", {"agent_id": "ann", "query": q, "deadline_ms": 180})
            assert status == 200 and got["memories"] and not got["ranking"].startswith("none")



async def test_questions_given_up_do_not_hold_the_line_for_the_next_one():
    """A burst left the encoder behind and a dozen recalls answered by words. The question asked
    next is encoded before those dozen — kept only for the cache, once no recall waits — so it is
    not pushed past its own deadline by questions no one awaits any more."""
    from memory_adapters.engine.dense import QueryBatcher
    embedder, encoder = slow_embedder(hold_s=30)
    queries = QueryBatcher(embedder)
    held = [queries.submit(f"what did we plant in row {i}?") for i in range(2)]  # both encoder calls stuck
    for _ in range(500):
        if encoder.calls == 2:
            break
        await asyncio.sleep(0.01)
    given_up = [queries.submit(f"who carried crate number {i}?") for i in range(12)]
    in_line = queries.expected_wait()
    for f in given_up:
        queries.abandon(f)  # what a recall past its deadline does
    assert queries.expected_wait() < in_line  # the next recall does not count them as ahead of it
    fresh = queries.submit("Which pet did I adopt?")
    encoder.gate.set()
    assert (await asyncio.wait_for(fresh, 30)).shape == (embedder.dim,)
    await asyncio.wait_for(asyncio.gather(*held, *given_up), 30)
    order = [t for batch in encoder.batches for t in batch]
    assert order.index("which pet did i adopt?") < min(order.index(f"who carried crate number {i}?") for i in range(12))
    assert embedder.cached("Who carried crate number 7?") is not None  # still there for the next time it is asked
    queries.close()


async def test_many_questions_of_one_agent_at_once_each_get_memories_when_nothing_must_be_waited_for(
        aiohttp_server, tmp_path):
    """32 of one agent's recalls at once (many sessions of one agent), its index loaded and every
    question asked before (vectors cached): one slot per agent, a tight deadline, and still no
    recall answers "agent busy" — a recall that needs to wait for nothing never gives up its turn
    while holding its slot."""
    embedder, _ = slow_embedder()
    server = await aiohttp_server(embedded(tmp_path / "mem", embedder, recalls_per_agent=1))
    url = url_of(server)
    questions = [f"What did I say about the {w} garden plan?" for w in
                 "north south east west upper lower front back".split()] * 4
    async with aiohttp.ClientSession() as s:
        await post(s, url + "/retain/batch", {"agent_id": "ann", "items": [
            {"entry": entry(f"hist1_{i}", f"The {w} garden plan: {n} tomato rows and a bench")}
            for i, (n, w) in enumerate((n, w) for n in range(40) for w in ("north", "south", "east", "west"))]})
        for q in dict.fromkeys(questions):  # asked once before: loaded, embedded
            assert (await post(s, url + "/recall", {"agent_id": "ann", "query": q}))[0] == 200
        answers = await asyncio.gather(*(post(s, url + "/recall", {"agent_id": "ann", "query": q, "deadline_ms": 60})
                                         for q in questions))
        stats = (await health(s, url))["recall_scheduling"]
    assert [status for status, _ in answers] == [200] * 32
    assert all(body["memories"] and body["ranking"] == "dense+lexical" for _, body in answers), \
        [body.get("ranking") for _, body in answers]
    assert stats["shed_busy"] == 0


def _raw_post(port: int, path: str, body: dict, *, close: bool = False) -> bytes:
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n{'Connection: close' if close else 'Connection: keep-alive'}"
            f"\r\n\r\n").encode() + data


async def test_a_recall_queued_behind_other_work_counts_its_deadline_from_when_it_was_read(tmp_path):
    """The proxy's `deadline_ms` runs from when it sent the recall (CONTRACT §5). A recall whose
    handler starts late — 32 recalls in flight, each ranked in turn on the service's one event
    loop — takes the cheaper ranking it has (fewer candidates) and still answers with memories,
    instead of ranking in full as if it had its whole deadline and arriving after the proxy gave up.
    Here another handler holds the event loop for 300 ms after both requests were read."""
    from memplane_cli import runner

    app = build_embedded_app(tmp_path / "mem", redactor=Redactor(), telemetry=Telemetry(make_logger(io.StringIO())),
                             embeddings="off")

    async def busy(request: web.Request) -> web.Response:  # what 30 rankings ahead of it do to the loop
        time.sleep(0.3)
        return web.json_response({})
    app.router.add_post("/busy", busy)
    site, port = await runner.start_site(runner.Site(app, "127.0.0.1", 0))
    try:
        url = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as s:
            for start in range(0, 450, 50):  # past the 400 candidates a full ranking reads
                status, _ = await post(s, url + "/retain/batch", {"agent_id": "ann", "items": [
                    {"entry": entry(f"hist1_{i}", f"{FACTS[i % 3]} Note {i} about the garden fence.")}
                    for i in range(start, start + 50)]})
                assert status < 300
            question = {"agent_id": "ann", "query": "Where does my sister live?", "deadline_ms": 150}
            status, alone = await post(s, url + "/recall", question)
            assert status == 200 and alone["ranking"] == "lexical"  # nothing ahead of it: a full ranking

        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_raw_post(port, "/busy", {}) + _raw_post(port, "/recall", question, close=True))
        await writer.drain()
        raw = await reader.read()  # both answers, in order, then the connection closes
        writer.close()
        queued = json.loads(raw.rsplit(b"\r\n\r\n", 1)[1])
        assert queued["ranking"] == "lexical; fewer candidates"
        assert "Porto" in queued["memories"][0]["text"]  # still the memories it needs
    finally:
        await site.cleanup()
