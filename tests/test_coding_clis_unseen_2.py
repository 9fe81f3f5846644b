"""Two more coding agents no rule of memplane was written for, through memplane.

* pi (`@mariozechner/pi-coding-agent` on npm, `pi -p`, pinned in tests/clients/package-lock.json):
  a provider of its own in `~/.pi/agent/models.json` (OpenAI chat completions, or Anthropic
  messages), tools `read`, `bash`, `edit`, `write`; declares `Current working directory:` in its
  system prompt; names no session; compacts on its own when the context passes its window less its
  `reserveTokens`, with a one-shot call of its own ("You are a context summarization assistant",
  the conversation quoted in `<conversation>`).
* The OpenAI Agents SDK for JavaScript (`@openai/agents` on npm, same lock): an agent with one
  function tool run by `run(agent, input)`, over the Responses API (its default) and chat
  completions (`setOpenAIAPI('chat_completions')`), streaming and not (tests/clients/agents_sdk.mjs).

Both run against the strict fake provider's coding model; memplane must tell what each call is by
its shape.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from proxy.testing.fake_provider import Received
from tests.cli_agents import CodingCli, block_memories, stored_memories
from tests.clients import install
from tests.test_coding_clis import (  # noqa: F401  (fixtures)
    AGENT, ALPHA_FACT, BETA_FACT, coding, refused, repos,
)
from tests.test_coding_clis_by_shape import _system, check
from tests.test_coding_clis_unseen import run_rounds, side_rules, story

APP_PY = "round(total * 1.2, 2)"  # what pi's `read` of alpha's src/app.py returns, never the person's words


@pytest.fixture(scope="session")
def pi() -> Path:
    try:
        return install.ensure()["pi"]
    except (FileNotFoundError, KeyError) as exc:
        pytest.skip(str(exc))


def is_pi_summary(r: Received) -> bool:
    """pi's compaction call (chat completions: a system message; Anthropic: the `system` field)."""
    return not r.body.get("tools") and "context summarization assistant" in _system(r) + json.dumps(r.body.get("system"))


def persons_words(memories: list[dict]) -> str:
    """The memories stored as what the person said (origin `user`)."""
    return "\n".join(m["value"] for m in memories if (m.get("metadata") or {}).get("origin") == "user")


def memory_text(memories: list[dict]) -> str:
    return "\n".join(json.dumps(m, ensure_ascii=False) for m in memories)


@pytest.mark.parametrize("api", ["openai-completions", "anthropic-messages"])
async def test_pi_compaction_gets_no_block_and_each_repository_keeps_its_work(pi, coding, tmp_path, api):
    stack, memory_url = coding
    alpha, beta = repos(tmp_path / "m")
    # alpha's pi compacts once its context passes 1,450 tokens (a session's calls are ~1,500 here)
    clis = {repo: CodingCli("pi", pi, tmp_path / f"home-{repo.name}", stack.proxy_url, stack.tokens[AGENT],
                            pi_api=api, pi_compact_at=1450 if repo == alpha else None) for repo in (alpha, beta)}
    first, second = story(alpha, beta)
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

