"""Real agents are tool loops with long, cached prompts: through memplane, in every placement, each
call of a loop is one the strict provider accepts, carries the same block, and the provider's cache
keeps hitting as it does without memory."""

from __future__ import annotations

import anthropic
import orjson
import pytest

from memory_adapters.engine.episodes import episodes_from_entry
from memplane_core.redact import Redactor
from memplane_core.turn_text import calls_tools
from proxy.testing.fake_provider import ToolCall, ToolLoop

WEATHER = [{"name": "get_weather", "description": "weather", "input_schema": {"type": "object"}},
           {"name": "get_time", "description": "time", "input_schema": {"type": "object"}}]
OA_TOOLS = [{"type": "function", "function": {"name": t["name"], "parameters": {"type": "object"}}} for t in WEATHER]
RESP_TOOLS = [{"type": "function", "name": t["name"], "parameters": {"type": "object"}} for t in WEATHER]
LOOP = [ToolCall("get_weather", {"city": "Porto"}), ToolCall("get_time", {"city": "Porto"})]
FACT = "My sister Ana lives in Porto."
QUESTION = "What is the weather where my sister lives?"


async def _teach(stack, agent):
    await stack.openai(agent).chat.completions.create(model="m", messages=[{"role": "user", "content": FACT}])
    await stack.settle()


def _loop_requests(stack, path):
    return [r for r in stack.provider.received if r.path == path]


async def _anthropic_loop(client, *, stream: bool, extra: dict | None = None) -> tuple[list, object]:
    messages = [{"role": "user", "content": QUESTION}]
    for _ in range(5):
        if stream:
            async with client.messages.stream(model="c", max_tokens=200, tools=WEATHER, messages=messages,
                                              **(extra or {})) as s:
                msg = await s.get_final_message()
        else:
            msg = await client.messages.create(model="c", max_tokens=200, tools=WEATHER, messages=messages,
                                               **(extra or {}))
        if msg.stop_reason != "tool_use":
            return messages, msg
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": f"{b.name}: 21C at noon"}
            for b in msg.content if b.type == "tool_use"]})
    raise AssertionError("the loop never ended")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("placement", ["trailing", "system", "latest", "search_results"])
async def test_anthropic_tool_loop_passes_in_every_placement_with_one_block(stack, reference, placement, stream):
    ref_url, _ = reference
    stack.add_agent("claude", ref_url, placement=placement)
    await _teach(stack, "claude")
    stack.provider.model = ToolLoop(LOOP, say="Let me check.")
    messages, final = await _anthropic_loop(stack.anthropic("claude"), stream=stream)
    assert "Porto" in final.content[-1].text and "Tool said: get_time" in final.content[-1].text
    calls = _loop_requests(stack, "/v1/messages")
    assert [r.status for r in calls] == [200, 200, 200]  # the strict provider refused nothing
    for r in calls[1:]:  # the steps' tool results lead their message; the trailing block comes after them
        content = r.body["messages"][-1]["content"]
        assert content[0]["type"] == "tool_result"
        assert all(b["type"] == "tool_result" for b in content[: -1 if placement == "trailing" else None])
    if placement == "search_results":
        firsts = [orjson.dumps([b for m in r.body["messages"] if isinstance(m["content"], list)
                                for b in m["content"] if b.get("type") == "search_result"]) for r in calls]
        assert b"Porto" in firsts[0] and len(set(firsts)) == 1
    else:
        blocks = [r.memories_blocks for r in calls]
        assert len(blocks[0]) == 1 and "Porto" in blocks[0][0]
        assert all(b == blocks[0] for b in blocks)  # byte-identical across the loop
    await stack.settle()
    ledger = stack.ledger("claude")
    assert len(ledger) == 4  # every call is a ledger line
    assert [calls_tools(e) for e in ledger[1:]] == [True, True, False]


