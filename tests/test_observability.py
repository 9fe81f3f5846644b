"""An operator sees what memory did: a status header on every turn, the turn id in the ledger,
and Prometheus metrics behind the admin token."""

from __future__ import annotations

import re

import aiohttp
import pytest

from memplane_cli.runner import free_port
from tests.conftest import url_of

RECALL = re.compile(r"^(succeeded|failed|timed_out|skipped|off); blocks=\d+; removed=\d+; latency_ms=\d+\.\d$")
BODIES = {
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "What is my cat called?"}]},
    "/v1/messages": {"model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": "What is my cat called?"}]},
    "/v1/responses": {"model": "m", "input": "What is my cat called?"},
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", sorted(BODIES))
async def test_every_turn_says_what_memory_did(stack, reference, path, stream):
    ref_url, _ = reference
    token = stack.add_agent("seen", ref_url)
    async with aiohttp.ClientSession() as s:
        async with s.post(stack.proxy_url + "/v1/chat/completions", headers={"Authorization": f"Bearer {token}"},
                          json={"model": "m", "messages": [{"role": "user", "content": "My cat is called Miso."}]}) as r:
            await r.read()
        await stack.settle()
        async with s.post(stack.proxy_url + path, json={**BODIES[path], "stream": stream},
                          headers={"Authorization": f"Bearer {token}"}) as r:
            assert r.status == 200
            await r.read()
            turn_id, recall = r.headers["X-Memplane-Turn-Id"], r.headers["X-Memplane-Recall"]
    assert RECALL.match(recall) and recall.startswith("succeeded; blocks=1")
    await stack.settle()
    assert stack.ledger("seen")[-1]["turn_id"] == turn_id


async def test_recall_status_is_off_without_memory_and_failed_when_the_service_is_down(stack):
    quiet = stack.add_agent("quiet")
    down = stack.add_agent("down", f"http://127.0.0.1:{free_port()}")
    async with aiohttp.ClientSession() as s:
        for token, expect in ((quiet, "off; blocks=0"), (down, "failed; blocks=0")):
            async with s.post(stack.proxy_url + "/v1/chat/completions", json=BODIES["/v1/chat/completions"],
                              headers={"Authorization": f"Bearer {token}"}) as r:
                assert r.status == 200 and r.headers["X-Memplane-Recall"].startswith(expect)


async def test_metrics_count_turns_and_memory_without_agent_labels(stack, reference):
    ref_url, _ = reference
    token = stack.add_agent("counted", ref_url)
    async with aiohttp.ClientSession() as s:
        for _ in range(3):
            async with s.post(stack.proxy_url + "/v1/chat/completions", json=BODIES["/v1/chat/completions"],
                              headers={"Authorization": f"Bearer {token}"}) as r:
                await r.read()
        async with s.post(stack.proxy_url + "/v1/chat/completions", json={"model": "m"},
                          headers={"Authorization": f"Bearer {token}"}) as r:
            assert r.status == 400
        await stack.settle()
        async with s.get(stack.proxy_url + "/metrics") as r:  # loopback, no admin token configured
            assert r.status == 200 and r.content_type.startswith("text/plain")
            text = await r.text()
    assert 'memplane_turns_total{format="openai",status="200"} 3.0' in text
    assert 'memplane_turns_total{format="openai",status="400"} 1.0' in text
    assert 'memplane_memory_ops_total{op="recall",status="succeeded"} 3.0' in text
    assert 'memplane_memory_ops_total{op="retain",status="succeeded"} 3.0' in text
    for name in ("memplane_upstream_latency_seconds_bucket", "memplane_recall_latency_seconds_count",
                 "memplane_injected_blocks_total", "memplane_injected_tokens_total", "memplane_retain_backlog_entries",
                 "memplane_retain_dead_letters_total"):
        assert name in text
    assert "counted" not in text  # no agent id as a label


async def test_metrics_need_the_admin_token_when_one_is_set(make_stack):
    stack = await make_stack(admin_token="ops-admin-secret")
    agent = stack.add_agent("agent")
    async with aiohttp.ClientSession() as s:
        for headers, status in (({}, 401), ({"Authorization": f"Bearer {agent}"}, 401),
                                ({"Authorization": "Bearer ops-admin-secret"}, 200)):
            async with s.get(stack.proxy_url + "/metrics", headers=headers) as r:
                assert r.status == status


