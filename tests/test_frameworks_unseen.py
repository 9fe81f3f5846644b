"""Agent frameworks memplane was never written for, through memplane (docs/coding-agents-by-shape.md,
"Agent frameworks never seen").

* smolagents (`ToolCallingAgent` and `CodeAgent` with `OpenAIServerModel`, `planning_interval=1`):
  before its tool loop, and after each step, it asks the model for a plan in a call of its own — first
  with no system prompt and no tools, one user message that is its planning template with the task
  quoted in a fence; then with a system prompt of its own over the loop so far — and opens the loop
  with the task ("New task:\n…"), the plan as an assistant message and "Now proceed and carry out this
  plan." as the newest user message. Tool results come back as user messages "Observation:\n…",
  the request's stop sequence; a `CodeAgent` offers no API tools (they are functions in its code).
* agno (`Agent` with `OpenAIChat`, `update_memory_on_run`, `enable_session_summaries`): beside its
  main call a memory manager gets the person's message under its own prompt and tools; after the
  run a session summary is asked for over the conversation quoted in a developer prompt.

Every framework runs against the strict fake provider; memplane must tell what each call is by its
shape. A test skips with the reason when its framework is not installed (`make test` installs them:
pyproject's `test` extra, pinned in constraints.txt).
"""

from __future__ import annotations

import asyncio
import re

import pytest

from proxy.testing.fake_provider import Answer, Received, ToolCall, View, memory_blocks, without_memories
from tests.cli_agents import block_memories, scaffolding_share
from tests.test_coding_memory import add_agent, coding, memories_of, opened  # noqa: F401  (fixture)
from tests.test_coding_side_calls import answers, explanation  # noqa: F401  (fixture)

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



async def test_a_summary_of_a_conversation_quoted_in_the_system_prompt_gets_no_block_and_leaves_nothing(answers):
    """A framework that keeps a summary of each session asks for it in a call of its own: the
    conversation quoted in its developer prompt, which asks to provide a summary (and extract its
    topics) as structured output, and a user message of its own. Not the person's words."""
    stack, memory_url, service, _ = answers
    add_agent(stack, "fw", memory_url)
    sdk = opened(stack, stack.openai("fw"))
    await sdk.chat.completions.create(model="gpt-4o", tools=TOOLS, messages=[
        {"role": "developer", "content": "You are a helpful assistant."}, {"role": "user", "content": FACT}])
    raw = await sdk.chat.completions.with_raw_response.create(model="gpt-4o", messages=[
        {"role": "developer", "content": "Analyze the following conversation between a user and an assistant, and "
                                         "extract the following details:\n- Summary (str): Provide a concise summary "
                                         "of the session, focusing on important information.\n- Topics (Optional"
                                         f"[List[str]]): List the topics discussed.\n<conversation>User: {FACT}\n"
                                         "Assistant: Noted.\n</conversation>"},
        {"role": "user", "content": "Provide the summary of the conversation."}],
        response_format={"type": "json_schema", "json_schema": {"name": "SessionSummaryResponse", "schema": {
            "type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"],
            "additionalProperties": False}, "strict": True}})
    assert stack.provider.received[-1].memories_block is None
    doc = await explanation(stack, raw.headers["x-memplane-turn-id"])
    assert (doc.get("call_kind"), doc["call_rule"]) == ("side", "task-instruction"), doc
    await stack.settle()
    said = [m.value for m in await memories_of(service, "fw") if (m.metadata or {}).get("origin") == "user"]
    assert said and not any("summary" in v.lower() for v in said), said