async def test_with_thinking_a_loop_step_keeps_the_block_in_the_question_and_its_results_alone(stack, reference):
    """Anthropic drops a loop's extended thinking (and its cache) when a step's user message holds
    anything but tool results; and the cache wants the question's message as the first call sent it.
    So with thinking on a step gets the block where the first call put it: after the question."""
    ref_url, _ = reference
    stack.add_agent("claude", ref_url)  # the default placement
    await _teach(stack, "claude")
    stack.provider.model = ToolLoop(LOOP[:1])
    eph = {"type": "ephemeral"}
    client = stack.anthropic("claude")
    thinking = {"type": "enabled", "budget_tokens": 1024}
    first = await client.messages.create(model="c", max_tokens=2048, tools=WEATHER, thinking=thinking, messages=[
        {"role": "user", "content": [{"type": "text", "text": QUESTION, "cache_control": eph}]}])
    asked = stack.provider.received[-1].body["messages"][0]
    use = next(b for b in first.content if b.type == "tool_use")
    history = [{"role": "user", "content": [{"type": "text", "text": QUESTION}]},
               {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "21C",
                                             "cache_control": eph},
                                            {"type": "text", "text": "<system-reminder>Keep going.</system-reminder>"}]}]
    await client.messages.create(model="c", max_tokens=2048, tools=WEATHER, thinking=thinking, messages=history)
    sent = stack.provider.received[-1].body["messages"]
    assert stack.provider.received[-1].status == 200
    strip = [{k: v for k, v in b.items() if k != "cache_control"} for b in asked["content"]]
    assert sent[0]["content"] == strip and "Porto" in sent[0]["content"][-1]["text"]  # as the first call sent it
    assert sent[1:] == history[1:]  # the answer and the step's results (and the client's note) as sent
    assert "cache_control" not in sent[0]["content"][-1]  # memplane never adds a breakpoint
    # the note beside the results did not start a new turn: the same block, not a fresh recall
    assert stack.provider.received[-1].memories_blocks == stack.provider.received[-2].memories_blocks


async def test_search_results_fall_back_to_text_with_structured_output_and_say_so(stack, reference):
    ref_url, _ = reference
    stack.add_agent("citer", ref_url, placement="search_results")
    await _teach(stack, "citer")
    schema = {"type": "json_schema", "schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
    raw = await stack.anthropic("citer").messages.with_raw_response.create(
        model="c", max_tokens=50, messages=[{"role": "user", "content": "Where does my sister live?"}],
        extra_body={"output_config": {"format": schema}})
    got = stack.provider.received[-1]
    assert got.status == 200
    assert not any(b.get("type") == "search_result" for b in got.body["messages"][-1]["content"])
    assert "Porto" in got.memories_block
    doc = (await _explain(stack, raw.headers["X-Memplane-Turn-Id"]))
    assert doc["placement"] == "latest" and "structured output" in doc["placement_note"]


async def test_search_results_follow_the_agents_own_citation_setting(stack, reference):
    ref_url, _ = reference
    stack.add_agent("citer", ref_url, placement="search_results")
    await _teach(stack, "citer")
    own = {"type": "search_result", "source": "kb://doc", "title": "kb", "content": [{"type": "text", "text": "x"}]}
    await stack.anthropic("citer").messages.create(model="c", max_tokens=50, messages=[
        {"role": "user", "content": [own, {"type": "text", "text": "Where does my sister live?"}]}])
    got = stack.provider.received[-1]
    assert got.status == 200 and "Porto" in got.memories_block
    assert [b["type"] for b in got.body["messages"][-1]["content"]] == ["text", "search_result", "text"]


async def _explain(stack, turn_id):
    import aiohttp
    async with aiohttp.ClientSession() as s, s.get(f"{stack.proxy_url}/memplane/turns/{turn_id}") as r:
        return await r.json()


# -- OpenAI Chat Completions --

async def _chat_loop(client, *, stream: bool, messages=None):
    messages = messages or [{"role": "user", "content": QUESTION}]
    for _ in range(5):
        if stream:
            s = await client.chat.completions.create(model="gpt-4o", tools=OA_TOOLS, messages=messages, stream=True)
            text, calls = "", {}
            async for chunk in s:
                for c in chunk.choices:
                    text += c.delta.content or ""
                    for tc in c.delta.tool_calls or ():
                        slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                        slot["id"] += tc.id or ""
                        slot["name"] += (tc.function.name or "") if tc.function else ""
                        slot["arguments"] += (tc.function.arguments or "") if tc.function else ""
            tool_calls = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                          for c in calls.values()]
        else:
            r = await client.chat.completions.create(model="gpt-4o", tools=OA_TOOLS, messages=messages)
            text = r.choices[0].message.content or ""
            tool_calls = [c.model_dump() for c in r.choices[0].message.tool_calls or ()]
        if not tool_calls:
            return messages, text
        messages = [*messages, {"role": "assistant", "content": text or None, "tool_calls": tool_calls}]
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": f"{c['function']['name']}: 21C"}
                     for c in tool_calls]
    raise AssertionError("the loop never ended")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("placement", ["trailing", "system", "latest"])
