"""Two more coding agents no rule of memplane was written for, through memplane.

* pi (`@mariozechner/pi-coding-agent` on npm, `pi -p`, pinned in tests/clients/package-lock.json):
  a provider of its own in `~/.pi/agent/models.json` (OpenAI chat completions, Responses, or
  Anthropic messages; it always streams), tools `read`, `bash`, `edit`, `write`; declares `Current working directory:` in its
  system prompt; names no session; compacts on its own when the context passes its window less its
  `reserveTokens`, with a one-shot call of its own ("You are a context summarization assistant",
  the conversation quoted in `<conversation>`).
* The OpenAI Agents SDK for JavaScript (`@openai/agents` on npm, same lock): an agent with one
  function tool run by `run(agent, input)`, over the Responses API (its default) and chat
  completions (`setOpenAIAPI('chat_completions')`), streaming and not, and an agent whose tool is
  another agent (`asTool()`) (tests/clients/agents_sdk.cjs).

Both run against the strict fake provider's coding model; memplane must tell what each call is by
its shape.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from proxy.testing.fake_provider import Received
from tests.cli_agents import CodingCli, block_memories, npm_clis, scaffolding_share, stored_memories
from tests.clients import install
from tests.test_coding_clis import (  # noqa: F401  (fixtures)
    AGENT, ALPHA_FACT, coding, refused, repos, scaffolding_of,
)
from tests.test_coding_clis_by_shape import check, run_rounds, side_rules, two_repositories

APP_PY = "round(total * 1.2, 2)"  # what pi's `read` of alpha's src/app.py returns, never the person's words


@pytest.fixture(scope="session")
def pi() -> Path:
    return npm_clis()["pi"]


def is_pi_summary(r: Received) -> bool:
    """pi's compaction call (its system prompt: a system message, Anthropic's `system`, Responses'
    `instructions` or developer item)."""
    return not r.body.get("tools") and "context summarization assistant" in json.dumps(r.body)


def persons_words(memories: list[dict]) -> str:
    """The memories stored as what the person said (origin `user`)."""
    return "\n".join(m["value"] for m in memories if (m.get("metadata") or {}).get("origin") == "user")


def tool_names(r: Received) -> set[str]:
    return {(t.get("function") or t).get("name") for t in r.body.get("tools") or () if isinstance(t, dict)}


def memory_text(memories: list[dict]) -> str:
    return "\n".join(json.dumps(m, ensure_ascii=False) for m in memories)


@pytest.mark.parametrize("api", ["openai-completions", "openai-responses", "anthropic-messages"])
async def test_pi_compaction_gets_no_block_and_each_repository_keeps_its_work(pi, coding, tmp_path, api):
    stack, memory_url = coding
    alpha, beta = repos(tmp_path / "m")
    # alpha's pi compacts once its context passes 1,450 tokens (a session's calls are ~1,500 here)
    clis = {repo: CodingCli("pi", pi, tmp_path / f"home-{repo.name}", stack.proxy_url, stack.tokens[AGENT],
                            pi_api=api, pi_compact_at=1450 if repo == alpha else None) for repo in (alpha, beta)}
    first, second = two_repositories(alpha, beta)
    # alpha's session goes on (`pi -p -c`) past pi's compaction threshold: pi summarizes it first
    # (the round's calls are all alpha's: its summary call does not quote what the person says next)
    more = [dict(repo=alpha, say=f"Please read {alpha}/README.md and {alpha}/src/app.py again.", resume=True,
                 match=str(alpha))]
    results = await run_rounds(clis, stack, [first, more, second])
    summaries = [r for res in results for r in res["calls"] if is_pi_summary(r)]
    memories = await stored_memories(memory_url, AGENT)
    report, problems = check(results, memories, is_pi_summary, len(first) + len(more) + len(second))
    text = memory_text(memories)
    if "context summarization assistant" in text or "<conversation>" in text or "[User]:" in text:
        problems.append("pi's compaction call left its prompt in a memory")
    said = persons_words(memories)
    for tool_output in (APP_PY, "The billing service", "index.py\n"):
        if tool_output in said:
            problems.append(f"a tool's output was stored as the person's words: {tool_output!r}")
    if not summaries:
        problems.append("pi did not compact")
    report["summary_calls"] = len(summaries)
    report["side_rules"] = side_rules(stack)
    report["projects"] = sorted({m.get("metadata", {}).get("project") or "-" for m in memories})
    print(f"\npi story ({api}): {report}")
    assert problems == [], "\n".join(problems)


async def test_pi_compacting_first_after_a_memplane_restart_gets_no_block_and_stores_no_transcript(
        pi, coding, make_stack, tmp_path):
    """`pi -c` compacts before it sends the person's next message when the last answer's context
    passed its threshold: after a memplane restart that summary call is the first call memplane sees
    from the agent (no main calls to compare it with), so only its own shape can tell it."""
    stack, memory_url = coding
    alpha, _ = repos(tmp_path / "m")
    home = tmp_path / "home"
    said = f"By the way, {ALPHA_FACT[0]}. Please read {alpha}/src/app.py."
    await CodingCli("pi", pi, home, stack.proxy_url, stack.tokens[AGENT]).run(said, alpha)
    await stack.settle()
    restarted = await make_stack()  # the same agents, ledger and provider; a new process's memory
    restarted.tokens.update(stack.tokens)
    first = len(restarted.provider.received)
    # the same home, now told to compact past 1,450 tokens (the last answer's context was ~1,500)
    await CodingCli("pi", pi, home, restarted.proxy_url, stack.tokens[AGENT], pi_compact_at=1450).run(
        "Which port does alpha's staging database listen on?", alpha, resume=True)
    await restarted.settle()
    calls = [r for r in restarted.provider.received[first:] if r.path.startswith("/v1/")]
    problems = refused(calls)
    summaries = [r for r in calls if is_pi_summary(r)]
    if not summaries:
        problems.append("pi did not compact")
    problems += [f"pi's summary call got a block: {r.memories_block[:200]!r}" for r in summaries if r.memories_block]
    memories = await stored_memories(memory_url, AGENT)
    words = persons_words(memories)
    if "[User]:" in words or "context checkpoint summary" in words:
        problems.append("pi's summary call was stored as the person's words")
    if words.count(ALPHA_FACT[0]) != 1:
        problems.append(f"the person's fact is stored {words.count(ALPHA_FACT[0])} times as their words")
    main = [r for r in calls if not is_pi_summary(r)]
    if not main or ALPHA_FACT[1] not in "\n".join(block_memories(main[0].memories_block)):
        problems.append(f"{ALPHA_FACT[1]!r} is not in the question's block")
    rules = sorted({(e["scaffolding"].get("side_call"), e["scaffolding"].get("rule"))
                    for e in restarted.ledger(AGENT)[-len(calls):] if e.get("scaffolding")}, key=str)
    print(f"\npi after a restart: calls {len(calls)}, summary calls {len(summaries)}, rules {rules}, "
          f"memories {len(memories)}, the fact stored {words.count(ALPHA_FACT[0])}x as the person's")
    assert problems == [], "\n".join(problems)


# -- the OpenAI Agents SDK (JS): an app's agent loop, Responses or chat completions, streaming or not --

AGENTS_SCRIPT = Path(__file__).parent / "clients" / "agents_sdk.cjs"
AGENTS_MODEL = "gpt-4.1"


@pytest.fixture(scope="session")
def agents_sdk() -> Path:
    """The pinned install's node_modules holding `@openai/agents`."""
    npm_clis()
    modules = install.cache_dir() / "node_modules"
    if not (modules / "@openai" / "agents" / "package.json").exists():
        pytest.skip(f"@openai/agents is not installed under {modules}")
    return modules


