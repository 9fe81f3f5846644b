"""What a coding turn leaves in memory: the retained copy of a ledger entry (CONTRACT §6).

The ledger keeps the turn as it was sent; the memory service gets the person's words and what was
done, compactly:

* scaffolding set aside (`scaffolding.py`: the tag rule, and the recurring parts the turn's recall
  found, recorded on the ledger line as `scaffolding.recurring`), in `request_original` and
  `request_effective` alike;
* a tool result becomes a short line: a file read is `[N lines]`; a command's output keeps its last
  line (where test runners and compilers put the verdict), anything else its first, at most
  `HEAD_CHARS`, with `failed:` in front when the client marked it an error; a line that assigns a
  secret-named value (`API_KEY=…`, `password: …`) is never kept;
* a tool call's long arguments (the `content` of a file written, an edit's old and new text)
  become `[N lines]`, so "Write /src/app.py" stays and the file does not;
* a call whose newest user message is wholly the client's own note (a `<system>…</system>` nudge
  after an answer without a tool call) keeps what came after it, not the person's earlier request
  a second time;
* a framework's text-protocol loop (`text_loops.py`): a user message that opens with the request's
  stop sequence is a tool result; an errand's answer the client put in as an assistant message, and
  its own words after it, are left out (ledger `scaffolding.inserted`); a call that sets stop
  sequences keys its loop by the person's message;
* a compaction request (`side_calls.py`) leaves one memory, the session's summary: the model's
  answer, under a fixed question. The summary a continued session resends is not stored again.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import re2

from memplane_core.turn_text import latest_user_index

from .scaffolding import digest, is_compaction_summary, sift_messages, system_text
from .side_calls import SideCall, classify
from .text_loops import read_loop, stop_sequences, tool_names

HEAD_CHARS = 160
LONG_ARG_CHARS = 200
SUMMARY_QUESTION = "Summary of this session so far (the client compacted its context)."
_SECRET_LINE = re2.compile(r"(?i)(secret|token|passw(or)?d|passwd|api[_-]?key|private[_-]?key|credential)"
                           r"[A-Za-z0-9_.-]*[\"']?[ \t]*[=:]")
_READS = re2.compile(r"(?i)(read|view|cat|open|show|get_?file|fetch)")
_PATH_KEYS = ("file_path", "path", "filePath", "absolute_path", "filename", "notebook_path")
_COMMAND_KEYS = ("command", "cmd")


def _count(n: int) -> str:
    return f"{n} line" if n == 1 else f"{n} lines"


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _clip(text: str, limit: int = HEAD_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}
    return {}


def compact_result(text: str, name: str | None, args: dict[str, Any], failed: bool = False) -> str:
    """One short line for a tool's output (see the module docstring)."""
    lines = _lines(text)
    if not lines:
        return text
    path = next((args[k] for k in _PATH_KEYS if isinstance(args.get(k), str)), None)
    if path is not None and name and _READS.search(name):
        line = f"[{_count(len(lines))} of {_clip(path, 120)}]"
    else:
        command = any(isinstance(args.get(k), (str, list)) for k in _COMMAND_KEYS)
        pick = lines[-1] if command else lines[0]
        if _SECRET_LINE.search(pick):
            pick = ""
        if len(lines) == 1 and len(text) <= HEAD_CHARS and pick:
            line = pick
        else:
            line = (_clip(pick) + " " if pick else "") + f"[{_count(len(lines))}]"
    return ("failed: " if failed else "") + line


def compact_args(args: dict[str, Any]) -> dict[str, Any]:
    """A tool call's arguments with long strings (file contents, edits) as `[N lines]`."""
    out: dict[str, Any] = {}
    for k, v in args.items():
        if isinstance(v, str) and len(v) > LONG_ARG_CHARS:
            out[k] = f"[{_count(len(_lines(v)) or 1)}]"
        else:
            out[k] = v
    return out


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def compact_tools(messages: list[Any]) -> list[Any]:
    """Tool calls and results of every wire format, compacted."""
    calls: dict[str, tuple[str | None, dict[str, Any]]] = {}
    out: list[Any] = []
    for m in messages:
        if not isinstance(m, dict):
            out.append(m)
            continue
        kind, role = m.get("type"), m.get("role")
        if role == "assistant" and (m.get("tool_calls") or isinstance(m.get("content"), list)):
            m = dict(m)
            if isinstance(m.get("tool_calls"), list):
                new_calls = []
                for call in m["tool_calls"]:
                    fn = call.get("function") if isinstance(call, dict) else None
                    if isinstance(fn, dict):
                        args = _args(fn.get("arguments"))
                        calls[str(call.get("id"))] = (fn.get("name"), args)
                        call = {**call, "function": {**fn, "arguments": orjson.dumps(compact_args(args)).decode()}}
                    new_calls.append(call)
                m["tool_calls"] = new_calls
            if isinstance(m.get("content"), list):
                blocks = []
                for b in m["content"]:
                    if isinstance(b, dict) and b.get("type") == "tool_use":
                        args = _args(b.get("input"))
                        calls[str(b.get("id"))] = (b.get("name"), args)
                        b = {**b, "input": compact_args(args)}
                    blocks.append(b)
                m["content"] = blocks
        elif role == "tool":
            name, args = calls.get(str(m.get("tool_call_id")), (None, {}))
            m = {**m, "content": compact_result(_result_text(m.get("content")), name, args)}
        elif role == "user" and isinstance(m.get("content"), list):
            blocks = []
            for b in m["content"]:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    name, args = calls.get(str(b.get("tool_use_id")), (None, {}))
                    b = {**b, "content": compact_result(_result_text(b.get("content")), name, args,
                                                        bool(b.get("is_error")))}
                blocks.append(b)
            m = {**m, "content": blocks}
        elif kind in ("function_call", "custom_tool_call"):
            args = _args(m.get("arguments") if kind == "function_call" else m.get("input"))
            calls[str(m.get("call_id"))] = (m.get("name"), args)
            if kind == "function_call":
                m = {**m, "arguments": orjson.dumps(compact_args(args)).decode()}
        elif kind in ("function_call_output", "custom_tool_call_output"):
            name, args = calls.get(str(m.get("call_id")), (None, {}))
            m = {**m, "output": compact_result(_result_text(m.get("output")), name, args)}
        out.append(m)
    return out


