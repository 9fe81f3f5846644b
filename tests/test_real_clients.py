"""Real clients run real tool loops through memplane, in every placement, streaming and not.

The story: an agent was told its locker number in an earlier conversation. Now the user asks a
question that needs a tool (the weather) and the memory (the locker number). The client — the
official openai / anthropic SDKs, langgraph, pydantic-ai, openai-agents — runs its own tool loop
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
    stack.add_agent(AGENT, ref_url, placement=placement)
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
    assert len(loop.stack.ledger(AGENT)) == 1 + steps  # the lesson, then every call of the loop
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
        kwargs = {"model": "claude-sonnet-4-5", "max_tokens": 512, "system": "You are a helpful assistant.",
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
        model="claude-sonnet-4-5", max_tokens=512, tools=[get_weather], system="You are a helpful assistant.",
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
    return await _langgraph(loop, ChatAnthropic(model="claude-sonnet-4-5", base_url=loop.stack.proxy_url,
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
    return await _pydantic_ai(loop, AnthropicModel("claude-sonnet-4-5", provider=provider))


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


Client = Callable[[Loop], Awaitable[str]]
OPENAI_CLIENTS: list[Client] = [openai_chat, openai_responses_chain, langgraph_openai, pydantic_ai_chat,
                                pydantic_ai_responses, openai_agents_responses, openai_agents_chat]
ANTHROPIC_CLIENTS: list[Client] = [anthropic_messages, anthropic_tool_runner, langgraph_anthropic,
                                   pydantic_ai_anthropic]
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
    assert answer == "Noted. Tool said: 21C and sunny"
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
    client_prefix = orjson.dumps(history).decode()[:-2]  # up to the newest message's closing quote
    assert sent.startswith(client_prefix[: client_prefix.rindex('"')])
    assert sent.index("<memories") > sent.index("What is my locker number?")