async def run_agent(modules: Path, home: Path, stack, key: str, api: str, stream: bool, say: str,
                    *flags: str) -> str:
    """One run of tests/clients/agents_sdk.cjs (a new process, as a later run of an app is)."""
    home.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "NODE_PATH": str(modules),
           "OPENAI_BASE_URL": f"{stack.proxy_url}/v1", "OPENAI_API_KEY": key, "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    argv = ["node", str(AGENTS_SCRIPT), "--api", api, "--model", AGENTS_MODEL, *(["--stream"] if stream else []), *flags, say]
    proc = await asyncio.create_subprocess_exec(*argv, env=env, cwd=home, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, f"the agent run failed:\n{out.decode()}\n{err.decode()[-3000:]}"
    return out.decode()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("api", ["responses", "chat_completions"])
async def test_agents_sdk_loop_keeps_one_episode_and_its_fact_comes_back_next_run(
        agents_sdk, coding, tmp_path, api, stream):
    stack, memory_url = coding
    alpha, _ = repos(tmp_path / "m")
    key = stack.tokens[AGENT]
    first = len(stack.provider.received)
    said = f"By the way, {ALPHA_FACT[0]}. Please read {alpha}/src/app.py."
    await run_agent(agents_sdk, tmp_path / "home", stack, key, api, stream, said)
    await stack.settle()
    loop = [r for r in stack.provider.received[first:] if r.path.startswith("/v1/")]
    then = len(stack.provider.received)
    await run_agent(agents_sdk, tmp_path / "home", stack, key, api, stream,
                    "Which port does alpha's staging database listen on?")
    await stack.settle()
    later = [r for r in stack.provider.received[then:] if r.path.startswith("/v1/")]
    problems = refused(loop + later)
    if len(loop) < 2 or APP_PY not in json.dumps(loop[-1].body):
        problems.append(f"the agent's tool loop did not run: {len(loop)} calls")
    memories = await stored_memories(memory_url, AGENT)
    words = persons_words(memories)
    if APP_PY in words:
        problems.append("the tool's result was stored as the person's words")
    if words.count(ALPHA_FACT[0]) != 1:
        problems.append(f"the loop's steps left {words.count(ALPHA_FACT[0])} episodes of the person's words")
    back = "\n".join(block_memories(later[0].memories_block if later else ""))
    if ALPHA_FACT[1] not in back:
        problems.append(f"{ALPHA_FACT[1]!r} is not in the next run's block")
    if len(memories) > 6:
        problems.append(f"{len(memories)} memories for two runs")
    share = max((scaffolding_share(block_memories(r.memories_block), scaffolding_of(loop + later))
                 for r in later if r.memories_block), default=0.0)
    if share > 0.10:
        problems.append(f"a block is {share:.0%} the app's scaffolding")
    print(f"\nagents sdk ({api}, {'stream' if stream else 'whole'}): loop calls {len(loop)}, "
          f"memories {len(memories)} ({words.count(ALPHA_FACT[0])} episode of the fact), "
          f"fact back {ALPHA_FACT[1] in back}, scaffolding share {share:.2f}")
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
async def test_agents_sdk_subagent_task_is_not_stored_as_the_persons_words(agents_sdk, coding, tmp_path, api):
    """An agent whose tool is another agent (`asTool`): the model hands the subagent a task in its own
    words, which the subagent's calls carry as their user message. That task is the model's, not the
    person's: it gets a block (the subagent works for the person) and leaves no memory of its own."""
    stack, memory_url = coding
    alpha, _ = repos(tmp_path / "m")
    key = stack.tokens[AGENT]
    first = len(stack.provider.received)
    said = f"By the way, {ALPHA_FACT[0]}. Please ask a subagent to read {alpha}/src/app.py and report what it does."
    await run_agent(agents_sdk, tmp_path / "home", stack, key, api, True, said, "--subagent")
    await stack.settle()
    calls = [r for r in stack.provider.received[first:] if r.path.startswith("/v1/")]
    problems = refused(calls)
    task = f"read {alpha}/src/app.py and report what it does"
    handed = [r for r in calls if tool_names(r) == {"read_file"}]  # the subagent's (the parent offers `Agent`)
    if len(handed) < 2:
        problems.append(f"the subagent's loop did not run: {len(handed)} calls")
    memories = await stored_memories(memory_url, AGENT)
    words = persons_words(memories)
    if words.count(task) != words.count(said):
        problems.append(f"the subagent's task was stored as the person's words: {words!r}")
    if words.count(ALPHA_FACT[0]) != 1:
        problems.append(f"the person's words are stored {words.count(ALPHA_FACT[0])} times")
    print(f"\nagents sdk subagent ({api}): calls {len(calls)}, subagent calls {len(handed)}, "
          f"memories {len(memories)}, rules {side_rules(stack)}, blocks {[bool(r.memories_block) for r in calls]}")
    assert problems == [], "\n".join(problems)