async def test_openai_chat_tool_loop_passes_in_every_placement_with_one_block(stack, reference, placement, stream):
    ref_url, _ = reference
    stack.add_agent("gpt", ref_url, placement=placement)
    await _teach(stack, "gpt")
    stack.provider.model = ToolLoop(LOOP)
    _, text = await _chat_loop(stack.openai("gpt"), stream=stream)
    assert "Porto" in text and "Tool said: get_time" in text
    calls = [r for r in _loop_requests(stack, "/v1/chat/completions")][1:]
    assert [r.status for r in calls] == [200, 200, 200]
    blocks = [r.memories_blocks for r in calls]
    assert len(blocks[0]) == 1 and all(b == blocks[0] for b in blocks)
    if placement == "trailing":
        assert all(r.body["messages"][-1]["role"] == "system" for r in calls)
    await stack.settle()
    entries = stack.ledger("gpt")
    assert len(entries) == 4
    assert [calls_tools(e) for e in entries[1:]] == [True, True, False]  # streamed or not, the steps are known


# -- OpenAI Responses --

async def test_responses_chain_gets_the_turns_block_in_instructions_and_never_stores_it(stack, reference):
    ref_url, _ = reference
    stack.add_agent("resp", ref_url)
    await _teach(stack, "resp")
    stack.provider.model = ToolLoop(LOOP)
    client = stack.openai("resp")
    previous = None
    for turn in (QUESTION, "And tomorrow?"):
        r = await client.responses.create(model="gpt-5", tools=RESP_TOOLS, input=turn, previous_response_id=previous)
        while any(o.type == "function_call" for o in r.output):
            outputs = [{"type": "function_call_output", "call_id": o.call_id, "output": f"{o.name}: 21C"}
                       for o in r.output if o.type == "function_call"]
            r = await client.responses.create(model="gpt-5", tools=RESP_TOOLS, input=outputs, previous_response_id=r.id)
        previous = r.id
        assert "Porto" in r.output_text
    calls = _loop_requests(stack, "/v1/responses")
    assert [c.status for c in calls] == [200] * 6
    first_turn = [c.body["instructions"] for c in calls[:3]]
    assert "Porto" in first_turn[0] and len(set(first_turn)) == 1  # the continuations got the same block
    for c in calls:  # nothing memplane added is an input item the provider keeps
        assert not any("<memories" in orjson.dumps(item).decode() for item in c.context or ())
    await stack.settle()
    entries = stack.ledger("resp")
    final = entries[3]  # the first turn's last step sends tool outputs only
    assert final["turn_question"] == QUESTION


async def test_a_responses_conversation_keeps_the_turns_block_through_its_tool_loop(stack, reference):
    """With `conversation` the provider keeps the items, so a loop's later calls send tool outputs
    only: they continue the turn (the same block, the question in the ledger), not a turn without text."""
    ref_url, _ = reference
    stack.add_agent("conv", ref_url)
    await _teach(stack, "conv")
    stack.provider.model = ToolLoop(LOOP)
    client = stack.openai("conv")
    r = await client.responses.create(model="gpt-5", tools=RESP_TOOLS, instructions="Be brief.", input=QUESTION,
                                      extra_body={"conversation": "conv_abc"})
    while any(o.type == "function_call" for o in r.output):
        outputs = [{"type": "function_call_output", "call_id": o.call_id, "output": f"{o.name}: 21C"}
                   for o in r.output if o.type == "function_call"]
        r = await client.responses.create(model="gpt-5", tools=RESP_TOOLS, instructions="Be brief.", input=outputs,
                                          extra_body={"conversation": {"id": "conv_abc"}})
    assert "Porto" in r.output_text
    calls = _loop_requests(stack, "/v1/responses")
    assert [c.status for c in calls] == [200] * 3
    instructions = [c.body["instructions"] for c in calls]
    assert "Porto" in instructions[0] and len(set(instructions)) == 1  # byte-identical through the loop
    for c in calls:  # the conversation the provider keeps holds nothing memplane added
        assert not any("<memories" in orjson.dumps(item).decode() for item in c.context or ())
    await stack.settle()
    assert [e.get("turn_question") for e in stack.ledger("conv")[2:]] == [QUESTION, QUESTION]


