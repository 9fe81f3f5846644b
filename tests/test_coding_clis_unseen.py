"""Two coding agents no rule of memplane was written for, through memplane (issue 47's yardsticks).

* Continue's CLI (`@continuedev/cli` on npm, `cn -p`, pinned in tests/clients/package-lock.json):
  OpenAI chat completions with tools (`Read`, `Bash`, …), declares its working directory in an
  `<env>` block of its system prompt; headless it names no session and makes no title call, and
  `cn -p /compact --resume` asks the model for a summary of the conversation so far.
* gptme (`gptme` on PyPI, `gptme -n`, pinned in tests/clients/pypi-clients.txt, in a venv of its
  own): OpenAI chat completions with tools, three system messages (the third declares
  `**Working Directory:** /path` in Markdown bold), the file a request names pasted into the
  person's message, and after the first answer a title call ("Generate concise conversation
  titles.") quoting the conversation.

Both run headless against the strict fake provider through the story of
tests/test_coding_clis_by_shape.py: facts said in passing in two repositories, a later question in
each that needs its own. The tests know the clients' side calls from their own prompts; memplane
must tell them by their shape.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.coding.for_memory import SUMMARY_QUESTION
from proxy.testing.fake_provider import Received
from tests.cli_agents import CodingCli, npm_clis, pypi_cli, stored_memories
from tests.test_coding_clis import (  # noqa: F401  (fixtures)
    AGENT, coding, repos,
)
from tests.test_coding_clis_by_shape import check, is_title_call, run_rounds, side_rules, two_repositories


@pytest.fixture(scope="session")
def continue_cli() -> Path:
    return npm_clis()["continue"]


@pytest.fixture(scope="session")
def gptme() -> Path:
    return pypi_cli("gptme")


# -- Continue: tools, an <env> block, a compaction on request --

def is_compaction(r: Received) -> bool:
    last = (r.body.get("messages") or [{}])[-1]
    return last.get("role") == "user" and "summary of our conversation so far" in json.dumps(last.get("content"))


async def test_continue_compaction_keeps_one_summary_and_each_repository_keeps_its_work(
        continue_cli, coding, tmp_path):
    stack, memory_url = coding
    alpha, beta = repos(tmp_path / "m")
    clis = {repo: CodingCli("continue", continue_cli, tmp_path / f"home-{repo.name}", stack.proxy_url,
                            stack.tokens[AGENT]) for repo in (alpha, beta)}
    first, second = two_repositories(alpha, beta)
    # between them, alpha's session is compacted (`cn -p /compact --resume`)
    compact = [dict(repo=alpha, say="/compact", compact=True, match="summary of our conversation so far")]
    results = await run_rounds(clis, stack, [first, compact, second])
    memories = await stored_memories(memory_url, AGENT)
    report, problems = check(results, memories, is_compaction, len(first) + len(second))
    summaries = [m for m in memories if SUMMARY_QUESTION in json.dumps(m)]
    if len(summaries) > 1:
        problems.append(f"{len(summaries)} memories of one compaction")
    report["side_rules"] = side_rules(stack)
    print(f"\ncontinue story: {report}")
    assert problems == [], "\n".join(problems)


# -- gptme: three system messages, a Markdown working directory, a title call after the first answer --

async def test_gptme_titles_leave_nothing_and_each_repository_keeps_its_work(gptme, coding, tmp_path):
    stack, memory_url = coding
    alpha, beta = repos(tmp_path / "m")
    clis = {repo: CodingCli("gptme", gptme, tmp_path / f"home-{repo.name}", stack.proxy_url, stack.tokens[AGENT])
            for repo in (alpha, beta)}
    rounds = two_repositories(alpha, beta)
    results = await run_rounds(clis, stack, rounds)
    memories = await stored_memories(memory_url, AGENT)
    report, problems = check(results, memories, is_title_call, sum(map(len, rounds)))
    text = "\n".join(json.dumps(m) for m in memories)
    if "conversation title" in text or "NO_NAME" in text:
        problems.append("a title call left a memory")
    report["side_rules"] = side_rules(stack)
    report["projects"] = sorted({m.get("metadata", {}).get("project") or "-" for m in memories})
    print(f"\ngptme story: {report}")
    assert problems == [], "\n".join(problems)

