"""Which calls of an agent are not the person's turns, read from what the request is (DESIGN.md,
"Coding agents: side calls and continued sessions"; docs/coding-agents-by-shape.md).

| call                                   | block | memory                          |
|----------------------------------------|-------|---------------------------------|
| `count_tokens` (a pass-through path)   | no    | no                              |
| side call: a one-shot errand           | no    | no (titles, commit messages, topic checks, summaries of a line) |
| subagent: its own conversation, with tools, inside a session | yes | no (the parent's tool line has it) |
| compaction request                     | no    | the session's summary, once     |

No rule names a client. A *one-shot* call offers no tools and carries no conversation (no earlier
answer, no tool result): a system prompt and one request. Whether it is the person's first
message or the client's errand is told by signals every request carries, measured against the
agent's main calls (`sessions.py`):

* `system-unlike-session` / `model-unlike-session`: the session the client names has main calls,
  and this one's system prompt or model is not theirs — decisive alone;
* `task-instruction`: the system prompt asks for a title, a commit message, a branch name, a
  summary, a label or a classification, and is not a system prompt of the agent's main calls (a
  chat agent told to end with a summary is not on an errand) — decisive alone once the agent has
  main calls; before any (a new agent, or one that only ever sends one message a call: a plain SDK
  app whose persona says "help the user choose titles"), only with the request's own errand shape
  (`quoted-material` or `tiny-max-tokens`: a title call quotes the person's words, a commit message
  call a diff), so an app that never sends tools or history is not read as errands for ever;
* `system-unlike-agent` / `model-unlike-agent`: the agent's main calls used other system prompts
  or other models; `quoted-material`: the request is mostly text it quotes (a fenced block, a
  diff, a transcript, a quoted string) or asks for such an errand over it; `tiny-max-tokens`
  (at most `TINY_MAX_TOKENS` tokens of answer); `instructions-in-request`: no system prompt, and the
  request's own words (outside what it quotes) ask for an errand — a framework's planning call puts
  its instructions in the user message with the person's task quoted in them — two of these together decide, one of them a
  difference from the agent's main calls. None of them alone: a person's first message may have
  any of them (a pasted diff, a terse client setting, a new system prompt).

A call with a conversation but without tools, in a session whose main calls offer tools, with
another system prompt or model than theirs, is a side call too (`tool-less-unlike-session`: a
check the client runs over the conversation). A call that offers tools, in a named session whose
main calls have another system prompt *and* another first message, is a subagent
(`own-conversation-in-session`); so is one that offers tools and opens, with no earlier answer, with
the words a main call with tools opened with under another system prompt and other tools (`same-words-other-prompt`:
a framework's memory manager or extractor handed the person's message as it is). A compaction request is recognised by what it asks: a summary of
the conversation so far. Each decision names its rule (the turn's explanation, `/metrics`
`memplane_calls_by_rule_total{kind,rule}`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

import re2

from memplane_core.memo import TextMemo
from memplane_core.turn_text import text_of

from .scaffolding import digest, system_text
from .sessions import AgentSeen
from .text_loops import stop_sequences, tool_names

TINY_MAX_TOKENS = 32
QUOTED_SHARE = 0.6  # share of the request's characters that are quoted for `quoted-material`
ASK_QUOTED_SHARE = 0.3  # ...when its own words ask for an errand (a title, a commit message) over them
SCAN_CHARS = 8000

_COMPACT = re2.compile(
    r"(?i)((create|write|provide|produce|generate)\s+an?\s+([a-z]+\s+){0,3}summary\s+of\s+(the|this|our)\s+"
    r"([a-z]+\s+){0,2}conversation|context\s+checkpoint\s+compaction|summari[sz]e\s+(the|this|our)\s+"
    r"([a-z]+\s+){0,2}conversation\s+so\s+far|generate\s+the\s+<state_snapshot>)")


def _errand(verbs: str, products: str) -> Any:
    """An errand: a verb of making or judging, then (within the sentence) what it makes."""
    return re2.compile(
        r"(?i)(\b(generat|writ|creat|produc|" + verbs + r"output|suggest|propos|summari[sz]|classif|categori[sz]|"
        r"analy[sz]|determin|detect|decid|pick|choos|nam)\w*\b[^.\n]{0,80}?\b(titles?|commit\s+messages?|"
        r"branch\s+names?|summary|summaries|labels?|topics?|categor(y|ies)|classification|tags?|headlines?"
        + products + r")\b"
        r"|\byou\s+are\s+an?\s+([\w-]+\s+){0,3}(title|summary|commit\s+message|branch\s+name|label|topic)\s+"
        r"(generator|writer|maker|classifier)\b"
        r"|\bsummari[sz]e\s+(this|the|following|these)\b)")


# a framework's errands over a conversation or in a request's own words: a plan among them
_ERRAND = _errand("provid|extract|", "|plans?")
# the errand a one-shot's system prompt names, which tells it alone once the agent has main calls: not
# a plan, which an app's own persona makes ("creates training plans") while its system prompt differs
# call by call (the time in it)
_ONE_SHOT_ERRAND = _errand("provid|extract|", "")
# A transcript's speaker label: `USER:`, or in square brackets with a qualifier (`[User]:`,
# `[Assistant tool calls]:`) as a client serialises the conversation it asks a summary of.
_TRANSCRIPT = re2.compile(r"^\s*((USER|ASSISTANT|User|Assistant|Human|AI|user|assistant|human)|"
                          r"\[(USER|ASSISTANT|User|Assistant|Human|AI|user|assistant|human)\b[^\]\n]{0,40}\])\s*:")
_DIFF = re2.compile(r"^(diff --git |--- a/|\+\+\+ b/|@@ -\d)")


class SideCall(str, Enum):
    TURN = "turn"
    SIDE = "side"
    SUBAGENT = "subagent"
    COMPACTION = "compaction"


@dataclass(frozen=True)
class Decision:
    kind: SideCall
    rule: str  # which rule decided (for a turn: why it is one)


@dataclass(frozen=True)
class Shape:
    """What a request is, read from the request alone (no state): the pure part, for a worker thread."""

    tools: bool
    history: bool  # an earlier answer or a tool result
    system: str  # digest of the system text ("" without one)
    model: str | None
    max_tokens: int | None
    first: str  # digest of the conversation's first message
    errand: bool  # the system prompt asks for a title, a commit message, …
    quoted: float  # share of the request's characters that quote material
    asks_over_quoted: bool  # the request's own words ask for an errand over the text it quotes
    compaction: bool
    asks_without_system: bool = False  # no system prompt, and the request's own words ask for an errand
    asks: bool = False  # the request's own words (outside what it quotes) ask for an errand
    stops: bool = False  # the request sets stop sequences (a text-protocol framework's call: text_loops.py)
    toolset: str = ""  # digest of the names of the tools it offers
    one_shot_errand: bool = False  # its system prompt names an errand of `_ONE_SHOT_ERRAND`'s


def _items(body: dict[str, Any]) -> list[Any]:
    items = body.get("messages") if isinstance(body.get("messages"), list) else body.get("input")
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    return items if isinstance(items, list) else []


def _last_user_text(items: list[Any]) -> str:
    """The request: the newest user message's text (every text part of it, in order)."""
    for m in reversed(items):
        if isinstance(m, dict) and m.get("role") == "user":
            return text_of(m.get("content"))
    return ""