async def test_a_turn_is_explained_by_its_id(stack, aiohttp_server):
    from click.testing import CliRunner

    from memplane_cli.main import main
    from tests.test_injection_safety import fixed_recall
    memories = [{"text": "The cat is called Miso.", "kind": "fact", "source": "svc", "score": 0.9},
                {"text": "old log", "kind": "raw_transcript"}, {"text": "The cat is called Miso.", "kind": "fact"},
                {"text": "key sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zQ", "kind": "fact"}]
    server = await aiohttp_server(fixed_recall(memories))
    token = stack.add_agent("why", url_of(server))
    async with aiohttp.ClientSession() as s:
        async with s.post(stack.proxy_url + "/v1/chat/completions", json=BODIES["/v1/chat/completions"],
                          headers={"Authorization": f"Bearer {token}"}) as r:
            turn_id = r.headers["X-Memplane-Turn-Id"]
        await stack.settle()
        async with s.get(f"{stack.proxy_url}/memplane/turns/{turn_id}") as r:
            doc = await r.json()
        async with s.get(f"{stack.proxy_url}/memplane/turns/turn_nope") as r:
            assert r.status == 404
    assert doc["agent_id"] == "why" and doc["format"] == "openai" and doc["query"] == "What is my cat called?"
    assert [m["decision"] for m in doc["memories"]] == ["injected", "transcript_kind", "duplicate", "injected"]
    assert "Miso" in doc["block"] and doc["placement"] == "trailing" and doc["redactions"] == {"openai": 1}
    assert doc["entry_id"] == stack.ledger("why")[-1]["id"] and doc["retain_state"] in ("pending", "delivered",
                                                                                         "failed: status 404 (will retry)")
    import asyncio  # the CLI blocks: run it beside the loop that serves the proxy
    result = await asyncio.to_thread(CliRunner().invoke, main, ["explain", turn_id, "--url", stack.proxy_url])
    assert result.exit_code == 0 and "[transcript_kind]" in result.output and "Miso" in result.output
    assert doc["deadline_ms"] == 150 and "told 150 ms" in result.output  # what the service was told it had


@pytest.mark.parametrize("said,header,reason", [
    ("shed", "degraded", "shed"),
    ({"nested": "<b>"}, "degraded", "other"),  # any other truthy value: a bounded label, never its text
    ("x\r\nSet-Cookie: a=b " * 700, "degraded", "other"),  # header splitting, near the 16 KiB answer limit
    (False, "succeeded", None), ("", "succeeded", None), (None, "succeeded", None),
], ids=["shed", "object", "header-splitting", "false", "empty", "null"])
async def test_a_service_that_says_its_answer_is_degraded_is_never_reported_as_a_success(
        stack, aiohttp_server, said, header, reason):
    from aiohttp import web

    async def recall(request):
        return web.json_response({"memories": [{"text": "My cat is called Miso.", "kind": "fact"}], "degraded": said})

    app = web.Application()
    app.router.add_post("/recall", recall)
    server = await aiohttp_server(app)
    token = stack.add_agent("told", url_of(server), retain=None)
    async with aiohttp.ClientSession() as s:
        async with s.post(stack.proxy_url + "/v1/chat/completions", json=BODIES["/v1/chat/completions"],
                          headers={"Authorization": f"Bearer {token}"}) as r:
            assert r.status == 200
            recalled = r.headers["X-Memplane-Recall"]
        async with s.get(stack.proxy_url + "/metrics") as r:
            text = await r.text()
    assert recalled.startswith(f"{header}; blocks=1;") and "Set-Cookie" not in str(r.headers)
    assert "Miso" in stack.provider.received[-1].memories_block  # degraded memories are still memories
    event = stack.events("recall", claw_id="told")[-1]
    assert event["memory_status"] == "succeeded" and event.get("degraded") == reason
    if reason:
        assert f'memplane_recalls_degraded_total{{reason="{reason}"}} 1.0' in text
    else:
        assert "memplane_recalls_degraded_total{" not in text
