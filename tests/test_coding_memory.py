"""Coding agents through memplane (issue 37): a person works with Claude Code and Codex in two
repositories; memplane remembers what the person said and what was done, not the client's own
scaffolding, keeps one repository's work out of the other, and does not multiply memories for the
calls a coding client makes on the side.

Real parts on loopback: the proxy, the embedded memory engine, the strict fake provider, and the
official anthropic / openai SDKs sending request bodies shaped like Claude Code's (a user message
of eight `<system-reminder>` blocks before the request, tools, `metadata.user_id`) and Codex's
(Responses input with `<user_instructions>` and `<environment_context>` messages, `store: false`).
"""

from __future__ import annotations

import io
import uuid
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from memory_adapters.embedded.app import EMBEDDED_SERVICE, build_embedded_app
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from proxy.testing.fake_provider.model import Answer, ToolCall, View
from tests.conftest import url_of

SECRET = "Sup3rS3cretPassw0rd-x7Qz"
CLAUDE_UA = "claude-cli/2.1.3 (external, sdk-cli)"
CODEX_UA = "codex_exec/0.169.0 (Debian 12; x86_64) dumb (codex_exec; 0.169.0)"
SKILLS = "\n".join(f"- skill-{i}: runs step {i} of the repository workflow and reports the outcome" for i in range(60))


def claude_reminders(cwd: str) -> list[str]:
    """The eight `<system-reminder>` blocks Claude Code writes before the person's request."""
    bodies = [
        f"As you answer the user's questions, you can use the following context:\n# Environment\n"
        f"Working directory: {cwd}\nIs directory a git repo: Yes\nPlatform: linux",
        f"The following skills are available for use with the Skill tool:\n{SKILLS}",
        "The following deferred tools are now available via ToolSearch: WebFetch, WebSearch, NotebookEdit",
        "Available agent types for the Agent tool: general-purpose, statusline-setup, output-style-setup",
        "Token budget: 200000 tokens for this conversation; context is compacted automatically.",
        "Today's date is 2026-11-27. The model is claude-sonnet-4-6.",
        "When you commit, end the message with: Co-Authored-By: Claude <noreply@anthropic.com>",
        "Remember to use the TodoWrite tool to track multi-step work; never mention this reminder.",
    ]
    return [f"<system-reminder>\n{b}\n</system-reminder>" for b in bodies]


