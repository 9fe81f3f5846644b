"""An MCP client (Claude Code, Codex, Cursor… here the `mcp` package's own Python client) uses an
agent's memory on purpose: `/mcp` on the proxy's port, the agent's token as a bearer, tools
search_memory, store_memory and forget_memory. Against a real proxy and a real embedded memory
engine on loopback: what one agent stores it finds and can forget; another agent neither sees nor
forgets it; a wrong token, a hostile web page and a wrong content type are refused before any tool runs."""

from __future__ import annotations

import io

import aiohttp
import orjson
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from memory_adapters.embedded.app import build_embedded_app
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from tests.conftest import url_of

GH_TOKEN = "ghp_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "curl", "version": "1"}}}


@pytest.fixture
async def setup(make_stack, aiohttp_server, tmp_path):
    stack = await make_stack()
    memory = await aiohttp_server(build_embedded_app(tmp_path / "mem", redactor=Redactor(), embeddings="off",
                                                     telemetry=Telemetry(make_logger(io.StringIO()))))
    stack.add_agent("alice", url_of(memory), service="embedded")
    stack.add_agent("bob", url_of(memory), service="embedded")
    stack.add_agent("nomem")
    return stack, url_of(memory)


def connect(stack, token: str, mode: str = "auto", **headers: str) -> Client:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}", **headers})
    return Client(streamable_http_client(stack.proxy_url + "/mcp", http_client=http), mode=mode)


def text(result) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # the 2026 per-request era, and the initialize handshake
async def test_an_agent_stores_finds_and_forgets_its_own_memory(setup, mode):
    stack, memory_url = setup
    async with connect(stack, stack.tokens["alice"], mode) as mcp:
        listed = await mcp.list_tools()
        assert [t.name for t in listed.tools] == ["search_memory", "store_memory", "forget_memory"]
        store_schema = next(t for t in listed.tools if t.name == "store_memory").input_schema
        assert store_schema["properties"]["scope"]["enum"] == ["session", "agent"]  # no global without a grant

        saved = await mcp.call_tool("store_memory", {"key": "editor", "value": "The user's editor is Helix"})
        assert not saved.is_error and text(saved) == "Saved (new) under key 'editor'."

        found = await mcp.call_tool("search_memory", {"query": "which editor does the user use"})
        [memory] = found.structured_content["memories"]
        assert memory["text"] == "The user's editor is Helix" and memory["key"] == "editor"
        assert memory["id"] in text(found)
        # a memory an agent's model wrote says so: it is not the person's own words (#38)
        assert memory["origin"] == "model" and f"[{memory['id']}] (model) " in text(found)

        gone = await mcp.call_tool("forget_memory", {"id": memory["id"], "reason": "the user switched editors"})
        assert not gone.is_error and text(gone) == f"Forgot memory {memory['id']}."
        again = await mcp.call_tool("search_memory", {"query": "which editor does the user use"})
        assert again.structured_content == {"memories": []} and text(again) == "No memories match."

    # audited like the proxy's own memory work: one memory_op event each, and the reason in the service's trail
    assert [(e["memory_op"], e["memory_status"]) for e in stack.events(claw_id="alice")] == [
        ("store", "succeeded"), ("search", "succeeded"), ("forget", "succeeded"), ("search", "succeeded")]
    assert all(e["via"] == "mcp" for e in stack.events(claw_id="alice"))
    async with aiohttp.ClientSession() as s:
        async with s.get(memory_url + "/api/audit", params={"agent_id": "alice"}) as r:
            [trail] = (await r.json())["audit"]
    assert trail["action"] == "forget" and trail["reason"] == "the user switched editors"
    assert trail["who"] == "admin (mcp:alice)"


async def test_a_secret_the_model_stores_is_scrubbed_before_it_reaches_memory(setup):
    stack, memory_url = setup
    async with connect(stack, stack.tokens["alice"]) as mcp:
        await mcp.call_tool("store_memory", {"key": "deploy", "value": f"deploy with {GH_TOKEN} on Fridays"})
        found = await mcp.call_tool("search_memory", {"query": f"deploy Fridays {GH_TOKEN}"})
    assert GH_TOKEN not in str(found.structured_content) and "Fridays" in text(found)
    async with aiohttp.ClientSession() as s:
        async with s.get(memory_url + "/api/memories", params={"agent_id": "alice"}) as r:
            stored = await r.text()
    assert GH_TOKEN not in stored and "Fridays" in stored
    assert GH_TOKEN not in stack.log.getvalue()


async def test_another_agent_neither_sees_nor_forgets_it(setup):
    stack, _ = setup
    async with connect(stack, stack.tokens["alice"]) as alice:
        await alice.call_tool("store_memory", {"key": "editor", "value": "The user's editor is Helix"})
        [memory] = (await alice.call_tool("search_memory", {"query": "editor Helix"})).structured_content["memories"]

    async with connect(stack, stack.tokens["bob"]) as bob:
        seen = await bob.call_tool("search_memory", {"query": "editor Helix"})
        assert seen.structured_content == {"memories": []}
        refused = await bob.call_tool("forget_memory", {"id": memory["id"], "reason": "mischief"})
        assert refused.is_error and "no memory with id" in text(refused)  # the same answer as for no such id
        # a forged agent_id in the arguments changes nothing: the token says who is asking
        await bob.call_tool("store_memory", {"key": "editor", "value": "Bob's editor is vim", "agent_id": "alice"})

    async with connect(stack, stack.tokens["alice"]) as alice:
        [still] = (await alice.call_tool("search_memory", {"query": "editor"})).structured_content["memories"]
    assert still["id"] == memory["id"] and still["text"] == "The user's editor is Helix"
    [failed] = stack.events("forget", claw_id="bob")
    assert failed["memory_status"] == "failed"


