"""Agents on the anthropic SDK or OpenAI's Responses API get the same memory by changing only base_url."""

from __future__ import annotations

import anthropic
import openai
import orjson
import pytest

from proxy.inject import PREAMBLE


async def _teach(stack, agent, fact):
    await stack.openai(agent).chat.completions.create(model="m", messages=[{"role": "user", "content": fact}])
    await stack.settle()


# -- Anthropic Messages --

async def test_anthropic_sdk_gets_memory_in_system_string(stack, reference):
    ref_url, _ = reference
    stack.add_agent("claude", ref_url, placement="system")  # an explicit choice now: the default is trailing
    await _teach(stack, "claude", "My sister Ana lives in Porto.")
    client = stack.anthropic("claude")
    msg = await client.messages.create(model="claude-x", max_tokens=100, system="Be brief.",
                                       messages=[{"role": "user", "content": "Where does Ana live?"}])
    assert "Porto" in msg.content[0].text
    got = stack.provider.received[-1]
    assert got.path == "/v1/messages"
    assert got.body["system"].startswith("Be brief.\n\n<memories service=\"mem-svc\">")
    assert got.headers["x-api-key"] == "sk-ant-operator-anthropic-key"
    assert got.headers["anthropic-version"]
    assert stack.tokens["claude"] not in str(got.headers)
    recall = stack.events("recall", claw_id="claude")[-1]
    assert recall["memory_blocks"] == 1


async def test_list_system_with_cache_control_keeps_earlier_blocks_byte_identical(stack, reference):
    ref_url, _ = reference
    stack.add_agent("cached", ref_url, placement="system")
    await _teach(stack, "cached", "Our fiscal year starts in April.")
    system = [{"type": "text", "text": "You are the finance bot." * 50, "cache_control": {"type": "ephemeral"}}]
    await stack.anthropic("cached").messages.create(
        model="claude-x", max_tokens=50, system=system,
        messages=[{"role": "user", "content": "When does the fiscal year start?"}])
    sent = stack.provider.received[-1].body["system"]
    assert orjson.dumps(sent[0]) == orjson.dumps(system[0])
    assert sent[1]["type"] == "text" and "April" in sent[1]["text"] and "<memories" in sent[1]["text"]


async def test_anthropic_streaming_is_relayed_and_assembled_with_usage(stack, reference):
    ref_url, _ = reference
    stack.add_agent("streamer", ref_url)
    async with stack.anthropic("streamer").messages.stream(
            model="claude-x", max_tokens=50, messages=[{"role": "user", "content": "I was born in Lagos."}]) as s:
        deltas = [t async for t in s.text_stream]
        final = await s.get_final_message()
    assert len(deltas) > 1 and "".join(deltas) == final.content[0].text
    await stack.settle()
    [entry] = stack.ledger("streamer")
    assert entry["response"]["format"] == "sse" and entry["response"]["text"] == final.content[0].text
    assert entry["usage"]["prompt_tokens"] > 0 and entry["usage"]["completion_tokens"] > 0
    assert entry["effective_provider"] == "anthropic"


async def test_anthropic_tool_use_round_trip(stack):
    stack.add_agent("tools")
    client = stack.anthropic("tools")
    tools = [{"name": "get_weather", "description": "w", "input_schema": {"type": "object"}}]
    first = await client.messages.create(model="c", max_tokens=50, tools=tools,
                                         messages=[{"role": "user", "content": "Weather in Lisbon?"}])
    use = first.content[0]
    assert use.type == "tool_use" and use.name == "get_weather"
    second = await client.messages.create(model="c", max_tokens=50, tools=tools, messages=[
        {"role": "user", "content": "Weather in Lisbon?"},
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "21C"},
                                     {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}])
    assert second.content[0].type == "text"
    sent = stack.provider.received[-1].body["messages"][-1]["content"]
    assert sent[0]["type"] == "tool_result" and sent[1]["type"] == "image"


async def test_search_results_placement_lets_claude_cite_memory(stack, reference):
    ref_url, _ = reference
    stack.add_agent("citer", ref_url, placement="search_results")
    await _teach(stack, "citer", "The launch code name is Bluebird.")
    msg = await stack.anthropic("citer").messages.create(
        model="c", max_tokens=50, messages=[{"role": "user", "content": "What is the launch code name?"}])
    latest = stack.provider.received[-1].body["messages"][-1]["content"]
    assert latest[0] == {"type": "text", "text": PREAMBLE}  # the results open with what they are: data
    latest = latest[1:]
    assert latest[0]["type"] == "search_result" and latest[0]["source"].startswith("memplane://mem-svc/hist1_")
    assert latest[0]["citations"] == {"enabled": True} and "Bluebird" in latest[0]["content"][0]["text"]
    assert latest[0]["content"][0]["text"].startswith('<memory kind="episode" source="reference" origin="user"')
    assert latest[-1] == {"type": "text", "text": "What is the launch code name?"}
    assert "system" not in stack.provider.received[-1].body
    assert msg.content[0].citations
    await stack.settle()
    entry = stack.ledger("citer")[-1]
    assert entry["citations"][0]["source"] == latest[0]["source"]


