"""An agent on the official openai SDK gets memory by changing only its base URL."""

from __future__ import annotations

import os

import orjson


async def test_fact_from_one_conversation_reaches_the_next(stack, reference):
    ref_url, store = reference
    stack.add_agent("analyst", ref_url)
    client = stack.openai("analyst")

    first = await client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "My sister Ana lives in Porto."}])
    assert first.choices[0].message.content
    await stack.settle()

    await client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "system", "content": "You are terse."},
                                  {"role": "user", "content": "Where does Ana live?"}])
    received = stack.provider.received[-1]
    block = received.memories_block
    assert block is not None and "Porto" in block
    # the default placement (trailing): the client's messages go out untouched, the block after them
    sent = received.body["messages"]
    assert sent[:2] == [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Where does Ana live?"}]
    assert sent[2]["role"] == "system" and sent[2]["content"].startswith("<memories service=\"mem-svc\">")
    assert received.headers["Authorization"] == "Bearer sk-operator-openai-key"


async def test_streaming_is_passed_through_and_assembled_in_the_ledger(stack, reference):
    ref_url, _ = reference
    stack.add_agent("writer", ref_url)
    client = stack.openai("writer")
    stream = await client.chat.completions.create(
        model="gpt-4o", stream=True, messages=[{"role": "user", "content": "Remember: I drink oolong tea."}])
    pieces = [chunk.choices[0].delta.content async for chunk in stream if chunk.choices and chunk.choices[0].delta.content]
    assert len(pieces) > 1  # chunk by chunk, not one blob
    text = "".join(pieces)
    await stack.settle()

    [entry] = stack.ledger("writer")
    assert entry["stream"] is True
    assert entry["response"] == {"format": "sse", "text": text}
    assert entry["usage"]["completion_tokens"] > 0
    # the agent did not ask for usage, so it never saw the extra usage chunk
    assert "stream_options" not in entry["request_original"]

    await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "What tea do I drink?"}])
    assert "oolong" in stack.provider.received[-1].memories_block


async def test_agent_without_memory_manifest_is_proxied_with_no_memory_work(stack):
    stack.add_agent("plain")
    reply = await stack.openai("plain").chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "Noted."
    await stack.settle()
    assert stack.events() == []
    assert stack.provider.received[-1].body == {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    assert len(stack.ledger("plain")) == 1  # the ledger is written whether or not memory is on


async def test_tools_n_response_format_parts_and_unknown_fields_pass_through(stack):
    stack.add_agent("tooler")
    client = stack.openai("tooler")
    messages = [{"role": "user", "content": [{"type": "text", "text": "Weather?"},
                                             {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
                                                                                     "properties": {"city": {"type": "string"}}}}}]
    reply = await client.chat.completions.create(
        model="gpt-4o", messages=messages, tools=tools, n=2, response_format={"type": "text"},
        extra_body={"x_vendor_field": {"keep": [1, 2]}})
    call = reply.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    sent = stack.provider.received[-1].body
    assert sent["messages"] == messages and sent["tools"] == tools and sent["n"] == 2
    assert sent["response_format"] == {"type": "text"} and sent["x_vendor_field"] == {"keep": [1, 2]}

    follow = messages + [reply.choices[0].message.model_dump(exclude_none=True),
                         {"role": "tool", "tool_call_id": call.id, "content": "21C and sunny"}]
    final = await client.chat.completions.create(model="gpt-4o", messages=follow, tools=tools)
    assert final.choices[0].message.content == "Noted."


async def test_models_and_other_v1_paths_pass_through(stack):
    stack.add_agent("lister")
    models = await stack.openai("lister").models.list()
    assert [m.id for m in models.data] == ["fake-model"]


async def test_healthz(stack, aiohttp_client):
    import aiohttp
    async with aiohttp.ClientSession() as s, s.get(f"{stack.proxy_url}/healthz") as r:
        assert r.status == 200 and (await r.json()) == {"status": "ok", "pid": os.getpid()}  # in-process stack


async def test_context_dir_changes_are_picked_up_without_restart(stack, reference):
    ref_url, _ = reference
    stack.add_agent("late")
    client = stack.openai("late")
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "I collect stamps."}])
    await stack.settle()
    assert stack.events() == []
    stack.add_agent("late", ref_url)  # now subscribe it to memory; same token
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "I collect coins too."}])
    await stack.settle()
    assert [e["memory_op"] for e in stack.events()] == ["recall", "retain"]


async def test_invalid_manifest_disables_memory_not_the_proxy(stack, reference):
    ref_url, _ = reference
    stack.add_agent("broken", ref_url)
    (stack.context_root / "broken" / "memory.json").write_text(orjson.dumps(
        {"version": 1, "service": "x", "base_url": "http://x", "recall": {"path": "/recall", "timeout_ms": -5}}).decode())
    reply = await stack.openai("broken").chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "Noted."
    warnings = [line for line in stack.log_lines() if line.get("event") == "memory_manifest_invalid"]
    assert warnings and "recall.timeout_ms" in warnings[0]["error"] and "memory.json" in warnings[0]["error"]