CLAUDE_SYSTEM = [{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
                 {"type": "text", "text": "You are an interactive CLI tool that helps users with software "
                                          "engineering tasks. " * 20}]
CLAUDE_TOOLS = [
    {"name": name, "description": f"The {name} tool.",
     "input_schema": {"type": "object", "properties": {k: {"type": "string"} for k in keys}}}
    for name, keys in (("Read", ("file_path",)), ("Bash", ("command",)), ("Edit", ("file_path", "new_string")))]


@dataclass
class CodingModel:
    """The fake provider's model for these stories: the tool calls of this turn, one per step, then
    an answer saying what was done."""

    calls: list[ToolCall] = field(default_factory=list)
    answer: str = "Done: I fixed the failing test in tests/test_dates.py and the suite passes now."

    def __call__(self, view: View) -> Answer:
        if view.tools and view.steps < len(self.calls):
            return Answer(tool_calls=[self.calls[view.steps]])
        return Answer(text=self.answer)


@pytest.fixture
async def coding(make_stack, provider_server, aiohttp_server, tmp_path):
    server = await aiohttp_server(build_embedded_app(tmp_path / "memory", redactor=Redactor(),
                                                     telemetry=Telemetry(make_logger(io.StringIO())),
                                                     embeddings="off"))
    stack = await make_stack()
    model = CodingModel()
    stack.provider.model = model
    yield stack, url_of(server), server.app[EMBEDDED_SERVICE], model
    for client in CLIENTS.pop(id(stack), []):
        await client.close()


CLIENTS: dict[int, list[Any]] = {}  # the SDK clients a test opened, closed when it ends


def opened(stack, client: Any) -> Any:
    CLIENTS.setdefault(id(stack), []).append(client)
    return client


RECALL_MS = 5000  # two cores shared by many test workers: a recall must not time out here


def add_agent(stack, agent_id: str, memory_url: str) -> str:
    return stack.add_agent(agent_id, memory_url, recall={"path": "/recall", "timeout_ms": RECALL_MS})


async def memories_of(service, agent_id: str) -> list[Any]:
    return await service.page(agent_id=agent_id, scope=None, type_=None, session_id=None, limit=1000, after=None)


def tool_outputs(model: CodingModel) -> dict[str, str]:
    return {"Read": f"     1→DATABASE_URL=postgres://app:{SECRET}@db:5432/app\n     2→DEBUG=false\n",
            "Bash": "collected 12 items\n\ntests/test_dates.py ........F...\n1 failed, 11 passed in 0.31s"}


class ClaudeCode:
    """One Claude Code session: each `ask` is a user turn run to the end of its tool loop."""

    def __init__(self, stack, agent_id: str, cwd: str, history: list[dict[str, Any]] | None = None,
                 session: str | None = None) -> None:
        self.client = opened(stack, stack.anthropic(agent_id, default_headers={"User-Agent": CLAUDE_UA}))
        self.cwd = cwd
        self.messages: list[dict[str, Any]] = list(history or [])
        self.user_id = f"user_4f2a_account_9c1e_session_{session or uuid.uuid4()}"
        self.turn_ids: list[str] = []
        self.cache_reads: list[int] = []  # the provider's cache_read_input_tokens, call by call
        self.system = CLAUDE_SYSTEM

    async def call(self, messages: list[dict[str, Any]], **kw: Any) -> Any:
        """One call as Claude Code makes it: breakpoints on its system prompt and on the newest
        message's last block (the one it slides forward call by call)."""
        eph = {"type": "ephemeral"}
        system = [*self.system[:-1], {**self.system[-1], "cache_control": eph}]
        last = messages[-1]
        content = last["content"] if isinstance(last["content"], list) else [{"type": "text", "text": last["content"]}]
        marked = [*messages[:-1], {**last, "content": [*content[:-1], {**content[-1], "cache_control": eph}]}]
        raw = await self.client.messages.with_raw_response.create(
            model="claude-sonnet-4-6", max_tokens=1024, system=system, messages=marked,
            metadata={"user_id": self.user_id}, **kw)
        self.turn_ids.append(raw.headers["x-memplane-turn-id"])
        answer = await raw.parse()
        self.cache_reads.append(answer.usage.cache_read_input_tokens or 0)
        return answer

    async def ask(self, request: str, results: dict[str, str] | None = None) -> str:
        blocks = [{"type": "text", "text": r} for r in claude_reminders(self.cwd)]
        self.messages.append({"role": "user", "content": [*blocks, {"type": "text", "text": request}]})
        while True:
            answer = await self.call(self.messages, tools=CLAUDE_TOOLS)
            self.messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                                   for b in answer.content]})
            uses = [b for b in answer.content if b.type == "tool_use"]
            if not uses:
                return "".join(b.text for b in answer.content if b.type == "text")
            self.messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": u.id, "content": (results or {}).get(u.name, "ok")}
                for u in uses]})


class Codex:
    """One `codex exec` session: Responses with `store: false`, the whole input every call."""

    def __init__(self, stack, agent_id: str, cwd: str) -> None:
        self.client = opened(stack, stack.openai(agent_id, default_headers={"User-Agent": CODEX_UA}))
        self.input: list[dict[str, Any]] = [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text":
                "<user_instructions>\n# AGENTS.md\nRun `make check` before you finish. Keep diffs small.\n"
                "</user_instructions>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text":
                f"<environment_context>\n  <cwd>{cwd}</cwd>\n  <approval_policy>never</approval_policy>\n"
                "  <sandbox_mode>workspace-write</sandbox_mode>\n  <shell>bash</shell>\n"
                "</environment_context>"}]}]
        self.turn_ids: list[str] = []

    async def ask(self, request: str) -> str:
        self.input.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": request}]})
        while True:
            raw = await self.client.responses.with_raw_response.create(
                model="gpt-5-codex", instructions="You are Codex, a coding agent.", input=self.input, store=False,
                tools=[{"type": "function", "name": "shell", "description": "Run a command.",
                        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}])
            self.turn_ids.append(raw.headers["x-memplane-turn-id"])
            answer = raw.parse()
            calls = [o for o in answer.output if o.type == "function_call"]
            if not calls:
                self.input.append({"type": "message", "role": "assistant",
                                   "content": [{"type": "output_text", "text": answer.output_text}]})
                return answer.output_text
            for c in calls:
                self.input.append({"type": "function_call", "call_id": c.call_id, "name": c.name,
                                   "arguments": c.arguments})
                self.input.append({"type": "function_call_output", "call_id": c.call_id,
                                   "output": "1 failed, 11 passed in 0.31s"})