async def test_responses_without_store_get_the_block_last_in_input(stack, reference):
    ref_url, _ = reference
    stack.add_agent("resp", ref_url)
    await _teach(stack, "resp")
    await stack.openai("resp").responses.create(model="gpt-5", store=False, instructions="Be brief.",
                                                input=[{"role": "user", "content": QUESTION}])
    body = stack.provider.received[-1].body
    assert body["instructions"] == "Be brief."
    assert body["input"][0] == {"role": "user", "content": QUESTION}
    assert body["input"][-1]["role"] == "developer" and "Porto" in body["input"][-1]["content"]


# -- prompt caching: the default placement keeps what the provider cached --

LONG_SYSTEM = "You are a careful assistant for the travel desk. " * 120


async def _anthropic_cached_turns(client, automatic: bool = False) -> list[int]:
    """Three turns with the client's sliding breakpoint on its newest message, or with automatic
    caching (one top-level `cache_control`: the API puts the breakpoint on the last block)."""
    eph = {"type": "ephemeral"}
    system = LONG_SYSTEM if automatic else [{"type": "text", "text": LONG_SYSTEM, "cache_control": eph}]
    mark = {} if automatic else {"cache_control": eph}
    extra = {"extra_body": {"cache_control": eph}} if automatic else {}
    history: list = []
    reads = []
    for q in ("Where does my sister live? " * 20, "What is the weather there? " * 20, "And tomorrow? " * 30):
        turn = [*history, {"role": "user", "content": [{"type": "text", "text": q, **mark}]}]
        msg = await client.messages.create(model="c", max_tokens=100, system=system, messages=turn, **extra)
        reads.append(msg.usage.cache_read_input_tokens or 0)
        history = [*history, {"role": "user", "content": [{"type": "text", "text": q}]},
                   {"role": "assistant", "content": [{"type": "text", "text": msg.content[0].text}]}]
    return reads


@pytest.mark.parametrize("automatic", [False, True])
async def test_trailing_keeps_at_least_90_percent_of_anthropic_cached_tokens(stack, reference, automatic):
    ref_url, _ = reference
    stack.add_agent("plain")  # no memory: the baseline
    stack.add_agent("mem", ref_url)
    await _teach(stack, "mem")
    baseline = await _anthropic_cached_turns(stack.anthropic("plain"), automatic)
    stack.provider.anthropic_cache.entries.clear()
    with_memory = await _anthropic_cached_turns(stack.anthropic("mem"), automatic)
    assert all(r.status == 200 for r in stack.provider.received)
    assert any("<memories" in orjson.dumps(r.body).decode() for r in stack.provider.received[-3:])
    assert baseline[1] > 1500 and baseline[2] > baseline[1]
    for turn in (1, 2):
        assert with_memory[turn] >= 0.9 * baseline[turn]


async def _anthropic_loop_cached_calls(client) -> list[int]:
    """Two user questions, each a tool loop whose results are long (a file read, a web page), with
    the client's breakpoints on its tools, its system prompt and its newest message."""
    eph = {"type": "ephemeral"}
    tools = [{**WEATHER[0], "cache_control": eph}, *WEATHER[1:]]
    messages: list = []
    reads = []
    for q in (QUESTION, "And what about tomorrow there?"):
        messages.append({"role": "user", "content": [{"type": "text", "text": q}]})
        while True:
            marked = [*messages[:-1], {**messages[-1], "content": [*messages[-1]["content"][:-1],
                                                                   {**messages[-1]["content"][-1], "cache_control": eph}]}]
            msg = await client.messages.create(model="c", max_tokens=2048, tools=tools, messages=marked,
                                               system=[{"type": "text", "text": LONG_SYSTEM, "cache_control": eph}])
            reads.append(msg.usage.cache_read_input_tokens or 0)
            messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]})
            if msg.stop_reason != "tool_use":
                break
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b.id, "content": f"{b.name}: " + "21C, light wind. " * 400}
                for b in msg.content if b.type == "tool_use"]})
    return reads


async def test_trailing_keeps_anthropic_tool_loops_cached_across_user_turns(stack, reference):
    """The question after a tool loop reads the loop's long tool results from the cache, with memory
    as without: the block goes after everything the client sent, after its breakpoint."""
    ref_url, _ = reference
    stack.add_agent("plain")
    stack.add_agent("mem", ref_url)
    await _teach(stack, "mem")
    stack.provider.model = ToolLoop(LOOP[:1])
    baseline = await _anthropic_loop_cached_calls(stack.anthropic("plain"))
    stack.provider.anthropic_cache.entries.clear()
    with_memory = await _anthropic_loop_cached_calls(stack.anthropic("mem"))
    assert all(r.status == 200 for r in stack.provider.received)
    assert all(len(r.memories_blocks) == 1 for r in stack.provider.received[-4:])
    assert baseline[2] > baseline[1] + 1000  # the second question reads the first one's tool results
    for call in (1, 2, 3):
        assert with_memory[call] >= 0.9 * baseline[call], (call, with_memory, baseline)


