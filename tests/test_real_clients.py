"""Real clients run real tool loops through memplane, in every placement, streaming and not.

The story: an agent was told its locker number in an earlier conversation. Now the user asks a
question that needs a tool (the weather) and the memory (the locker number). The client — the
official openai / anthropic SDKs, langgraph, pydantic-ai, openai-agents, litellm, llm — runs its own tool loop
through memplane against the strict fake provider, which refuses what the real APIs refuse. The
tool is slow enough that anything memplane retains between the steps would show up in the next
step's recall.

What the user notices, and each test asserts:
* the loop completes (every call accepted by the strict provider);
* the final answer uses the remembered fact and the tool's result;
* the memory the model sees is one block, byte-identical on every call of the loop (the
  provider's prompt cache keeps hitting inside the loop);
* every call is a ledger line, and the loop is remembered once, not once per step.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from proxy.testing.fake_provider import Received, ToolCall, ToolLoop
from tests.harness import Stack

FACT = "Remember: my locker number is 4471."
QUESTION = "What is the weather in Lisbon today, and what is my locker number?"
WEATHER = "21C and sunny"
AGENT = "looper"
OPENAI_PLACEMENTS = ["system", "latest", "trailing"]
ANTHROPIC_PLACEMENTS = ["system", "latest", "search_results", "trailing"]
BLOCK_RE = re.compile(r"<memories\b[^>]*>.*?</memories>", re.S)


@dataclass
class Loop:
    """One tool loop of one agent through memplane."""

    stack: Stack
    store: Any
    first: int  # the provider's first request of this loop
    stream: bool

    async def weather(self, city: str) -> str:
        # A tool that takes a while: whatever memplane retains meanwhile reaches the next recall.
        await self.stack.settle()
        return WEATHER

    def calls(self) -> list[Received]:
        return self.stack.provider.received[self.first:]


def memory_units(doc: Any) -> list[str]:
    """Each injected memory the model sees: a `<memories>` block, or one message's memplane
    search results (the `search_results` placement), as bytes to compare."""
    units: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, str):
            units.extend(BLOCK_RE.findall(node))
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            ours = [b for b in node if isinstance(b, dict) and b.get("type") == "search_result"
                    and str(b.get("source", "")).startswith("memplane://")]
            if ours:
                units.append(orjson.dumps(ours).decode())
            for item in node:
                if item not in ours:
                    walk(item)

    walk(doc)
    return units


def model_saw(r: Received) -> Any:
    """The whole prompt of a call: with previous_response_id or an Anthropic message thread, the
    provider's stored conversation plus this request."""
    if r.context is None:
        return r.body
    return {"system": r.system, "instructions": r.body.get("instructions"), "items": r.context}


async def start(stack: Stack, reference, placement: str, stream: bool) -> Loop:
    ref_url, store = reference
    # These tests are about the clients, not the recall deadline (tests/test_recall_deadline.py): a
    # loaded CI host must not turn a late recall into a missing block.
    stack.add_agent(AGENT, ref_url, placement=placement, recall={"path": "/recall", "timeout_ms": 5000})
    await stack.openai(AGENT).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": FACT}])
    await stack.settle()
    stack.provider.model = ToolLoop([ToolCall("get_weather", {"city": "Lisbon"})], say="Let me check the weather.")
    return Loop(stack, store, len(stack.provider.received), stream)


async def finish(loop: Loop, answer: str, steps: int = 2) -> None:
    calls = loop.calls()
    refused = [(c.status, c.error) for c in calls if c.status != 200]
    assert not refused, f"the provider refused what memplane forwarded: {refused}"
    assert len(calls) == steps
    assert all(c.body.get("stream") for c in calls) or not loop.stream  # (some clients stream anyway)
    seen = [memory_units(model_saw(c)) for c in calls]
    assert "4471" in answer, f"the answer did not use the remembered fact: {answer!r} (blocks per call: " \
                             f"{[len(u) for u in seen]})"
    assert WEATHER in answer
    assert all(len(units) == 1 for units in seen), f"the model saw {[len(u) for u in seen]} memory blocks per call"
    assert len({units[0] for units in seen}) == 1, "the memory changed between the calls of one tool loop"
    await loop.stack.settle()
    ledger = loop.stack.ledger(AGENT)
    assert len(ledger) == 1 + steps  # the lesson, then every call of the loop
    step = orjson.dumps(ledger[1]["response"]).decode()  # the model's tool call, streamed or not
    assert "get_weather" in step and "Lisbon" in step, f"the ledger lost the tool call: {step[:300]}"
    assert loop.store.count(AGENT) == 2, "the loop was remembered more than once"  # the lesson + this turn