async def explanation(stack, turn_id: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(f"{stack.proxy_url}/memplane/turns/{turn_id}") as r:
        assert r.status == 200
        return await r.json()


def last_block(stack) -> str:
    return stack.provider.received[-1].memories_block or ""


async def test_claude_code_keeps_the_persons_words_and_what_was_done_not_its_reminders(coding):
    stack, memory_url, service, model = coding
    add_agent(stack, "cc", memory_url)
    model.calls = [ToolCall("Read", {"file_path": "/home/ana/parser/.env"}),
                   ToolCall("Bash", {"command": "pytest -x tests/test_dates.py"})]
    first = ClaudeCode(stack, "cc", "/home/ana/parser")
    await first.ask("Please fix the flaky date test in tests/test_dates.py. By the way, I prefer the "
                    "pytest -x flag when running tests.", tool_outputs(model))
    await stack.settle()

    # the first call's explanation shows the eight reminders set aside, and /metrics counts them
    doc = await explanation(stack, first.turn_ids[0])
    assert doc["set_aside"]["parts"] == 8 and doc["set_aside"]["tags"] == {"system-reminder": 8}
    assert "system-reminder" not in doc["query"] and "flaky date test" in doc["query"]
    async with aiohttp.ClientSession() as s, s.get(f"{stack.proxy_url}/metrics") as r:
        metrics = await r.text()
    assert 'memplane_scaffolding_set_aside_parts_total{rule="tagged"}' in metrics
    async with aiohttp.ClientSession() as s, s.get(f"{stack.proxy_url}/memplane/ui/turns/{first.turn_ids[0]}") as r:
        page = await r.text()
    assert r.status == 200 and "8 part(s)" in page and "&lt;system-reminder&gt; ×8" in page  # the inspector says so

    # what the session left: one memory of the person's words and what was done, compact, no secret
    stored = await memories_of(service, "cc")
    text = "\n".join(m.value for m in stored)
    assert len(stored) <= 3
    assert "pytest -x flag" in text and "skill-" not in text and "Working directory" not in text
    assert SECRET not in text and "DATABASE_URL" not in text
    assert "1 failed, 11 passed" in text  # what the command said, in one line

    model.calls = []
    model.answer = "You prefer pytest -x."
    second = ClaudeCode(stack, "cc", "/home/ana/parser")
    await second.ask("Which pytest flag do I like?")
    block = last_block(stack)
    assert "pytest -x flag" in block
    assert "system-reminder" not in block and "skill-" not in block and SECRET not in block


async def test_one_repositorys_work_stays_there_and_the_persons_preference_follows_them(coding):
    stack, memory_url, service, model = coding
    add_agent(stack, "cc", memory_url)
    model.calls = []
    await ClaudeCode(stack, "cc", "/work/alpha").ask(
        "The alpha service deploys with the command make ship-alpha-canary.")
    await ClaudeCode(stack, "cc", "/work/alpha").ask("I prefer concise commit messages in the imperative mood.")
    await stack.settle()

    b = ClaudeCode(stack, "cc", "/work/beta")
    await b.ask("How does this service deploy, and what commit messages do I like, concise or imperative?")
    beta = last_block(stack)
    assert "concise commit messages" in beta  # about the person: agent-wide
    assert "ship-alpha-canary" not in beta  # alpha's work: not in beta

    await ClaudeCode(stack, "cc", "/work/alpha").ask("How does the alpha service deploy, which make command?")
    assert "ship-alpha-canary" in last_block(stack)

    # Codex declares its directory in <environment_context>: the same scope, the same memory
    add_agent(stack, "codex", memory_url)
    await Codex(stack, "codex", "/work/alpha").ask("Note: the alpha service deploys with make ship-alpha-canary.")
    await stack.settle()
    await Codex(stack, "codex", "/work/beta").ask("How does the alpha service deploy, which make command?")
    assert "ship-alpha-canary" not in last_block(stack)
    codex = Codex(stack, "codex", "/work/alpha")
    await codex.ask("How does the alpha service deploy, which make command?")
    assert "ship-alpha-canary" in last_block(stack)
    doc = await explanation(stack, codex.turn_ids[0])
    assert doc["project"] == "/work/alpha" and doc["set_aside"]["tags"] == {"user_instructions": 1,
                                                                              "environment_context": 1}


async def test_an_agent_with_project_scope_off_remembers_work_everywhere(coding):
    stack, memory_url, service, model = coding
    from manifests.agents import write_agent
    from manifests.agents import memory_manifest
    manifest = {**memory_manifest("mem-svc", memory_url), "recall": {"path": "/recall", "timeout_ms": RECALL_MS}}
    token, _ = write_agent(stack.context_root, "flat", memory=manifest, extra={"project_scope": False})
    stack.tokens["flat"] = token
    await ClaudeCode(stack, "flat", "/work/alpha").ask("The alpha service deploys with make ship-alpha-canary.")
    await stack.settle()
    await ClaudeCode(stack, "flat", "/work/beta").ask("How does the alpha service deploy, which make command?")
    assert "ship-alpha-canary" in last_block(stack)
    assert all("project" not in m.metadata for m in await memories_of(service, "flat"))


async def test_side_calls_subagents_and_compaction_do_not_multiply_memories(coding):
    stack, memory_url, service, model = coding
    add_agent(stack, "cc", memory_url)
    model.calls = []
    session = ClaudeCode(stack, "cc", "/home/ana/parser")
    await session.ask("Our staging database is called pelican-7; use it for the migration test.")
    await stack.settle()
    before = len(await memories_of(service, "cc"))

    # a title call: the small model, no tools, a short system prompt
    model.answer = "Staging database migration"
    await session.client.messages.create(
        model="claude-haiku-4-5", max_tokens=64, system="Summarize this coding conversation in under 50 "
        "characters. Answer with the title only.", messages=[{"role": "user", "content": "pelican-7 migration"}])
    assert stack.provider.received[-1].memories_block is None
    # count_tokens is a pass-through: never a block
    await session.client.messages.count_tokens(model="claude-sonnet-4-6", messages=session.messages)
    # a subagent (the Agent tool): a conversation of its own, with its own system prompt, in the same
    # session (the client names it): recalls like a turn, leaves no memory of its own
    sub = ClaudeCode(stack, "cc", "/home/ana/parser", session=session.user_id.rsplit("_session_", 1)[1])
    sub.system = [*CLAUDE_SYSTEM, {"type": "text", "text": "You are a subagent: do the task you are given."}]
    model.answer = "The migration test uses the staging database pelican-7."
    await sub.ask("Find which database the migration test uses.")
    assert "pelican-7" in last_block(stack)
    # a compaction request: no block, and its answer is stored once, as the session's summary
    model.answer = ("Summary: the person asked to use the staging database pelican-7 for the migration test; "
                    "the migration test was updated and passes.")
    await compact(session)
    assert stack.provider.received[-1].memories_block is None
    doc = await explanation(stack, session.turn_ids[-1])
    assert doc["call_kind"] == "compaction"
    await stack.settle()

    stored = await memories_of(service, "cc")
    # the summary, as the model's (bounded) memory beside memplane's question; the title call and the
    # subagent left nothing
    assert len(stored) == before + 2
    assert sum("Summary of this session" in m.value for m in stored) == 1
    [summary] = [m for m in stored if m.value.startswith("assistant: Summary: the person asked")]
    assert summary.metadata["origin"] == "model"

    # the session continues after compaction: the summary it resends is not stored again
    continued = ClaudeCode(stack, "cc", "/home/ana/parser", history=continued_from(model.answer))
    model.answer = "Done: the migration test now also covers rollbacks on pelican-7."
    await continued.ask("Now add a rollback case to the migration test.")
    await stack.settle()
    again = await memories_of(service, "cc")
    assert len(again) == before + 4  # the turn and its reply, which names its things (pelican-7)
    assert sum("This session is being continued" in m.value for m in again) == 0


async def test_a_resumed_session_does_not_get_its_own_turns_back_as_memories(coding):
    stack, memory_url, service, model = coding
    add_agent(stack, "cc", memory_url)
    model.calls = []
    other = ClaudeCode(stack, "cc", "/home/ana/parser")
    await other.ask("Remember that the release branch of the parser is called release-granite.")
    session = ClaudeCode(stack, "cc", "/home/ana/parser")
    model.answer = "Done: the staging database pelican-7 now runs the migration test."
    await session.ask("Our staging database is called pelican-7; use it for the migration test.")
    await stack.settle()

    # `claude -c`: the same conversation again, with a new question about both facts
    resumed = ClaudeCode(stack, "cc", "/home/ana/parser", history=session.messages)
    await resumed.ask("Which staging database and which release branch do we use for the parser migration?")
    block = last_block(stack)
    assert "release-granite" in block  # another session's fact: recalled
    assert "pelican-7" not in block  # this conversation's own turn: already in the request
    doc = await explanation(stack, resumed.turn_ids[0])
    assert doc["already_in_request"] >= 1


async def test_claude_codes_prompt_cache_reads_hold_with_memory(coding):
    """A session of three questions, each a tool loop reading a long file: with memory (the default
    placement) the provider's cache reads stay at ≥ 90 % of the same session without memplane's block."""
    stack, memory_url, service, model = coding
    stack.add_agent("plain")
    add_agent(stack, "cc", memory_url)
    model.calls = []
    await ClaudeCode(stack, "cc", "/home/ana/parser").ask("I prefer the pytest -x flag when running the parser tests.")
    await stack.settle()
    long_file = "\n".join(f"{n:>6}→    token_{n} = lex(source, offset={n})" for n in range(400))

    async def session(agent_id: str) -> list[int]:
        stack.provider.anthropic_cache.entries.clear()
        model.calls = [ToolCall("Read", {"file_path": "/home/ana/parser/lexer.py"})]
        cc = ClaudeCode(stack, agent_id, "/home/ana/parser", session="fixed")
        for q in ("Explain the lexer's offsets, then run the parser tests my way.", "Which tokens does it emit?",
                  "And where are comments skipped?"):
            await cc.ask(q, {"Read": long_file})
        return cc.cache_reads

    without, with_memory = await session("plain"), await session("cc")
    print(f"cache reads per call, without memory {without}, with {with_memory}")
    assert any(r.memories_block for r in stack.provider.received[-6:])  # memory was there
    assert sum(without[1:]) > 10_000  # later calls read the earlier loops from the cache
    assert sum(with_memory[1:]) >= 0.9 * sum(without[1:]), (with_memory, without)


async def test_the_agents_user_agent_reaches_the_provider(coding):
    stack, memory_url, service, model = coding
    add_agent(stack, "cc", memory_url)
    model.calls = []
    await ClaudeCode(stack, "cc", "/home/ana/parser").ask("What does the parser do?")
    sent = stack.provider.received[-1].headers["User-Agent"]
    assert sent.startswith(CLAUDE_UA + " memplane/")


async def test_an_untagged_preamble_repeated_across_sessions_is_set_aside(coding):
    """A client's fixed preamble without a tag (Gemini-family clients start each session with one)
    is recognised after it recurred in three sessions; the person's own request never is."""
    stack, memory_url, service, model = coding
    add_agent(stack, "qwen", memory_url)
    client = opened(stack, stack.openai("qwen"))
    preamble = ("This is the coding CLI. We are setting up the context for our chat. My operating system is "
                "linux. Here is the folder structure of the current working directories: src/ tests/ docs/")
    for n in range(4):
        raw = await client.chat.completions.with_raw_response.create(
            model="qwen3-coder-plus", messages=[
                {"role": "user", "content": [{"type": "text", "text": preamble},
                                             {"type": "text", "text": f"Session {n}: explain the lexer module "
                                                                      f"and its token types please."}]}])
    await stack.settle()
    doc = await explanation(stack, raw.headers["x-memplane-turn-id"])
    assert doc["set_aside"]["by_rule"] == {"recurring": 1}
    stored = [m.value for m in await memories_of(service, "qwen")]
    assert sum(preamble[:40] in v for v in stored) == 2  # sessions 0–1 kept it; from the third on it is set aside
    assert sum("explain the lexer module" in v for v in stored) == 4


def test_project_scope_is_turned_off_per_agent_by_the_cli_and_the_pod_file(tmp_path):
    import json

    from click.testing import CliRunner

    from manifests.compiler import CompileError, compile_pod
    from manifests.models import AgentMetadata
    from memplane_cli.main import main
    from tests.test_compiler import BASE, pod

    ctx = tmp_path / "ctx"
    assert CliRunner().invoke(main, ["agent", "add", "coder", "--context-root", str(ctx),
                                     "--no-project-scope"]).exit_code == 0
    assert CliRunner().invoke(main, ["agent", "add", "other", "--context-root", str(ctx)]).exit_code == 0
    meta = lambda d, a: AgentMetadata.from_doc(json.loads((d / a / "metadata.json").read_text()))  # noqa: E731
    assert meta(ctx, "coder").project_scope is False and meta(ctx, "other").project_scope is True

    out = tmp_path / "out"
    compile_pod(pod(tmp_path, BASE.replace("x-claw: {agent: ./r.md}", "x-claw: {agent: ./r.md, project-scope: false}")),
                out)
    assert meta(out, "researcher").project_scope is False and meta(out, "analyst").project_scope is True
    with pytest.raises(CompileError, match="project-scope must be true or false"):
        compile_pod(pod(tmp_path, BASE.replace("x-claw: {agent: ./r.md}", "x-claw: {agent: ./r.md, project-scope: no-thanks}")),
                    tmp_path / "bad")


async def test_the_tiered_engine_keeps_a_projects_work_in_that_project(tiered):
    url, _ = tiered

    def entry(eid: str, text: str) -> dict[str, Any]:
        return {"id": eid, "ts": "2026-11-27T10:00:00.000Z",
                "request_original": {"messages": [{"role": "user", "content": text}]},
                "response": {"format": "json", "json": {"content": [{"type": "text", "text": "Noted, will do."}]}}}

    async with aiohttp.ClientSession() as s:
        for eid, text in (("hist1_a", "The alpha service deploys with make ship-alpha-canary."),
                          ("hist1_b", "I prefer concise commit messages when we deploy.")):
            async with s.post(f"{url}/retain", json={"agent_id": "cc", "metadata": {"project": "/work/alpha"},
                                                       "entry": entry(eid, text)}) as r:
                assert r.status in (200, 201, 202)

        async def recall(project: str) -> str:
            async with s.post(f"{url}/recall", json={"agent_id": "cc", "query": "how do we deploy, commit messages?",
                                                      "metadata": {"project": project}}) as r:
                return str(await r.json())

        beta, alpha = await recall("/work/beta"), await recall("/work/alpha")
    assert "concise commit messages" in beta and "ship-alpha-canary" not in beta
    assert "ship-alpha-canary" in alpha


@pytest.mark.parametrize("text, tag", [
    ("<system-reminder>\nToday's date is 2026-11-27.\n</system-reminder>", "system-reminder"),
    ("<environment_context>\n  <cwd>/w</cwd>\n</environment_context>", "environment_context"),
    ('<ide_selection path="/src/a.py">def f(): pass</ide_selection>', "ide_selection"),
    ("<context>\nopen files: a.py\n</context>", "context"),
    # a client's own note as a user turn (gptme nudges the model with one when it answered without a tool)
    ("<system>No tool call detected in last message. Did you mean to finish?</system>", "system"),
    ("<div>my pasted markup</div>", None),  # the person's markup: a plain tag name
    ("<system-reminder>a</system-reminder> and then my question?", None),  # not wholly wrapped
    ("Why does <system-reminder> appear in my logs?", None),
])
def test_a_context_tag_is_recognised_by_its_shape_not_by_one_client(text, tag):
    from proxy.coding.scaffolding import context_tag
    assert context_tag(text) == tag


def test_a_call_whose_newest_message_is_the_clients_note_does_not_store_the_persons_words_again():
    """A client that nudges the model with a note of its own as a user turn (`<system>…</system>`)
    resends the person's request before it: that call adds no words of the person, so its memory
    holds what it added (tool steps, a stating reply) and not the request a second time."""
    from memory_adapters.engine.episodes import episode_texts
    from proxy.coding.for_memory import for_memory
    fact = "By the way, the staging database listens on port 6543. Please say ok."
    request = {"model": "m", "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": fact},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "<system>No tool call detected in last message. Did you mean to finish?</system>"}]}
    entry = {"id": "hist1_n", "ts": "2026-11-29T03:00:00Z", "request_original": request,
             "request_effective": request, "response": {"format": "sse", "text": "Done."}}
    assert not any(fact in t for t in episode_texts(for_memory(entry)))
    first = {**entry, "request_original": {**request, "messages": request["messages"][:2]}}
    first["request_effective"] = first["request_original"]
    assert any(fact in t for t in episode_texts(for_memory(first)))  # the call that carried it keeps it