async def _chat_cached_turns(client) -> list[int]:
    history = [{"role": "system", "content": LONG_SYSTEM}]
    reads = []
    for q in ("Where does my sister live? " * 20, "What is the weather there? " * 20, "And tomorrow? " * 30):
        history.append({"role": "user", "content": q})
        r = await client.chat.completions.create(model="gpt-4o", messages=history)
        reads.append(r.usage.prompt_tokens_details.cached_tokens)
        history.append({"role": "assistant", "content": r.choices[0].message.content})
    return reads


async def test_trailing_keeps_at_least_90_percent_of_openai_cached_tokens(stack, reference):
    ref_url, _ = reference
    stack.add_agent("plain")
    stack.add_agent("mem", ref_url)
    await _teach(stack, "mem")
    baseline = await _chat_cached_turns(stack.openai("plain"))
    stack.provider.openai_cache.seen.clear()
    with_memory = await _chat_cached_turns(stack.openai("mem"))
    assert "Porto" in (stack.provider.received[-1].memories_block or "")
    assert baseline[1] >= 1024
    for turn in (1, 2):
        assert with_memory[turn] >= 0.9 * baseline[turn]


# -- what a tool loop leaves in memory --

async def test_a_tool_loop_is_remembered_once_with_its_tools_and_answer(stack, reference):
    ref_url, store = reference
    stack.add_agent("claude", ref_url)
    stack.provider.model = ToolLoop(LOOP, say="Let me check.")
    await _anthropic_loop(stack.anthropic("claude"), stream=True)
    await stack.settle()
    entries = stack.ledger("claude")
    assert len(entries) == 3
    records = list(store._agents["claude"].records.values())
    assert len(records) == 1  # one user turn, one memory: not one per step
    summary = records[0]["summary"]
    assert QUESTION in summary and "get_time" in summary and "Tool said" in summary
    # the engine: each step carries the loop under the loop's ids, the last replacing the earlier ones
    # (a loop that ends on a tool call keeps its latest step); the last carries it whole
    redactor = Redactor()
    made = [episodes_from_entry("claude", e, {}, redactor) for e in entries]
    assert [len(m) for m in made] == [1, 2, 3]  # the user's words; what the tools said; the answer, each apart
    assert {m.id for step in made for m in step} == {m.id for m in made[2]}  # one turn: the same memories
    said, tools, answer = made[2]
    assert answer.metadata["origin"] == "model" and answer.value.startswith("assistant: ")
    assert QUESTION not in answer.value and answer.metadata["tainted"] is True
    assert QUESTION in said.value and "get_weather" not in said.value and "<memories" not in said.value
    assert tools.value.startswith("tools: get_weather(") and tools.metadata["origin"] == "tool"
    assert said.metadata["origin"] == "user" and said.metadata["tainted"] is True


async def test_streamed_anthropic_tool_use_is_ledgered_with_its_input(stack):
    stack.add_agent("claude")
    stack.provider.model = ToolLoop(LOOP[:1], say="Let me check.")
    async with stack.anthropic("claude").messages.stream(model="c", max_tokens=50, tools=WEATHER,
                                                         messages=[{"role": "user", "content": "Weather?"}]) as s:
        await s.get_final_message()
    await stack.settle()
    [entry] = stack.ledger("claude")
    assert entry["response"]["text"] == "Let me check."
    [call] = entry["response"]["tool_calls"]
    assert call["name"] == "get_weather" and orjson.loads(call["arguments"]) == {"city": "Porto"}


# -- routing and headers --

async def test_anthropic_models_list_goes_to_anthropic_with_the_anthropic_key(stack):
    stack.add_agent("claude")
    page = await stack.anthropic("claude").models.list()
    got = stack.provider.received[-1]
    assert got.path == "/v1/models"
    assert got.headers["x-api-key"] == "sk-ant-operator-anthropic-key" and "Authorization" not in got.headers
    assert page.data  # the SDK could read the answer in its own shape
    with pytest.raises(anthropic.NotFoundError) as missing:
        await stack.anthropic("claude").beta.files.list()
    assert missing.value.body["type"] == "error"  # refused in the caller's own dialect


