"""Two more real coding agents through memplane, which no rule of memplane names (issue 47).

* opencode (`opencode-ai` on npm, pinned in tests/clients/package-lock.json): OpenAI chat
  completions, declares its working directory in its system prompt, and opens every session with a
  title call (its own system prompt, no tools, the person's words in quotes).
* aider (`aider-chat` on PyPI, pinned in tests/clients/pypi-clients.txt, in a venv of its own):
  OpenAI chat completions without tools (it edits by *SEARCH/REPLACE* blocks in its answer),
  declares no working directory, and after each edit asks the model for a commit message over the
  diff.

Both run headless against the strict fake provider through the same kind of story as
tests/test_coding_clis.py: several sessions in two repositories, facts said in passing, questions
that need them later. The tests know which calls are the clients' side calls (from the clients'
own prompts); memplane must tell them by their shape. To keep the suite's time, a round's two
sessions (one per repository, as in two terminals) run at once; each call is the session's whose
words it carries.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from proxy.coding.reading import NO_PROJECT
from proxy.testing.fake_provider import Received
from tests.cli_agents import (CodingCli, block_memories, make_repo, npm_clis, pypi_cli, scaffolding_share,
                              stored_memories)
from tests.test_coding_clis import (  # noqa: F401  (fixtures)
    AGENT, ALPHA_FACT, BETA_FACT, NAME_FACT, PREFERENCE, coding, refused, repos, scaffolding_of,
)


@pytest.fixture(scope="session")
def opencode() -> Path:
    return npm_clis()["opencode"]


@pytest.fixture(scope="session")
def aider() -> Path:
    return pypi_cli("aider")


def _system(r: Received) -> str:
    return "\n".join(m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
                     for m in r.body.get("messages") or () if m.get("role") == "system")


def check(results: list[dict], memories: list[dict], is_side, sessions: int) -> tuple[dict, list[str]]:
    """The issue's yardsticks over a story: side calls get no block and leave nothing, each fact in
    the block of the question that needs it and the other repository's not, ≤ 3 memories a session,
    scaffolding ≤ 10 % of any block."""
    problems: list[str] = []
    calls = [r for res in results for r in res["calls"]]
    side = [r for r in calls if is_side(r)]
    if not side:
        problems.append("the client made no side call")
    problems += [f"a side call got a block: {r.memories_block[:200]!r}" for r in side if r.memories_block]
    for res in results:
        if "needs" in res:
            main = [r for r in res["calls"] if not is_side(r)]
            said = "\n".join(block_memories(main[0].memories_block if main else ""))
            if res["needs"] not in said:
                problems.append(f"session {res['n']}: {res['needs']!r} not in its block")
            if res["not_other"] in said:
                problems.append(f"session {res['n']}: the other repository's {res['not_other']!r} is in its block")
    per_session = len(memories) / sessions
    if per_session > 3:
        problems.append(f"{per_session:.1f} memories per session")
    scaffolding = scaffolding_of(calls)
    worst = max((scaffolding_share(block_memories(r.memories_block), scaffolding) for r in calls if r.memories_block),
                default=0.0)
    if worst > 0.10:
        problems.append(f"a block is {worst:.0%} client scaffolding")
    return {"calls": len(calls), "side_calls": len(side), "memories": len(memories),
            "memories_per_session": round(per_session, 2), "scaffolding_share_max": round(worst, 3)}, problems


async def run_rounds(clis: dict[Path, CodingCli], stack, rounds: list[list[dict]]) -> list[dict]:
    """Each round's sessions at once (one CLI per repository), then memory settles; a session's calls
    are those that carry its words (`match`, else what it said: the title call quotes them, the commit
    call's transcript too)."""
    results: list[dict] = []
    for steps in rounds:
        first = len(stack.provider.received)
        await asyncio.gather(*(clis[s["repo"]].run(s["say"], s["repo"], resume=s.get("resume", False),
                                                   compact=s.get("compact", False), timeout=150)
                               for s in steps))
        await stack.settle()
        calls = [r for r in stack.provider.received[first:] if r.path.startswith("/v1/")]
        assert refused(calls) == [], refused(calls)
        for s in steps:
            mine = [r for r in calls if s.get("match", s["say"]) in json.dumps(r.body, ensure_ascii=False)]
            results.append({**s, "n": len(results) + 1, "calls": mine})
    return results


def side_rules(stack) -> list[str]:
    """The rules that decided the agent's side calls, from its ledger."""
    return sorted({e["scaffolding"]["rule"] for e in stack.ledger(AGENT)
                   if e.get("scaffolding", {}).get("side_call") and e["scaffolding"].get("rule")})


async def explanation(stack, turn_id: str) -> dict:
    async with aiohttp.ClientSession() as s, s.get(f"{stack.proxy_url}/memplane/turns/{turn_id}") as r:
        assert r.status == 200
        return await r.json()


# -- opencode: declares its working directory, titles every session --

def two_repositories(alpha: Path, beta: Path) -> list[list[dict]]:
    """Two rounds, one session per repository in each: a fact told, then asked for."""
    return [
        [dict(repo=alpha, say=f"By the way, {ALPHA_FACT[0]}. Please read {alpha}/src/app.py."),
         dict(repo=beta, say=f"Note that {BETA_FACT[0]}. Please run `ls {beta}/src`.")],
        [dict(repo=alpha, say="Which port does alpha's staging database listen on?",
              needs=ALPHA_FACT[1], not_other=BETA_FACT[1]),
         dict(repo=beta, say="When does the beta indexer run?", needs=BETA_FACT[1], not_other=ALPHA_FACT[1])],
    ]


def is_title_call(r: Received) -> bool:
    return not r.body.get("tools") and "title" in _system(r).lower()


async def test_opencode_titles_leave_nothing_and_each_repository_keeps_its_work(opencode, coding, tmp_path):
    stack, memory_url = coding
    alpha, beta = repos(tmp_path / "m")
    clis = {repo: CodingCli("opencode", opencode, tmp_path / f"home-{repo.name}", stack.proxy_url, stack.tokens[AGENT])
            for repo in (alpha, beta)}
    rounds = two_repositories(alpha, beta)
    results = await run_rounds(clis, stack, rounds)
    memories = await stored_memories(memory_url, AGENT)
    report, problems = check(results, memories, is_title_call, sum(map(len, rounds)))
    text = "\n".join(m["value"] if isinstance(m.get("value"), str) else json.dumps(m) for m in memories)
    if "Generate a title" in text or "title generator" in text:
        problems.append("a title call left a memory")
    report["side_rules"] = side_rules(stack)
    print(f"\nopencode story: {report}")
    assert problems == [], "\n".join(problems)


# -- aider: no tools, no working directory, a commit message after each edit --

def is_commit_call(r: Received) -> bool:
    return "commit message" in _system(r).lower() and not any(m.get("role") == "assistant"
                                                                for m in r.body.get("messages") or ())


def scope_aider(repo: Path, project: str) -> None:
    """The documented fix for a client that declares no project: its config sends X-Memplane-Project
    (aider reads `.aider.model.settings.yml` at the repository's root; litellm sends `extra_headers`)."""
    (repo / ".aider.model.settings.yml").write_text(
        f"- name: openai/qwen3-coder-plus\n  extra_params:\n    extra_headers:\n      X-Memplane-Project: {project}\n")


async def test_aider_is_told_how_to_scope_then_its_commit_messages_leave_nothing_and_scoping_works(
        aider, coding, tmp_path):
    stack, memory_url = coding
    alpha, beta = repos(tmp_path / "m")
    # The same client as a second agent with nothing set, in a third repository, at the same time.
    bare = "aider-bare"
    stack.add_agent(bare, memory_url, service="embedded")
    gamma = make_repo(tmp_path / "m", "gamma", {"README.md": "# gamma\nThe mailer.\n"})
    cli = CodingCli("aider", aider, tmp_path / "home", stack.proxy_url, stack.tokens[AGENT])
    clis = {alpha: cli, beta: cli,
            gamma: CodingCli("aider", aider, tmp_path / "home-bare", stack.proxy_url, stack.tokens[bare])}
    # scoped through the client's own config: each repository keeps its work
    scope_aider(alpha, "alpha")
    scope_aider(beta, "beta")
    hello = dict(repo=gamma, say=f"Hi, {NAME_FACT[0]}. Please create notes/hello.md saying `hello`.")
    rounds = [
        [dict(repo=alpha, say=f"By the way, {ALPHA_FACT[0]}. Please create docs/db.md saying `staging db`."),
         dict(repo=beta, say=f"Note that {BETA_FACT[0]}. Please create docs/schedule.md saying `nightly`."), hello],
        [dict(repo=alpha, say="Which port does alpha's staging database listen on?",
              needs=ALPHA_FACT[1], not_other=BETA_FACT[1]),
         dict(repo=beta, say="When does the beta indexer run?", needs=BETA_FACT[1], not_other=ALPHA_FACT[1])],
    ]
    results = await run_rounds(clis, stack, rounds)
    for path in (alpha / "docs" / "db.md", beta / "docs" / "schedule.md", gamma / "notes" / "hello.md"):
        assert path.exists(), f"aider applied the model's edit: {path}"

    # unscoped: aider declares no directory; memplane says so, with the fix
    turn = next(e for e in stack.ledger(bare) if not e.get("scaffolding", {}).get("side_call"))
    doc = await explanation(stack, turn["turn_id"])
    assert doc["project_note"] == NO_PROJECT and "X-Memplane-Project" in NO_PROJECT and "--project" in NO_PROJECT
    told = [line for line in stack.log_lines() if line.get("event") == "coding_no_project"]
    assert [t["claw_id"] for t in told] == [bare] and told[0]["fix"] == NO_PROJECT

    scoped = [r for r in results if r["repo"] != gamma]
    memories = await stored_memories(memory_url, AGENT)
    report, problems = check(results, memories, is_commit_call, len(scoped))
    text = "\n".join(json.dumps(m) for m in memories + await stored_memories(memory_url, bare))
    for mark in ("diff --git", "# Diffs", "commit message"):
        if mark in text:
            problems.append(f"a commit-message call left a memory ({mark!r})")
    if "get_factorial" in text or "SEARCH/REPLACE block* Rules" in text:
        problems.append("aider's few-shot examples or appended rules were stored as the person's words")
    projects = {m.get("metadata", {}).get("project") for m in memories}
    report["projects"] = sorted(p or "-" for p in projects)
    if "-" in report["projects"]:
        problems.append("a scoped session left an agent-wide memory")
    print(f"\naider story: {report}")
    assert problems == [], "\n".join(problems)