# -- the clients: each runs one tool loop and returns the final answer --

async def openai_chat(loop: Loop) -> str:
    client = loop.stack.openai(AGENT)
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}}}}}]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."},
                                      {"role": "user", "content": QUESTION}]
    while True:
        if loop.stream:
            async with client.chat.completions.stream(model="gpt-4o", messages=messages, tools=tools) as s:
                reply = await s.get_final_completion()
        else:
            reply = await client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
        msg = reply.choices[0].message
        if not msg.tool_calls:
            return msg.content
        messages.append(msg.model_dump(exclude_none=True, exclude={"parsed"}))
        for call in msg.tool_calls:
            city = orjson.loads(call.function.arguments)["city"]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": await loop.weather(city)})


async def openai_responses_chain(loop: Loop) -> str:
    """The Responses API with server-side state: each step sends only the function output."""
    client = loop.stack.openai(AGENT)
    tools = [{"type": "function", "name": "get_weather", "description": "Current weather",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    kwargs: dict[str, Any] = {"model": "gpt-5", "tools": tools, "instructions": "You are a helpful assistant.",
                              "input": QUESTION}
    while True:
        if loop.stream:
            async with client.responses.stream(**kwargs) as s:
                response = await s.get_final_response()
        else:
            response = await client.responses.create(**kwargs)
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            return response.output_text
        outputs = [{"type": "function_call_output", "call_id": c.call_id,
                    "output": await loop.weather(orjson.loads(c.arguments)["city"])} for c in calls]
        kwargs = {**kwargs, "previous_response_id": response.id, "input": outputs}


async def anthropic_messages(loop: Loop) -> str:
    client = loop.stack.anthropic(AGENT)
    tools = [{"name": "get_weather", "description": "Current weather",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    while True:
        kwargs = {"model": "claude-sonnet-4-6", "max_tokens": 512, "system": "You are a helpful assistant.",
                  "tools": tools, "messages": messages}
        if loop.stream:
            async with client.messages.stream(**kwargs) as s:
                reply = await s.get_final_message()
        else:
            reply = await client.messages.create(**kwargs)
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            return "".join(b.text for b in reply.content if b.type == "text")
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id, "content": await loop.weather(u.input["city"])}
            for u in uses]})


async def anthropic_tool_runner(loop: Loop) -> str:
    """The anthropic SDK's own loop (beta tool runner; it keeps the conversation in a server-side
    message thread when the server offers one)."""
    import anthropic

    @anthropic.beta_async_tool
    async def get_weather(city: str) -> str:
        """Current weather for a city."""
        return await loop.weather(city)

    runner = loop.stack.anthropic(AGENT).beta.messages.tool_runner(
        model="claude-sonnet-4-6", max_tokens=512, tools=[get_weather], system="You are a helpful assistant.",
        messages=[{"role": "user", "content": QUESTION}], **({"stream": True} if loop.stream else {}))
    final = await runner.until_done()
    return "".join(b.text for b in final.content if b.type == "text")


def _langchain_weather(loop: Loop):
    from langchain_core.tools import tool

    @tool
    async def get_weather(city: str) -> str:
        """Current weather for a city."""
        return await loop.weather(city)

    return get_weather


async def _langgraph(loop: Loop, llm) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent's move to langchain.agents
        from langgraph.prebuilt import create_react_agent
        agent = create_react_agent(llm, [_langchain_weather(loop)], prompt="You are a helpful assistant.")
    out = await agent.ainvoke({"messages": [("user", QUESTION)]})
    content = out["messages"][-1].content
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


async def langgraph_openai(loop: Loop) -> str:
    from langchain_openai import ChatOpenAI
    return await _langgraph(loop, ChatOpenAI(model="gpt-4o", base_url=f"{loop.stack.proxy_url}/v1",
                                             api_key=loop.stack.tokens[AGENT], max_retries=0, streaming=loop.stream))


