"""Real coding agents through memplane. Claude Code (`claude -p`, the npm CLI) both ways issue 42 asks for:

* memory as MCP tools: `--mcp-config` names `/mcp` with the agent's token; the scripted model (the
  strict fake provider) calls `search_memory`, Claude Code runs it against memplane, and the answer
  carries what memory held;
* the user's own key: `ANTHROPIC_API_KEY` is the user's, `ANTHROPIC_CUSTOM_HEADERS` names the agent;
  the provider sees the user's key and memplane records the turn without it.

And Codex (`codex exec`) with the user's own key: a `model_providers` entry whose `env_key` is the
user's `OPENAI_API_KEY` and whose `env_http_headers` names the agent.

Each is skipped with a message when its CLI is not installed (`MEMPLANE_TEST_CLAUDE` /
`MEMPLANE_TEST_CODEX`, or `claude` / `codex` on PATH)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil

import pytest

from memory_adapters.embedded.app import build_embedded_app
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from proxy.testing.fake_provider import Answer, ToolCall
from tests.clients import install
from tests.conftest import url_of

PINNED = {name: str(path) for name, path in (install.installed() or {}).items()}  # `make clients` (tests/clients)
CLAUDE = os.environ.get("MEMPLANE_TEST_CLAUDE") or PINNED.get("claude") or shutil.which("claude")
CODEX = os.environ.get("MEMPLANE_TEST_CODEX") or PINNED.get("codex") or shutil.which("codex")
needs_claude = pytest.mark.skipif(not CLAUDE, reason="Claude Code is not installed (`make clients`, "
                                                     "or MEMPLANE_TEST_CLAUDE=/path/to/claude)")
needs_codex = pytest.mark.skipif(not CODEX, reason="Codex is not installed (`make clients`, "
                                                   "or MEMPLANE_TEST_CODEX=/path/to/codex)")
SEARCH = "mcp__memplane__search_memory"  # Claude Code's name for the MCP server's tool
USER_KEY = "sk-ant-api03-user0wnKeyAb3dEf6hIj9kLm2nOp5qRs8tUvWx"
USER_OPENAI_KEY = "sk-proj-user0wnKeyAb3dEf6hIj9kLm2nOp5qRs8tUv"


def searching(view) -> Answer:
    """A model that looks in memory when it has the tool, then says what it found."""
    if SEARCH in view.tools and view.steps == 0:
        return Answer(tool_calls=[ToolCall(SEARCH, {"query": "which editor"})])
    if view.tool_results:
        return Answer(text="From memory: " + " | ".join(view.tool_results))
    return Answer(text="Hello from the fake model.")


async def run_claude(tmp_path, prompt: str, env: dict[str, str], *args: str) -> tuple[int, str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    proc = await asyncio.create_subprocess_exec(
        CLAUDE, "-p", prompt, "--model", "claude-sonnet-4-5", *args,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
             "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
             "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
             # MCP tools in the request's tool list, not behind Claude Code's ToolSearch: a real model
             # finds them there, the scripted one only calls tools it is offered by name
             "ENABLE_TOOL_SEARCH": "false", **env},
        cwd=str(tmp_path), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    return await finished(proc)


async def finished(proc) -> tuple[int, str, str]:
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 240)
    except asyncio.TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


def own_key(stack, agent_id: str) -> None:
    """What `memplane agent add ID --client-provider-key` writes (tests/test_client_provider_key.py)."""
    meta_path = stack.context_root / agent_id / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["provider_key"] = "client"
    meta_path.write_text(json.dumps(meta))


def written_by_memplane(stack) -> str:
    return stack.log.getvalue() + "".join(p.read_text(errors="replace")
                                          for p in stack.history_root.rglob("*") if p.is_file())


@pytest.fixture
async def setup(make_stack, aiohttp_server, tmp_path):
    stack = await make_stack()
    memory = await aiohttp_server(build_embedded_app(tmp_path / "mem", redactor=Redactor(), embeddings="off",
                                                     telemetry=Telemetry(make_logger(io.StringIO()))))
    stack.add_agent("coder", url_of(memory), service="embedded")
    stack.provider.model = searching
    return stack


@needs_claude
async def test_claude_code_searches_memory_over_mcp(setup, tmp_path):
    stack = setup
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {stack.tokens['coder']}"})
    async with Client(streamable_http_client(stack.proxy_url + "/mcp", http_client=http)) as mcp:
        await mcp.call_tool("store_memory", {"key": "editor", "value": "The user's editor is Helix"})

    config = tmp_path / "memplane-mcp.json"
    config.write_text(json.dumps({"mcpServers": {"memplane": {
        "type": "http", "url": stack.proxy_url + "/mcp",
        "headers": {"Authorization": "Bearer ${MEMPLANE_AGENT_TOKEN}"}}}}))
    code, out, err = await run_claude(
        tmp_path, "Which editor do I use?",
        {"ANTHROPIC_BASE_URL": stack.proxy_url, "ANTHROPIC_API_KEY": stack.tokens["coder"],
         "MEMPLANE_AGENT_TOKEN": stack.tokens["coder"]},
        "--mcp-config", str(config), "--strict-mcp-config", "--allowedTools", SEARCH)
    assert code == 0, (out, err)
    assert "The user's editor is Helix" in out
    searches = stack.events("search", claw_id="coder")
    assert searches and all(e["memory_status"] == "succeeded" and e["via"] == "mcp" for e in searches)


@needs_claude
async def test_claude_code_with_the_users_own_key(setup, tmp_path):
    stack = setup
    own_key(stack, "coder")
    code, out, err = await run_claude(
        tmp_path, "Say hello.",
        {"ANTHROPIC_BASE_URL": stack.proxy_url, "ANTHROPIC_API_KEY": USER_KEY,
         "ANTHROPIC_CUSTOM_HEADERS": f"X-Memplane-Agent: {stack.tokens['coder']}"})
    assert code == 0, (out, err)
    assert "Hello from the fake model." in out
    turns = [r for r in stack.provider.received if r.path == "/v1/messages"]
    assert turns and all(r.headers.get("x-api-key") == USER_KEY for r in turns)
    assert all("X-Memplane-Agent" not in r.headers for r in turns)
    assert stack.ledger("coder")  # recorded as the agent's turns
    assert USER_KEY not in written_by_memplane(stack)


@needs_codex
async def test_codex_with_the_users_own_key(setup, tmp_path):
    stack = setup
    own_key(stack, "coder")
    stack.provider.model = lambda view: Answer(text="Hello from the fake model.")
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(f"""model = "gpt-5"
model_provider = "memplane"
[model_providers.memplane]
name = "memplane"
base_url = "{stack.proxy_url}/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
env_http_headers = {{ "X-Memplane-Agent" = "MEMPLANE_AGENT_TOKEN" }}
""")
    proc = await asyncio.create_subprocess_exec(
        CODEX, "exec", "--skip-git-repo-check", "Say hello.",
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "CODEX_HOME": str(codex_home),
             "OPENAI_API_KEY": USER_OPENAI_KEY, "MEMPLANE_AGENT_TOKEN": stack.tokens["coder"]},
        cwd=str(tmp_path), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    code, out, err = await finished(proc)
    assert code == 0, (out, err)
    assert "Hello from the fake model." in out
    turns = [r for r in stack.provider.received if r.path == "/v1/responses"]
    assert turns and all(r.headers.get("Authorization") == f"Bearer {USER_OPENAI_KEY}" for r in turns)
    assert all("X-Memplane-Agent" not in r.headers for r in turns)
    assert len(stack.ledger("coder")) == len(turns)
    assert USER_OPENAI_KEY not in written_by_memplane(stack)