async def test_a_second_prompt_with_tools_over_the_persons_message_keeps_one_memory_of_it(answers):
    """A framework that keeps memories of its own (a memory manager) hands the person's message, as
    it is, to a call with another system prompt and tools of its own, beside the agent's main call:
    the person said it once. It reads as a subagent's call (a block, no memory); a later message of
    the person, or the main prompt again, is theirs."""
    stack, memory_url, service, _ = answers
    add_agent(stack, "fw", memory_url)
    sdk = opened(stack, stack.openai("fw"))
    main = [{"role": "developer", "content": "You are a helpful assistant."}, {"role": "user", "content": FACT}]
    await sdk.chat.completions.create(model="gpt-4o", tools=TOOLS, messages=main)
    memory_tools = [{"type": "function", "function": {"name": "add_note", "description": "Add a note.",
                                                      "parameters": {"type": "object",
                                                                     "properties": {"note": {"type": "string"}}}}}]
    raw = await sdk.chat.completions.with_raw_response.create(model="gpt-4o", tools=memory_tools, messages=[
        {"role": "developer", "content": "You are a Memory Manager that is responsible for managing information "
                                         "and preferences about the user."}, main[1]])
    doc = await explanation(stack, raw.headers["x-memplane-turn-id"])
    assert (doc.get("call_kind"), doc["call_rule"]) == ("subagent", "same-words-other-prompt"), doc
    await sdk.chat.completions.create(model="gpt-4o", tools=TOOLS, messages=[
        main[0], {"role": "user", "content": "Also, my gym is on Rua Augusta."}])
    await stack.settle()
    said = [m.value for m in await memories_of(service, "fw") if (m.metadata or {}).get("origin") == "user"]
    assert len([v for v in said if "4471" in v]) == 1 and any("Rua Augusta" in v for v in said), said


PLAN = "1. Look up the order.\n2. Answer."
CALLING = "Calling tools:\n[{'name': 'lookup_order', 'arguments': {'order_id': 'A-1001'}}]"
STOPS = ["Observation:", "Calling tools:"]


def text_protocol_model(view: View) -> Answer:
    """A model for a framework that writes tool calls as text and gets their results back as user
    messages starting "Observation:" (the request's stop sequence)."""
    if not view.tools:
        return Answer(text=PLAN)
    said = [m for m in view.body.get("messages") or () if m.get("role") == "user"]
    if said and str(said[-1].get("content")).startswith("Observation:"):
        return Answer(text="Order A-1001 has shipped.")
    return Answer(text=CALLING)


class PlanThenAct:
    """A framework memplane has never seen, as its requests look on the wire: a planning call (no
    system prompt, no tools, the task quoted in its instructions), then a tool loop that opens with
    the task, the plan as an assistant message and the framework's own "go on", writes its tool calls
    as text and sends each result back as a user message that starts with its stop sequence."""

    def __init__(self, stack, agent_id: str) -> None:
        self.sdk = opened(stack, stack.openai(agent_id))
        self.turn_ids: list[str] = []
        self.updates: list[str] = []  # the plan updates' turn ids

    async def call(self, **kw) -> str:
        raw = await self.sdk.chat.completions.with_raw_response.create(model="gpt-4o", **kw)
        self.turn_ids.append(raw.headers["x-memplane-turn-id"])
        return raw.parse().choices[0].message.content or ""

    async def run(self, task: str, steps: int = 1) -> str:
        plan = await self.call(stop=["<end_plan>"], messages=[{"role": "user", "content": planning_prompt(task)}])
        messages = [{"role": "system", "content": MAIN_SYSTEM}, {"role": "user", "content": f"New task:\n{task}"},
                    {"role": "assistant", "content": f"Here are the facts I know and the plan of action that I "
                                                     f"will follow to solve the task:\n```\n{plan}\n```"},
                    {"role": "user", "content": "Now proceed and carry out this plan."}]
        for _ in range(steps):
            said = await self.call(tools=TOOLS, stop=STOPS, messages=messages)
            messages += [{"role": "assistant", "content": said}, {"role": "user", "content": f"Observation:\n{ORDER}"}]
            # the plan's update: its own system prompt over the loop so far, no tools
            update = await self.call(stop=["<end_plan>"], messages=[
                {"role": "system", "content": "You are a world expert at analyzing a situation, and plan "
                                              f"accordingly towards solving a task.\nYou have been given the "
                                              f"following task:\n```\n{task}\n```\nFind the task and history below:"},
                *messages[1:2], *messages[4:],
                {"role": "user", "content": "Now write your updated facts below, then your new plan."}])
            self.updates.append(self.turn_ids[-1])
            messages += [{"role": "assistant", "content": f"I still need to solve the task I was given:\n```\n{task}"
                                                          f"\n```\n\nHere are the facts I know and my new/updated "
                                                          f"plan of action to solve the task:\n```\n{update}\n```"},
                         {"role": "user", "content": "Now proceed and carry out this plan."}]
        return await self.call(tools=TOOLS, stop=STOPS, messages=messages)