async def langgraph_anthropic(loop: Loop) -> str:
    from langchain_anthropic import ChatAnthropic
    return await _langgraph(loop, ChatAnthropic(model="claude-sonnet-4-6", base_url=loop.stack.proxy_url,
                                                api_key=loop.stack.tokens[AGENT], max_retries=0,
                                                streaming=loop.stream))


async def _pydantic_ai(loop: Loop, model) -> str:
    from pydantic_ai import Agent
    agent = Agent(model, instructions="You are a helpful assistant.")

    @agent.tool_plain
    async def get_weather(city: str) -> str:
        """Current weather for a city."""
        return await loop.weather(city)

    if loop.stream:
        # `run_stream` ends at the first text ("Let me check the weather."); an event handler
        # streams every model request of the whole loop instead.
        async def handler(ctx, events) -> None:
            async for _ in events:
                pass
        return (await agent.run(QUESTION, event_stream_handler=handler)).output
    return (await agent.run(QUESTION)).output


async def pydantic_ai_chat(loop: Loop) -> str:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    provider = OpenAIProvider(openai_client=loop.stack.openai(AGENT))
    return await _pydantic_ai(loop, OpenAIChatModel("gpt-4o", provider=provider))


async def pydantic_ai_responses(loop: Loop) -> str:
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider
    provider = OpenAIProvider(openai_client=loop.stack.openai(AGENT))
    return await _pydantic_ai(loop, OpenAIResponsesModel("gpt-5", provider=provider))


async def pydantic_ai_anthropic(loop: Loop) -> str:
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider
    provider = AnthropicProvider(anthropic_client=loop.stack.anthropic(AGENT))
    return await _pydantic_ai(loop, AnthropicModel("claude-sonnet-4-6", provider=provider))


async def _openai_agents(loop: Loop, model, **run_kwargs: Any) -> str:
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    set_tracing_disabled(True)  # traces would be exported to the public endpoint

    @function_tool
    async def get_weather(city: str) -> str:
        """Current weather for a city."""
        return await loop.weather(city)

    agent = Agent(name="assistant", instructions="You are a helpful assistant.", model=model, tools=[get_weather])
    if loop.stream:
        result = Runner.run_streamed(agent, QUESTION, **run_kwargs)
        async for _ in result.stream_events():
            pass
    else:
        result = await Runner.run(agent, QUESTION, **run_kwargs)
    return str(result.final_output)


async def openai_agents_responses(loop: Loop) -> str:
    """openai-agents on the Responses API, chaining calls with previous_response_id."""
    from agents import OpenAIResponsesModel
    model = OpenAIResponsesModel(model="gpt-5", openai_client=loop.stack.openai(AGENT))
    return await _openai_agents(loop, model, auto_previous_response_id=True)


async def openai_agents_chat(loop: Loop) -> str:
    from agents import OpenAIChatCompletionsModel
    return await _openai_agents(loop, OpenAIChatCompletionsModel(model="gpt-4o",
                                                                 openai_client=loop.stack.openai(AGENT)))


async def _litellm(loop: Loop, model: str, api_base: str) -> str:
    """litellm as a client library: one `acompletion` per step, the loop written as its docs show."""
    import os
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of the price list at import
    import litellm
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}}}}}]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."},
                                      {"role": "user", "content": QUESTION}]
    while True:
        reply = await litellm.acompletion(model=model, api_base=api_base, api_key=loop.stack.tokens[AGENT],
                                          messages=messages, tools=tools, stream=loop.stream, max_tokens=512)
        if loop.stream:
            reply = litellm.stream_chunk_builder([chunk async for chunk in reply], messages=messages)
        msg = reply.choices[0].message
        if not msg.tool_calls:
            return msg.content
        messages.append(msg.model_dump(exclude_none=True))
        for call in msg.tool_calls:
            city = orjson.loads(call.function.arguments)["city"]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": await loop.weather(city)})


async def litellm_openai(loop: Loop) -> str:
    return await _litellm(loop, "openai/gpt-4o", f"{loop.stack.proxy_url}/v1")


async def litellm_anthropic(loop: Loop) -> str:
    return await _litellm(loop, "anthropic/claude-sonnet-4-6", loop.stack.proxy_url)