def test_a_compaction_summary_is_the_sessions_memory_not_scaffolding():
    from proxy.coding.scaffolding import sift_messages
    summary = "This session is being continued from a previous conversation. The user asked for pelican-7."
    kept, aside = sift_messages([{"role": "user", "content": [{"type": "text", "text": summary}]}],
                                recurring=lambda t: True)
    assert kept[0]["content"][0]["text"] == summary and aside.parts == 0


@pytest.mark.parametrize("text, name, args, line", [
    ("     1→API_KEY=sk-live-abc\n     2→DEBUG=1", "Read", {"file_path": "/p/.env"}, "[2 lines of /p/.env]"),
    ("building…\nerror: cannot find module 'x'", "Bash", {"command": "npm run build"},
     "error: cannot find module 'x' [2 lines]"),
    ("export DB_PASSWORD=hunter2", "Bash", {"command": "cat env.sh"}, "[1 line]"),  # a secret line is never kept
    ("ok", "Bash", {"command": "true"}, "ok"),
])
def test_a_tool_result_leaves_one_line_and_never_a_secret(text, name, args, line):
    from proxy.coding.for_memory import compact_result
    assert compact_result(text, name, args) == line


@pytest.mark.parametrize("body, project", [
    ({"system": "x\nPrimary working directory: /home/ana/parser/\n", "messages": []}, "/home/ana/parser"),
    ({"system": "env:\n - Primary working directory: /home/ana/parser\n - Is a git repo: true", "messages": []},
     "/home/ana/parser"),  # Claude Code 2.1 writes its environment as a list
    ({"input": [{"role": "user", "content": "<environment_context>\n  <cwd>/w/b/../c</cwd>\n</environment_context>"}]},
     "/w/c"),
    ({"messages": [{"role": "user", "content": "I'm currently working in the directory: /tmp/q\n"}]}, "/tmp/q"),
    ({"messages": [{"role": "user", "content": "no directory here"}]}, None),
    # a label in Markdown emphasis, the colon inside or outside it (gptme's third system message)
    ({"messages": [{"role": "system", "content": [{"type": "text", "text": "## System Information\n\n"
                   "**OS:** Debian\n**Working Directory:** /home/ana/parser\n"}]}]}, "/home/ana/parser"),
    ({"system": "- __Current working directory__: `/srv/app`\n", "messages": []}, "/srv/app"),
    ({"system": "*cwd*: /srv/app\n", "messages": []}, "/srv/app"),
])
def test_the_project_is_the_directory_the_client_declares(body, project):
    from proxy.coding.project import project_of
    assert project_of({}, body) == project
    assert project_of({"X-Memplane-Project": "billing"}, body) == "billing"  # the header wins
    assert project_of({}, body, enabled=False) is None


