"""A user who pays with their own provider key (or subscription) keeps using it through memplane:
the operator marks their agent `"provider_key": "client"` (`memplane agent add ID
--client-provider-key`, or `provider-key: client` in a pod file); the client sends its own key as
the SDK's api_key and names the agent in `X-Memplane-Agent`. The provider sees the user's key, the
turn still gets memory and a ledger line, and the key is nowhere memplane writes. An agent without
the option never forwards a client key, and a client key without a valid agent header is 401 with
nothing forwarded. Driven with the official openai and anthropic SDKs against the strict fake provider."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest
from anthropic import AsyncAnthropic, AuthenticationError as AnthropicAuthError
from click.testing import CliRunner
from openai import AsyncOpenAI, AuthenticationError

from manifests.compiler import compile_pod
from memplane_cli.main import main

USER_OPENAI_KEY = "sk-proj-user0wnKeyAb3dEf6hIj9kLm2nOp5qRs8tUv"
USER_ANTHROPIC_KEY = "sk-ant-api03-user0wnKeyAb3dEf6hIj9kLm2nOp5qRs8tUvWx"
USER_OAUTH_TOKEN = "sk-ant-oat01-user0wnSubscriptionAb3dEf6hIj9kLm2nOp"


def own_key_agent(stack, agent_id: str, memory_url: str | None = None) -> str:
    token = stack.add_agent(agent_id, memory_url)
    meta_path = stack.context_root / agent_id / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["provider_key"] = "client"  # what `memplane agent add --client-provider-key` writes (tested below)
    meta_path.write_text(json.dumps(meta))
    return token


def written_by_memplane(stack, *extra: Path) -> str:
    """Everything memplane wrote: the ledger files, the log lines, and any other files named."""
    files = [p for p in stack.history_root.rglob("*") if p.is_file()]
    files += [p for root in extra for p in root.rglob("*") if p.is_file()]
    return stack.log.getvalue() + "".join(p.read_text(errors="replace") for p in files)


async def test_the_openai_sdk_with_its_own_key_reaches_the_provider_with_that_key(stack, reference, tmp_path):
    memory_url, _ = reference
    token = own_key_agent(stack, "byok", memory_url)
    client = AsyncOpenAI(base_url=f"{stack.proxy_url}/v1", api_key=USER_OPENAI_KEY, max_retries=0,
                         default_headers={"X-Memplane-Agent": token})
    await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "My cat is Miso."}])
    await stack.settle()
    r = await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "my cat?"}])
    assert r.choices[0].message.content
    await stack.settle()

    first, second = stack.provider.received
    for seen in (first, second):
        assert seen.headers["Authorization"] == f"Bearer {USER_OPENAI_KEY}"  # the user's key, not the operator's
        assert "sk-operator-openai-key" not in str(seen.headers)
        assert "X-Memplane-Agent" not in seen.headers and token.split(":")[1] not in str(seen.headers)
    assert "Miso" in str(second.body)  # memory works as for any agent: recalled from the first turn
    assert len(stack.ledger("byok")) == 2
    assert USER_OPENAI_KEY not in written_by_memplane(stack, tmp_path / "reference-memory")  # nor in memory


async def test_the_anthropic_sdk_with_its_own_key_or_subscription_token(stack):
    token = own_key_agent(stack, "claude")
    with_key = AsyncAnthropic(base_url=stack.proxy_url, api_key=USER_ANTHROPIC_KEY, max_retries=0,
                              default_headers={"X-Memplane-Agent": token})
    await with_key.messages.create(model="claude-x", max_tokens=50, messages=[{"role": "user", "content": "hi"}])
    # a subscription: Claude Code sends its OAuth token as a bearer (ANTHROPIC_AUTH_TOKEN)
    with_oauth = AsyncAnthropic(base_url=stack.proxy_url, auth_token=USER_OAUTH_TOKEN, max_retries=0,
                                default_headers={"X-Memplane-Agent": token, "anthropic-beta": "oauth-2025-04-20"})
    await with_oauth.messages.create(model="claude-x", max_tokens=50, messages=[{"role": "user", "content": "hi"}])
    # and the classic `x-api-key` header (Claude Code with ANTHROPIC_API_KEY, curl)
    async with aiohttp.ClientSession() as s:
        async with s.post(stack.proxy_url + "/v1/messages", json={
                "model": "claude-x", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]},
                headers={"x-api-key": USER_ANTHROPIC_KEY, "X-Memplane-Agent": token,
                         "anthropic-version": "2023-06-01"}) as r:
            assert r.status == 200
    await stack.settle()

    by_sdk, by_oauth, by_header = stack.provider.received
    sent_by_sdk = by_sdk.headers.get("x-api-key") or by_sdk.headers["Authorization"].removeprefix("Bearer ")
    assert sent_by_sdk == USER_ANTHROPIC_KEY  # (this SDK version sends api_key as a bearer)
    assert by_oauth.headers["Authorization"] == f"Bearer {USER_OAUTH_TOKEN}" and "x-api-key" not in by_oauth.headers
    assert by_oauth.headers["anthropic-beta"] == "oauth-2025-04-20"
    assert by_header.headers["x-api-key"] == USER_ANTHROPIC_KEY and "Authorization" not in by_header.headers
    everything_sent = str([seen.headers for seen in stack.provider.received])
    assert "sk-ant-operator-anthropic-key" not in everything_sent and token not in everything_sent
    logged = written_by_memplane(stack)
    assert USER_ANTHROPIC_KEY not in logged and USER_OAUTH_TOKEN not in logged
    assert len(stack.ledger("claude")) == 3


async def test_an_agent_without_the_option_never_forwards_a_client_key(stack):
    token = stack.add_agent("managed")
    client = AsyncOpenAI(base_url=f"{stack.proxy_url}/v1", api_key=USER_OPENAI_KEY, max_retries=0,
                         default_headers={"X-Memplane-Agent": token})
    await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    [seen] = stack.provider.received
    assert seen.headers["Authorization"] == "Bearer sk-operator-openai-key"  # the operator's key policy holds
    assert USER_OPENAI_KEY not in str(seen.headers)


@pytest.mark.parametrize("agent_header", [None, "byok:wrong-secret", "nobody:secret", ""])
async def test_a_client_key_without_a_valid_agent_header_is_401_and_nothing_is_forwarded(stack, agent_header):
    own_key_agent(stack, "byok")
    headers = {} if agent_header is None else {"X-Memplane-Agent": agent_header}
    client = AsyncOpenAI(base_url=f"{stack.proxy_url}/v1", api_key=USER_OPENAI_KEY, max_retries=0,
                         default_headers=headers)
    with pytest.raises(AuthenticationError):
        await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(AuthenticationError):
        await client.models.list()  # the pass-through too
    assert stack.provider.received == []
    assert USER_OPENAI_KEY not in written_by_memplane(stack)


async def test_an_own_key_agent_must_name_itself_and_bring_a_key(stack):
    token = own_key_agent(stack, "byok")
    # its agent token as the api key (the usual way) would leave with no provider key at all: refused
    plain = AsyncAnthropic(base_url=stack.proxy_url, api_key=token, max_retries=0)
    with pytest.raises(AnthropicAuthError, match="brings its own provider key"):
        await plain.messages.create(model="claude-x", max_tokens=50, messages=[{"role": "user", "content": "hi"}])
    assert stack.provider.received == []
    # and the token in both places would send it to the provider: refused before anything leaves
    both = AsyncOpenAI(base_url=f"{stack.proxy_url}/v1", api_key=token, max_retries=0,
                       default_headers={"X-Memplane-Agent": token})
    with pytest.raises(AuthenticationError, match="memplane token"):
        await both.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert stack.provider.received == []


async def test_the_pass_through_carries_the_client_key_too(stack):
    token = own_key_agent(stack, "byok")
    client = AsyncOpenAI(base_url=f"{stack.proxy_url}/v1", api_key=USER_OPENAI_KEY, max_retries=0,
                         default_headers={"X-Memplane-Agent": token})
    await client.models.list()
    [seen] = stack.provider.received
    assert seen.headers["Authorization"] == f"Bearer {USER_OPENAI_KEY}"


def test_the_operator_turns_it_on_per_agent_from_the_cli_and_the_pod_file(tmp_path):
    ctx = tmp_path / "ctx"
    result = CliRunner().invoke(main, ["agent", "add", "byok", "--context-root", str(ctx), "--no-memory",
                                       "--client-provider-key"])
    assert result.exit_code == 0, result.output
    assert json.loads((ctx / "byok" / "metadata.json").read_text())["provider_key"] == "client"
    CliRunner().invoke(main, ["agent", "add", "managed", "--context-root", str(ctx), "--no-memory"])
    assert "provider_key" not in json.loads((ctx / "managed" / "metadata.json").read_text())

    pod = tmp_path / "pod.yml"
    pod.write_text("x-claw: {pod: desk}\nservices:\n"
                   "  coder:\n    image: c\n    x-claw: {agent: ./c.md, provider-key: client}\n"
                   "  helper:\n    image: h\n    x-claw: {agent: ./h.md}\n")
    compile_pod(pod, tmp_path / "out")
    assert json.loads((tmp_path / "out" / "coder" / "metadata.json").read_text())["provider_key"] == "client"
    assert "provider_key" not in json.loads((tmp_path / "out" / "helper" / "metadata.json").read_text())
    pod.write_text(pod.read_text().replace("provider-key: client", "provider-key: mine"))
    with pytest.raises(Exception, match="provider-key must be 'operator' or 'client'"):
        compile_pod(pod, tmp_path / "out2")