def _has_history(body: dict[str, Any], items: list[Any]) -> bool:
    if body.get("previous_response_id") or body.get("conversation"):
        return True
    for m in items:
        if not isinstance(m, dict):
            continue
        if m.get("role") in ("assistant", "tool", "function", "model") or \
                m.get("type") in ("function_call", "function_call_output", "custom_tool_call",
                                  "custom_tool_call_output", "reasoning"):
            return True
        content = m.get("content")
        if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "tool_result" for p in content):
            return True
    return False


def _max_tokens(body: dict[str, Any]) -> int | None:
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _lines_quoted(body: str) -> list[tuple[str, bool]]:
    """Each line of `body`, and whether it is material the text quotes: a fenced block (its fences
    too), a diff or a transcript (`USER:` / `assistant:` / `[User]:` lines and what follows them),
    a `>` line."""
    out: list[tuple[str, bool]] = []
    fenced = diff = transcript = False
    for line in body.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            out.append((line, True))
            continue
        if not fenced and not diff and _DIFF.search(line):
            diff = True
        if not fenced and not transcript and _TRANSCRIPT.search(line):
            transcript = True
        out.append((line, fenced or diff or transcript or line.startswith(">")))
    return out


def _wholly_quoted(body: str) -> bool:
    return len(body) >= 2 and body[0] == body[-1] and body[0] in "\"'`" or body[:1] + body[-1:] in ("“”", "«»")