def test_a_continued_session_does_not_get_its_own_compaction_summary_back():
    """Codex resends a compaction's summary inside its own preamble; the stored summary episode
    (memplane's fixed question, then the summary) is left out of that request's block, while another
    session's turn stays."""
    from proxy.coding.already_said import drop_already_said, request_shingles
    from proxy.coding.for_memory import SUMMARY_QUESTION
    from proxy.recall_policy import InjectedMemory
    summary = "<summary>Summary: the parser now keeps comments and the tests pass again.</summary>"
    request = ["Another language model started to solve this problem and produced a summary: " + summary,
               "Please say ok."]
    mine = InjectedMemory(text=f"user: {SUMMARY_QUESTION}\nassistant: {summary}")
    other = InjectedMemory(text="user: The staging database listens on port 6543.\nassistant: Noted.")
    kept, dropped = drop_already_said([mine, other], request_shingles(request))
    assert kept == [other] and dropped == 2
    kept, _ = drop_already_said([mine], request_shingles(["Please say ok, and summarise the parser work."]))
    assert kept == [mine]  # a summary this request does not carry is still recalled


async def test_a_continued_session_does_not_get_its_compaction_summary_back_through_the_proxy(coding):
    """The stored summary (the model's own memory since replies are never merged into the person's)
    is what a continued session resends in its first message: recalled again, it would fill the
    block with the request's own words."""
    stack, memory_url, service, model = coding
    add_agent(stack, "cc", memory_url)
    model.calls = []
    other = ClaudeCode(stack, "cc", "/home/ana/parser")
    await other.ask("Remember that the release branch of the parser is called release-granite.")
    session = ClaudeCode(stack, "cc", "/home/ana/parser")
    await session.ask("Our staging database is called pelican-7; use it for the migration test.")
    model.answer = ("Summary: the person asked to use the staging database pelican-7 for the migration test; "
                    "the migration test was updated on port 6543 and passes.")
    await compact(session)
    summary = model.answer
    await stack.settle()
    assert any(m.value == f"assistant: {summary}" for m in await memories_of(service, "cc"))

    continued = ClaudeCode(stack, "cc", "/home/ana/parser", history=continued_from(summary))
    model.answer = "Done."
    await continued.ask("Which release branch and which staging database port does the migration test use?")
    block = last_block(stack)
    assert "release-granite" in block  # another session's fact: recalled
    assert "port 6543" not in block  # the summary the request carries: left out
    assert SUMMARY_QUESTION_TEXT not in block  # memplane's own question is nobody's memory to show



