"""A coding agent's "model": does what the person's request names, with the client's own tools.

The real coding CLIs (Claude Code, Codex, Qwen Code) run their tool loops against the fake
provider. This model reads the person's latest request — not the client's scaffolding around it,
not a memory block — and plans from plain phrases in it:

* ``read /abs/path`` — read that file (Claude Code's ``Read``, Codex's ``exec_command`` with
  ``cat``, Qwen Code's ``read_file``);
* ``run `cmd``` — run a shell command (``Bash`` / ``exec_command`` / ``run_shell_command``);
* ``ask a subagent to …`` — hand the rest of the sentence to a subagent (Claude Code's ``Agent``);
* ``create path/name saying `text``` — for a client without tools that tells the model to answer
  with *SEARCH/REPLACE* edit blocks (aider's edit format), one block that creates the file.

One tool call per step, then a short final answer. A compaction request (the client asks for a
summary of the conversation) is answered with a summary of what the person asked so far.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .model import Answer, ToolCall, View, _text_of

FINISH = "complete"  # gptme's non-interactive mode ends a session only when the model calls this tool
_WRAPPERS = ("system-reminder", "environment_context", "memories", "user_instructions", "permissions instructions")
_READ = re.compile(r"\bread (/[\w./@-]+\w)")
_RUN = re.compile(r"\brun `([^`]+)`")
_CREATE = re.compile(r"\bcreate ([\w.-]+(?:/[\w.-]+)*) saying `([^`]+)`")
_SUBAGENT = re.compile(r"\bask a subagent to ([^\n]+?)(?:\.(?=\s|$)|\n|$)")  # the sentence: a path keeps its dots
# Claude Code's `/compact` ("Please provide your summary based on the conversation so far … an
# <analysis> block followed by a <summary> block") and Codex's ("You are performing a CONTEXT
# CHECKPOINT COMPACTION. Create a handoff summary …"), pi's ("Create a structured context checkpoint summary").
COMPACTION = re.compile(r"summary based on the conversation so far|summary of (?:the|our) conversation|"
                        r"CONTEXT CHECKPOINT COMPACTION|handoff summary|context checkpoint summary", re.I)


def _split(text: str, tag: str) -> tuple[str, list[str]]:
    """`text` without its `<tag …>…</tag>` spans, and the spans (str.find: linear on any input)."""
    out, spans, pos = [], [], 0
    while (start := text.find(f"<{tag}", pos)) >= 0:
        end = text.find(f"</{tag}>", start)
        if end < 0:
            break
        out.append(text[pos:start])
        spans.append(text[start:end + len(tag) + 3])
        pos = end + len(tag) + 3
    return "".join(out) + text[pos:], spans


def own_words(text: str) -> str:
    """The request without the client's wrapped context and without memory blocks."""
    for tag in _WRAPPERS:
        text, _ = _split(text, tag)
    return text.strip()


def without_memories(text: str) -> str:
    """The text without memplane's `<memories>` blocks."""
    return _split(text, "memories")[0]


def wrapped_context(text: str) -> list[str]:
    """The parts of a text the client wrapped in its context tags (not memory blocks)."""
    found: list[str] = []
    for tag in _WRAPPERS:
        text, spans = _split(text, tag)
        found += [] if tag == "memories" else spans
    return found


def _parameters(body: dict[str, Any], name: str) -> set[str]:
    """The parameter names the request's tool `name` declares (chat, Responses or Anthropic shape)."""
    for tool in body.get("tools") or ():
        spec = tool.get("function", tool) if isinstance(tool, dict) else {}
        if spec.get("name") == name:
            schema = spec.get("parameters") or spec.get("input_schema") or {}
            return set(schema.get("properties") or ())
    return set()


def _read(view: View, path: str) -> ToolCall | None:
    tools = view.tools
    if "Read" in tools:  # Claude Code's `file_path`, Continue's `filepath`: as the schema says
        key = "filepath" if "filepath" in _parameters(view.body, "Read") else "file_path"
        return ToolCall("Read", {key: path})
    if "exec_command" in tools:
        return ToolCall("exec_command", {"cmd": f"cat {path}"})
    if "read_file" in tools:
        return ToolCall("read_file", {"file_path": path})
    if "read" in tools:  # opencode's `filePath`, pi's `path`
        key = "path" if "path" in _parameters(view.body, "read") else "filePath"
        return ToolCall("read", {key: path})
    return None


