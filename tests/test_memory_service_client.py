"""The memory-service client against a real aiohttp server on loopback: what each way a service
can answer (or not) becomes for recall, retain, batch, forget, the descriptor and the REST API."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from manifests.agents import memory_manifest
from manifests.models import MemoryManifest
from memplane_core.contract import MAX_FORGET_IDS, ForgetRequest, RecallRequest, RetainRequest, describe
from memplane_cli.runner import free_port
from proxy.memory_service import (
    MAX_RECALL_BYTES,
    BatchUnsupported,
    MemoryService,
    MemoryServiceError,
    RetryableRetainError,
)


async def service(aiohttp_server, routes: dict[str, object], *, recall_timeout_ms: int = 300,
                  batch: bool = False) -> tuple[MemoryService, aiohttp.ClientSession]:
    app = web.Application()
    for path, handler in routes.items():
        method, _, where = path.partition(" ")
        app.router.add_route(method, where, handler)
    server = await aiohttp_server(app)
    manifest = MemoryManifest.from_doc(memory_manifest(
        "mem", f"http://{server.host}:{server.port}", recall_timeout_ms=recall_timeout_ms, auth_token="svc-token",
        retain_batch_path="/retain/batch" if batch else None))
    session = aiohttp.ClientSession()
    return MemoryService.of(session, manifest, "ann", "pod-1"), session


def ask() -> RecallRequest:
    return RecallRequest.model_construct(agent_id="ann", pod="pod-1", query="where do I live?",
                                         messages=[{"role": "user", "content": "where do I live?"}],
                                         metadata={"path": "openai"}, budget_tokens=3000, max_blocks=8)


async def test_a_recall_body_is_one_services_accept_and_odd_answer_items_are_read_leniently(aiohttp_server):
    seen = []

    async def recall(request: web.Request) -> web.Response:
        seen.append((request.headers.get("Authorization"), await request.read()))
        return web.json_response({"ranking": "lexical: deadline\x1b[31m", "memories": [
            {"text": "Lives in Lyon.", "score": 0.8, "kind": "fact", "id": "m1"},
            {"text": "Likes tea.", "score": True, "kind": 7}, "not an object", {"text": None}]})

    client, session = await service(aiohttp_server, {"POST /recall": recall})
    async with session:
        outcome = await client.recall(ask())
    [(auth, raw)] = seen
    sent = RecallRequest.model_validate_json(raw)  # what memplane's own services validate it with
    assert auth == "Bearer svc-token" and sent.agent_id == "ann" and sent.deadline_ms == 150
    assert b"null" not in raw  # nothing unset goes on the wire (no `system`, no `top_k`)
    assert outcome.status == "succeeded" and outcome.status_code == 200
    assert outcome.ranking == "lexical: deadline?[31m"  # no control characters reach a log line
    assert [(m.text, m.score, m.kind) for m in outcome.memories] == [
        ("Lives in Lyon.", 0.8, "fact"), ("Likes tea.", None, "7"), ("", None, None)]


async def test_a_recall_that_does_not_answer_in_time_is_timed_out(aiohttp_server):
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({"memories": [{"text": "too late"}]})

    client, session = await service(aiohttp_server, {"POST /recall": slow}, recall_timeout_ms=50)
    async with session:
        outcome = await client.recall(ask())
        release.set()
    assert outcome.status == "timed_out" and outcome.memories == [] and outcome.error == "no answer within 50 ms"


async def test_an_answer_that_came_in_time_while_the_proxy_was_off_the_cpu_is_used():
    """On a host whose cores are all taken the proxy's process can be off the CPU when the answer
    comes; when it runs again, the answer and the timeout are due at once. The answer counts."""
    import threading
    import time

    ready, done = threading.Event(), threading.Event()
    port = free_port()

    def serve() -> None:  # the service in its own thread and event loop: it answers while ours stalls
        async def recall(request: web.Request) -> web.Response:
            await asyncio.sleep(0.2)
            return web.json_response({"memories": [{"text": "Lives in Lyon."}]})

        async def main() -> None:
            app = web.Application()
            app.router.add_post("/recall", recall)
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            ready.set()
            await asyncio.to_thread(done.wait, 30)
            await runner.cleanup()
        asyncio.run(main())

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    assert ready.wait(10)
    manifest = MemoryManifest.from_doc(memory_manifest("mem", f"http://127.0.0.1:{port}", recall_timeout_ms=400))
    async with aiohttp.ClientSession() as session:
        client = MemoryService.of(session, manifest, "ann", "pod-1")

        async def off_the_cpu() -> None:  # the proxy's process descheduled from 150 ms to 600 ms
            await asyncio.sleep(0.15)
            time.sleep(0.45)
        stall = asyncio.create_task(off_the_cpu())
        outcome = await client.recall(ask())
        await stall
    done.set()
    server.join(10)
    assert outcome.status == "succeeded" and [m.text for m in outcome.memories] == ["Lives in Lyon."]


@pytest.mark.parametrize(("answer", "error"), [
    (web.json_response({"error": {"message": "busy"}}, status=503), "status 503"),
    (web.Response(body=b'{"memories": [{"text": "' + b"x" * MAX_RECALL_BYTES + b'"}]}',
                  content_type="application/json"), f"response over {MAX_RECALL_BYTES} bytes"),
    (web.Response(text="<html>oops</html>", content_type="text/html"), "invalid JSON"),
    (web.json_response({"results": []}), "no memories list"),
])
async def test_anything_but_a_small_valid_answer_means_no_memories(aiohttp_server, answer, error):
    async def recall(request: web.Request) -> web.Response:
        return answer

    client, session = await service(aiohttp_server, {"POST /recall": recall})
    async with session:
        outcome = await client.recall(ask())
    assert (outcome.status, outcome.error, outcome.memories) == ("failed", error, [])
    assert outcome.status_code == (503 if error == "status 503" else 200)


async def test_a_service_that_is_not_there_fails_each_call_its_own_way():
    manifest = MemoryManifest.from_doc(memory_manifest("mem", f"http://127.0.0.1:{free_port()}"))
    async with aiohttp.ClientSession() as session:
        client = MemoryService.of(session, manifest, "ann")
        outcome = await client.recall(ask())
        assert outcome.status == "failed" and outcome.error == "ClientConnectorError"
        with pytest.raises(RetryableRetainError, match="ClientConnectorError"):
            await client.retain({}, {"id": "hist1_a"})
        with pytest.raises(MemoryServiceError) as refused:
            await client.listing()
        assert refused.value.unreachable and "did not answer" in str(refused.value)


async def test_retain_says_when_to_try_again_and_a_refusal_is_a_status(aiohttp_server):
    answers = [web.Response(status=503, headers={"Retry-After": "2"}), web.Response(status=429),
               web.Response(status=503, headers={"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}),
               web.Response(status=503, headers={"Retry-After": "99999"}),
               web.json_response({"error": {"message": "duplicate"}}, status=409),
               web.json_response({"status": "stored"}, status=202)]
    bodies = []

    async def retain(request: web.Request) -> web.Response:
        bodies.append(RetainRequest.model_validate_json(await request.read()))
        return answers.pop(0)

    client, session = await service(aiohttp_server, {"POST /retain": retain})
    waits = []
    async with session:
        for _ in range(4):
            with pytest.raises(RetryableRetainError) as busy:
                await client.retain({"service": "mem"}, {"id": "hist1_a", "ts": "2026-01-01T00:00:00Z"})
            waits.append(busy.value.retry_after)
        assert await client.retain({}, {"id": "hist1_a"}) == 409  # refused for good: not retried
        assert await client.retain({}, {"id": "hist1_a"}) == 202
    assert waits == [2.0, None, None, None]  # seconds only, and never more than an hour
    assert bodies[0].pod == "pod-1" and bodies[0].entry["id"] == "hist1_a" and bodies[0].metadata == {"service": "mem"}


async def test_a_batch_gives_each_item_its_status_or_is_retried_whole(aiohttp_server):
    answers = [web.json_response({"results": [{"code": 202}, {"code": 400}]}),
               web.json_response({"stored": 2}), web.Response(status=404), web.Response(status=400)]

    async def batch(request: web.Request) -> web.Response:
        return answers.pop(0)

    client, session = await service(aiohttp_server, {"POST /retain/batch": batch}, batch=True)
    items = [({}, {"id": "hist1_a"}), ({}, {"id": "hist1_b"})]
    async with session:
        assert await client.retain_batch(items) == [202, 400]
        with pytest.raises(RetryableRetainError, match="without per-item results"):
            await client.retain_batch(items)
        with pytest.raises(BatchUnsupported):
            await client.retain_batch(items)
        assert await client.retain_batch(items) == [400, 400]


async def test_forget_goes_in_calls_services_accept_and_a_refusal_is_an_error(aiohttp_server):
    calls: list[ForgetRequest] = []

    async def forget(request: web.Request) -> web.Response:
        calls.append(ForgetRequest.model_validate_json(await request.read()))
        return web.Response(status=204 if len(calls) < 3 else 500)

    client, session = await service(aiohttp_server, {"POST /forget": forget})
    ids = [f"hist1_{i}" for i in range(MAX_FORGET_IDS + 1)]
    async with session:
        assert await client.forget(ids, "asked") == 204
        with pytest.raises(MemoryServiceError) as refused:
            await client.forget(["hist1_x"], "asked")
    assert [len(c.entry_ids) for c in calls] == [MAX_FORGET_IDS, 1, 1] and calls[0].reason == "asked"
    assert refused.value.status == 500 and refused.value.reason == "status 500"


async def test_the_descriptor_is_read_and_checked(aiohttp_server):
    docs = [describe(retain_batch=True), {"version": 2, "memory": "everything"}, "<html>"]

    async def described(request: web.Request) -> web.Response:
        doc = docs.pop(0)
        return web.json_response(doc) if isinstance(doc, dict) else web.Response(text=doc)

    client, session = await service(aiohttp_server, {"GET /.claw-describe.json": described})
    async with session:
        assert (await client.describe())["memory"]["retain"]["batch_path"] == "/retain/batch"
        with pytest.raises(MemoryServiceError, match="descriptor is not valid"):
            await client.describe()
        with pytest.raises(MemoryServiceError, match="not JSON"):
            await client.describe()


async def test_a_rest_refusal_carries_the_services_own_message(aiohttp_server):
    async def listing(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "unknown scope 'x'"}}, status=400)

    client, session = await service(aiohttp_server, {"GET /api/memories": listing})
    async with session:
        with pytest.raises(MemoryServiceError) as refused:
            await client.listing(scope="x")
    assert refused.value.status == 400 and refused.value.service_message == "unknown scope 'x'"
    assert str(refused.value) == "The memory service refused to list memories (status 400: unknown scope 'x')."


async def test_a_timed_out_recall_keeps_its_connection_for_the_next_one(aiohttp_server):
    """The answer that came too late is read in the background, so the next recall reuses the
    connection instead of opening another (at 32 turns in flight that was 8 % of the proxy's CPU)."""
    peers: set = set()
    calls = 0

    async def recall(request: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        peers.add(request.transport.get_extra_info("peername"))
        if calls == 1:
            await asyncio.sleep(0.1)  # past the 50 ms timeout
        return web.json_response({"memories": [{"text": "Lives in Lyon."}]})

    client, session = await service(aiohttp_server, {"POST /recall": recall}, recall_timeout_ms=50)
    async with session:
        late = await client.recall(ask())
        await asyncio.sleep(0.15)  # the late answer arrives and is read
        timely = await client.recall(ask())
    assert late.status == "timed_out" and late.memories == []
    assert timely.status == "succeeded" and [m.text for m in timely.memories] == ["Lives in Lyon."]
    assert len(peers) == 1  # one connection for both
