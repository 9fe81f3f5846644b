"""The fake provider is as strict as the real APIs: what they refuse, it refuses the same way.

The tests talk to the provider directly with the official SDKs (no memplane in between), so a
later test that runs through memplane and passes means memplane forwarded a valid request.
"""

from __future__ import annotations

import anthropic
import openai
import pytest

from proxy.testing.fake_provider import AnthropicCache, OpenAIPrefixCache, ToolCall, ToolLoop

WEATHER = [{"name": "get_weather", "description": "weather", "input_schema": {"type": "object"}}]
OA_WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


@pytest.fixture
def clients(provider_server):
    provider, url = provider_server
    return (provider,
            openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0),
            anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-test", max_retries=0))


async def _tool_use(claude) -> tuple[list, str]:
    first = await claude.messages.create(model="c", max_tokens=50, tools=WEATHER,
                                         messages=[{"role": "user", "content": "Weather in Lisbon?"}])
    use = next(b for b in first.content if b.type == "tool_use")
    return [{"role": "user", "content": "Weather in Lisbon?"},
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]}], use.id


# -- Anthropic --

async def test_anthropic_text_before_a_tool_result_is_refused_in_anthropic_shape(clients):
    provider, _, claude = clients
    history, use_id = await _tool_use(claude)
    result = {"type": "tool_result", "tool_use_id": use_id, "content": "21C"}
    with pytest.raises(anthropic.BadRequestError) as bad:
        await claude.messages.create(model="c", max_tokens=50, tools=WEATHER, messages=[
            *history, {"role": "user", "content": [{"type": "text", "text": "<memories/>"}, result]}])
    assert bad.value.body["type"] == "error"
    assert bad.value.body["error"]["type"] == "invalid_request_error"
    assert "must come first" in bad.value.body["error"]["message"]
    # a separate user message in front of the results is merged into the same turn: refused too
    with pytest.raises(anthropic.BadRequestError):
        await claude.messages.create(model="c", max_tokens=50, tools=WEATHER, messages=[
            *history, {"role": "user", "content": "<memories/>"}, {"role": "user", "content": [result]}])
    # text after the results is what the docs allow
    ok = await claude.messages.create(model="c", max_tokens=50, tools=WEATHER, messages=[
        *history, {"role": "user", "content": [result, {"type": "text", "text": "<memories/>"}]}])
    assert ok.stop_reason == "end_turn"
    assert [r.status for r in provider.received] == [200, 400, 400, 200]