async def test_anthropic_errors_arrive_in_anthropic_shape(make_stack):
    stack = await make_stack()
    stack.add_agent("err")
    from anthropic import AsyncAnthropic
    bad = AsyncAnthropic(base_url=stack.proxy_url, api_key="err:nope", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as exc:
        await bad.messages.create(model="c", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert exc.value.body["type"] == "error" and exc.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.BadRequestError):
        await stack.anthropic("err").messages.create(model="c", max_tokens=5, messages=[])
    stack.state.settings.anthropic_base_url = "http://127.0.0.1:9"
    with pytest.raises(anthropic.InternalServerError) as exc:
        await stack.anthropic("err").messages.create(model="c", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert exc.value.status_code == 502
    assert stack.provider.received == []


# -- OpenAI Responses --

async def test_responses_api_gets_memory_in_instructions(stack, reference):
    ref_url, _ = reference
    stack.add_agent("resp", ref_url)
    await _teach(stack, "resp", "I am allergic to peanuts.")
    client = stack.openai("resp")
    stack.provider.stored["resp_prev123"] = []  # an earlier response the (strict) provider still has
    r = await client.responses.create(model="gpt-5", instructions="Be careful.", input="What am I allergic to?",
                                      previous_response_id="resp_prev123")
    assert "peanuts" in r.output_text
    body = stack.provider.received[-1].body
    assert body["instructions"].startswith("Be careful.\n\n<memories")
    assert body["previous_response_id"] == "resp_prev123" and body["input"] == "What am I allergic to?"
    await stack.settle()
    entry = stack.ledger("resp")[-1]
    assert entry["path"] == "/v1/responses" and entry["usage"]["prompt_tokens"] > 0


async def test_responses_streaming_with_item_input(stack, reference):
    ref_url, _ = reference
    stack.add_agent("rstream", ref_url)
    client = stack.openai("rstream")
    stream = await client.responses.create(model="gpt-5", stream=True, input=[
        {"role": "user", "content": [{"type": "input_text", "text": "My train leaves at 9:40."},
                                     {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}])
    deltas = [ev.delta async for ev in stream if ev.type == "response.output_text.delta"]
    assert len(deltas) > 1
    await stack.settle()
    entry = stack.ledger("rstream")[-1]
    assert entry["response"] == {"format": "sse", "text": "".join(deltas)}
    assert entry["usage"]["completion_tokens"] > 0
    recall = stack.events("recall", claw_id="rstream")[0]
    assert recall["memory_status"] == "succeeded"


async def test_responses_errors_arrive_in_openai_shape(stack):
    stack.add_agent("rerr")
    with pytest.raises(openai.BadRequestError) as exc:
        await stack.openai("rerr").responses.create(model="gpt-5", extra_body={"input": None})
    assert exc.value.status_code == 400


# -- recall metadata and placement --

async def test_recall_request_carries_path_messages_system_and_query(stack, aiohttp_server):
    from aiohttp import web
    seen = []

    async def recall(request):
        seen.append(await request.json())
        return web.json_response({"memories": []})
    app = web.Application()
    app.router.add_post("/recall", recall)
    server = await aiohttp_server(app)
    stack.add_agent("meta", f"http://{server.host}:{server.port}")
    await stack.anthropic("meta").messages.create(
        model="c", max_tokens=5, system="sys", extra_headers={"X-Session-Id": "s-42"},
        messages=[{"role": "user", "content": [{"type": "text", "text": "first part"},
                                               {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}},
                                               {"type": "text", "text": "second part of the question"}]}])
    await stack.openai("meta").responses.create(model="r", input="hello there from the responses api")
    anth, resp = seen
    assert anth["metadata"]["path"] == "anthropic" and anth["system"] == "sys"
    assert anth["metadata"]["session_id"] == "s-42" and anth["metadata"]["requested_model"] == "c"
    assert anth["query"] == "first part\nsecond part of the question"
    assert anth["agent_id"] == "meta" and anth["pod"] == "test-pod"
    assert resp["metadata"]["path"] == "responses"
    assert resp["messages"] == [{"role": "user", "content": "hello there from the responses api"}]


async def test_latest_placement_keeps_the_earlier_prompt_byte_identical(stack, reference):
    ref_url, _ = reference
    stack.add_agent("cachey", ref_url, placement="latest")
    await _teach(stack, "cachey", "Remember my locker number is 4471.")
    history = [{"role": "system", "content": "Long stable instructions."},
               {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"},
               {"role": "user", "content": "What is my locker number?"}]
    await stack.openai("cachey").chat.completions.create(model="m", messages=history)
    sent = stack.provider.received[-1].body["messages"]
    assert orjson.dumps(sent[:3]) == orjson.dumps(history[:3])
    assert sent[3]["role"] == "system" and "4471" in sent[3]["content"]
    assert sent[4] == history[3]
