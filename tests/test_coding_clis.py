"""Coding agents through memplane: the real CLIs from npm, headless, against the strict fake provider.

Claude Code (`claude -p`), OpenAI Codex CLI (`codex exec`) and Qwen Code (`qwen -p`), pinned in
tests/clients/package-lock.json and installed once into ~/.cache/memplane/npm-clis, run as a new user would
run them: pointed at memplane with the agent's token as API key, offline. memplane runs with the
embedded memory engine; the fake provider behind it refuses what the real APIs refuse (signed
thinking blocks and encrypted reasoning must come back unchanged) and answers as a coding model
that reads files, runs commands and calls a subagent, so each CLI's own tool loop really runs.

The person's story: a developer tells their agent facts and a preference in passing while it
works, across sessions and two repositories; later questions need them back — and nothing else:
not the client's scaffolding, not the other project's work, not a secret a tool read.
"""

from __future__ import annotations

import asyncio
import io
import resource
from collections import Counter
from pathlib import Path

import pytest

from memory_adapters.embedded.app import build_embedded_app
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from proxy.testing.fake_provider import CodingModel, FakeProvider, Received, own_words, without_memories, wrapped_context
from tests.cli_agents import (
    ClientRecorder,
    CodingCli,
    block_memories,
    make_repo,
    npm_clis,
    replay,
    repeated_share,
    scaffolding_share,
    scaffolding_words,
    stored_memories,
)
from tests.conftest import url_of
from tests.harness import Stack

AGENT = "coder"
SECRET = "ghp_R8x2Vb7NqL4tY9wK3mZ6pD1sF5hJ0cE2aG8u"


@pytest.fixture(scope="session")
def clis() -> dict[str, Path]:
    return npm_clis()


@pytest.fixture
async def coding(make_stack, aiohttp_server, tmp_path):
    """memplane (proxy + embedded memory engine) in front of the fake provider's coding model."""
    stack: Stack = await make_stack()
    stack.provider.model = CodingModel()
    memory = build_embedded_app(tmp_path / "memory", redactor=Redactor(),
                                telemetry=Telemetry(make_logger(io.StringIO())))
    memory_url = url_of(await aiohttp_server(memory))
    stack.add_agent(AGENT, memory_url, service="embedded")
    return stack, memory_url


def cli_for(name: str, clis: dict[str, Path], home: Path, base_url: str, key: str) -> CodingCli:
    return CodingCli(name, clis[name], home, base_url, key)


def session_calls(stack: Stack, first: int) -> list[Received]:
    return [r for r in stack.provider.received[first:] if r.path.startswith("/v1/")]


def refused(calls: list[Received]) -> list[str]:
    return [f"{r.path} {r.status}: {r.error}" for r in calls if r.status != 200]


# -- each CLI: its tool loop finishes, nothing is refused, a fact comes back next session --

@pytest.mark.parametrize("name", ["qwen", "claude", "codex"])
async def test_a_coding_cli_runs_its_tool_loop_through_memplane_and_remembers_next_session(
        name, clis, coding, tmp_path):
    stack, _ = coding
    repo = make_repo(tmp_path, "shop", {"README.md": "# shop\nA small web shop.\n",
                                        "notes.txt": "TODO: migrate the cart to the new API\n"})
    cli = cli_for(name, clis, tmp_path / "home", stack.proxy_url, stack.tokens[AGENT])

    first = len(stack.provider.received)
    answer = await cli.run(f"My favourite test runner is pytest-xdist. Please read {repo}/notes.txt and say ok.",
                           repo)
    calls = session_calls(stack, first)
    assert "Done." in answer
    assert refused(calls) == []
    assert any("migrate the cart" in str(r.body) for r in calls), "the file's text came back as a tool result"
    await stack.settle()

    first = len(stack.provider.received)
    await cli.run("Which test runner do I like?", repo)
    calls = session_calls(stack, first)
    assert refused(calls) == []
    assert "pytest-xdist" in (calls[0].memories_block or ""), calls[0].memories_block


# -- the long-horizon story --

ALPHA_FACT = ("alpha's staging database listens on port 6543", "port 6543")
BETA_FACT = ("the beta indexer runs nightly at 02:15 UTC", "at 02:15 UTC")
PREFERENCE = ("I prefer tabs over spaces in every repository", "tabs over spaces")
NAME_FACT = ("my name is Dana Okafor", "Okafor")


