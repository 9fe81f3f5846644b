"""Nobody gets in without their own token, and every bad request gets a clean provider-shaped error."""

from __future__ import annotations

import aiohttp
import openai
import pytest

from memplane_cli.runner import free_port


@pytest.mark.parametrize("token", ["analyst:wrong-secret", "ghost:whatever", "no-colon-token"])
async def test_bad_tokens_get_401_and_nothing_is_forwarded(stack, token):
    stack.add_agent("analyst")
    from openai import AsyncOpenAI
    client = AsyncOpenAI(base_url=f"{stack.proxy_url}/v1", api_key=token, max_retries=0)
    with pytest.raises(openai.AuthenticationError) as exc:
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert exc.value.status_code == 401
    assert exc.value.body["type"] == "authentication_error"
    assert stack.provider.received == []


async def test_missing_token_gets_401(stack):
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{stack.proxy_url}/v1/chat/completions", json={"messages": []}) as r:
            assert r.status == 401
            body = await r.json()
    assert body["error"]["type"] == "authentication_error"
    assert stack.provider.received == []


async def test_token_is_never_logged_or_forwarded(stack, reference):
    ref_url, _ = reference
    token = stack.add_agent("quiet", ref_url)
    await stack.openai("quiet").chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    await stack.settle()
    secret = token.split(":", 1)[1]
    assert secret not in stack.log.getvalue()
    assert secret not in str(stack.provider.received[-1].headers)
    assert secret not in (stack.history_root / "quiet" / "history.jsonl").read_text()