async def test_agents_organization_is_dropped_and_the_operators_sent(make_stack):
    stack = await make_stack(openai_organization="org-operator", openai_project="proj-operator")
    stack.provider.organization, stack.provider.project = "org-operator", "proj-operator"
    stack.add_agent("gpt")
    client = stack.openai("gpt", organization="org-agents-own", project="proj-agents-own")
    r = await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content
    got = stack.provider.received[-1]
    assert got.headers["OpenAI-Organization"] == "org-operator" and got.headers["OpenAI-Project"] == "proj-operator"


async def test_the_query_string_reaches_the_provider(stack):
    stack.add_agent("claude")
    await stack.anthropic("claude").messages.create(model="c", max_tokens=5, messages=[{"role": "user", "content": "x"}],
                                                    extra_query={"beta": "true"})
    assert stack.provider.received[-1].query == "beta=true"
    await stack.anthropic("claude").models.list(extra_query={"limit": "5"})
    assert stack.provider.received[-1].query == "limit=5"


@pytest.fixture
async def counting_recall(aiohttp_server):
    """A memory service whose answer changes on every recall (as a busy memory's does)."""
    from aiohttp import web
    asked = []

    async def recall(request):
        asked.append(await request.json())
        return web.json_response({"memories": [{"text": f"Answer number {len(asked)}.", "kind": "fact"}]})
    app = web.Application()
    app.router.add_post("/recall", recall)
    server = await aiohttp_server(app)
    return f"http://{server.host}:{server.port}", asked


@pytest.mark.parametrize("placement", ["trailing", "latest"])
async def test_every_call_of_a_tool_loop_replays_the_first_calls_block(stack, counting_recall, placement):
    url, asked = counting_recall
    stack.add_agent("gpt", url, placement=placement)
    stack.add_agent("claude", url, placement=placement)
    stack.provider.model = ToolLoop(LOOP)
    await _chat_loop(stack.openai("gpt"), stream=False)
    await _anthropic_loop(stack.anthropic("claude"), stream=True)
    chat = [r.memories_blocks for r in _loop_requests(stack, "/v1/chat/completions")]
    claude = [r.memories_blocks for r in _loop_requests(stack, "/v1/messages")]
    assert len(asked) == 2  # one recall per user turn, not per call
    assert all(b == chat[0] for b in chat) and "Answer number 1." in chat[0][0]
    # the same question from another agent is its own turn: it never gets the first agent's block
    assert all(b == claude[0] for b in claude) and "Answer number 2." in claude[0][0]
    # the next user turn recalls afresh
    messages, _ = await _chat_loop(stack.openai("gpt"), stream=False)
    assert "Answer number 3." in _loop_requests(stack, "/v1/chat/completions")[-1].memories_block
    assert len(asked) == 3


async def test_a_loop_whose_client_slides_its_breakpoint_onto_a_string_prompt_keeps_one_block(stack, counting_recall):
    """A client that writes its messages as strings and puts its sliding breakpoint on the newest one
    (as the prompt-caching docs show) sends the question as a text block on the first call and as a
    string on the next: the same prompt to the API, so the same user turn — one recall, one block."""
    url, asked = counting_recall
    stack.add_agent("claude", url)
    stack.provider.model = ToolLoop(LOOP)
    client = stack.anthropic("claude")
    eph = {"type": "ephemeral"}
    messages: list = [{"role": "user", "content": QUESTION}]
    while True:
        *older, newest = messages
        content = newest["content"]
        content = content if isinstance(content, list) else [{"type": "text", "text": content}]
        marked = [*older, {**newest, "content": [*content[:-1], {**content[-1], "cache_control": eph}]}]
        msg = await client.messages.create(model="c", max_tokens=100, tools=WEATHER, messages=marked)
        if msg.stop_reason != "tool_use":
            break
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]})
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": "21C"}
                                                     for b in msg.content if b.type == "tool_use"]})
    blocks = [r.memories_blocks for r in _loop_requests(stack, "/v1/messages")]
    assert len(blocks) == 3 and len(asked) == 1  # one user turn, one recall
    assert all(b == blocks[0] for b in blocks) and "Answer number 1." in blocks[0][0]