def quoted_share(text: str) -> float:
    """How much of `text` (by characters) is material it quotes (`_lines_quoted`), or 1.0 for a
    text wholly in quotation marks."""
    body = text.strip()
    if not body:
        return 0.0
    if _wholly_quoted(body):
        return 1.0
    lines = _lines_quoted(body)
    total = sum(len(line) + 1 for line, _ in lines)
    return sum(len(line) + 1 for line, quoted in lines if quoted) / total if total else 0.0


def own_words(text: str) -> str:
    """The lines of `text` that are not material it quotes: the request's own words."""
    body = text.strip()
    return "" if _wholly_quoted(body) else "\n".join(line for line, quoted in _lines_quoted(body) if not quoted)


class _TextSignals(NamedTuple):
    """What the system prompt and the newest user text say (`Shape`'s fields of the same names)."""

    errand: bool
    quoted: float
    asks_over_quoted: bool
    asks_without_system: bool
    asks: bool
    one_shot_errand: bool


_SHAPES: TextMemo[_TextSignals] = TextMemo(entries=2048, key_chars=SCAN_CHARS * 2 + 1)


def _text_signals(system: str, request: str) -> _TextSignals:
    key = system[:SCAN_CHARS] + "\x00" + request[:SCAN_CHARS]
    hit = _SHAPES.get(key)
    if hit is None:
        share = quoted_share(request[:SCAN_CHARS])
        own = "\n".join(line for line in request[:2000].split("\n")[:10])
        # with no system prompt, a framework's instructions are the request's own words (the person's
        # task quoted in them): read those for an errand, as a system prompt is read
        asks = _ERRAND.search(own_words(request[:SCAN_CHARS])) is not None
        hit = _TextSignals(errand=_ERRAND.search(system[:SCAN_CHARS]) is not None, quoted=share,
                           asks_over_quoted=share >= ASK_QUOTED_SHARE and _ERRAND.search(own) is not None,
                           asks_without_system=not system.strip() and share > 0 and asks, asks=asks,
                           one_shot_errand=_ONE_SHOT_ERRAND.search(system[:SCAN_CHARS]) is not None)
        _SHAPES.put(key, hit)
    return hit


def is_compaction(request: str) -> bool:
    last = request[-4000:]
    folded = last.casefold()  # every compaction ask holds these words: a cheap test first
    return (("summar" in folded and "conversation" in folded) or "compaction" in folded
            or "state_snapshot" in folded) and _COMPACT.search(last) is not None


def shape_of(body: dict[str, Any]) -> Shape:
    """The request's shape (see the module docstring)."""
    items = _items(body)
    system = system_text(body)
    request = _last_user_text(items)
    conversation = [m for m in items if not (isinstance(m, dict) and m.get("role") in ("system", "developer"))]
    first = text_of(conversation[0].get("content")) if conversation and isinstance(conversation[0], dict) else ""
    model = body.get("model")
    return Shape(tools=bool(body.get("tools") or body.get("functions")), history=_has_history(body, items),
                 system=digest(system) if system else "", model=model if isinstance(model, str) else None,
                 max_tokens=_max_tokens(body), first=digest(first), compaction=is_compaction(request),
                 stops=bool(stop_sequences(body)), toolset=digest("\n".join(sorted(tool_names(body)))),
                 **_text_signals(system, request)._asdict())