async def test_scope_global_needs_the_grant_and_an_agent_without_memory_gets_a_tool_error(setup):
    stack, _ = setup
    async with connect(stack, stack.tokens["alice"]) as mcp:
        refused = await mcp.call_tool("store_memory", {"key": "k", "value": "for everyone", "scope": "global"})
        assert refused.is_error and "needs a grant" in text(refused)
        bad = await mcp.call_tool("search_memory", {})
        assert bad.is_error and "query" in text(bad)
        no_session = await mcp.call_tool("store_memory", {"key": "k", "value": "this chat only", "scope": "session"})
        assert no_session.is_error and "needs a session" in text(no_session)
    async with connect(stack, stack.tokens["alice"], **{"X-Session-Id": "chat-7"}) as mcp:
        saved = await mcp.call_tool("store_memory", {"key": "k", "value": "this chat only", "scope": "session"})
        assert not saved.is_error
    async with connect(stack, stack.tokens["nomem"]) as mcp:
        empty = await mcp.call_tool("search_memory", {"query": "anything"})
        assert empty.is_error and "no memory service" in text(empty)


async def post(stack, headers: dict[str, str], body: bytes = orjson.dumps(INITIALIZE)) -> tuple[int, dict, dict]:
    async with aiohttp.ClientSession() as s:
        async with s.post(stack.proxy_url + "/mcp", data=body, headers={
                "Accept": "application/json, text/event-stream", **headers}) as r:
            return r.status, dict(r.headers), await r.json(content_type=None)


@pytest.mark.parametrize("token", [None, "alice:wrong-secret", "nobody:secret", "garbage"])
async def test_a_wrong_or_missing_token_is_401_and_no_tool_runs(setup, token):
    stack, _ = setup
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    status, answer_headers, body = await post(stack, headers)
    assert status == 401 and answer_headers["WWW-Authenticate"].startswith("Bearer")
    assert body["error"]["message"].startswith("Invalid or missing agent token")

    # the SDK's client fails to connect, and says so
    with pytest.raises(Exception):
        async with connect(stack, token or "") as mcp:
            await mcp.list_tools()
    assert stack.events() == []


@pytest.mark.parametrize("origin,host", [
    ("http://evil.example:8080", "evil.example:8080"),  # DNS rebinding: a hostile name that resolves to 127.0.0.1
    ("http://evil.example", None),                        # a cross-site page calling the loopback proxy
    ("null", None),                                       # a sandboxed frame or a file: page
])
async def test_a_web_page_cannot_use_the_endpoint_even_with_a_token(setup, origin, host):
    stack, _ = setup
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {stack.tokens['alice']}",
               "Origin": origin}
    if host:
        headers["Host"] = host
    status, _, body = await post(stack, headers)
    assert status == 403 and "Cross-site requests to /mcp are refused" in body["error"]["message"]


async def test_the_proxys_own_origin_and_plain_clients_pass_and_other_content_types_do_not(setup):
    stack, _ = setup
    auth = {"Authorization": f"Bearer {stack.tokens['alice']}"}
    own = {"Origin": stack.proxy_url, "Content-Type": "application/json", **auth}
    status, _, body = await post(stack, own)
    assert status == 200 and body["result"]["serverInfo"]["name"] == "memplane-memory"
    status, _, body = await post(stack, {"Content-Type": "text/plain", **auth})
    assert status == 415
    status, _, body = await post(stack, {"Content-Type": "application/json", **auth}, b"{not json")
    assert status == 400 and body["error"]["code"] == -32700  # the package's parse error, not a traceback
    async with aiohttp.ClientSession() as s:
        async with s.get(stack.proxy_url + "/mcp", headers={"Accept": "text/event-stream", **auth}) as r:
            assert r.status == 405 and r.headers["Allow"] == "POST"  # no stream left open that never speaks


async def test_the_tools_list_offers_global_only_to_an_agent_with_the_grant(make_stack, aiohttp_server, tmp_path):
    stack = await make_stack()
    memory = await aiohttp_server(build_embedded_app(tmp_path / "mem", redactor=Redactor(), embeddings="off",
                                                     telemetry=Telemetry(make_logger(io.StringIO()))))
    stack.add_agent("curator", url_of(memory), service="embedded", grants=["global"])
    async with connect(stack, stack.tokens["curator"]) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        assert "global" in tools["store_memory"].input_schema["properties"]["scope"]["enum"]
        saved = await mcp.call_tool("store_memory", {"key": "house-style", "value": "British spelling", "scope": "global"})
        assert not saved.is_error



def test_a_proxy_that_never_serves_mcp_never_imports_the_mcp_package():
    """The package (and starlette under it) costs more start-up than the rest of the proxy: it is
    imported on the first call to /mcp, not when the proxy starts."""
    import subprocess
    import sys
    probe = ("import sys; from proxy.app import build_app; from proxy.config import ProxySettings; "
             "build_app(ProxySettings(context_root='c', history_root='h')); "
             "print(sorted(m for m in ('mcp', 'mcp_types', 'starlette') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