async def test_anthropic_tool_use_without_its_result_and_stray_results_are_refused(clients):
    _, _, claude = clients
    history, use_id = await _tool_use(claude)
    with pytest.raises(anthropic.BadRequestError, match="without `tool_result` blocks immediately after"):
        await claude.messages.create(model="c", max_tokens=50, messages=[*history, {"role": "user", "content": "hm"}])
    with pytest.raises(anthropic.BadRequestError, match="unexpected `tool_use_id`"):
        await claude.messages.create(model="c", max_tokens=50, messages=[{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_nowhere", "content": "x"}]}])
    with pytest.raises(anthropic.BadRequestError, match='Unexpected role "system"'):
        await claude.messages.create(model="c", max_tokens=50, messages=[
            {"role": "system", "content": "be terse"}, {"role": "user", "content": "hi"}])


def _search_result(text: str, citations: bool | None) -> dict:
    block = {"type": "search_result", "source": "kb://1", "title": "t", "content": [{"type": "text", "text": text}]}
    if citations is not None:
        block["citations"] = {"enabled": citations}
    return block


async def test_anthropic_citations_are_all_or_nothing_and_not_with_structured_output(clients):
    _, _, claude = clients
    mixed = [_search_result("a", True), _search_result("b", None), {"type": "text", "text": "q?"}]
    with pytest.raises(anthropic.BadRequestError, match="all search results"):
        await claude.messages.create(model="c", max_tokens=50, messages=[{"role": "user", "content": mixed}])
    cited = [_search_result("a", True), {"type": "text", "text": "q?"}]
    schema = {"type": "json_schema", "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}
    with pytest.raises(anthropic.BadRequestError, match="structured outputs"):
        await claude.messages.create(model="c", max_tokens=50, messages=[{"role": "user", "content": cited}],
                                     extra_body={"output_config": {"format": schema}})
    answer = await claude.messages.create(model="c", max_tokens=50, messages=[{"role": "user", "content": cited}])
    assert answer.content[0].citations[0].source == "kb://1"


async def test_anthropic_refuses_a_fifth_cache_breakpoint(clients):
    _, _, claude = clients
    eph = {"type": "ephemeral"}
    system = [{"type": "text", "text": f"part {i}", "cache_control": eph} for i in range(4)]
    await claude.messages.create(model="c", max_tokens=5, system=system, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.BadRequestError, match="A maximum of 4 blocks with cache_control"):
        await claude.messages.create(model="c", max_tokens=5, system=system, messages=[
            {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": eph}]}])


async def test_anthropic_stream_carries_text_then_tool_use_with_its_input(clients):
    provider, _, claude = clients
    provider.model = ToolLoop([ToolCall("get_weather", {"city": "Porto"})], say="Let me check.")
    async with claude.messages.stream(model="c", max_tokens=50, tools=WEATHER,
                                      messages=[{"role": "user", "content": "Weather?"}]) as stream:
        final = await stream.get_final_message()
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[0].text == "Let me check." and final.content[1].input == {"city": "Porto"}


# -- OpenAI Chat Completions --

async def _chat_tool_call(gpt):
    first = await gpt.chat.completions.create(model="gpt-4o", tools=OA_WEATHER,
                                              messages=[{"role": "user", "content": "Weather?"}])
    msg = first.choices[0].message
    return [{"role": "user", "content": "Weather?"}, msg.model_dump(exclude_none=True)], msg.tool_calls[0].id


async def test_openai_nothing_may_come_between_tool_calls_and_their_results(clients):
    _, gpt, _ = clients
    history, call_id = await _chat_tool_call(gpt)
    tool = {"role": "tool", "tool_call_id": call_id, "content": "21C"}
    with pytest.raises(openai.BadRequestError) as bad:
        await gpt.chat.completions.create(model="gpt-4o", tools=OA_WEATHER, messages=[
            *history, {"role": "system", "content": "<memories/>"}, tool])
    assert bad.value.body["type"] == "invalid_request_error"
    assert "must be followed by tool messages" in bad.value.body["message"] and call_id in bad.value.body["message"]
    with pytest.raises(openai.BadRequestError, match="must be a response to a preceeding message"):
        await gpt.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}, tool])
    with pytest.raises(openai.BadRequestError, match="Invalid value: 'memory'"):
        await gpt.chat.completions.create(model="gpt-4o", messages=[{"role": "memory", "content": "x"}])
    final = await gpt.chat.completions.create(model="gpt-4o", tools=OA_WEATHER, messages=[
        *history, tool, {"role": "system", "content": "<memories/>"}])
    assert final.choices[0].finish_reason == "stop"


async def test_openai_stream_assembles_a_tool_call_the_sdk_can_run(clients):
    provider, gpt, _ = clients
    provider.model = ToolLoop([ToolCall("get_weather", {"city": "Faro"})])
    async with gpt.chat.completions.stream(model="gpt-4o", tools=OA_WEATHER,
                                           messages=[{"role": "user", "content": "Weather?"}]) as stream:
        final = await stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and call.function.arguments == '{"city":"Faro"}'


async def test_an_agents_organization_header_is_refused_next_to_the_operators_key(clients):
    provider, gpt, _ = clients
    provider.organization = "org-operator"
    with pytest.raises(openai.AuthenticationError) as bad:
        await gpt.with_options(organization="org-agent").chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert bad.value.body["code"] == "mismatched_organization"
    ok = await gpt.with_options(organization="org-operator").chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert ok.choices[0].message.content


# -- OpenAI Responses --

async def test_responses_continuation_replays_the_stored_conversation(clients):
    provider, gpt, _ = clients
    provider.model = ToolLoop([ToolCall("get_weather", {"city": "Braga"})])
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    first = await gpt.responses.create(model="gpt-5", input="Weather in Braga?", tools=tools)
    call = next(i for i in first.output if i.type == "function_call")
    with pytest.raises(openai.BadRequestError, match="No tool call found for function call output"):
        await gpt.responses.create(model="gpt-5", tools=tools, input=[
            {"type": "function_call_output", "call_id": call.call_id, "output": "15C"}])
    with pytest.raises(openai.BadRequestError, match=f"No tool output found for function call {call.call_id}"):
        await gpt.responses.create(model="gpt-5", tools=tools, previous_response_id=first.id, input="and?")
    with pytest.raises(openai.BadRequestError, match="Previous response with id 'resp_gone' not found"):
        await gpt.responses.create(model="gpt-5", previous_response_id="resp_gone", input="hi")
    second = await gpt.responses.create(model="gpt-5", tools=tools, previous_response_id=first.id, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "15C"}])
    assert second.output_text.endswith("Tool said: 15C")
    seen = provider.received[-1].context
    assert [i.get("type", "message") for i in seen] == ["message", "function_call", "function_call_output"]


async def test_responses_stream_carries_function_call_arguments(clients):
    provider, gpt, _ = clients
    provider.model = ToolLoop([ToolCall("get_weather", {"city": "Evora"})])
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    async with gpt.responses.stream(model="gpt-5", input="Weather?", tools=tools) as stream:
        final = await stream.get_final_response()
    call = next(i for i in final.output if i.type == "function_call")
    assert call.name == "get_weather" and call.arguments == '{"city":"Evora"}'


# -- models list per caller dialect --

async def test_models_list_answers_in_the_callers_own_shape(clients):
    _, gpt, claude = clients
    assert [m.id async for m in gpt.models.list()] == ["fake-model"]
    assert [m.id async for m in claude.models.list()] == ["claude-fake"]


# -- prompt-cache simulation --

def _turns(system: str, n: int) -> list[dict]:
    msgs = []
    for i in range(n):
        msgs.append({"role": "user", "content": f"question {i} " + "detail " * 60})
        msgs.append({"role": "assistant", "content": f"answer {i} " + "words " * 60})
    return msgs


def test_anthropic_cache_follows_the_sliding_breakpoint_and_breaks_on_a_changed_prefix():
    cache = AnthropicCache()
    system = [{"type": "text", "text": "S" * 6000, "cache_control": {"type": "ephemeral"}}]

    def body(history: list[dict], sys=system) -> dict:
        *before, last = history
        last = {"role": "user", "content": [{"type": "text", "text": last["content"],
                                             "cache_control": {"type": "ephemeral"}}]}
        return {"model": "c", "system": sys, "messages": [*before, last]}

    convo = _turns("", 3)
    t1 = cache.usage(body(convo[:1]))
    t2 = cache.usage(body(convo[:3]))
    t3 = cache.usage(body(convo[:5]))
    assert t1["cache_read_input_tokens"] == 0 and t1["cache_creation_input_tokens"] > 1500
    assert t2["cache_read_input_tokens"] == t1["cache_creation_input_tokens"]  # all of turn 1's prompt
    assert t3["cache_read_input_tokens"] > t2["cache_read_input_tokens"]
    # one byte earlier in the prefix: only what comes before it can hit (here: nothing cached
    # ends before the system prompt, so the read falls to zero)
    changed = [{**system[0], "text": "S" * 5999 + "X"}]
    assert cache.usage(body(convo[:5], changed))["cache_read_input_tokens"] == 0


def test_anthropic_cache_lookback_is_twenty_blocks():
    cache = AnthropicCache(min_tokens=1)
    blocks = [{"type": "text", "text": f"block {i} " * 10} for i in range(30)]
    first = [{**b, "cache_control": {"type": "ephemeral"}} if i == 0 else b for i, b in enumerate(blocks)]
    cache.usage({"model": "c", "messages": [{"role": "user", "content": first}]})
    near = [*blocks[:20], {**blocks[20], "cache_control": {"type": "ephemeral"}}]
    far = [*blocks[:21], {**blocks[21], "cache_control": {"type": "ephemeral"}}]
    assert cache.usage({"model": "c", "messages": [{"role": "user", "content": far}]})["cache_read_input_tokens"] == 0
    assert cache.usage({"model": "c", "messages": [{"role": "user", "content": near}]})["cache_read_input_tokens"] > 0


def test_openai_prefix_cache_hits_from_1024_tokens_in_steps_of_128():
    cache = OpenAIPrefixCache()
    base = "x" * 4 * 1300
    assert cache.cached_tokens(base + "A" * 40) == 0  # nothing seen yet
    assert cache.cached_tokens(base + "B" * 40) == 1280  # 1300 shared tokens → 1024 + 2 × 128
    short = OpenAIPrefixCache()
    short.cached_tokens("y" * 4 * 1000)
    assert short.cached_tokens("y" * 4 * 1000 + "z") == 0  # under 1024 tokens nothing is cached


async def test_anthropic_message_thread_replays_and_keeps_its_system_prompt(clients):
    provider, _, claude = clients
    beta = {"betas": ["message-threads-2026-08-12"]}
    first = await claude.beta.messages.create(model="c", max_tokens=20, system="Be brief.", **beta,
                                              messages=[{"role": "user", "content": "hi"}],
                                              extra_body={"thread": {"type": "create"}})
    cont = {"thread": {"type": "continue", "previous_message_id": first.id}}
    await claude.beta.messages.create(model="c", max_tokens=20, messages=[{"role": "user", "content": "again"}],
                                      extra_body=cont, **beta)
    seen = provider.received[-1]
    assert seen.system == "Be brief." and [m["role"] for m in seen.context] == ["user", "assistant", "user"]
    with pytest.raises(anthropic.BadRequestError, match="cannot be set on a `continue`"):
        await claude.beta.messages.create(model="c", max_tokens=20, system="Other.", extra_body=cont, **beta,
                                          messages=[{"role": "user", "content": "again"}])
    with pytest.raises(anthropic.BadRequestError) as lost:
        await claude.beta.messages.create(model="c", max_tokens=20, messages=[{"role": "user", "content": "x"}],
                                          extra_body={"thread": {"type": "continue", "previous_message_id": "msg_x"}},
                                          **beta)
    assert lost.value.body["error"]["details"]["error_code"] == "thread_not_found"


async def test_parallel_tool_calls_must_all_be_answered_before_anything_else(clients):
    provider, gpt, _ = clients
    provider.model = ToolLoop([[ToolCall("get_weather", {"city": "Porto"}), ToolCall("get_weather", {"city": "Faro"})]])
    first = await gpt.chat.completions.create(model="gpt-4o", tools=OA_WEATHER,
                                              messages=[{"role": "user", "content": "Weather?"}])
    msg = first.choices[0].message
    assert len(msg.tool_calls) == 2
    a, b = ({"role": "tool", "tool_call_id": c.id, "content": t} for c, t in zip(msg.tool_calls, ("17C", "24C")))
    history = [{"role": "user", "content": "Weather?"}, msg.model_dump(exclude_none=True)]
    with pytest.raises(openai.BadRequestError, match="did not have response messages"):
        await gpt.chat.completions.create(model="gpt-4o", tools=OA_WEATHER, messages=[
            *history, a, {"role": "user", "content": "<memories/>"}, b])
    final = await gpt.chat.completions.create(model="gpt-4o", tools=OA_WEATHER, messages=[*history, a, b])
    assert final.choices[0].message.content.endswith("Tool said: 17C / 24C")


# -- hostile bodies: the rules answer every shape with None or a Problem, never an exception --

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from proxy.testing.fake_provider import anthropic_problem, chat_problem, responses_problem  # noqa: E402

_json = st.recursive(st.none() | st.booleans() | st.integers(-2 ** 63, 2 ** 63 - 1) | st.text(max_size=8)
                     | st.sampled_from(["user", "assistant", "tool", "system", "tool_use", "tool_result", "text",
                                        "search_result", "function_call", "function_call_output", "id1"]),
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.sampled_from(["role", "content", "type", "id", "tool_use_id", "call_id",
                                                        "tool_calls", "tool_call_id", "messages", "input", "model",
                                                        "max_tokens", "system", "citations", "enabled",
                                                        "cache_control", "previous_response_id", "output_config",
                                                        "format", "tools", "text"]), inner, max_size=5),
                     max_leaves=30)


_ids = st.sampled_from(["id1", "id2"]) | _json
_block = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_use", "tool_result", "search_result", "image"])},
    optional={"text": st.text(min_size=1, max_size=5) | _json, "id": _ids, "tool_use_id": _ids, "name": _json,
              "input": _json, "content": _json, "citations": _json, "cache_control": _json, "source": _json})