async def test_a_plan_then_act_framework_keeps_the_persons_task_and_not_its_own_notes_or_tool_results(coding):
    """The person's task is the loop's first user message, not its newest: the newest is the
    framework's "go on" after the plan it inserted (the answer of its planning call, not an answer to
    that task) or a tool's observation (a user message that starts with the request's stop sequence)."""
    stack, memory_url, service, _ = coding
    stack.provider.model = text_protocol_model
    add_agent(stack, "fw", memory_url)
    # (a first run before it: the agent's main calls are known, as they are after any first session)
    # (its very first call, the planning call, is read as the person's one-shot: nothing to compare it with)
    await PlanThenAct(stack, "fw").run("Please look up the status of order A-1001.")
    await stack.settle()
    before = {m.id for m in await memories_of(service, "fw")}
    first = len(stack.provider.received)
    await PlanThenAct(stack, "fw").run(f"{FACT} Please look up the status of order A-1001 again.")
    await stack.settle()
    later = PlanThenAct(stack, "fw")
    await later.run("What is my locker number?")
    blocks = [r.memories_block or "" for r in stack.provider.received[first:]]
    assert "4471" in blocks[-1], "the person's fact did not come back in the next session's loop"
    for turn_id in later.updates:  # an errand over the conversation: no block, no memory
        doc = await explanation(stack, turn_id)
        assert (doc.get("call_kind"), doc["call_rule"]) == ("side", "task-instruction"), doc
    await stack.settle()
    memories = [m for m in await memories_of(service, "fw") if m.id not in before]
    said = [m.value for m in memories if (m.metadata or {}).get("origin") == "user"]
    assert any("4471" in v for v in said), said
    for note in ("Now proceed and carry out this plan", "Facts survey", "Here are the facts I know",
                 "updated facts", "I still need to solve"):
        assert not any(note in v for v in said), f"the framework's {note!r} was stored as the person's words: {said}"
    assert not any(v.lstrip().startswith("Observation:") or "Parcelforce" in v.split("tools:")[0] for v in said), said
    assert len([v for v in said if "4471" in v]) == 1, said  # one episode for the loop, not one a step


# -- the frameworks themselves, through memplane against the strict fake provider --

QUESTION = "What is my locker number?"
TASK = f"{FACT} Please look up the status of order A-1001."
# the agent's first session: its very first call (a plan, before any main call) has nothing to be
# compared with and is read as the person's one-shot (docs: "Left alone")
WARM_UP = "Please look up the status of order A-1001 for me."
_LOCKER = re.compile(r"locker number is (\d+)")


def _said(r: Received) -> list[str]:
    """The user messages' texts of a request (memplane's block left out)."""
    out = []
    for m in r.body.get("messages") or ():
        if isinstance(m, dict) and m.get("role") == "user":
            content = m.get("content")
            out.append(content if isinstance(content, str) else
                       "\n".join(p.get("text", "") for p in content or () if isinstance(p, dict)))
    return [without_memories(t) for t in out]


def framework_model(view: View) -> Answer:
    """The fake model a framework's agent talks to (test scaffolding, not memplane): a plan when no
    tool is offered; with tools, look the order up once when the task names one (its result comes
    back as a tool message or an "Observation:" user message), then the final answer — a
    `final_answer` tool call where the framework offers one — from the memory block and the result."""
    said = "\n".join(t for t in (_said_of(view.body)))
    if (view.body.get("response_format") or {}).get("type") == "json_schema":  # a structured summary
        return Answer(text='{"summary": "The user asked about an order.", "topics": ["orders"]}')
    stops = view.body.get("stop") or ()
    if not view.tools and "Observation:" in stops:  # a code agent: its tools are functions in its code
        return Answer(text=_code_step(view.body))
    if not view.tools:
        return Answer(text="1. Look up what the task names.\n2. Answer the person.")
    observed = view.tool_results or [t for t in _said_of(view.body) if t.startswith("Observation:")]
    if "A-1001" in said and not observed and "lookup_order" in view.tools:
        return Answer(tool_calls=[ToolCall("lookup_order", {"order_id": "A-1001"})])
    found = _LOCKER.search("\n".join(memory_blocks(view.body)))
    text = f"Your locker number is {found.group(1)}." if found else "I do not know your locker number."
    if observed:
        text += " " + observed[-1].removeprefix("Observation:").strip()
    if "final_answer" in view.tools:
        return Answer(tool_calls=[ToolCall("final_answer", {"answer": text})])
    return Answer(text=text)