async def _post(stack, agent, raw: bytes, path="/v1/chat/completions"):
    headers = {"Authorization": f"Bearer {stack.tokens[agent]}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as s, s.post(f"{stack.proxy_url}{path}", data=raw, headers=headers) as r:
        return r.status, await r.json()


async def test_malformed_json_missing_messages_and_oversized_bodies(make_stack):
    stack = await make_stack(max_body_bytes=4096)
    stack.add_agent("sloppy")
    status, body = await _post(stack, "sloppy", b"{not json")
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    status, body = await _post(stack, "sloppy", b'{"model": "m"}')
    assert status == 400 and body["error"]["param"] == "messages"
    status, body = await _post(stack, "sloppy", b'["a list"]')
    assert status == 400
    status, body = await _post(stack, "sloppy", b'{"model":"m","messages":[{"role":"user","content":"' + b"x" * 5000 + b'"}]}')
    assert status == 413 and body["error"]["type"] == "invalid_request_error"
    assert stack.provider.received == []
    assert stack.ledger("sloppy") == []


async def test_upstream_unreachable_is_502(make_stack, tmp_path):
    stack = await make_stack()
    stack.state.settings.openai_base_url = f"http://127.0.0.1:{free_port()}/v1"
    stack.add_agent("lonely")
    with pytest.raises(openai.APIStatusError) as exc:
        await stack.openai("lonely").chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert exc.value.status_code == 502
    assert "unreachable" in exc.value.message


async def test_upstream_timeout_is_504(make_stack):
    stack = await make_stack(upstream_read_timeout_s=0.3)
    stack.provider.delay_s = 3
    stack.add_agent("hurried")
    with pytest.raises(openai.APIStatusError) as exc:
        await stack.openai("hurried").chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert exc.value.status_code == 504


async def test_upstream_errors_pass_through_and_are_not_ledgered(stack):
    stack.add_agent("unlucky")
    stack.provider.fail_with = [429]
    with pytest.raises(openai.RateLimitError):
        await stack.openai("unlucky").chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    await stack.settle()
    assert stack.ledger("unlucky") == []


async def test_unknown_agent_ids_are_not_remembered(stack):
    import aiohttp
    async with aiohttp.ClientSession() as s:
        for i in range(300):
            async with s.get(f"{stack.proxy_url}/v1/models", headers={"Authorization": f"Bearer ghost{i}:x"}) as r:
                assert r.status == 401
    assert len(stack.state.contexts._cache) == 0  # nothing grows with ids that do not exist


async def test_an_oversized_authorization_header_is_refused_without_logging_the_token(stack, caplog):
    import asyncio
    from urllib.parse import urlsplit
    token = stack.add_agent("big")
    parts = urlsplit(stack.proxy_url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}{'A' * 20000}\r\n\r\n".encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.read(200), 10)
    writer.close()
    assert head.startswith(b"HTTP/1.") and b" 400 " in head.split(b"\r\n")[0]
    secret = token.split(":", 1)[1]
    assert secret not in caplog.text and secret not in stack.log.getvalue()


async def test_a_stream_the_provider_breaks_off_midway_raises_in_every_sdk_instead_of_ending_short(make_stack):
    """A cut-off answer must not look finished: the agent's SDK raises, as it would had the
    provider failed the stream itself, and the ledger still keeps what was said, marked."""
    import anthropic
    stack = await make_stack(upstream_read_timeout_s=0.4)
    stack.provider.stall_after = 3
    stack.add_agent("cut")
    with pytest.raises(anthropic.APIStatusError) as claude:
        async with stack.anthropic("cut").messages.stream(model="c", max_tokens=100,
                                                          messages=[{"role": "user", "content": "tell me"}]) as s:
            await s.get_final_message()
    with pytest.raises(openai.APIError) as chat:
        async for _ in await stack.openai("cut").chat.completions.create(
                model="m", stream=True, messages=[{"role": "user", "content": "tell me"}]):
            pass
    events = []
    async for ev in await stack.openai("cut").responses.create(model="m", stream=True, input="tell me"):
        events.append(ev.type)
    assert "broke off" in claude.value.message and "broke off" in chat.value.message
    assert events[-1] == "error" and "response.completed" not in events
    await stack.settle()
    assert [e["response"].get("incomplete") for e in stack.ledger("cut")] == ["upstream_broke_off"] * 3


async def test_one_agents_flood_of_slow_calls_leaves_other_agents_their_upstream_slots(make_stack):
    """An agent may hold only its share of the calls to the provider; its other calls wait for its
    own slots, not everyone's."""
    import asyncio
    stack = await make_stack(max_concurrent_upstream=8)  # a share of 2 each
    stack.provider.slow_models = {"slow": 30.0}
    stack.add_agent("greedy")
    stack.add_agent("polite")
    greedy = stack.openai("greedy")
    flood = [asyncio.create_task(greedy.chat.completions.create(model="slow", messages=[{"role": "user", "content": f"{n}"}]))
             for n in range(20)]
    while sum(r.body.get("model") == "slow" for r in stack.provider.received) < 2:
        await asyncio.sleep(0.01)
    answer = await asyncio.wait_for(stack.openai("polite").chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hello"}]), 20)
    assert answer.choices[0].message.content
    assert sum(r.body.get("model") == "slow" for r in stack.provider.received) == 2  # the rest wait their turn
    for task in flood:
        task.cancel()
    await asyncio.gather(*flood, return_exceptions=True)


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_a_body_that_claims_compression_but_is_not_compressed_gets_400_in_the_callers_format(stack, encoding):
    """A client (or an attacker) labels a plain body `Content-Encoding: gzip`: the proxy says so in the
    provider's own error shape, on turns and pass-through alike, instead of an internal error."""
    stack.add_agent("labeller")
    plain = b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}'
    for path, anthropic in (("/v1/chat/completions", False), ("/v1/messages", True), ("/v1/embeddings", False),
                            ("/v1/messages/count_tokens", True)):
        headers = {"Authorization": f"Bearer {stack.tokens['labeller']}", "Content-Type": "application/json",
                   "Content-Encoding": encoding}
        async with aiohttp.ClientSession(auto_decompress=False) as s, \
                s.post(f"{stack.proxy_url}{path}", data=plain, headers=headers) as r:
            status, body = r.status, await r.json()
        assert status == 400, (path, body)
        if anthropic:
            assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        else:
            assert body["error"]["type"] == "invalid_request_error" and body["error"]["code"] == "invalid_body"
    assert stack.provider.received == [] and stack.ledger("labeller") == []
    assert not [ln for ln in stack.log_lines() if ln.get("type") == "unhandled_error"]


async def test_a_turn_the_ledger_cannot_record_is_refused_before_the_provider_is_paid(stack, tmp_path):
    """Every model call is a recorded turn: a ledger that cannot take it (here a planted symlink,
    which the writer will not follow; a full disk alike) is a 503 in the provider's format, and
    the provider is never called."""
    import os
    stack.add_agent("blocked")
    home = stack.history_root / "blocked"
    home.mkdir(parents=True, exist_ok=True)
    os.symlink(tmp_path / "elsewhere.jsonl", home / "history.jsonl")
    with pytest.raises(openai.APIStatusError) as refused:
        await stack.openai("blocked").with_options(max_retries=0).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hello"}])
    assert refused.value.status_code == 503 and refused.value.code == "ledger_unavailable"
    assert stack.provider.received == [] and not (tmp_path / "elsewhere.jsonl").exists()