_anthropic = st.fixed_dictionaries(
    {"model": st.just("m"), "max_tokens": st.just(5),
     "messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]),
                                                 "content": st.text(min_size=1, max_size=5)
                                                 | st.lists(_block, min_size=1, max_size=4)}),
                          min_size=1, max_size=5)},
    optional={"system": _json, "tools": _json, "output_config": _json, "cache_control": _json})
_chat = st.fixed_dictionaries(
    {"model": st.just("m"),
     "messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant", "tool"])},
                                                optional={"content": _json, "tool_calls": _json,
                                                          "tool_call_id": _ids}), min_size=1, max_size=5)},
    optional={"tools": _json})
_any = st.dictionaries(st.sampled_from(["model", "max_tokens", "messages", "system", "tools", "input",
                                        "instructions", "previous_response_id", "output_config"]), _json)


@settings(max_examples=200, deadline=None)  # ~4.5 s of CPU; hypothesis keeps any failing example
@given(_anthropic | _chat | _any)
def test_no_body_makes_the_provider_raise(body):
    """Rules, then (for what they accept) the model's view and the cache simulation."""
    from proxy.testing.fake_provider.cache import openai_prompt
    from proxy.testing.fake_provider.model import anthropic_view, chat_view, responses_view
    from proxy.testing.fake_provider.rules import input_items
    if anthropic_problem(body) is None:
        anthropic_view(body)
        AnthropicCache().usage(body)
    if chat_problem(body) is None:
        chat_view(body)
        OpenAIPrefixCache().cached_tokens(openai_prompt(body.get("tools"), body["messages"]))
    if responses_problem(body, {}.get) is None:
        responses_view(body, input_items(body.get("input", [])))
        openai_prompt(body.get("tools"), input_items(body.get("input", [])))