def story(alpha: Path, beta: Path, name: str) -> list[dict]:
    """Twenty sessions of one developer's coding agent across two repositories."""
    s = [
        dict(repo=alpha, say=f"Hi, {NAME_FACT[0]}. Please read {alpha}/README.md and say ok."),
        dict(repo=alpha, say=f"Please run `git -C {alpha} log --oneline` and tell me the last commit."),
        dict(repo=alpha, say=f"By the way, {ALPHA_FACT[0]}. Please read {alpha}/src/app.py."),
        dict(repo=beta, say=f"Now beta, the search indexer. Please read {beta}/README.md."),
        dict(repo=beta, say=f"Note that {BETA_FACT[0]}. Please run `ls {beta}/src`."),
        dict(repo=alpha, say=f"Please read {alpha}/.env and check the settings are complete.", secret=True),
        dict(repo=alpha, say=f"{PREFERENCE[0]}, and short commit messages. Please read {alpha}/src/app.py."),
        dict(repo=beta, say=f"Please ask a subagent to read {beta}/src/index.py and report what it does.",
             subagent=True),
        dict(repo=beta, say=f"And the tests? Please read {beta}/tests/test_index.py.", resume=True),
        dict(repo=alpha, say=f"Please run `git -C {alpha} status --short`."),
        dict(repo=alpha, say="Please say ok.", compact=True),  # continues session 10 and compacts it
        dict(repo=beta, say=f"Please read {beta}/src/index.py and say ok."),
        dict(repo=alpha, say=f"Please run `ls {alpha}/src`."),
        dict(repo=beta, say=f"Please run `git -C {beta} log --oneline`."),
        dict(repo=alpha, say=f"Please read {alpha}/README.md again."),
        dict(repo=beta, say=f"Please read {beta}/README.md again."),
        dict(repo=alpha, say="Which port does alpha's staging database listen on?",
             needs=ALPHA_FACT[1], not_other=BETA_FACT[1]),
        dict(repo=beta, say="When does the beta indexer run?", needs=BETA_FACT[1], not_other=ALPHA_FACT[1]),
        dict(repo=beta, say="I'm adding a new module here: how should I indent it?", needs=PREFERENCE[1]),
        dict(repo=alpha, say="What is my surname?", needs=NAME_FACT[1]),
    ]
    assert len(s) == 20
    return s


def repos(root: Path) -> tuple[Path, Path]:
    alpha = make_repo(root, "alpha", {
        "README.md": "# alpha\nThe billing service.\n",
        "src/app.py": "def invoice(total):\n    return round(total * 1.2, 2)\n",
        ".env": f"DATABASE_URL=postgres://localhost:6543/alpha\nGITHUB_TOKEN={SECRET}\n",
    })
    beta = make_repo(root, "beta", {
        "README.md": "# beta\nThe search indexer.\n",
        "src/index.py": "def build(docs):\n    return sorted(set(docs))\n",
        "tests/test_index.py": "from src.index import build\n\ndef test_build():\n    assert build(['b', 'a']) == ['a', 'b']\n",
    })
    return alpha, beta


def scaffolding_of(calls: list[Received]) -> str:
    """The text the client wrote around the person's words in these requests: its system prompt
    and developer items, and what it wrapped in its context tags inside user turns."""
    out: list[str] = []
    for r in calls:
        out += _texts(r.body.get("system")) + _texts(r.body.get("instructions"))
        turns = [*(r.body.get("messages") or []), *(r.body.get("input") or [] if isinstance(r.body.get("input"), list)
                                                      else [])]
        for turn in turns:
            if not isinstance(turn, dict):
                continue
            if turn.get("role") in ("system", "developer"):
                out += _texts(turn.get("content"))
            elif turn.get("role") == "user":
                out += [part for text in _texts(turn.get("content")) for part in wrapped_context(text)]
    # memplane's own block is not the client's; a system prompt every call repeats counts once
    return "\n".join(without_memories(text) for text in dict.fromkeys(out))