async def test_a_repeated_question_in_a_new_conversation_recalls_afresh(stack, counting_recall):
    url, asked = counting_recall
    stack.add_agent("gpt", url)
    for _ in range(2):
        await stack.openai("gpt").chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])
    blocks = [r.memories_block for r in stack.provider.received]
    assert "Answer number 1." in blocks[0] and "Answer number 2." in blocks[1]


# -- Anthropic message threads: memplane holds them for agents with memory --

THREADS_BETA = ["message-threads-2026-08-12"]


async def _thread_turn(client, text, thread, **extra):
    return await client.beta.messages.create(model="c", max_tokens=100, messages=[{"role": "user", "content": text}],
                                             extra_body={"thread": thread}, betas=THREADS_BETA, **extra)


async def test_a_message_thread_is_held_by_memplane_and_never_stores_a_block(stack, reference):
    ref_url, _ = reference
    stack.add_agent("claude", ref_url)
    stack.add_agent("other", ref_url)
    await _teach(stack, "claude")
    client = stack.anthropic("claude")
    first = await _thread_turn(client, QUESTION, {"type": "create"}, system="Be brief.")
    second = await _thread_turn(client, "And tomorrow?", {"type": "continue", "previous_message_id": first.id})
    assert "Porto" in second.content[0].text
    got = stack.provider.received[-1]
    assert "thread" not in got.body and got.body["system"] == "Be brief."  # an ordinary request upstream
    assert [m["role"] for m in got.body["messages"]] == ["user", "assistant", "user"]
    assert got.body["messages"][0]["content"] == QUESTION  # the client's own words, no block kept in them
    assert len(got.memories_blocks) == 1
    assert not stack.provider.threads  # the provider holds no conversation with memplane's block in it
    # a reply is continued once; another agent cannot continue this agent's thread
    for who, previous in (("claude", first.id), ("other", second.id), ("claude", "msg_nowhere")):
        with pytest.raises(anthropic.BadRequestError) as lost:
            await _thread_turn(stack.anthropic(who), "hi", {"type": "continue", "previous_message_id": previous})
        assert lost.value.body["error"]["details"] == {"error_code": "thread_not_found"}
    with pytest.raises(anthropic.BadRequestError, match="cannot be set on a `continue`"):
        await _thread_turn(client, "hi", {"type": "continue", "previous_message_id": second.id}, system="x")


async def test_a_thread_of_an_agent_without_memory_stays_with_the_provider(stack):
    stack.add_agent("plain")
    first = await _thread_turn(stack.anthropic("plain"), "hello", {"type": "create"})
    await _thread_turn(stack.anthropic("plain"), "again", {"type": "continue", "previous_message_id": first.id})
    assert stack.provider.received[-1].body["thread"]["previous_message_id"] == first.id


async def test_a_streamed_thread_reply_is_kept_whole_for_the_next_call(stack, reference):
    ref_url, _ = reference
    stack.add_agent("claude", ref_url)
    await _teach(stack, "claude")
    stack.provider.model = ToolLoop(LOOP[:1], say="Let me check.")
    client = stack.anthropic("claude")
    async with client.beta.messages.stream(model="c", max_tokens=100, tools=WEATHER, betas=THREADS_BETA,
                                           messages=[{"role": "user", "content": QUESTION}],
                                           extra_body={"thread": {"type": "create"}}) as s:
        first = await s.get_final_message()
    use = next(b for b in first.content if b.type == "tool_use")
    second = await client.beta.messages.create(
        model="c", max_tokens=100, betas=THREADS_BETA,
        messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "21C"}]}],
        extra_body={"thread": {"type": "continue", "previous_message_id": first.id}})
    assert "Porto" in second.content[0].text and "Tool said: 21C" in second.content[0].text
    got = stack.provider.received[-1]
    assert got.status == 200 and got.body["tools"] == stack.provider.received[-2].body["tools"]
    assert got.body["messages"][1]["content"] == [{"type": "text", "text": "Let me check."},
                                                  {"type": "tool_use", "id": use.id, "name": "get_weather",
                                                   "input": {"city": "Porto"}}]
    blocks = [r.memories_blocks for r in stack.provider.received[-2:]]
    assert blocks[0] == blocks[1] and len(blocks[0]) == 1  # the turn's block, once, the same bytes


async def _weather_loop(client, asked: list[dict]) -> None:
    """A chat tool loop of two calls: the model asks for the weather tool, the client sends its result back."""
    step = await client.chat.completions.create(model="m", tools=OA_TOOLS, messages=asked)
    call = step.choices[0].message.tool_calls[0]
    await client.chat.completions.create(model="m", tools=OA_TOOLS, messages=[
        *asked, step.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "21C at noon"}])