def _run(tools: list[str], command: str) -> ToolCall | None:
    if "shell" in tools:  # gptme
        return ToolCall("shell", {"command": command})
    if "Bash" in tools:
        return ToolCall("Bash", {"command": command, "description": "Run the requested command"})
    if "exec_command" in tools:
        return ToolCall("exec_command", {"cmd": command})
    if "run_shell_command" in tools:
        return ToolCall("run_shell_command", {"command": command, "description": "Run the requested command"})
    if "bash" in tools:
        return ToolCall("bash", {"command": command})
    return None


def _subagent(view: View, task: str) -> ToolCall | None:
    if "Agent" not in view.tools:
        return None
    if "input" in _parameters(view.body, "Agent"):  # the OpenAI Agents SDK's `agent.asTool()`
        return ToolCall("Agent", {"input": task.strip()})
    return ToolCall("Agent", {"description": "Subagent task", "prompt": task.strip(),
                              "subagent_type": "general-purpose"})


def plan(view: View) -> list[ToolCall]:
    """The tool calls the person's latest request asks for, in the order it names them."""
    said = own_words(view.user_text)
    found: list[tuple[int, ToolCall | None]] = []
    found += [(m.start(), _read(view, m.group(1))) for m in _READ.finditer(said)]
    found += [(m.start(), _run(view.tools, m.group(1))) for m in _RUN.finditer(said)]
    found += [(m.start(), _subagent(view, m.group(1))) for m in _SUBAGENT.finditer(said)]
    return [call for _, call in sorted(found, key=lambda x: x[0]) if call is not None]


def _edit_block(view: View) -> str | None:
    """A file the person asked to create, as the edit block a tool-less client's system prompt asks for."""
    system = "\n".join(_text_of(m.get("content")) for m in view.body.get("messages") or ()
                       if isinstance(m, dict) and m.get("role") == "system")
    m = _CREATE.search(own_words(view.user_text))
    if m is None or "SEARCH/REPLACE" not in system:
        return None
    return f"{m.group(1)}\n```\n<<<<<<< SEARCH\n=======\n{m.group(2)}\n>>>>>>> REPLACE\n```\n\nDone."


def _asked_again(body: dict[str, Any]) -> bool:
    """The client answered the model's final answer with a message of its own (gptme's nudge to end
    the session through its tool): the model, as real ones do, answers first and finishes when nudged."""
    turns = [m for m in body.get("messages") or () if isinstance(m, dict) and m.get("role") != "system"
             and (m.get("tool_calls") or without_memories(_text_of(m.get("content"))).strip())]  # not a block alone
    return len(turns) >= 2 and turns[-1].get("role") == "user" and turns[-2].get("role") == "assistant" \
        and not turns[-2].get("tool_calls")


def _latest_user_text(body: dict[str, Any]) -> str:
    """The text of the request's last user turn, tool results and all (a compaction prompt can
    share its turn with the last tool result)."""
    turns = body.get("messages") or body.get("input") or []
    for turn in reversed(turns if isinstance(turns, list) else []):
        if isinstance(turn, dict) and turn.get("role") == "user":
            return _text_of(turn.get("content"))
    return ""


@dataclass
class CodingModel:
    """Plan from the request, one tool call per step, then answer `done` (or a summary)."""

    done: str = "Done."
    summaries: int = 0  # compaction requests answered

    def __call__(self, view: View) -> Answer:
        if COMPACTION.search(own_words(_latest_user_text(view.body))):
            self.summaries += 1
            return Answer(text="<analysis>The person asked for files to be read and commands run.</analysis>\n"
                               "<summary>Summary: the session so far covered the person's requests and the files "
                               "read.</summary>")
        calls = plan(view)
        if view.steps < len(calls):
            return Answer(tool_calls=[calls[view.steps]])
        if FINISH in view.tools and view.steps == len(calls) and _asked_again(view.body):
            return Answer(tool_calls=[ToolCall(FINISH)])  # a loop that ends only through its own tool
        if not view.tools:
            edit = _edit_block(view)
            if edit:
                return Answer(text=edit)
        return Answer(text=self.done)