def _code_step(body: dict) -> str:
    said = _said_of(body)
    observed = [t for t in said if t.startswith("Observation:")]
    if "A-1001" in "\n".join(said) and not observed:
        return "Thought: I look the order up.\n<code>\nprint(lookup_order(order_id='A-1001'))\n</code>"
    found = _LOCKER.search("\n".join(memory_blocks(body)))
    text = f"Your locker number is {found.group(1)}." if found else "I do not know your locker number."
    if observed:
        text += " " + ORDER
    return f"Thought: I can answer.\n<code>\nfinal_answer({text!r})\n</code>"


def _said_of(body: dict) -> list[str]:
    return _said(Received("", {}, body))


def smolagents_run(stack, task: str, stream: bool, kind: str = "tools") -> str:
    """A new ToolCallingAgent or CodeAgent (a new agent object each session) with a plan before its
    first step and after each one, run to its end."""
    from smolagents import CodeAgent, OpenAIServerModel, ToolCallingAgent, tool

    @tool
    def lookup_order(order_id: str) -> str:
        """Look up an order's shipping status.

        Args:
            order_id: the order's id
        """
        return ORDER

    model = OpenAIServerModel(model_id="gpt-4o", api_base=f"{stack.proxy_url}/v1", api_key=stack.tokens["smol"])
    agent = (ToolCallingAgent if kind == "tools" else CodeAgent)(
        tools=[lookup_order], model=model, planning_interval=1, stream_outputs=stream, max_steps=4, verbosity_level=0)
    return str(agent.run(task))


def story_report(stack, agent_id: str, runs: list[list[Received]], memories: list, is_side) -> tuple[dict, list[str]]:
    """The yardsticks over a framework's two sessions: nothing refused, the fact in the second
    session's main calls' block, no side call given a block, none of the framework's own text or a
    tool's output stored as the person's words."""
    problems: list[str] = []
    calls = [r for run in runs for r in run]
    problems += [f"{r.path} {r.status}: {r.error}" for r in calls if r.status != 200]
    side = [r for r in calls if is_side(r)]
    asked = [r for r in runs[-1] if not is_side(r)]
    if not asked or "4471" not in (asked[0].memories_block or ""):
        problems.append("the fact did not come back in the next session's block")
    said = [m.value for m in memories if (m.metadata or {}).get("origin") == "user"]
    person = {WARM_UP, TASK, QUESTION}
    scaffolding = "\n".join(t for r in calls for t in (*_said(r), *_system_texts(r)) if t not in person)
    for t in person:
        scaffolding = scaffolding.replace(t, "")
    worst = max((scaffolding_share(block_memories(r.memories_block), scaffolding) for r in calls if r.memories_block),
                default=0.0)
    stored_scaffolding = scaffolding_share(said, scaffolding)
    if stored_scaffolding > 0.10:
        problems.append(f"{stored_scaffolding:.0%} of the person's stored words are the framework's: {said}")
    if any(ORDER in v for v in said):
        problems.append(f"a tool's output was stored as the person's words: {said}")
    if not any("4471" in v for v in said):
        problems.append(f"the person's fact was not stored as their words: {said}")
    rules = sorted({(e.get("scaffolding") or {}).get("rule", "") for e in stack.ledger(agent_id)} - {""})
    return {"calls_per_session": [len(run) for run in runs], "side_calls": len(side),
            "side_with_block": sum(1 for r in side if r.memories_block), "side_rules": rules,
            "memories": len(memories), "persons_words": len(said),
            "scaffolding_share_of_stored_words": round(stored_scaffolding, 3),
            "scaffolding_share_of_blocks_max": round(worst, 3)}, problems


def _system_texts(r: Received) -> list[str]:
    out = []
    for m in r.body.get("messages") or ():
        if isinstance(m, dict) and m.get("role") == "system":
            content = m.get("content")
            text = content if isinstance(content, str) else "\n".join(
                p.get("text", "") for p in content or () if isinstance(p, dict))
            if not text.lstrip().startswith("<memories"):
                out.append(text)
    return out


