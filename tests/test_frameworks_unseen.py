"""Agent frameworks memplane was never written for, through memplane (docs/coding-agents-by-shape.md,
"Agent frameworks never seen").

* smolagents (`ToolCallingAgent` with `OpenAIServerModel`, `planning_interval`): before its tool loop,
  and every `planning_interval` steps, it asks the model for a plan in a call of its own — no system
  prompt, no tools, one user message that is its planning template with the person's task quoted in a
  fence — then opens the loop with the task ("New task:\\n…"), the plan as an assistant message, and
  "Now proceed and carry out this plan." as the newest user message.

Every framework runs against the strict fake provider; memplane must tell what each call is by its
shape. A test skips with the reason when its framework is not installed (`make test` installs them:
pyproject's `test` extra, pinned in constraints.txt).
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from proxy.testing.fake_provider import Answer, ToolCall, View, memory_blocks
from tests.test_coding_memory import add_agent, coding, memories_of, opened  # noqa: F401  (fixture)
from tests.test_coding_side_calls import explanation

FACT = "By the way, my locker number is 4471."
ORDER = "Order A-1001 shipped via Parcelforce on 2026-11-20."
MAIN_SYSTEM = "You are an expert assistant who can solve any task using tool calls."
TOOLS = [{"type": "function", "function": {"name": "lookup_order", "description": "Look up an order.",
                                           "parameters": {"type": "object",
                                                          "properties": {"order_id": {"type": "string"}}}}}]


def planning_prompt(task: str) -> str:
    """A framework's planning call: its instructions and the person's task, all in one user message."""
    return ("You are a world expert at analyzing a situation to derive facts, and plan accordingly towards "
            "solving a task.\nBelow I will present you a task. You will need to 1. build a survey of facts "
            "known or needed to solve the task, then 2. make a plan of action to solve the task.\n\n"
            "## 1. Facts survey\nList the facts given in the task, the facts to look up and the facts to derive.\n\n"
            "## 2. Plan\nDevelop a step-by-step high-level plan based on the available tools.\n"
            "- lookup_order: Look up an order.\n\n---\nNow begin! Here is your task:\n```\n"
            f"{task}\n```\nFirst in part 1, write the facts survey, then in part 2, write your plan.")


@pytest.fixture
def answers(coding):
    stack, memory_url, service, model = coding
    stack.provider.model = lambda view: Answer(text="1. Look up the order.\n2. Answer.")
    return coding


async def test_a_planning_call_with_its_instructions_in_the_user_message_gets_no_block_and_leaves_nothing(answers):
    """An agent with main calls (a system prompt, tools) sends a one-shot with no system prompt whose
    one user message is the framework's instructions with the person's task quoted: the client's
    errand (two signals: unlike the agent's main calls, and its own words ask for a plan)."""
    stack, memory_url, service, _ = answers
    add_agent(stack, "fw", memory_url)
    sdk = opened(stack, stack.openai("fw"))
    await sdk.chat.completions.create(model="gpt-4o", tools=TOOLS, messages=[
        {"role": "system", "content": MAIN_SYSTEM}, {"role": "user", "content": f"New task:\n{FACT}"}])
    await stack.settle()
    raw = await sdk.chat.completions.with_raw_response.create(model="gpt-4o", stop=["<end_plan>"], messages=[
        {"role": "user", "content": planning_prompt("What is the status of order A-1001?")}])
    assert stack.provider.received[-1].memories_block is None
    doc = await explanation(stack, raw.headers["x-memplane-turn-id"])
    assert doc["call_rule"] == "system-unlike-agent+instructions-in-request"
    # a person's own first words to a plain app (no system prompt, no tools) that ask for a plan stay theirs
    add_agent(stack, "chat", memory_url)
    chat = opened(stack, stack.openai("chat"))
    await chat.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content":
        "I move to Porto in March. Write me a plan for the first week from my list:\n```\n- find a flat\n"
        "- open a bank account\n```"}])
    await stack.settle()
    stored = [m.value for m in await memories_of(service, "fw")]
    assert not any("Facts survey" in v or "A-1001" in v for v in stored), stored
    assert any("Porto" in m.value for m in await memories_of(service, "chat"))
