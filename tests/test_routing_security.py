"""Every model call is a turn: raw paths that could be read two ways, the pass-through allow-list
and `allowed_models`, driven over a raw socket the way an attacker would (no SDK normalising)."""

from __future__ import annotations

import asyncio
import io
from urllib.parse import urlsplit

import aiohttp
import orjson
import pytest
from aiohttp import web

from manifests.agents import write_agent
from memplane_core.telemetry import Telemetry, make_logger
from proxy.app import build_app
from proxy.config import ProxySettings
from tests.conftest import url_of


async def raw_request(url: str, method: str, path: str, token: str, body: bytes = b"", *,
                      content_type: str = "application/json") -> tuple[int, dict]:
    """Send the request line exactly as given (like `curl --path-as-is`)."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    head = (f"{method} {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    writer.write(head.encode() + body)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    status = int(data.split(b" ", 2)[1])
    payload = data.split(b"\r\n\r\n", 1)[1]
    if b"transfer-encoding: chunked" in data.split(b"\r\n\r\n", 1)[0].lower():
        payload = b"".join(payload.split(b"\r\n")[1::2])
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError:
        doc = {}
    return status, doc


CHAT = orjson.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})


@pytest.mark.parametrize("path", [
    "/v1/chat/./completions", "/v1/chat/x/../completions", "/v1/./messages", "/v1/../admin",
    "/v1/messages/../../secret", "/v1//chat/completions", "/v1/chat%2Fcompletions", "/v1/chat/%2e%2e/x",
    "/v1/chat%5Ccompletions", "/v1/models/",
])
async def test_a_path_that_could_be_read_two_ways_is_refused_and_nothing_is_forwarded(stack, path):
    token = stack.add_agent("mallory")
    before = len(stack.provider.received)
    status, doc = await raw_request(stack.proxy_url, "POST", path, token, CHAT)
    assert status == 400
    if path == "/v1/./messages":  # answered in the shape of the API it names
        assert doc["type"] == "error" and doc["error"]["type"] == "invalid_request_error"
    else:
        assert doc["error"]["type"] == "invalid_request_error"
    assert len(stack.provider.received) == before
    assert stack.ledger("mallory") == []


async def test_only_the_allow_list_is_passed_through_and_each_call_is_logged(stack):
    token = stack.add_agent("agent")
    status, _ = await raw_request(stack.proxy_url, "GET", "/v1/models", token)
    assert status == 200
    for method, path in (("GET", "/v1/files"), ("POST", "/v1/fine_tuning/jobs"), ("GET", "/v1/batches"),
                         ("DELETE", "/v1/models/gpt-4o")):
        status, doc = await raw_request(stack.proxy_url, method, path, token)
        assert status == 404 and doc["error"]["type"] == "not_found_error"
    lines = [ln for ln in stack.log_lines() if ln.get("type") == "request" and ln.get("passthrough")]
    assert [(ln["path"], ln["status_code"], ln["claw_id"]) for ln in lines] == [
        ("/v1/models", 200, "agent"), ("/v1/files", 404, "agent"), ("/v1/fine_tuning/jobs", 404, "agent"),
        ("/v1/batches", 404, "agent"), ("/v1/models/gpt-4o", 404, "agent")]


async def test_the_operator_can_widen_the_allow_list(make_stack):
    stack = await make_stack(passthrough="GET /v1/models, GET /v1/files/{id}")
    token = stack.add_agent("agent")
    await raw_request(stack.proxy_url, "GET", "/v1/files/file-1", token)
    assert (await raw_request(stack.proxy_url, "POST", "/v1/embeddings", token))[0] == 404
    lines = [ln for ln in stack.log_lines() if ln.get("passthrough")]
    assert [(ln["path"], "refused" in ln) for ln in lines] == [("/v1/files/file-1", False), ("/v1/embeddings", True)]


async def test_allowed_models_are_enforced_on_turns_and_pass_through(stack):
    token, _ = write_agent(stack.context_root, "limited", pod="p", extra={"allowed_models": ["gpt-4o-mini"]})
    stack.tokens["limited"] = token
    before = len(stack.provider.received)
    status, doc = await raw_request(stack.proxy_url, "POST", "/v1/chat/completions", token, CHAT)
    assert status == 403 and doc["error"]["code"] == "model_not_allowed"
    status, doc = await raw_request(stack.proxy_url, "POST", "/v1/messages", token,
                                    orjson.dumps({"model": "claude-x", "max_tokens": 5,
                                                  "messages": [{"role": "user", "content": "hi"}]}))
    assert status == 403 and doc["error"]["type"] == "permission_error"
    status, _ = await raw_request(stack.proxy_url, "POST", "/v1/embeddings", token,
                                  orjson.dumps({"model": "text-embedding-3-large", "input": "x"}))
    assert status == 403
    assert len(stack.provider.received) == before and stack.ledger("limited") == []
    ok = orjson.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
    assert (await raw_request(stack.proxy_url, "POST", "/v1/chat/completions", token, ok))[0] == 200


async def test_a_hostile_memory_id_in_the_inspector_cannot_reach_another_route_of_the_memory_service(
        make_stack, aiohttp_server):
    """The inspector deletes a REST memory by id; an id full of dot-segments stays one path segment."""
    seen: list[tuple[str, str]] = []

    async def record(request):
        seen.append((request.method, request.raw_path))
        return web.Response(status=404)

    service = web.Application()
    service.router.add_route("*", "/{tail:.*}", record)
    memory = await aiohttp_server(service)
    stack = await make_stack(admin_token="inspector-admin-token")
    stack.add_agent("ui-agent", url_of(memory))
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{stack.proxy_url}/memplane/ui/agents/ui-agent/forget",
                          data={"memory_id": "../../retain?x=1#y"}, allow_redirects=False,
                          headers={"Authorization": "Bearer inspector-admin-token"}) as r:
            assert r.status == 303
    assert seen == [("DELETE", "/api/memories/..%2F..%2Fretain%3Fx=1%23y")]  # one segment, on the wire


@pytest.fixture
async def recorder(aiohttp_server, tmp_path):
    """A provider that records each request exactly as it arrived (raw path, content type, body),
    behind a proxy whose allow-list has the default routes plus an upload route; yields
    (proxy url, what the provider saw, the context root)."""
    seen: list[dict] = []

    async def record(request):
        seen.append({"method": request.method, "raw_path": request.raw_path, "content_type":
                     request.headers.get("Content-Type"), "body": await request.read()})
        return web.json_response({"ok": True})

    provider = web.Application()
    provider.router.add_route("*", "/{tail:.*}", record)
    upstream = url_of(await aiohttp_server(provider))
    settings = ProxySettings(
        context_root=tmp_path / "context", history_root=tmp_path / "history",
        openai_base_url=f"{upstream}/v1", openai_api_key="sk-operator-openai-key",
        anthropic_base_url=upstream, anthropic_api_key="sk-ant-operator-anthropic-key",
        passthrough="GET /v1/models, GET /v1/models/{id}, POST /v1/embeddings, POST /v1/messages/count_tokens, "
                    "POST /v1/audio/transcriptions")
    app = build_app(settings, Telemetry(make_logger(io.StringIO())))
    return url_of(await aiohttp_server(app)), seen, settings.context_root


@pytest.mark.parametrize("path", [
    "/v1/models/%252E%252E%252Fresponses%252Fresp_1",  # %25: would be decoded once more on the way out
    "/v1/models/gpt-4o%3Fapi-version=evil%26x=1",  # %3F: would become a query string upstream
    "/v1/models/a%23b",  # %23: would cut the path at a fragment upstream
    "/v1/models/a%00b", "/%761/models/gpt-4o",
])
async def test_an_id_that_would_mean_another_path_upstream_is_refused_and_nothing_is_forwarded(recorder, path):
    """Mallory hides a path, a query or a fragment in an allowed `{id}`; the proxy must not forward
    something the provider reads as a different request than the one the allow-list approved."""
    proxy, seen, root = recorder
    token, _ = write_agent(root, "mallory", pod="p")
    status, doc = await raw_request(proxy, "GET", path, token)
    assert status == 400 and doc["error"]["code"] == "invalid_path"
    assert seen == []


async def test_an_allowed_id_reaches_the_provider_byte_for_byte(recorder):
    proxy, seen, root = recorder
    token, _ = write_agent(root, "agent", pod="p")
    for path in ("/v1/models/gpt-4o", "/v1/models/ft%3Agpt-4o%3Aacme%3A%3Aabc123?beta=true"):
        assert (await raw_request(proxy, "GET", path, token))[0] == 200
    assert [s["raw_path"] for s in seen] == ["/v1/models/gpt-4o", "/v1/models/ft%3Agpt-4o%3Aacme%3A%3Aabc123?beta=true"]


EMBED = orjson.dumps({"model": "text-embedding-3-large", "input": "hi"})


def _limited(root, name="limited"):
    token, _ = write_agent(root, name, pod="p", extra={"allowed_models": ["text-embedding-3-small", "whisper-1"]})
    return token


async def test_a_forbidden_model_cannot_hide_behind_another_content_type(recorder):
    """Mallory may only embed with the small model; labelling the body text/plain (or leaving the
    type out) must not slip the large one past the check with the operator's key."""
    proxy, seen, root = recorder
    token = _limited(root)
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "application/octet-stream"):
        status, doc = await raw_request(proxy, "POST", "/v1/embeddings", token, EMBED, content_type=content_type)
        assert status == 415 and doc["error"]["code"] == "unsupported_media_type", content_type
    status, doc = await raw_request(proxy, "POST", "/v1/messages/count_tokens", token, orjson.dumps(
        {"model": "claude-x", "messages": [{"role": "user", "content": "hi"}]}), content_type="text/plain")
    assert status == 415 and doc["type"] == "error" and doc["error"]["type"] == "invalid_request_error"
    assert seen == []