async def compact(session) -> None:
    """Claude Code's compaction call: the whole session and its request for a summary."""
    await session.call([*session.messages, {"role": "user", "content": [{"type": "text", "text":
                        "Your task is to create a detailed summary of the conversation so far, paying close "
                        "attention to the user's explicit requests and your previous actions."}]}], tools=CLAUDE_TOOLS)


def continued_from(summary: str) -> list[dict]:
    """The history a session continued after compaction opens with: the summary, and an acknowledgement."""
    return [{"role": "user", "content": [{"type": "text", "text": "This session is being continued from a "
                                         "previous conversation that ran out of context. " + summary}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Understood, continuing."}]}]

SUMMARY_QUESTION_TEXT = "Summary of this session so far"


async def test_a_resumed_session_does_not_get_its_own_replies_back_as_memories(coding):
    """A reply that names something is its own memory, the model's: a resumed session that resends
    it (as the assistant's message) does not get it back in the block beside the person's turn."""
    stack, memory_url, service, model = coding
    add_agent(stack, "cc", memory_url)
    model.calls = []
    other = ClaudeCode(stack, "cc", "/home/ana/parser")
    await other.ask("Remember that the release branch of the parser is called release-granite.")
    session = ClaudeCode(stack, "cc", "/home/ana/parser")
    model.answer = "Done: the migration test now runs against that database on port 6543."
    await session.ask("Our staging database is called pelican-7; use it for the migration test.")
    await stack.settle()
    assert any(m.value == f"assistant: {model.answer}" for m in await memories_of(service, "cc"))

    resumed = ClaudeCode(stack, "cc", "/home/ana/parser", history=session.messages)
    await resumed.ask("Which staging database port and which release branch do we use for the parser migration?")
    block = last_block(stack)
    assert "release-granite" in block
    assert "6543" not in block and "pelican-7" not in block


CLAUDE_COMPACTION_SUMMARY = """<analysis>
Let me go through the conversation chronologically. The user wants the parser to keep comments.
</analysis>

<summary>
1. Primary Request and Intent:
   The user asked to make the parser keep comments when it rewrites a file, and wants every test to run without
   network access. The user prefers small commits and does not want new dependencies.

2. Files and Code Sections:
   - src/parser/lexer.py: comments are now kept as trivia tokens.
   - tests/test_comments.py: new tests for comment round trips.

3. Errors and fixes:
   - The round trip test failed because trailing comments were dropped; fixed by attaching them to the previous token.

4. Current Work:
   Finishing the comment round trip for block comments.
</summary>"""


async def test_after_a_compaction_a_new_session_still_gets_the_projects_facts(coding):
    """A compaction summary is the model's bounded memory holding only its sentences that name
    something (its paths): the person's rules in plain words come back from the person's own turn,
    and the file the work is in from the summary."""
    stack, memory_url, service, model = coding
    add_agent(stack, "cc", memory_url)
    model.calls = []
    session = ClaudeCode(stack, "cc", "/home/ana/parser")
    model.answer = "Understood."
    await session.ask("Make the parser keep comments when it rewrites a file. Every test must run without network "
                      "access, and please add no new dependencies.")
    model.answer = CLAUDE_COMPACTION_SUMMARY
    await compact(session)
    await stack.settle()
    [summary] = [m for m in await memories_of(service, "cc") if m.metadata.get("origin") == "model"]
    assert "src/parser/lexer.py" in summary.value

    fresh = ClaudeCode(stack, "cc", "/home/ana/parser")
    model.answer = "Done."
    await fresh.ask("Can the new tests for the parser use the network, and may I add a dependency for them?")
    block = last_block(stack)
    assert "run without network access" in block and "no new dependencies" in block
    await fresh.ask("In which file are the parser's comments kept as trivia tokens?")
    assert "src/parser/lexer.py" in last_block(stack)


async def test_a_continued_session_does_not_get_its_summary_back_when_only_the_summary_matches(coding):
    """The summary is the model's own memory, no neighbour of memplane's question: a question only
    the summary answers finds it alone. The continued session resends that summary, so it is left
    out all the same."""
    stack, memory_url, service, model = coding
    add_agent(stack, "cc", memory_url)
    model.calls = []
    session = ClaudeCode(stack, "cc", "/home/ana/parser")
    await session.ask("Our staging database is called pelican-7; use it for the migration test.")
    model.answer = ("Summary: the migration test now runs against pelican-7; the harbour proxy in front of it "
                    "listens on port 6543 and the CI job reaches it through HARBOUR_URL.")
    await compact(session)
    summary = model.answer
    await stack.settle()

    continued = ClaudeCode(stack, "cc", "/home/ana/parser", history=continued_from(summary))
    model.answer = "Done."
    await continued.ask("What does the harbour proxy listen on, and how does CI reach it?")
    doc = await explanation(stack, continued.turn_ids[-1])
    assert "6543" not in last_block(stack), last_block(stack)
    assert doc["already_in_request"] >= 1