async def test_a_loop_that_ends_on_a_tool_call_keeps_the_persons_words_and_a_loop_keeps_one_episode(stack, engine):
    """Some agents end a session with a tool call whose result never goes back to the model (a
    `finish` tool): memory keeps that turn from its last step. A loop that ends with an answer
    still leaves one episode for the turn, not one per step."""
    stack.add_agent("coder", engine, service="embedded")
    client = stack.openai("coder")
    finish = [{"type": "function", "function": {"name": "finish", "parameters": {"type": "object", "properties": {}}}}]
    stack.provider.model = ToolLoop([ToolCall("finish", {})])
    said = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": FACT}]
    ended = await client.chat.completions.create(model="m", tools=finish, messages=said)
    assert ended.choices[0].message.tool_calls[0].function.name == "finish"  # and the client stops there
    await stack.settle()

    stack.provider.model = ToolLoop(LOOP[:1])
    await _weather_loop(client, [{"role": "system", "content": "You are a coding agent."},
                                 {"role": "user", "content": "Please check the weather in Lisbon for my trip on Friday."}])
    await stack.settle()

    stack.provider.model = None
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Where does Ana live?"}])
    assert "Porto" in (stack.provider.received[-1].memories_block or ""), "the finished turn was remembered"
    await stack.settle()
    from tests.cli_agents import stored_memories
    texts = [m["value"] for m in await stored_memories(engine, "coder")]
    said = [t for t in texts if not t.startswith(("assistant:", "tools:"))]  # the person's parts
    assert sum(FACT in t for t in said) == 1
    assert sum("my trip on Friday" in t for t in said) == 1  # the loop's two calls: one episode
    assert sum(t.startswith("tools:") and "get_weather" in t for t in texts) == 1


async def test_a_responses_conversation_keeps_each_user_turn_of_its_tool_loops_once(stack, engine):
    """With `conversation` a loop's later calls carry no user message: each is a step of the loop its
    turn began, so a conversation of two user turns leaves each turn once, and the second turn's
    steps never replace the first turn's memory."""
    stack.add_agent("conv2", engine, service="embedded")
    client = stack.openai("conv2")
    questions = ["What is the weather where my sister lives in Porto?",
                 "And what time is it in Porto for my brother Rui?"]
    for n, question in enumerate(questions):
        stack.provider.model = ToolLoop(LOOP[:1])
        r = await client.responses.create(model="gpt-5", tools=RESP_TOOLS, input=question,
                                          extra_body={"conversation": "conv_two_turns"})
        while any(o.type == "function_call" for o in r.output):
            outputs = [{"type": "function_call_output", "call_id": o.call_id, "output": f"{o.name}: 21C at {n + 9}am"}
                       for o in r.output if o.type == "function_call"]
            r = await client.responses.create(model="gpt-5", tools=RESP_TOOLS, input=outputs,
                                              extra_body={"conversation": {"id": "conv_two_turns"}})
        await stack.caught_up()
    from tests.cli_agents import stored_memories
    texts = [m["value"] for m in await stored_memories(engine, "conv2")]
    said = [t for t in texts if not t.startswith(("assistant:", "tools:"))]  # the person's parts
    assert [sum(q in t for t in said) for q in questions] == [1, 1], said


async def test_forgetting_any_call_of_a_tool_loop_forgets_the_turn_it_kept(stack, engine):
    """A loop's episode is kept from its latest step, so it holds what every step said: forgetting
    any of the loop's ledger entries (as a person picks one in the inspector) forgets it."""
    import aiohttp
    stack.add_agent("forgetful", engine, service="embedded")
    client = stack.openai("forgetful")
    stack.provider.model = ToolLoop(LOOP[:1])
    await _weather_loop(client, [{"role": "user", "content": "Please check the weather in Lisbon for my trip on Friday."}])
    await stack.caught_up()
    first = stack.ledger("forgetful")[0]["id"]  # the loop's first call, not the one the episode came from
    from tests.cli_agents import stored_memories
    assert any("my trip on Friday" in m["value"] for m in await stored_memories(engine, "forgetful"))
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{engine}/forget", json={"agent_id": "forgetful", "entry_ids": [first],
                                                       "reason": "the person asked"}) as r:
            assert r.status == 204, await r.text()
    assert not any("my trip on Friday" in m["value"] for m in await stored_memories(engine, "forgetful"))