@pytest.mark.parametrize("body", [
    b'{"model":"text-embedding-3-large","model":"text-embedding-3-small","input":"hi"}',
    b'{"model":"text-embedding-3-small","input":"hi","model":"text-embedding-3-large"}',
    b'{"model":"text-embedding-3-small","input":{"a":1,"a":2}}',
])
async def test_a_body_with_a_duplicate_key_is_refused_since_the_provider_may_read_the_other_value(recorder, body):
    proxy, seen, root = recorder
    status, doc = await raw_request(proxy, "POST", "/v1/embeddings", _limited(root), body)
    assert status == 400 and doc["error"]["code"] == "duplicate_key"
    assert seen == []


@pytest.mark.parametrize("body", [b'{"model":"text-embedding-3-large",', b'\xef\xbb\xbf{"model":"x"}',
                                  b'{"model":"text-embedding-3-small","input":NaN}'])
async def test_a_json_body_the_proxy_cannot_read_is_refused_rather_than_forwarded_unchecked(recorder, body):
    proxy, seen, root = recorder
    status, doc = await raw_request(proxy, "POST", "/v1/embeddings", _limited(root), body)
    assert status == 400 and doc["error"]["code"] == "invalid_json"
    assert seen == []


async def test_an_allowed_json_body_is_forwarded_unchanged(recorder):
    proxy, seen, root = recorder
    body = b'{"model": "text-embedding-3-small", "input": ["hi", "there"]}'
    status, _ = await raw_request(proxy, "POST", "/v1/embeddings", _limited(root), body,
                                  content_type="application/json; charset=utf-8")
    assert status == 200
    assert [(s["raw_path"], s["content_type"], s["body"]) for s in seen] == [
        ("/v1/embeddings", "application/json", body)]