def _llm_models(loop: Loop) -> None:
    """Simon Willison's `llm` reaches an OpenAI-compatible endpoint through extra-openai-models.yaml
    in its user directory (LLM_USER_PATH), read whenever a model is looked up."""
    import os
    user_dir = loop.stack.history_root.parent / "llm-user"
    user_dir.mkdir(exist_ok=True)
    (user_dir / "extra-openai-models.yaml").write_text(
        f"- model_id: memplane-gpt\n  model_name: gpt-4o\n  api_base: {loop.stack.proxy_url}/v1\n"
        "  api_key_name: memplane\n  supports_tools: true\n  can_stream: true\n")
    (user_dir / "keys.json").write_text(orjson.dumps({"memplane": loop.stack.tokens[AGENT]}).decode())
    os.environ["LLM_USER_PATH"] = str(user_dir)


async def llm_library(loop: Loop) -> str:
    """The `llm` CLI's library: a chain runs the tool loop (what `llm --functions` does)."""
    import llm
    _llm_models(loop)

    async def get_weather(city: str) -> str:
        """Current weather for a city."""
        return await loop.weather(city)

    model = llm.get_async_model("memplane-gpt")
    chain = model.chain(QUESTION, system="You are a helpful assistant.", tools=[get_weather], stream=loop.stream)
    return await chain.text()


Client = Callable[[Loop], Awaitable[str]]
OPENAI_CLIENTS: list[Client] = [openai_chat, openai_responses_chain, langgraph_openai, pydantic_ai_chat,
                                pydantic_ai_responses, openai_agents_responses, openai_agents_chat, litellm_openai,
                                llm_library]
ANTHROPIC_CLIENTS: list[Client] = [anthropic_messages, anthropic_tool_runner, langgraph_anthropic,
                                   pydantic_ai_anthropic, litellm_anthropic]
CASES = [pytest.param(client, placement, stream, id=f"{client.__name__}-{placement}-{'stream' if stream else 'json'}")
         for clients, placements in ((OPENAI_CLIENTS, OPENAI_PLACEMENTS), (ANTHROPIC_CLIENTS, ANTHROPIC_PLACEMENTS))
         for client in clients for placement in placements for stream in (False, True)]


@pytest.mark.parametrize(("client", "placement", "stream"), CASES)
async def test_tool_loop_completes_with_the_remembered_fact_and_one_block(stack, reference, client, placement,
                                                                         stream):
    loop = await start(stack, reference, placement, stream)
    answer = await client(loop)
    await finish(loop, answer)


CONTROL = [pytest.param(client, stream, id=f"{client.__name__}-{'stream' if stream else 'json'}")
           for client in OPENAI_CLIENTS + ANTHROPIC_CLIENTS for stream in (False, True)]


@pytest.mark.parametrize(("client", "stream"), CONTROL)
async def test_the_same_tool_loop_completes_through_memplane_without_memory(stack, client, stream):
    """The control: every client's loop is valid as the client sends it."""
    stack.add_agent(AGENT)
    stack.provider.model = ToolLoop([ToolCall("get_weather", {"city": "Lisbon"})], say="Let me check the weather.")
    loop = Loop(stack, None, len(stack.provider.received), stream)
    answer = await client(loop)
    assert [c.status for c in loop.calls()] == [200, 200]
    assert all(c.body.get("stream") for c in loop.calls()) or not stream
    assert answer.endswith("Noted. Tool said: 21C and sunny")  # (llm's chain text includes "Let me check…")
    assert all(memory_units(model_saw(c)) == [] for c in loop.calls())