def _texts(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [t for k, v in node.items() if k not in ("tools",) for t in _texts(v)]
    if isinstance(node, list):
        return [t for v in node for t in _texts(v)]
    return []


def _said(message: dict) -> str:
    """A message's own text parts (not its role or part types)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(p["text"] for p in content or () if isinstance(p, dict) and isinstance(p.get("text"), str))


async def run_story(cli: CodingCli, provider: FakeProvider, sessions: list[dict], settle) -> list[dict]:
    results: list[dict] = []
    for n, step in enumerate(sessions, 1):
        first = len(provider.received)
        await cli.run(step["say"], step["repo"], resume=step.get("resume", False), compact=step.get("compact", False))
        await settle()
        calls = [r for r in provider.received[first:] if r.path.startswith("/v1/")]
        assert refused(calls) == [], f"session {n}: {refused(calls)}"
        results.append({**step, "n": n, "calls": calls})
    return results


def cpu_seconds() -> float:
    """CPU time of this process and of the CLI processes it waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.mark.parametrize("name", ["claude", "codex"])
async def test_twenty_sessions_of_a_coding_agent_remember_the_person_and_the_work(
        name, clis, coding, aiohttp_server, tmp_path, record_property):
    stack, memory_url = coding
    sessions = story(*repos(tmp_path / "m"), name)
    # The CLI talks to memplane through a recorder that keeps its requests as it sent them.
    recorder = ClientRecorder(stack.proxy_url)
    cli = cli_for(name, clis, tmp_path / "home", url_of(await aiohttp_server(recorder.app())), stack.tokens[AGENT])
    cpu = cpu_seconds()
    results = await run_story(cli, stack.provider, sessions, stack.settle)
    cpu_story = cpu_seconds() - cpu
    # The same agent without memplane: its very requests, in order, straight to a provider of their
    # own (which signs as memplane's provider did, so the thinking and reasoning it sent verify).
    direct = FakeProvider(model=CodingModel(), signer=stack.provider.signer)
    await replay(recorder.sent, url_of(await aiohttp_server(direct.app())))
    assert refused(direct.received) == [], refused(direct.received)
    assert len(direct.received) == len(recorder.sent) > 20

    # The story really had its moments: a file with the secret read by a tool, a compaction, a subagent.
    assert any(SECRET in str(r.body) for r in results[5]["calls"]), "session 6's tool read the .env file"
    assert stack.provider.model.summaries >= 1, "session 11 compacted the conversation"

    blocks = [(res, r) for res in results for r in res["calls"] if r.memories_block]
    memories = await stored_memories(memory_url, AGENT)
    report = {"sessions": len(sessions), "memories": len(memories), "cpu_s": round(cpu_story, 1)}
    problems: list[str] = []
    # which calls memplane read as not the person's turns, and by which rule (coding/side_calls.py)
    marks = [e["scaffolding"] for e in stack.ledger(AGENT) if isinstance(e.get("scaffolding"), dict)]
    report["not_turns"] = dict(Counter(f"{m['side_call']}:{m.get('rule')}" for m in marks if m.get("side_call")))
    if name == "claude" and not any(m.get("side_call") == "subagent" for m in marks):
        problems.append("session 8's subagent calls were read as the person's turns")
    if name == "claude":  # session 8's subagent: a conversation of its own that starts with its task
        asked = [own_words(_said(r.body["messages"][0])) for r in results[7]["calls"]]
        report["subagent_requests"] = sum(a.startswith("read ") and "index.py" in a and "ask a subagent" not in a
                                          for a in asked)
        if not report["subagent_requests"]:
            problems.append(f"session 8's subagent did not run: {[a[:80] for a in asked]}")

    # prompt-cache reads stay >= 90 % of the same agent's without memplane
    reads = sum(r.cache_read for res in results for r in res["calls"])
    direct_reads = sum(r.cache_read for r in direct.received)
    ratio = reads / direct_reads if direct_reads else 0.0
    report.update(cache_reads=reads, cache_reads_direct=direct_reads, cache_ratio=round(ratio, 3))
    if ratio < 0.90:
        problems.append(f"prompt-cache reads are {ratio:.0%} of the agent's without memplane")

    # each fact and the preference in the block of the question that needs it, the other project's
    # fact not: looked for in the memories' text, not their attributes (a `ts` at 02:15 UTC holds "02:15")
    for res in results:
        if "needs" in res:
            said = "\n".join(block_memories(res["calls"][0].memories_block))
            if res["needs"] not in said:
                problems.append(f"session {res['n']}: {res['needs']!r} not in its block")
            leaked = [line for line in said.splitlines() if res.get("not_other") and res["not_other"] in line]
            if leaked:
                problems.append(f"session {res['n']}: the other project's {res['not_other']!r} is in its block: {leaked}")

    # at most 10 % of the block's memory text is client scaffolding
    scaffolding = scaffolding_of([r for res in results for r in res["calls"]])
    shares = [scaffolding_share(block_memories(r.memories_block), scaffolding) for _, r in blocks]
    worst = max(shares, default=0.0)
    report["scaffolding_share_max"] = round(worst, 3)
    report["scaffolding_share_mean"] = round(sum(shares) / len(shares), 3) if shares else 0.0
    if worst > 0.10:
        _, covered = scaffolding_words(block_memories(blocks[shares.index(worst)][1].memories_block), scaffolding)
        problems.append(f"a block's memory text is {worst:.0%} client scaffolding: {' '.join(covered)[:300]!r}")

    # memories stored per session average <= 3 (the subagent's calls included)
    per_session = len(memories) / len(sessions)
    report["memories_per_session"] = round(per_session, 2)
    if per_session > 3:
        problems.append(f"{per_session:.1f} memories stored per session")

    # a continued session's block repeats <= 10 % of what the request already holds
    for res in results:
        if res.get("resume") or res.get("compact"):
            for r in res["calls"]:
                if r.memories_block:
                    rest = "\n".join(_texts(r.body)).replace(r.memories_block, "")
                    share = repeated_share(block_memories(r.memories_block), rest)
                    report[f"resumed_repeat_s{res['n']}"] = round(share, 3)
                    if share > 0.10:
                        problems.append(f"session {res['n']} (continued): its block repeats {share:.0%} of the request")
                    break

    # the secret is nowhere in stored memories or blocks
    if any(SECRET in str(m) for m in memories):
        problems.append("the secret is in a stored memory")
    if any(SECRET in (r.memories_block or "") for _, r in blocks):
        problems.append("the secret is in a block")

    for key, value in report.items():
        record_property(key, value)
    print(f"\n{name} story: {report}")
    assert problems == [], "\n".join(problems)