@pytest.mark.parametrize("kind", ["tools", "code"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_smolagents_plans_and_tool_results_are_not_the_persons_words(coding, stream, kind):
    pytest.importorskip("smolagents", reason="smolagents is not installed (pyproject's test extra)")
    stack, memory_url, service, _ = coding
    stack.provider.model = framework_model
    add_agent(stack, "smol", memory_url)
    runs: list[list[Received]] = []
    answers = []
    before: set[str] = set()
    for task in (WARM_UP, TASK, QUESTION):  # three sessions, a new agent object each
        first = len(stack.provider.received)
        answers.append(await asyncio.to_thread(smolagents_run, stack, task, stream, kind))
        await stack.settle()
        runs.append([r for r in stack.provider.received[first:] if r.path.startswith("/v1/")])
        before = before or {m.id for m in await memories_of(service, "smol")}
    assert all(r.body.get("stream") for run in runs for r in run if "<end_plan>" not in r.body["stop"]) or not stream
    memories = [m for m in await memories_of(service, "smol") if m.id not in before]
    report, problems = story_report(stack, "smol", runs, memories,  # its plans: a stop at "<end_plan>"
                                    lambda r: "<end_plan>" in (r.body.get("stop") or ()))
    report["first_session_memories"] = len(before)
    print(f"\nsmolagents {kind} agent ({'stream' if stream else 'whole'}): {report}")
    for m in memories:
        print("   ", (m.metadata or {}).get("origin"), repr(m.value[:160]))
    assert "4471" in answers[-1], answers
    assert problems == [], "\n".join(problems)
    assert report["persons_words"] == 2, "a session's loop left more than one episode of the person's words"
    steps = [m.value for m in memories if (m.metadata or {}).get("origin") == "tool"]
    assert all(v.startswith("tools: lookup_order(") for v in steps) or kind == "code", steps  # named by the text


def agno_run(stack, task: str, stream: bool, db_path: str, session_id: str) -> str:
    """A new agno Agent (a new object each session, one JSON store across them) that keeps a summary
    of each session and its own memories of the user (`update_memory_on_run`), both by calls of its own."""
    from agno.agent import Agent
    from agno.db.json import JsonDb
    from agno.models.openai import OpenAIChat

    def lookup_order(order_id: str) -> str:
        """Look up an order's shipping status.

        Args:
            order_id: the order's id
        """
        return ORDER

    agent = Agent(model=OpenAIChat(id="gpt-4o", base_url=f"{stack.proxy_url}/v1", api_key=stack.tokens["agno"],
                                   max_retries=0),
                  tools=[lookup_order], db=JsonDb(db_path=db_path), user_id="ana", session_id=session_id,
                  update_memory_on_run=True, enable_session_summaries=True, add_history_to_context=True,
                  instructions="You are a helpful assistant.", telemetry=False)
    if stream:
        return "".join(str(getattr(event, "content", "") or "") for event in agent.run(task, stream=True))
    return str(agent.run(task).content)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_agno_session_summaries_are_not_the_persons_words(coding, tmp_path, stream, monkeypatch):
    pytest.importorskip("agno", reason="agno is not installed (pyproject's test extra)")
    monkeypatch.setenv("AGNO_TELEMETRY", "false")
    stack, memory_url, service, _ = coding
    stack.provider.model = framework_model
    add_agent(stack, "agno", memory_url)
    runs: list[list[Received]] = []
    answers = []
    for n, task in enumerate((WARM_UP, TASK, QUESTION)):  # three sessions, a new agent object each
        first = len(stack.provider.received)
        answers.append(await asyncio.to_thread(agno_run, stack, task, stream, str(tmp_path / "agno"), f"s{n}"))
        await stack.settle()
        runs.append([r for r in stack.provider.received[first:] if r.path.startswith("/v1/")])
    memories = await memories_of(service, "agno")

    def is_side(r: Received) -> bool:  # its summary call, and its memory manager (tools of its own)
        return {(t.get("function") or {}).get("name") for t in r.body.get("tools") or ()} != {"lookup_order"}

    mains = [r for run in runs for r in run if not is_side(r)]
    assert all(bool(r.body.get("stream")) == stream for r in mains), [r.body.get("stream") for r in mains]
    report, problems = story_report(stack, "agno", runs, memories, is_side)
    summaries = [r for run in runs for r in run if not r.body.get("tools")]
    report["summary_calls_with_block"] = sum(1 for r in summaries if r.memories_block)
    print(f"\nagno Agent ({'stream' if stream else 'whole'}): {report}")
    for m in memories:
        print("   ", (m.metadata or {}).get("origin"), repr(m.value[:160]))
    assert "4471" in answers[-1], answers
    assert summaries and report["summary_calls_with_block"] == 0
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("text", ["```\n" * 50_000, "Observation:" * 10_000, "x" * 100_000, "~~~" + "\n" * 100_000])
def test_hostile_framework_loops_are_read_in_linear_time(text):
    """100 KB of fences or stop sequences, in an assistant message and in 500 observations."""
    import time

    from proxy.coding.side_calls import own_words
    from proxy.coding.text_loops import answer_names, inserted_answers, read_body
    body = {"stop": ["Observation:", "\n", 5], "messages": [
        {"role": "user", "content": text}, {"role": "assistant", "content": text},
        *[{"role": "user", "content": "Observation:" + text[:200]} for _ in range(500)]]}
    started = time.perf_counter()
    read = read_body(body, {"x"})
    answer_names(text), own_words(text), inserted_answers(body["messages"], {}.get)
    assert time.perf_counter() - started < 2.0
    assert len(read["messages"]) == len(body["messages"])


def test_an_answer_that_calls_a_tool_is_never_read_as_put_in():
    """A loop's step whose text matches an errand's answer still carries its tool call: kept."""
    from proxy.coding.scaffolding import digest
    from proxy.coding.text_loops import inserted_answers, read_body
    said = "I will read the file now, then fix it."
    steps = [{"role": "user", "content": "Please fix the date test."},
             {"role": "assistant", "content": [{"type": "text", "text": said},
                                               {"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]
    answered = {digest(said): digest("Generate a title for: Please fix the date test.")}
    assert inserted_answers(steps, answered.get) == []
    plain = [steps[0], {"role": "assistant", "content": said}, {"role": "user", "content": "Go on."}]
    found = inserted_answers(plain, answered.get)
    assert found and read_body({"messages": plain}, set(found))["messages"] == [steps[0]]


async def test_a_chat_whose_window_cut_a_question_from_its_answer_keeps_the_persons_newest_words(coding):
    """A plain chat app that sends only its last few messages: the window may begin with an answer
    whose question it cut. That answer is the chat's own, not an errand's put in by a framework, so
    the person's newest message after it is still remembered as theirs."""
    stack, memory_url, service, _ = coding
    stack.provider.model = lambda view: Answer(text="That sounds like a lovely plan for the weekend ahead.")
    add_agent(stack, "chat", memory_url)
    sdk = opened(stack, stack.openai("chat"))
    history: list[dict] = []
    for said in ("We are driving to the coast on Saturday morning.", "The car is a small blue hatchback.",
                 "My locker number at the gym is 4471, by the way."):
        history.append({"role": "user", "content": said})
        window = history[-2:]  # the app keeps its last two messages: an answer, then the newest words
        answer = await sdk.chat.completions.create(model="gpt-4o", messages=window)
        history.append({"role": "assistant", "content": answer.choices[0].message.content})
    await stack.settle()
    said = [m.value for m in await memories_of(service, "chat") if (m.metadata or {}).get("origin") == "user"]
    assert any("4471" in v for v in said), said
    assert any("hatchback" in v for v in said), said


async def test_a_chat_that_labels_the_persons_messages_with_its_stop_sequence_keeps_their_words(coding):
    """A plain chat app in a question/answer format: each of the person's messages is sent as
    "Question: …" and the app stops the model at "Question:" so it does not write the next one. The
    person's messages open with the stop sequence from the first on; they are not a framework's tool
    observations (those follow the loop's task), and the person's newest words are remembered."""
    stack, memory_url, service, _ = coding
    stack.provider.model = lambda view: Answer(text="Answer: noted, thank you for telling me that.")
    add_agent(stack, "qa", memory_url)
    sdk = opened(stack, stack.openai("qa"))
    history: list[dict] = [{"role": "system", "content": "Answer each question in one line, as 'Answer: …'."}]
    for said in ("Question: We are driving to the coast on Saturday morning, which road is best?",
                 "Question: My locker number at the gym is 4471, can you remember it?"):
        history.append({"role": "user", "content": said})
        answer = await sdk.chat.completions.create(model="gpt-4o", stop=["Question:"], messages=history)
        history.append({"role": "assistant", "content": answer.choices[0].message.content})
    await stack.settle()
    said = [m.value for m in await memories_of(service, "qa") if (m.metadata or {}).get("origin") == "user"]
    assert any("4471" in v for v in said), said
