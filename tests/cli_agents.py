"""Drive the real coding-agent CLIs (Claude Code, Codex, Qwen Code, opencode, aider, Continue, gptme, pi) headless
through memplane.

Each CLI gets a private HOME (and CODEX_HOME), is pointed at the proxy with the agent's token as
its API key, and is kept offline: no telemetry, no auto-update, no other traffic. The fake
provider behind memplane answers with `CodingModel`, so the CLIs' own tool loops really run
(reading files, running commands, calling a subagent) in temp git repositories.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from tests.clients import install

CLAUDE_MODEL = "claude-sonnet-4-5"
CODEX_MODEL = "gpt-5-codex"
QWEN_MODEL = "qwen3-coder-plus"
OPENCODE_MODEL = "qwen3-coder-plus"  # opencode and aider speak OpenAI chat completions to "memplane"
AIDER_MODEL = "openai/qwen3-coder-plus"  # litellm's name: the OpenAI-compatible API at OPENAI_API_BASE
CONTINUE_MODEL = "qwen3-coder-plus"  # Continue's `openai` provider with an `apiBase`
GPTME_MODEL = "local/qwen3-coder-plus"  # gptme's `local` provider: the OpenAI-compatible API at OPENAI_BASE_URL
PI_MODEL = "qwen3-coder-plus"  # pi's `memplane` provider of ~/.pi/agent/models.json
PI_CONTEXT = 8000  # the context window pi is told the model has: small, so its auto-compaction can be reached
QUIET = {  # every CLI: nothing but the model calls
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1", "DISABLE_BUG_COMMAND": "1", "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    "NO_UPDATE_NOTIFIER": "1", "CI": "1", "NO_COLOR": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # aider's litellm: its bundled model list, not a download
    "GPTME_TIKTOKEN_TIMEOUT": "0", "GPTME_TELEMETRY_ENABLED": "false",  # gptme: no tokenizer download
    "CONTINUE_CLI_ENABLE_TELEMETRY": "0", "CONTINUE_METRICS_ENABLED": "0",
    "PI_OFFLINE": "1", "PI_SKIP_VERSION_CHECK": "1", "PI_TELEMETRY": "0",
}


@dataclass
class CodingCli:
    """One CLI, one agent identity, its own home; `run` is one headless session."""

    name: str  # claude | codex | qwen | opencode | aider | continue | gptme | pi
    binary: Path
    home: Path
    base_url: str  # where the CLI sends its model calls (memplane, or the provider for a baseline)
    api_key: str
    transcripts: list[str] = field(default_factory=list)
    pi_api: str = "openai-completions"  # pi: the wire format of its `memplane` provider
    pi_compact_at: int | None = None  # pi: tokens of context after which it compacts (its reserveTokens)

    def __post_init__(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        if self.name == "codex":
            (self.home / ".codex").mkdir(exist_ok=True)
            (self.home / ".codex" / "config.toml").write_text(f'''model = "{CODEX_MODEL}"
model_provider = "memplane"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[analytics]
enabled = false

[otel]
exporter = "none"

[model_providers.memplane]
name = "memplane"
base_url = "{self.base_url}/v1"
env_key = "MEMPLANE_AGENT_KEY"
wire_api = "responses"
''')
        if self.name == "opencode":  # a provider of its own for memplane, OpenAI chat completions
            config = self.home / ".config" / "opencode"
            config.mkdir(parents=True, exist_ok=True)
            (config / "opencode.json").write_text(orjson.dumps({
                "$schema": "https://opencode.ai/config.json", "autoupdate": False, "share": "disabled",
                "model": f"memplane/{OPENCODE_MODEL}",
                "provider": {"memplane": {"npm": "@ai-sdk/openai-compatible", "name": "memplane",
                                          "options": {"baseURL": f"{self.base_url}/v1", "apiKey": self.api_key},
                                          "models": {OPENCODE_MODEL: {"name": OPENCODE_MODEL}}}}}).decode())

        if self.name == "continue":  # a config of its own naming memplane as an OpenAI-compatible API
            config = self.home / ".continue"
            config.mkdir(exist_ok=True)
            (config / "config.yaml").write_text(
                f"name: memplane\nversion: 1.0.0\nschema: v1\nmodels:\n  - name: {CONTINUE_MODEL}\n"
                f"    provider: openai\n    model: {CONTINUE_MODEL}\n    apiBase: {self.base_url}/v1\n"
                f"    apiKey: {self.api_key}\n    roles: [chat, edit, apply, summarize]\n")

        if self.name == "pi":  # a provider of its own in models.json, the key read from the environment
            config = self.home / ".pi" / "agent"
            config.mkdir(parents=True, exist_ok=True)
            base = self.base_url if self.pi_api == "anthropic-messages" else f"{self.base_url}/v1"
            (config / "models.json").write_text(orjson.dumps({"providers": {"memplane": {
                "baseUrl": base, "api": self.pi_api, "apiKey": "MEMPLANE_AGENT_KEY",
                "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                "models": [{"id": PI_MODEL, "contextWindow": PI_CONTEXT, "maxTokens": 1024}]}}}).decode())
            reserve = PI_CONTEXT - self.pi_compact_at if self.pi_compact_at else 1024
            (config / "settings.json").write_text(orjson.dumps({"compaction": {
                "enabled": True, "reserveTokens": reserve, "keepRecentTokens": 1}}).decode())

    def env(self) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home), "LANG": "C.UTF-8",
               "GIT_CONFIG_NOSYSTEM": "1", **QUIET}
        if self.name == "claude":
            env.update(ANTHROPIC_BASE_URL=self.base_url, ANTHROPIC_API_KEY=self.api_key)
        elif self.name == "codex":
            env.update(CODEX_HOME=str(self.home / ".codex"), MEMPLANE_AGENT_KEY=self.api_key)
        elif self.name == "opencode":
            pass  # its config file names memplane and the key
        elif self.name == "aider":
            env.update(OPENAI_API_BASE=f"{self.base_url}/v1", OPENAI_API_KEY=self.api_key)
        elif self.name == "continue":
            pass  # its config file names memplane and the key
        elif self.name == "gptme":
            env.update(OPENAI_BASE_URL=f"{self.base_url}/v1", OPENAI_API_KEY=self.api_key)
        elif self.name == "pi":
            env.update(MEMPLANE_AGENT_KEY=self.api_key)  # its models.json names the variable
        else:
            # QWEN_CODE_NO_RELAUNCH: the CLI runs in this node process instead of re-spawning itself with a
            # larger heap (a second start of its bundle, ~1.3 s of CPU per session)
            env.update(OPENAI_BASE_URL=f"{self.base_url}/v1", OPENAI_API_KEY=self.api_key, OPENAI_MODEL=QWEN_MODEL,
                       QWEN_CODE_NO_RELAUNCH="1")
        return env

    def argv(self, prompt: str, *, resume: bool, compact: bool = False) -> list[str]:
        """`compact`: continue the latest session and compact it (Claude Code's `/compact`; Codex
        compacts on its own once the context passes `model_auto_compact_token_limit`)."""
        if self.name == "claude":
            return [str(self.binary), "-p", "/compact" if compact else prompt, "--model", CLAUDE_MODEL,
                    "--allowedTools", "Read,Bash,Agent", *(["-c"] if resume or compact else [])]
        if self.name == "codex":
            head = [str(self.binary), "exec"] + (["resume", "--last"] if resume or compact else [])
            if compact:
                head += ["-c", "model_auto_compact_token_limit=2000"]
            return [*head, "--skip-git-repo-check", prompt]
        if self.name == "opencode":
            return [str(self.binary), "run", prompt, *(["--continue"] if resume else [])]
        if self.name == "aider":  # one message, then exit; edits committed with a message the model writes
            return [str(self.binary), "--model", AIDER_MODEL, "--edit-format", "diff", "--no-check-update",
                    "--analytics-disable", "--no-show-model-warnings", "--no-show-release-notes", "--yes-always",
                    "--no-pretty", "--no-stream", "--no-gitignore", "--no-auto-lint", "--no-fancy-input",
                    *(["--restore-chat-history"] if resume else []), "--message", prompt]
        if self.name == "continue":  # `cn -p`: one message, then exit; `/compact` compacts the resumed session
            return [str(self.binary), "-p", "--config", str(self.home / ".continue" / "config.yaml"), "--auto",
                    "/compact" if compact else prompt, *(["--resume"] if resume or compact else [])]
        if self.name == "gptme":  # non-interactive: runs until the model calls `complete`
            return [str(self.binary), "-n", "--model", GPTME_MODEL, *(["-r"] if resume else []),
                    prompt]
        if self.name == "pi":  # print mode: one message, its tool loop, then exit; `-c` continues the latest
            return [str(self.binary), "-p", "--provider", "memplane", "--model", PI_MODEL, "--no-extensions",
                    "--no-skills", prompt, *(["-c"] if resume or compact else [])]
        return [str(self.binary), "-p", prompt, *(["-c"] if resume else [])]

    async def run(self, prompt: str, cwd: Path, *, resume: bool = False, compact: bool = False,
                  timeout: float = 90) -> str:
        """One headless session; its final answer (stdout). Fails with the CLI's output when it fails."""
        proc = await asyncio.create_subprocess_exec(*self.argv(prompt, resume=resume, compact=compact), cwd=cwd,
                                                    env=self.env(),
                                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                    stderr=subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except asyncio.TimeoutError:
            proc.kill()
            out, err = await proc.communicate()
            raise AssertionError(f"{self.name} did not finish in {timeout}s:\n{out.decode()}\n{err.decode()}")
        self.transcripts.append(out.decode() + err.decode())
        assert proc.returncode == 0, f"{self.name} exited {proc.returncode}:\n{out.decode()}\n{err.decode()[-3000:]}"
        return out.decode()


def make_repo(root: Path, name: str, files: dict[str, str]) -> Path:
    """A small git repository with one commit."""
    repo = root / name
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git = ["git", "-c", "user.name=Dana", "-c", "user.email=dana@example.org", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", f"{name}: first version"], cwd=repo, check=True)
    return repo


async def stored_memories(memory_url: str, agent_id: str) -> list[dict[str, Any]]:
    """Every memory the service holds for the agent (its own scopes and the global one)."""
    out: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as http:
        for scope in ("", "&scope=global"):
            cursor = ""
            while True:
                async with http.get(f"{memory_url}/api/memories?agent_id={agent_id}&limit=500{scope}{cursor}") as r:
                    assert r.status == 200, await r.text()
                    page = orjson.loads(await r.read())
                out += page["memories"]
                if not page.get("next_cursor"):
                    break
                cursor = f"&cursor={page['next_cursor']}"
    unique = {m["id"]: m for m in out}
    return list(unique.values())


_MEMORY = re.compile(r"<memory\b[^>]*>(.*?)</memory>", re.S)


def block_memories(block: str | None) -> list[str]:
    """The memory texts of a `<memories>` block (XML entities undone)."""
    from xml.sax.saxutils import unescape
    return [unescape(m) for m in _MEMORY.findall(block or "")]


_TRIM = re.compile(r"^(<[^>]*>|[\W_])+|(<[^>]*>|[\W_])+$")


def words_of(text: str) -> list[str]:
    """Whitespace-separated words, punctuation and tags trimmed; a path stays one word (a file path
    in a memory is not the working directory the client declared)."""
    trim = _TRIM.sub
    return [w for w in (trim("", w) for w in text.lower().split()) if w]


@lru_cache(maxsize=4)  # a story's scaffolding (megabytes) is compared with every block it saw
def shingles(text: str, n: int = 5) -> frozenset[str]:
    words = words_of(text)
    return frozenset(" ".join(words[i:i + n]) for i in range(max(0, len(words) - n + 1)))


def scaffolding_words(memories: list[str], scaffolding: str, n: int = 5) -> tuple[int, list[str]]:
    """All words of the memories, and those that sit in a run of `n` words also found in text the
    client wrote around the person's words (system prompt, developer items, wrapped context)."""
    known = shingles(scaffolding, n)
    words, covered = 0, []
    for m in memories:
        ws = words_of(m)
        hit = [False] * len(ws)
        for i in range(len(ws) - n + 1):
            if " ".join(ws[i:i + n]) in known:
                hit[i:i + n] = [True] * n
        words += len(ws)
        covered += [w for w, h in zip(ws, hit) if h]
    return words, covered


def scaffolding_share(memories: list[str], scaffolding: str) -> float:
    """How much of the block's memory text (by words) is the client's own scaffolding."""
    words, covered = scaffolding_words(memories, scaffolding)
    return len(covered) / words if words else 0.0


def repeated_share(memories: list[str], request_text: str) -> float:
    """Share of the block's memory words already present in the request outside the block."""
    said = shingles(request_text, 3)
    words = 0
    repeated = 0
    for m in memories:
        own = shingles(m, 3)
        words += len(own)
        repeated += len(own & said)
    return repeated / words if words else 0.0


# -- what the client sent, before memplane touched it --

_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "accept-encoding",
        "content-encoding"}


@dataclass
class Sent:
    path_qs: str
    headers: dict[str, str]
    body: bytes


@dataclass
class ClientRecorder:
    """A pass-through in front of memplane that keeps each model call exactly as the CLI sent it.
    Why: "the same agent without memplane" is those very requests sent straight to a provider
    (`replay`): the client's bytes, no block, same order — the prompt-cache baseline of the story,
    without running every session a second time."""

    target: str  # memplane's base URL
    sent: list[Sent] = field(default_factory=list)

    def app(self):
        from aiohttp import web

        async def forward(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
            if request.method == "POST" and request.path.startswith("/v1/"):
                self.sent.append(Sent(request.path_qs, headers, body))
            async with aiohttp.ClientSession(auto_decompress=False) as http:
                async with http.request(request.method, self.target + request.path_qs, headers=headers,
                                        data=body) as up:
                    resp = web.StreamResponse(status=up.status, headers={
                        k: v for k, v in up.headers.items() if k.lower() not in _HOP})
                    await resp.prepare(request)
                    async for chunk in up.content.iter_any():
                        await resp.write(chunk)
                    await resp.write_eof()
                    return resp

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", forward)
        return app


async def replay(sent: list[Sent], provider_url: str) -> None:
    """Send the recorded calls, in order, straight to a provider (the baseline without memplane)."""
    async with aiohttp.ClientSession() as http:
        for call in sent:
            async with http.post(provider_url + call.path_qs, headers=call.headers, data=call.body) as r:
                await r.read()


def npm_clis() -> dict[str, Path]:
    """The pinned npm coding-agent CLIs (tests/clients), installed once; without npm the test is
    skipped, saying so."""
    try:
        return install.ensure()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def pypi_cli(name: str) -> Path:
    """A PyPI client pinned in tests/clients (aider, gptme), in its own venv; skipped, saying why,
    where this machine cannot have it."""
    try:
        return install.ensure_pypi(name)[name]
    except (FileNotFoundError, RuntimeError) as exc:
        pytest.skip(str(exc))