def _form(*fields: tuple[str, str]) -> tuple[bytes, str]:
    boundary = "----memplane-test-boundary"
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
             for name, value in fields]
    audio = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
             f"Content-Type: audio/wav\r\n\r\n").encode() + b"RIFF\x00\x01binary\r\n"
    return b"".join(parts) + audio + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


async def test_an_upload_on_the_allow_list_is_checked_by_its_model_field_and_forwarded_intact(recorder):
    """The operator allows transcriptions: the agent's allowed model goes through with its boundary
    (the provider must be able to read the form); a forbidden or doubled `model` field does not."""
    proxy, seen, root = recorder
    token = _limited(root)
    ok, content_type = _form(("model", "whisper-1"))
    assert (await raw_request(proxy, "POST", "/v1/audio/transcriptions", token, ok, content_type=content_type))[0] == 200
    assert [(s["content_type"], s["body"]) for s in seen] == [(content_type, ok)]
    body, content_type = _form(("model", "gpt-4o-transcribe"))
    status, doc = await raw_request(proxy, "POST", "/v1/audio/transcriptions", token, body, content_type=content_type)
    assert status == 403 and doc["error"]["code"] == "model_not_allowed"
    body, content_type = _form(("model", "whisper-1"), ("model", "gpt-4o-transcribe"))
    status, doc = await raw_request(proxy, "POST", "/v1/audio/transcriptions", token, body, content_type=content_type)
    assert status == 400 and doc["error"]["code"] == "duplicate_key"
    assert len(seen) == 1