def _without_summaries(messages: list[Any]) -> list[Any]:
    """A continued session resends its compaction summary: it was stored once, at compaction."""
    out = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) and m.get("role") == "user" else None
        if isinstance(content, str) and is_compaction_summary(content):
            continue
        if isinstance(content, list):
            kept = [p for p in content if not (isinstance(p, dict) and isinstance(p.get("text"), str)
                                               and is_compaction_summary(p["text"]))]
            if not kept:
                continue
            if len(kept) != len(content):
                m = {**m, "content": kept}
        out.append(m)
    return out


def _request_for_memory(request: Any, recurring: set[str], inserted: set[str]) -> tuple[Any, bool]:
    """The request's retained copy, and whether the framework's loop was read anew (text_loops.py)."""
    if not isinstance(request, dict):
        return request, False
    key = "messages" if isinstance(request.get("messages"), list) else "input"
    items = request.get(key)
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list):
        return request, False
    is_recurring = (lambda t: digest(t) in recurring) if recurring else None
    system = system_text(request)
    read = read_loop(items, stop_sequences(request), inserted, tool_names(request))
    sifted, _ = sift_messages(_from_the_clients_note(read, is_recurring, system), is_recurring, system)
    return {**request, key: compact_tools(_without_summaries(sifted))}, read is not items


def items_of(request: dict[str, Any]) -> Any:
    return request.get("messages") if isinstance(request.get("messages"), list) else request.get("input")


def _stops(request: Any) -> bool:
    return isinstance(request, dict) and bool(stop_sequences(request))


def _loop_key(request: Any) -> str | None:
    """A framework loop's key from its retained copy: the conversation up to the person's message
    (each step's newest user message was the framework's, so the key the proxy gave each step
    differs). A call that sets stop sequences is a step of such a loop even when it offers no tools
    (a code agent's tools are functions in the code it writes; its results come back as observations)."""
    items = items_of(request) if isinstance(request, dict) else None
    if not isinstance(items, list):
        return None
    i = latest_user_index(items, skip_tool_results=True)
    return None if i is None else hashlib.sha256(orjson.dumps(items[: i + 1])).hexdigest()


def _from_the_clients_note(items: list[Any], recurring: Any, system: str) -> list[Any]:
    """When the newest user message is wholly the client's scaffolding (a note of its own nudging
    the model, `<system>…</system>`), the person said nothing new in this call: what it adds starts
    after that note. The person's earlier messages go (the call that carried them kept them), or
    they would be stored again under this call as its question."""
    newest = latest_user_index(items, skip_tool_results=True)
    if newest is None or sift_messages([items[newest]], recurring, system)[0]:
        return items
    before = [m for m in items[:newest] if isinstance(m, dict) and m.get("role") in ("system", "developer")]
    return [*before, *items[newest + 1:]]


def _summary_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """A compaction request leaves the session's summary: its answer under a fixed question."""
    req = entry.get("request_original") if isinstance(entry.get("request_original"), dict) else {}
    key = "messages" if "messages" in req else "input"
    short = {k: v for k, v in req.items() if k not in ("messages", "input", "tools")}
    short[key] = [{"role": "user", "content": SUMMARY_QUESTION}]
    return {**entry, "request_original": short, "request_effective": short}


def leaves_no_memory(entry: dict[str, Any]) -> bool:
    """A side call, a subagent's call, or a call memplane could not place in a project while the
    agent works in projects: retain acknowledges it without sending it (a subagent's work is in its
    parent's tool line; a title or a commit message is nothing to remember; an agent-wide copy of
    one repository's work would show in every other's block)."""
    marks = entry.get("scaffolding") if isinstance(entry.get("scaffolding"), dict) else {}
    return marks.get("side_call") in (SideCall.SIDE, SideCall.SUBAGENT) or marks.get("unscoped") is True


def for_memory(entry: dict[str, Any]) -> dict[str, Any]:
    """The copy of `entry` a memory service gets (see the module docstring); the ledger keeps the
    original. The id and every other field stay as they were."""
    marks = entry.get("scaffolding") if isinstance(entry.get("scaffolding"), dict) else {}
    if marks.get("side_call") == SideCall.COMPACTION:
        return _summary_entry(entry)
    recurring = set(marks.get("recurring") or ())
    inserted = set(marks.get("inserted") or ())
    out = dict(entry)
    for key in ("request_original", "request_effective"):
        if key in entry:
            out[key], reread = _request_for_memory(entry[key], recurring, inserted)
            if key == "request_original" and (reread or _stops(entry[key])):
                out["loop_key"] = _loop_key(out[key]) or entry.get("loop_key")
                if out["loop_key"] is None:
                    del out["loop_key"]
    return out


__all__ = ["classify", "compact_result", "compact_tools", "for_memory", "leaves_no_memory"]