async def test_default_placement_of_a_new_agent_is_trailing(stack, reference):
    """A new agent (no placement in its memory.json) gets the block after everything the client
    sent: the client's own messages reach the provider byte for byte, as a prefix."""
    ref_url, _ = reference
    stack.add_agent(AGENT, ref_url)
    await stack.openai(AGENT).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": FACT}])
    await stack.settle()
    history = [{"role": "system", "content": "You are a helpful assistant."},
               {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"},
               {"role": "user", "content": "What is my locker number?"}]
    reply = await stack.openai(AGENT).chat.completions.create(model="gpt-4o", messages=history)
    assert "4471" in reply.choices[0].message.content
    sent = orjson.dumps(stack.provider.received[-1].body["messages"]).decode()
    client = orjson.dumps(history).decode()
    newest = "What is my locker number?"
    # everything the client sent, up to the end of its newest text, reaches the provider unchanged
    assert sent.startswith(client[:client.rindex(newest) + len(newest)])
    assert sent.index("<memories") > sent.index(newest)


# -- pass-through and headers, as the SDKs send them --

async def test_anthropic_sdk_lists_models_from_the_anthropic_upstream(stack):
    stack.add_agent(AGENT)
    models = [m.id async for m in stack.anthropic(AGENT).models.list()]
    assert models == ["claude-fake"]  # the provider answered in Anthropic's shape
    sent = stack.provider.received[-1].headers
    assert "sk-ant-operator-anthropic-key" in (sent.get("x-api-key", "") + sent.get("Authorization", ""))
    assert "sk-operator-openai-key" not in str(sent) and stack.tokens[AGENT] not in str(sent)


async def test_an_agents_organization_and_project_never_reach_the_provider(stack):
    """The real API answers 401 mismatched_organization when an organization header does not
    belong to the (operator's) key; memplane drops the agent's."""
    stack.add_agent(AGENT)
    client = stack.openai(AGENT).with_options(organization="org-agents-own", project="proj-agents-own")
    reply = await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content
    sent = {k.lower() for k in stack.provider.received[-1].headers}
    assert "openai-organization" not in sent and "openai-project" not in sent


async def test_the_query_string_reaches_the_provider(stack):
    stack.add_agent(AGENT)
    await stack.anthropic(AGENT).beta.messages.create(model="claude-sonnet-4-6", max_tokens=20,
                                                      messages=[{"role": "user", "content": "hi"}],
                                                      extra_query={"beta": "true"})
    assert stack.provider.received[-1].query == "beta=true"


# -- citations: consistent with the agent's own search results, never with structured output --

async def _citing_agent(stack, reference) -> Any:
    await start(stack, reference, "search_results", stream=False)
    stack.provider.model = None
    return stack.anthropic(AGENT)


async def test_search_results_placement_follows_the_agents_own_citation_setting(stack, reference):
    """An agent that sends its own search results without citations: memory must not turn
    citations on for some results only (the API refuses a mix)."""
    client = await _citing_agent(stack, reference)
    own = {"type": "search_result", "source": "kb://manual/chain", "title": "Chain wear",
           "content": [{"type": "text", "text": "Replace the chain at 0.5 % elongation."}]}
    await client.messages.create(model="claude-sonnet-4-6", max_tokens=100, messages=[
        {"role": "user", "content": [own, {"type": "text", "text": "What is my locker number?"}]}])
    sent = stack.provider.received[-1]
    assert sent.status == 200, sent.error
    assert "4471" in orjson.dumps(sent.body).decode()


async def test_structured_output_gets_memory_without_citations(stack, reference):
    client = await _citing_agent(stack, reference)
    schema = {"type": "json_schema", "schema": {"type": "object", "properties": {"locker": {"type": "string"}},
                                                "required": ["locker"], "additionalProperties": False}}
    await client.messages.create(model="claude-sonnet-4-6", max_tokens=100,
                                 messages=[{"role": "user", "content": "What is my locker number?"}],
                                 extra_body={"output_config": {"format": schema}})
    sent = stack.provider.received[-1]
    assert sent.status == 200, sent.error
    assert "4471" in orjson.dumps(sent.body).decode()


# -- conversations the provider stores: memory is per request, never piled up in the stored chain --

TURNS = ["What is my locker number?", "And which city did I ask about the weather for?", "Thanks, anything else?"]


@pytest.mark.parametrize("placement", OPENAI_PLACEMENTS)
async def test_a_responses_chain_sees_one_block_per_call_over_three_turns(stack, reference, placement):
    """openai SDK, `previous_response_id` across three user turns: the provider stores the
    chain, so a block sent as an input item would come back on every later turn."""
    await start(stack, reference, placement, stream=False)
    stack.provider.model = None
    client = stack.openai(AGENT)
    first = len(stack.provider.received)
    previous = None
    for text in TURNS:
        response = await client.responses.create(model="gpt-5", input=text, instructions="Be brief.",
                                                 **({"previous_response_id": previous} if previous else {}))
        previous = response.id
    calls = stack.provider.received[first:]
    assert [c.status for c in calls] == [200, 200, 200]
    assert [len(memory_units(model_saw(c))) for c in calls] == [1, 1, 1]
    assert "4471" in orjson.dumps(model_saw(calls[0])).decode()


@pytest.mark.parametrize("placement", ANTHROPIC_PLACEMENTS)
async def test_an_anthropic_message_thread_sees_one_block_per_call_over_three_turns(stack, reference, placement):
    """The anthropic SDK's message thread (server-held conversation, as its tool runner uses):
    the same story as a Responses chain."""
    await start(stack, reference, placement, stream=False)
    stack.provider.model = None
    client = stack.anthropic(AGENT)
    first = len(stack.provider.received)
    thread: dict[str, Any] = {"type": "create"}
    for n, text in enumerate(TURNS):
        extra = {"system": "Be brief."} if n == 0 else {}
        reply = await client.beta.messages.create(model="claude-sonnet-4-6", max_tokens=100, **extra,
                                                  messages=[{"role": "user", "content": text}],
                                                  extra_body={"thread": thread},
                                                  betas=["message-threads-2026-08-12"])
        thread = {"type": "continue", "previous_message_id": reply.id}
    calls = stack.provider.received[first:]
    assert [(c.status, c.error) for c in calls] == [(200, None)] * 3
    assert [len(memory_units(model_saw(c))) for c in calls] == [1, 1, 1]


PARALLEL = [pytest.param(client, placement, stream, id=f"{client.__name__}-{placement}-{'stream' if stream else 'json'}")
            for client, placements in ((openai_chat, OPENAI_PLACEMENTS), (anthropic_messages, ANTHROPIC_PLACEMENTS))
            for placement in placements for stream in (False, True)]


@pytest.mark.parametrize(("client", "placement", "stream"), PARALLEL)
async def test_parallel_tool_calls_keep_their_results_together(stack, reference, client, placement, stream):
    """The model asks for two tools at once: nothing may come between the call and its results."""
    loop = await start(stack, reference, placement, stream)
    stack.provider.model = ToolLoop([[ToolCall("get_weather", {"city": "Lisbon"}),
                                      ToolCall("get_weather", {"city": "Porto"})]])
    answer = await client(loop)
    await finish(loop, answer)
    assert answer.endswith(f"Tool said: {WEATHER} / {WEATHER}")


@pytest.mark.parametrize("placement", ANTHROPIC_PLACEMENTS)
async def test_an_agent_using_all_four_cache_breakpoints_still_gets_memory(stack, reference, placement):
    """Anthropic allows four `cache_control` breakpoints; memplane never adds a fifth."""
    await start(stack, reference, placement, stream=False)
    stack.provider.model = None
    eph = {"type": "ephemeral"}
    await stack.anthropic(AGENT).messages.create(
        model="claude-sonnet-4-6", max_tokens=100,
        tools=[{"name": "get_weather", "input_schema": {"type": "object"}, "cache_control": eph}],
        system=[{"type": "text", "text": "You are a helpful assistant.", "cache_control": eph}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "hello", "cache_control": eph}]},
                  {"role": "assistant", "content": "hi"},
                  {"role": "user", "content": [{"type": "text", "text": "What is my locker number?",
                                                "cache_control": eph}]}])
    sent = stack.provider.received[-1]
    assert sent.status == 200, sent.error
    assert "4471" in orjson.dumps(sent.body).decode()


async def test_the_llm_cli_runs_a_tool_loop_with_memory(stack, reference, monkeypatch):
    """The `llm` command line itself, as a user types it, with a tool defined by --functions."""
    import asyncio
    import shutil
    import sys
    from pathlib import Path
    loop = await start(stack, reference, "trailing", stream=True)
    _llm_models(loop)
    monkeypatch.setenv("LLM_USER_PATH", str(Path(stack.history_root.parent / "llm-user")))
    binary = shutil.which("llm", path=str(Path(sys.executable).parent))
    assert binary, "the llm CLI is installed with the test extra"
    code = "def get_weather(city: str) -> str:\n    'Current weather for a city.'\n    return '21C and sunny'\n"
    proc = await asyncio.create_subprocess_exec(
        binary, "-m", "memplane-gpt", "--functions", code, QUESTION,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    await finish(loop, out.decode())