def decide(shape: Shape, seen: AgentSeen | None = None, session: str | None = None) -> Decision:
    """What kind of call this is, and the rule that said so (see the module docstring)."""
    if shape.compaction:
        return Decision(SideCall.COMPACTION, "compaction-request")
    if seen is not None and shape.first in seen.handed:  # its task is the model's words (handed.py)
        return Decision(SideCall.SUBAGENT, "handed-by-tool-call")
    main = seen.sessions.get(session) if seen is not None and session else None
    if shape.tools:
        if main is not None and shape.first != main.first and shape.system != main.system:
            return Decision(SideCall.SUBAGENT, "own-conversation-in-session")
        # (its tools its own too: a chat app that sends the person's first message again, its system
        # prompt stamped with a new time, offers the same tools)
        opened = seen.opened.get(shape.first) if seen is not None and not shape.history else None
        if opened is not None and opened[0] != shape.system and opened[1] != shape.toolset:
            return Decision(SideCall.SUBAGENT, "same-words-other-prompt")  # a memory manager, an extractor
        return Decision(SideCall.TURN, "offers-tools")
    if shape.history:
        # an errand over the conversation (a plan's update): its system prompt asks for one, unlike the
        # agent's main calls, which offered tools or whose newest words (the framework's, in a call that
        # sets stop sequences as a text-protocol loop does) ask for it too: a chat whose system prompt
        # names the time differs on every call, and the person's own newest words may ask for a plan
        if seen is not None and seen.has_mains and shape.errand and shape.system not in seen.systems \
                and (seen.tools or (shape.asks and shape.stops)):
            return Decision(SideCall.SIDE, "task-instruction")
        if main is not None and main.tools and \
                (shape.system != main.system or (shape.model and shape.model != main.model)):
            return Decision(SideCall.SIDE, "tool-less-unlike-session")  # (a chat's model switch is no check)
        return Decision(SideCall.TURN, "conversation")
    # a one-shot: the person's first words, or the client's errand?
    if main is not None and shape.system != main.system:
        return Decision(SideCall.SIDE, "system-unlike-session")
    if main is not None and shape.model and main.model and shape.model != main.model:
        return Decision(SideCall.SIDE, "model-unlike-session")
    quoted = shape.quoted >= QUOTED_SHARE or shape.asks_over_quoted
    tiny = shape.max_tokens is not None and shape.max_tokens <= TINY_MAX_TOKENS
    if shape.one_shot_errand and (seen is None or shape.system not in seen.systems) and \
            ((seen is not None and seen.has_mains) or quoted or tiny):  # an app's own persona is no errand
        return Decision(SideCall.SIDE, "task-instruction")
    signals: list[str] = []
    if main is None and seen is not None and seen.has_mains:
        if shape.system not in seen.systems:
            signals.append("system-unlike-agent")
        if shape.model and len(seen.models) and shape.model not in seen.models:
            signals.append("model-unlike-agent")
    if quoted:
        signals.append("quoted-material")
    if shape.asks_without_system:
        signals.append("instructions-in-request")
    if tiny:
        signals.append("tiny-max-tokens")
    if len(signals) >= 2 and signals[0].endswith("-unlike-agent"):
        return Decision(SideCall.SIDE, "+".join(signals))
    return Decision(SideCall.TURN, "one-shot")


def classify(headers: Any, body: dict[str, Any], seen: AgentSeen | None = None,
             session: str | None = None) -> SideCall:
    """The call's kind (`decide` over `shape_of`); `headers` are not read: no rule names a client."""
    return decide(shape_of(body), seen, session).kind