async def test_an_agent_cannot_continue_another_agents_stored_response(stack):
    """Every agent calls the provider with the operator's key: an id is all it would take to
    continue (and read) another agent's stored conversation."""
    import openai
    stack.add_agent("alice")
    stack.add_agent("bob")
    first = await stack.openai("alice").responses.create(model="gpt-5", input="My locker code is 4821.")
    sent = len(stack.provider.received)
    with pytest.raises(openai.BadRequestError) as refused:
        await stack.openai("bob").responses.create(model="gpt-5", input="What was my locker code?",
                                                  previous_response_id=first.id)
    assert refused.value.code == "previous_response_not_found" and first.id in refused.value.message
    assert len(stack.provider.received) == sent  # nothing went to the provider
    again = await stack.openai("alice").responses.create(model="gpt-5", input="And again?",
                                                         previous_response_id=first.id)
    assert again.id and stack.provider.received[-1].status == 200


async def test_an_agent_cannot_join_another_agents_conversation(stack):
    """A Responses `conversation` is kept by the provider under the operator's key: naming another
    agent's conversation id would continue (and read) it, like another agent's response id."""
    import openai
    stack.add_agent("alice")
    stack.add_agent("bob")
    await stack.openai("alice").responses.create(model="gpt-5", input="My locker code is 4821.",
                                                 conversation="conv_alice")
    sent = len(stack.provider.received)
    for conversation in ("conv_alice", {"id": "conv_alice"}):
        with pytest.raises(openai.NotFoundError) as refused:
            await stack.openai("bob").responses.create(model="gpt-5", input="What was my locker code?",
                                                      conversation=conversation)
        assert refused.value.code == "conversation_not_found" and "conv_alice" in refused.value.message
    assert len(stack.provider.received) == sent and stack.ledger("bob") == []
    await stack.openai("alice").responses.create(model="gpt-5", input="And again?", conversation="conv_alice")
    assert stack.provider.received[-1].status == 200


async def test_an_agent_cannot_continue_another_agents_message_thread_at_the_provider(stack):
    """Agents without memory leave Anthropic message threads to the provider, under the operator's
    key: another agent's message id must not continue (and read) that thread."""
    import anthropic
    stack.add_agent("carol")
    stack.add_agent("dave")

    async def turn(agent, text, thread):
        return await stack.anthropic(agent).beta.messages.create(
            model="c", max_tokens=100, messages=[{"role": "user", "content": text}],
            extra_body={"thread": thread}, betas=["message-threads-2026-08-12"])

    first = await turn("carol", "My PIN is 9911.", {"type": "create"})
    sent = len(stack.provider.received)
    with pytest.raises(anthropic.BadRequestError) as refused:
        await turn("dave", "What is my PIN?", {"type": "continue", "previous_message_id": first.id})
    assert refused.value.body["error"]["details"] == {"error_code": "thread_not_found"}
    assert len(stack.provider.received) == sent and stack.ledger("dave") == []
    await turn("carol", "Thanks.", {"type": "continue", "previous_message_id": first.id})
    assert stack.provider.received[-1].status == 200
