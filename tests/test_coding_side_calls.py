"""Side calls and projects told by what a request is, for any client (issue 47).

No client's name or User-Agent is sent here that memplane knows: the official openai SDK with its
own User-Agent, request shapes a new coding client could send (a title call with its own system
prompt, a commit message over a diff, a main call with tools and a conversation), against the
proxy, the embedded memory engine and the strict fake provider.
"""

from __future__ import annotations

import json
import uuid

import aiohttp
import pytest

from proxy.coding.reading import NO_PROJECT, UNSCOPED
from proxy.coding.side_calls import decide, quoted_share, shape_of
from proxy.testing.fake_provider.model import Answer, ToolCall
from tests.test_coding_memory import add_agent, coding, memories_of, opened  # noqa: F401  (fixture)

MAIN_SYSTEM = "You are Helm, a coding assistant. Use the tools to read and change the user's files."
TOOLS = [{"type": "function", "function": {"name": "read", "description": "Read a file.",
                                           "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
DIFF = ("diff --git a/db.py b/db.py\nindex 3b18e51..a1f2c3d 100644\n--- a/db.py\n+++ b/db.py\n@@ -1,2 +1,2 @@\n"
        "-PORT = 5432\n+PORT = 6543\n")


class Client:
    """A coding client memplane has never seen: main calls with tools and a conversation, and its
    own side calls, every call naming its session in `X-Session-Id`."""

    def __init__(self, stack, agent_id: str, cwd: str | None, session: str | None = None, **headers: str) -> None:
        self.sdk = opened(stack, stack.openai(agent_id, default_headers={"User-Agent": "helm/0.1", **headers}))
        self.cwd = cwd
        self.session = session or uuid.uuid4().hex
        self.messages: list[dict] = []
        self.turn_ids: list[str] = []

    def system(self) -> str:
        return MAIN_SYSTEM + (f"\n<env>\n  Working directory: {self.cwd}\n</env>" if self.cwd else "")

    async def call(self, **kw) -> str:
        raw = await self.sdk.chat.completions.with_raw_response.create(
            extra_headers={"X-Session-Id": self.session}, **kw)
        self.turn_ids.append(raw.headers["x-memplane-turn-id"])
        return raw.parse().choices[0].message.content or ""

    async def ask(self, text: str) -> str:
        self.messages.append({"role": "user", "content": text})
        answer = await self.call(model="helm-large", tools=TOOLS,
                                 messages=[{"role": "system", "content": self.system()}, *self.messages])
        self.messages.append({"role": "assistant", "content": answer})
        return answer

    async def title(self) -> str:
        return await self.call(model="helm-small", max_tokens=200, messages=[
            {"role": "system", "content": "You are a title generator. You output ONLY a thread title."},
            {"role": "user", "content": json.dumps(self.messages[0]["content"])}])


async def explanation(stack, turn_id: str) -> dict:
    async with aiohttp.ClientSession() as s, s.get(f"{stack.proxy_url}/memplane/turns/{turn_id}") as r:
        assert r.status == 200
        return await r.json()


async def metrics(stack) -> str:
    async with aiohttp.ClientSession() as s, s.get(f"{stack.proxy_url}/metrics") as r:
        return await r.text()


@pytest.fixture
def answers(coding):
    stack, memory_url, service, model = coding
    stack.provider.model = lambda view: Answer(text="Done.")
    return coding


async def test_a_title_call_of_an_unknown_client_gets_no_block_and_leaves_nothing(answers):
    stack, memory_url, service, _ = answers
    add_agent(stack, "helm", memory_url)
    first = Client(stack, "helm", "/work/alpha")
    await first.ask("Remember that alpha's staging database listens on port 6543.")
    await stack.settle()
    second = Client(stack, "helm", "/work/alpha")
    await second.ask("Which port does alpha's staging database listen on?")
    assert "port 6543" in (stack.provider.received[-1].memories_block or "")
    await second.title()  # the same session, its own system prompt, another model
    assert stack.provider.received[-1].memories_block is None
    await stack.settle()
    stored = [m.value for m in await memories_of(service, "helm")]
    assert len(stored) == 2 and not any("title" in v for v in stored)
    doc = await explanation(stack, second.turn_ids[-1])
    assert doc["call_kind"] == "side" and doc["call_rule"] == "system-unlike-session"
    assert 'memplane_calls_by_rule_total{kind="side",rule="system-unlike-session"} 1.0' in await metrics(stack)


async def test_a_title_before_any_main_call_is_told_by_its_instruction(answers):
    stack, memory_url, service, _ = answers
    add_agent(stack, "helm", memory_url)
    client = Client(stack, "helm", "/work/alpha")
    client.messages.append({"role": "user", "content": "Please fix the flaky date test."})
    await client.title()  # a new agent's very first call: nothing to compare with
    await stack.settle()
    assert stack.provider.received[-1].memories_block is None
    assert await memories_of(service, "helm") == []
    doc = await explanation(stack, client.turn_ids[-1])
    assert doc["call_rule"] == "task-instruction"


async def test_a_commit_message_over_a_diff_leaves_nothing_and_a_persons_pasted_diff_is_theirs(answers):
    stack, memory_url, service, _ = answers
    add_agent(stack, "helm", memory_url)
    client = Client(stack, "helm", None)
    await client.ask("Please change the database port to 6543.")
    sdk = client.sdk
    # the client's own errand: no session, no tools, its own system prompt, the diff quoted
    await sdk.chat.completions.create(model="helm-large", messages=[
        {"role": "system", "content": "Reply with a one-line git commit message for the changes below."},
        {"role": "user", "content": f"USER: Please change the database port to 6543.\n\n# Diffs:\n{DIFF}"}])
    assert stack.provider.received[-1].memories_block is None
    # a plain chat agent's first message that pastes a diff is the person's turn
    add_agent(stack, "chat", memory_url)
    chat = opened(stack, stack.openai("chat"))
    await chat.chat.completions.create(model="gpt-4o", max_tokens=20, messages=[
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": f"Why did my port change? Here is the diff:\n```diff\n{DIFF}```"}])
    await stack.settle()
    helm = [m.value for m in await memories_of(service, "helm")]
    assert len(helm) == 1 and "diff --git" not in helm[0] and "commit message" not in helm[0]
    assert any("Why did my port change" in m.value for m in await memories_of(service, "chat"))



async def test_a_summary_over_a_bracketed_transcript_before_any_main_call_leaves_nothing(answers):
    """A client's summary call that quotes the conversation as `[User]: …` / `[Assistant]: …` lines
    (after a memplane restart it can be the first call seen from the agent) is an errand over quoted
    material, not the person's words; a person's own message that mentions `[User]` is theirs."""
    stack, memory_url, service, _ = answers
    add_agent(stack, "helm", memory_url)
    sdk = opened(stack, stack.openai("helm"))
    transcript = ("<conversation>\n[User]: By the way, alpha's staging database listens on port 6543.\n\n"
                  "[Assistant tool calls]: read(path=\"/work/alpha/src/app.py\")\n\n"
                  "[Tool result]: def invoice(total):\n    return round(total * 1.2, 2)\n\n"
                  "[Assistant]: Done.\n</conversation>\n\n")
    raw = await sdk.chat.completions.with_raw_response.create(model="helm-large", max_tokens=4000, messages=[
        {"role": "system", "content": "You are a context summarization assistant. Read a conversation, then "
                                      "produce a structured summary following the exact format specified."},
        {"role": "user", "content": transcript + "Summarize the prefix to provide context for the retained suffix."}])
    assert stack.provider.received[-1].memories_block is None
    doc = await explanation(stack, raw.headers["x-memplane-turn-id"])
    assert doc["call_kind"] == "side" and doc["call_rule"] == "task-instruction"
    add_agent(stack, "chat", memory_url)
    chat = opened(stack, stack.openai("chat"))
    await chat.chat.completions.create(model="gpt-4o", messages=[
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "In my chat export, what does a line starting with [User]: mean?"}])
    await stack.settle()
    assert await memories_of(service, "helm") == []
    assert any("[User]: mean" in m.value for m in await memories_of(service, "chat"))


TASK_TOOL = [{"type": "function", "function": {"name": "research", "description": "Hand a task to a subagent.",
                                               "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}}}]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_subagent_handed_its_task_by_a_tool_call_gets_a_block_and_leaves_nothing(answers, stream):
    """An app whose tool is another agent (no session named): the subagent's conversation opens with
    the task the model wrote as the tool call's argument. Those are the model's words: the subagent
    gets a block and stores nothing as the person's. A model that hands on the person's own message
    verbatim hands on the person's words: the parent's next step is still the person's turn."""
    stack, memory_url, service, _ = answers
    add_agent(stack, "app", memory_url)
    sdk = opened(stack, stack.openai("app"))
    task = "Find where alpha's staging database port is configured and report the file."
    person = "Remember that alpha's staging database listens on port 6543. Where is it configured?"

    def model(view):
        if view.tools and view.steps == 0 and "research" in view.tools:
            said = view.user_text
            return Answer(tool_calls=[ToolCall("research", {"task": person if "verbatim" in said else task})])
        return Answer(text="Done.")
    stack.provider.model = model

    async def call(messages, tools=None):
        kw = {"tools": tools} if tools else {}
        if stream:
            raw = await sdk.chat.completions.with_raw_response.create(model="app-large", messages=messages,
                                                                       stream=True, **kw)
            async for _ in raw.parse():
                pass
        else:
            raw = await sdk.chat.completions.with_raw_response.create(model="app-large", messages=messages, **kw)
        return raw.headers["x-memplane-turn-id"]

    await call([{"role": "system", "content": "You are the app's assistant."},
                {"role": "user", "content": person}], TASK_TOOL)
    await stack.settle()  # the person's words are stored: the subagent's block can hold them
    sub = await call([{"role": "system", "content": "You are a research subagent. Use the tools."},
                      {"role": "user", "content": task}], TOOLS)
    assert stack.provider.received[-1].memories_block is not None  # it works for the person: a block
    doc = await explanation(stack, sub)
    assert doc["call_kind"] == "subagent" and doc["call_rule"] == "handed-by-tool-call"
    await stack.settle()
    stored = [m.value for m in await memories_of(service, "app")]
    assert not any(task in v for v in stored), stored
    # the person's message handed on verbatim: the parent's later step is still theirs
    verbatim = person.replace("Where", "Verbatim: where")
    add_agent(stack, "app2", memory_url)
    sdk = opened(stack, stack.openai("app2"))
    first = [{"role": "system", "content": "You are the app's assistant."}, {"role": "user", "content": verbatim}]
    await call(first, TASK_TOOL)
    await stack.settle()
    assert any(verbatim in m.value for m in await memories_of(service, "app2"))

async def test_a_call_that_declares_nothing_belongs_to_its_sessions_project(answers):
    stack, memory_url, service, _ = answers
    add_agent(stack, "helm", memory_url)
    alpha = Client(stack, "helm", "/work/alpha")
    await alpha.ask("Note: the alpha service deploys with make ship-alpha-canary.")
    undeclared = Client(stack, "helm", None, session=alpha.session)  # the same session, no <env> this time
    await undeclared.ask("And alpha's cache runs on redis port 6390.")
    await stack.settle()
    doc = await explanation(stack, undeclared.turn_ids[-1])
    assert doc["project"] == "/work/alpha" and doc["project_from"] == "session"
    beta = Client(stack, "helm", "/work/beta")
    await beta.ask("Which port does the cache use, and how does it deploy?")
    block = stack.provider.received[-1].memories_block or ""
    assert "6390" not in block and "ship-alpha-canary" not in block
    await stack.settle()
    stored = await memories_of(service, "helm")
    assert {m.metadata.get("project") for m in stored} == {"/work/alpha", "/work/beta"}


async def test_when_unsure_of_the_project_nothing_is_stored_agent_wide(answers):
    stack, memory_url, service, _ = answers
    add_agent(stack, "helm", memory_url)
    await Client(stack, "helm", "/work/alpha").ask("Note: the alpha service deploys with make ship-alpha-canary.")
    stray = Client(stack, "helm", None)  # a new session that declares no directory
    await stray.ask("The beta indexer runs nightly at 02:15 UTC.")
    await stack.settle()
    doc = await explanation(stack, stray.turn_ids[-1])
    assert doc["project_note"] == UNSCOPED
    stored = [m.value for m in await memories_of(service, "helm")]
    assert len(stored) == 1 and "02:15" not in stored[0]


async def test_a_client_that_declares_nothing_is_told_once_and_scoping_works_once_set(answers, tmp_path):
    stack, memory_url, service, _ = answers
    add_agent(stack, "helm", memory_url)
    for _ in range(2):
        await Client(stack, "helm", None).ask("Hello, what can you do?")
    c = Client(stack, "helm", None)
    await c.ask("Hi again.")
    told = [line for line in stack.log_lines() if line.get("event") == "coding_no_project"]
    assert len(told) == 1 and told[0]["fix"] == NO_PROJECT  # once per agent
    doc = await explanation(stack, c.turn_ids[-1])
    assert doc["project_note"] == NO_PROJECT  # every such turn's explanation
    async with aiohttp.ClientSession() as s, s.get(f"{stack.proxy_url}/memplane/ui/turns/{c.turn_ids[-1]}") as r:
        assert "X-Memplane-Project" in await r.text()  # the inspector says it too
    # the header from the client's config
    a = Client(stack, "helm", None, **{"X-Memplane-Project": "alpha"})
    await a.ask("Note: the alpha service deploys with make ship-alpha-canary.")
    await stack.settle()
    await Client(stack, "helm", None, **{"X-Memplane-Project": "beta"}).ask("How does the alpha service deploy?")
    assert "ship-alpha-canary" not in (stack.provider.received[-1].memories_block or "")
    await Client(stack, "helm", None, **{"X-Memplane-Project": "alpha"}).ask("How does the alpha service deploy?")
    assert "ship-alpha-canary" in (stack.provider.received[-1].memories_block or "")


async def test_an_agents_default_project_scopes_a_client_that_declares_nothing(answers):
    stack, memory_url, service, _ = answers
    from manifests.agents import memory_manifest, write_agent
    manifest = {**memory_manifest("mem-svc", memory_url), "recall": {"path": "/recall", "timeout_ms": 5000}}
    for agent, project in (("helm-alpha", "alpha"), ("helm-beta", "beta")):
        stack.tokens[agent], _ = write_agent(stack.context_root, agent, memory=manifest, extra={"project": project})
    client = Client(stack, "helm-alpha", None)
    await client.ask("Note: the alpha service deploys with make ship-alpha-canary.")
    await stack.settle()
    doc = await explanation(stack, client.turn_ids[-1])
    assert doc["project"] == "alpha" and doc["project_from"] == "agent-default" and "project_note" not in doc
    assert {m.metadata.get("project") for m in await memories_of(service, "helm-alpha")} == {"alpha"}


async def test_two_clones_of_one_repository_are_one_project_when_the_request_names_its_remote(answers):
    stack, memory_url, service, _ = answers
    add_agent(stack, "helm", memory_url)
    remote = "origin\tgit@github.com:acme/alpha.git (fetch)"
    first = Client(stack, "helm", "/home/ana/alpha")
    first.system = lambda: f"{MAIN_SYSTEM}\nWorking directory: /home/ana/alpha\n{remote}"  # type: ignore[method-assign]
    await first.ask("Note: the alpha service deploys with make ship-alpha-canary.")
    await stack.settle()
    worktree = Client(stack, "helm", "/tmp/alpha-worktree")
    worktree.system = lambda: f"{MAIN_SYSTEM}\nWorking directory: /tmp/alpha-worktree\n{remote}"  # type: ignore[method-assign]
    await worktree.ask("How does the alpha service deploy?")
    assert "ship-alpha-canary" in (stack.provider.received[-1].memories_block or "")
    doc = await explanation(stack, worktree.turn_ids[-1])
    assert doc["project"] == "github.com/acme/alpha"


def test_the_shape_rules_need_two_weak_signals_and_no_client_name():
    one_shot = {"model": "m", "messages": [{"role": "system", "content": "You are a helpful assistant."},
                                           {"role": "user", "content": "What is a monad?"}]}
    assert decide(shape_of(one_shot)).rule == "one-shot"
    assert decide(shape_of({**one_shot, "max_tokens": 5})).kind.value == "turn"  # one weak signal
    quoted = {**one_shot, "max_tokens": 5, "messages": [one_shot["messages"][0],
                                                        {"role": "user", "content": f"```\n{DIFF}```"}]}
    assert decide(shape_of(quoted)).rule == "one-shot"  # two, but none compares with the agent's main calls
    from proxy.coding.sessions import SessionBook
    book = SessionBook()
    main = shape_of({**one_shot, "tools": TOOLS, "model": "big"})
    book.main_call("a", None, main.system, main.model, main.first, None)
    side = {**quoted, "messages": [{"role": "system", "content": "Answer tersely."}, quoted["messages"][1]]}
    assert decide(shape_of(side), book.of("a")).rule == "system-unlike-agent+model-unlike-agent+quoted-material" \
        "+tiny-max-tokens"
    with_tools = {**one_shot, "tools": TOOLS}
    assert decide(shape_of(with_tools)).rule == "offers-tools"
    # a chat agent whose own system prompt asks for a summary is not on an errand once it has talked
    summarising = {"model": "m", "messages": [{"role": "system", "content": "Answer, then write a short summary."},
                                              {"role": "user", "content": "What is a monad?"}]}
    # a new agent's first call: an errand only with the request's own errand shape (its words quoted)
    assert decide(shape_of(summarising)).rule == "one-shot"
    quoting = {**summarising, "messages": [summarising["messages"][0], {"role": "user", "content": '"What is a monad?"'}]}
    assert decide(shape_of(quoting)).rule == "task-instruction"
    talked = shape_of({**summarising, "messages": [*summarising["messages"], {"role": "assistant", "content": "…"},
                                                   {"role": "user", "content": "And a functor?"}]})
    book.main_call("chat", None, talked.system, talked.model, talked.first, None)
    assert decide(shape_of(summarising), book.of("chat")).rule == "one-shot"


@pytest.mark.parametrize("text", [
    "USER: " + "a" * 100_000, "[User" * 20_000, "[Assistant " + "a" * 100_000 + "]:", "```" * 40_000, "diff --git " + "\n+" * 50_000, "Working directory: " + "/" * 100_000,
    "origin " + "a." * 50_000, "generate " + "title " * 20_000, '"' + "x" * 100_000 + '"', "\n\n".join(["p" * 50] * 2000),
])
def test_hostile_requests_are_read_without_harm(text):
    """100 KB adversarial strings through every pattern of the shape read (RE2: linear on any input)."""
    from proxy.coding.project import project_of
    from proxy.coding.scaffolding import without_echoes
    body = {"model": "m", "messages": [{"role": "system", "content": text}, {"role": "user", "content": text}]}
    assert decide(shape_of(body)).kind.value in ("turn", "side")
    found = project_of({}, body)
    assert found is None or len(found) <= 512
    assert 0.0 <= quoted_share(text) <= 1.0
    assert len(without_echoes(text, text)) <= len(text)



@pytest.mark.parametrize("arguments", [
    "[" * 1000 + "]" * 1000, '{"a":' * 1000 + '"x"' + "}" * 1000, '{"task": "' + "t" * 100_000 + '"}',
    '["' + '", "'.join(["a task of twenty chars"] * 20_000) + '"]', "not json " * 10_000,
])
def test_hostile_tool_arguments_in_an_answer_are_read_without_harm(arguments):
    """What an answer hands its tools is read from the model's output (handed.py): deep nesting, 100 KB
    strings and floods of arguments cost no recursion and bounded work."""
    from proxy.coding.handed import MAX_ARGS, handed_texts
    for response in ({"tool_calls": [{"name": "t", "arguments": arguments}]},
                     {"format": "json", "json": {"output": [{"type": "function_call", "arguments": arguments}]}}):
        found = handed_texts(response)
        assert len(found) <= MAX_ARGS

def test_a_default_project_is_set_by_the_cli_and_by_the_pod_file(tmp_path):
    from click.testing import CliRunner

    from manifests.compiler import CompileError, compile_pod
    from manifests.models import AgentMetadata
    from memplane_cli.main import main
    from tests.test_compiler import BASE, pod

    ctx = tmp_path / "ctx"
    assert CliRunner().invoke(main, ["agent", "add", "aider", "--context-root", str(ctx),
                                     "--project", "billing"]).exit_code == 0
    assert CliRunner().invoke(main, ["agent", "add", "other", "--context-root", str(ctx)]).exit_code == 0
    meta = lambda d, a: AgentMetadata.from_doc(json.loads((d / a / "metadata.json").read_text()))  # noqa: E731
    assert meta(ctx, "aider").project == "billing" and meta(ctx, "other").project is None
    bad = CliRunner().invoke(main, ["agent", "add", "x", "--context-root", str(ctx), "--project", "  "])
    assert bad.exit_code != 0 and "--project needs a name" in bad.output

    out = tmp_path / "out"
    compile_pod(pod(tmp_path, BASE.replace("x-claw: {agent: ./r.md}", "x-claw: {agent: ./r.md, project: search}")), out)
    assert meta(out, "researcher").project == "search" and meta(out, "analyst").project is None
    with pytest.raises(CompileError, match="project must be a non-empty name"):
        compile_pod(pod(tmp_path, BASE.replace("x-claw: {agent: ./r.md}", "x-claw: {agent: ./r.md, project: 7}")),
                    tmp_path / "bad")


def test_the_book_of_main_calls_is_bounded_across_agents():
    from proxy.coding.sessions import SessionBook
    book = SessionBook(max_agents=2, max_sessions=3)
    for n in range(5):
        book.main_call(f"agent-{n % 3}", f"s{n}", "sys", "m", "first", None)
    assert sum(book.of(f"agent-{n % 3}").sessions.get(f"s{n}") is not None for n in range(5)) <= 3
    assert book.of("agent-1").sessions.get("s4") is not None  # the newest stays


def test_an_agent_flooding_new_sessions_pushes_out_only_its_own():
    """One agent naming a new session id on every call (a bug, or on purpose) fills only its own
    share of the book: another agent's session, and what it says of its calls, stays."""
    from proxy.coding.sessions import SessionBook
    book = SessionBook(max_sessions=50, per_agent=10)
    book.main_call("coder", "the-real-session", "sys", "m", "first", "billing-api", tools=True)
    for n in range(5_000):
        book.main_call("flooder", f"s{n}", "sys", "m", "first", None)
    kept = book.of("coder").sessions.get("the-real-session")
    assert kept is not None and kept.project == "billing-api"
    assert book.of("flooder").sessions.get("s4999") is not None  # its newest stays
    assert sum(book.of("flooder").sessions.get(f"s{n}") is not None for n in range(5_000)) == 10


@pytest.mark.parametrize("system", [
    None,  # the plainest SDK use: one user message
    "You are a helpful assistant.",
    # an app's own persona whose wording reads like an errand (a verb of making, then a title/summary/tag)
    "You are Quill, a writing assistant. Help the user write blog posts and choose good titles.",
    "You are a support assistant for Acme. Answer questions; summarize long answers at the end.",
])
async def test_a_plain_sdk_users_single_message_calls_get_memories_and_leave_them(answers, system):
    """The most ordinary OpenAI SDK use — one user message a call, no tools, no history, no session —
    is the person's turn whatever its system prompt says: it leaves a memory and the next call recalls it."""
    stack, memory_url, service, _ = answers
    add_agent(stack, "app", memory_url)
    sdk = opened(stack, stack.openai("app"))
    lead = [{"role": "system", "content": system}] if system else []
    await sdk.chat.completions.create(model="gpt-4o-mini", messages=[
        *lead, {"role": "user", "content": "Remember that my blog is about sourdough baking in Lisbon."}])
    await stack.settle()
    assert any("sourdough" in m.value for m in await memories_of(service, "app"))
    await sdk.chat.completions.create(model="gpt-4o-mini", messages=[
        *lead, {"role": "user", "content": "What is my blog about?"}])
    assert "sourdough" in (stack.provider.received[-1].memories_block or "")


async def test_a_shared_prompt_cache_key_is_no_session(answers):
    """`prompt_cache_key` is a cache bucket an app shares across its users and conversations (OpenAI's
    guidance), not a conversation: an SDK app that sets one and routes some calls to another model
    keeps every conversation's memory."""
    stack, memory_url, service, _ = answers
    add_agent(stack, "app", memory_url)
    sdk = opened(stack, stack.openai("app"))
    first = [{"role": "user", "content": "Hi, I'm planning a trip."}]
    await sdk.responses.create(model="gpt-4o", input=first, prompt_cache_key="acme-assistant")
    await sdk.responses.create(model="gpt-4o", prompt_cache_key="acme-assistant", input=[
        *first, {"role": "assistant", "content": "Done."}, {"role": "user", "content": "Where should I go?"}])
    # another conversation of the app, routed to a smaller model
    await sdk.responses.create(model="gpt-4o-mini", prompt_cache_key="acme-assistant", input=[
        {"role": "user", "content": "Remember that my passport expires in March 2027."}])
    await stack.settle()
    assert any("passport" in m.value for m in await memories_of(service, "app"))
    await sdk.responses.create(model="gpt-4o-mini", prompt_cache_key="acme-assistant", input=[
        {"role": "user", "content": "When does my passport expire?"}])
    assert "March 2027" in (stack.provider.received[-1].memories_block or "")


async def test_a_person_switching_models_mid_conversation_keeps_their_memory(answers):
    """A chat client that names its session (`X-Session-Id`, as memplane's docs ask) and lets the
    person pick another model mid-conversation: the calls after the switch are the person's turns
    (no tools were ever offered, so none is a coding client's check over the conversation)."""
    stack, memory_url, service, _ = answers
    add_agent(stack, "chat", memory_url)
    sdk = opened(stack, stack.openai("chat"))
    session = {"X-Session-Id": uuid.uuid4().hex}
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "Hi there."}]
    await sdk.chat.completions.create(model="gpt-4o", messages=messages, extra_headers=session)
    messages += [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "How are you?"}]
    await sdk.chat.completions.create(model="gpt-4o", messages=messages, extra_headers=session)
    messages += [{"role": "assistant", "content": "Done."},
                 {"role": "user", "content": "Remember that my dentist appointment is on the 14th."}]
    raw = await sdk.chat.completions.with_raw_response.create(model="o3-mini", messages=messages,
                                                              extra_headers=session)
    await stack.settle()
    doc = await explanation(stack, raw.headers["x-memplane-turn-id"])
    assert doc.get("call_kind") is None, doc.get("call_rule")
    assert any("dentist" in m.value for m in await memories_of(service, "chat"))


def coach_system(minute: int) -> dict:
    """A plain chat app's system prompt: a persona that makes plans, and the current time."""
    return {"role": "system", "content": "You are Coach, who creates training plans for runners. "
                                         f"Current time: 2026-11-29 07:{minute:02d} UTC."}


async def coach_chat(answers) -> tuple:
    """The app's first two turns (main calls, each under its own time); its SDK client and messages."""
    stack, memory_url, service, _ = answers
    add_agent(stack, "coach", memory_url)
    sdk = opened(stack, stack.openai("coach"))
    messages = [{"role": "user", "content": "Hi, I'm training for a marathon."}]
    await sdk.chat.completions.create(model="gpt-4o", messages=[coach_system(1), *messages])
    messages += [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "I live in Lisbon."}]
    await sdk.chat.completions.create(model="gpt-4o", messages=[coach_system(2), *messages])
    return stack, service, sdk, messages


async def test_a_chat_whose_system_prompt_names_the_time_keeps_a_persons_request_for_a_plan(answers):
    """A plain chat app (no tools, no session) whose persona makes plans and whose system prompt
    carries the current time, so it differs on every call: the person asking for a plan mid-chat
    is their turn, not a framework's plan update (task-instruction)."""
    stack, service, sdk, messages = await coach_chat(answers)
    messages += [{"role": "assistant", "content": "Done."},
                 {"role": "user", "content": "Please create a training plan for me: I run 30 km a week "
                                             "and my race is the Porto marathon in April."}]
    raw = await sdk.chat.completions.with_raw_response.create(model="gpt-4o", messages=[coach_system(3), *messages])
    doc = await explanation(stack, raw.headers["x-memplane-turn-id"])
    assert doc.get("call_kind") is None, doc.get("call_rule")
    await stack.settle()
    assert any("Porto marathon" in m.value for m in await memories_of(service, "coach"))


async def test_a_chat_with_a_sliding_window_whose_model_searched_the_persons_words_keeps_their_newest(answers):
    """A plain SDK chat app with a search tool whose model passes the person's question on verbatim
    as the query, and a history cut to its last messages (starting on a user message): when that
    question becomes the window's first message, the call is still the person's turn, not a subagent
    handed its task by a tool call, and what they say next is remembered."""
    stack, memory_url, service, _ = answers
    add_agent(stack, "chat", memory_url)
    sdk = opened(stack, stack.openai("chat"))
    search = [{"type": "function", "function": {"name": "search", "description": "Search the web.",
                                                "parameters": {"type": "object",
                                                               "properties": {"query": {"type": "string"}}}}}]
    question = "Look up the best ramen places near Shinjuku station for tonight."

    def model(view):
        last = (view.body.get("messages") or [{}])[-1]
        if view.tools and last.get("role") == "user" and str(last.get("content")).startswith("Look up"):
            return Answer(tool_calls=[ToolCall("search", {"query": last["content"]})])
        return Answer(text="Done.")
    stack.provider.model = model
    system = {"role": "system", "content": "You are a helpful assistant."}
    history = [{"role": "user", "content": "Hi, I'm in Tokyo this week."}, {"role": "assistant", "content": "Done."},
               {"role": "user", "content": question}]
    answer = (await sdk.chat.completions.create(model="gpt-4o", tools=search, messages=[system, *history])).choices[0]
    call = answer.message.tool_calls[0]
    history += [{"role": "assistant", "content": None, "tool_calls": [
                    {"id": call.id, "type": "function", "function": {"name": "search",
                                                                     "arguments": call.function.arguments}}]},
                {"role": "tool", "tool_call_id": call.id, "content": "Fuunji, Menya Musashi."}]
    await sdk.chat.completions.create(model="gpt-4o", tools=search, messages=[system, *history])
    history += [{"role": "assistant", "content": "Done."},
                {"role": "user", "content": "Remember that I am allergic to sesame."}]
    window = history[2:]  # the app keeps its last messages, starting on a user message
    raw = await sdk.chat.completions.with_raw_response.create(model="gpt-4o", tools=search,
                                                              messages=[system, *window])
    doc = await explanation(stack, raw.headers["x-memplane-turn-id"])
    assert doc.get("call_kind") is None, doc.get("call_rule")
    await stack.settle()
    assert any("sesame" in m.value for m in await memories_of(service, "chat"))


async def test_a_first_message_sent_again_after_a_failed_call_under_a_fresh_time_stamp_is_the_persons(answers):
    """A chat app with tools whose system prompt carries the current time: the person's first message
    fails (the provider's 500) and the app sends it again, its system prompt stamped anew. The second
    try is the person's turn and leaves their memory, not a memory manager's call handed their words
    (same-words-other-prompt: that one offers tools of its own)."""
    stack, memory_url, service, _ = answers
    add_agent(stack, "app", memory_url)
    sdk = opened(stack, stack.openai("app")).with_options(max_retries=0)
    said = {"role": "user", "content": "Remember that my passport expires in March 2027."}

    def system(minute: int) -> dict:
        return {"role": "system", "content": f"You are a helpful assistant. Current time: 2026-11-29 07:{minute:02d}."}

    stack.provider.fail_with = [500]
    with pytest.raises(Exception):
        await sdk.chat.completions.create(model="gpt-4o", tools=TOOLS, messages=[system(1), said])
    raw = await sdk.chat.completions.with_raw_response.create(model="gpt-4o", tools=TOOLS, messages=[system(2), said])
    doc = await explanation(stack, raw.headers["x-memplane-turn-id"])
    assert doc.get("call_kind") is None, doc.get("call_rule")
    await stack.settle()
    assert any("March 2027" in m.value for m in await memories_of(service, "app"))


async def test_a_new_chat_of_an_app_that_makes_plans_with_a_time_stamped_system_prompt_is_the_persons(answers):
    """The same app as above: after a first conversation, the person opens a new one. Its first
    message is their one-shot, though the persona speaks of making plans and the system prompt's
    time is none the agent's main calls had."""
    stack, service, sdk, messages = await coach_chat(answers)
    raw = await sdk.chat.completions.with_raw_response.create(model="gpt-4o", messages=[coach_system(9), {
        "role": "user", "content": "Remember that my race is the Porto marathon in April."}])
    doc = await explanation(stack, raw.headers["x-memplane-turn-id"])
    assert doc.get("call_kind") is None, doc.get("call_rule")
    await stack.settle()
    assert any("Porto marathon" in m.value for m in await memories_of(service, "coach"))
