"""Where an agent framework's conversation is not the person's: its tool results sent back as user
messages, and its own errand's answer put in as an assistant message (docs/coding-agents-by-shape.md,
"Agent frameworks never seen").

* **Observations.** A framework that has the model write its tool calls as text stops the model at
  a stop sequence it sets ("Observation:") and writes that sequence itself, with the tool's output,
  as the next user message. A user message that begins with one of the request's own stop sequences
  is that: a tool result, never the person's words — unless the conversation's first user message
  opens with it too (an app that labels the person's messages so). It is read as one (an Anthropic `tool_result`
  part), paired with a `tool_use` part on the assistant message before it, so the loop's question
  stays the person's message and the output becomes a tool line.
* **An errand's answer put in.** A framework that plans (or reflects) first asks the model in a
  call of its own, then opens its loop with the person's task, that answer as an assistant message,
  and a user message of its own ("Now proceed and carry out this plan."). memplane notes, per agent,
  the answers of side calls that offer no tools (errands: a plan, a summary; never a chat turn's,
  whose question an app's window may have cut) with the request each answered (`sessions.py`); an
  assistant message that is — or quotes in a fence — such an answer, to a request the conversation
  does not carry, was put in by the client: it and the user messages right after it are
  the client's, and the person's words are before it. A chat resends each answer after the message
  it answered, so nothing there is set aside; after a restart nothing is noted and nothing is.

Both rewrite only memplane's reading of the request (the recall query, the retained copy); the
provider gets the request as sent.
"""

from __future__ import annotations

from typing import Any

from memplane_core.memo import TextMemo
from memplane_core.turn_text import answers_tools, text_of

from .scaffolding import digest

MAX_STOPS = 8  # stop sequences looked at (OpenAI allows 4; Anthropic more)
MIN_ANSWER_CHARS = 20  # a shorter answer ("Done.", "OK") is no errand's product worth telling
MIN_STOP_CHARS = 4
MAX_TOOL_NAMES = 64  # offered tools looked for in an assistant's text that calls one
NAME_SCAN_CHARS = 8000  # a shorter stop ("\n", "User") could open a person's own message


def stop_sequences(body: dict[str, Any]) -> tuple[str, ...]:
    """The request's stop sequences (`stop`, Anthropic's `stop_sequences`) long enough to mean a protocol."""
    raw = body.get("stop", body.get("stop_sequences"))
    stops = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    return tuple(s.strip() for s in stops[:MAX_STOPS] if isinstance(s, str) and len(s.strip()) >= MIN_STOP_CHARS)


def _fenced(text: str) -> list[str]:
    """The contents of the text's fenced blocks (``` or ~~~), stripped."""
    out: list[str] = []
    inside: list[str] | None = None
    for line in text.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            if inside is None:
                inside = []
            else:
                out.append("\n".join(inside).strip())
                inside = None
        elif inside is not None:
            inside.append(line)
    return [t for t in out if t]


_NAMES: TextMemo[list[str]] = TextMemo(chars=8_000_000, key_chars=200_000)


def answer_names(text: str) -> list[str]:
    """The digests an assistant message is matched by: its whole text, and each fenced block's (at
    least `MIN_ANSWER_CHARS`: "Done." recurs by chance). Remembered: an agent resends its earlier
    answers on every call (reading them again cost ~1 ms a call on a 150 KB conversation)."""
    hit = _NAMES.get(text)
    if hit is None:
        stripped = text.strip()
        hit = [digest(t) for t in (stripped, *_fenced(stripped)) if len(t) >= MIN_ANSWER_CHARS]
        _NAMES.put(text, hit)
    return hit


def _is_observation(message: Any, stops: tuple[str, ...]) -> bool:
    if not stops or not isinstance(message, dict) or message.get("role") != "user":
        return False
    content = message.get("content")
    if answers_tools(content):
        return False
    return text_of(content).lstrip().startswith(stops)


def _plain_answer(m: Any) -> bool:
    """An assistant message that calls no tool (in any wire format): only such a one can be put in."""
    if not isinstance(m, dict) or m.get("role") != "assistant" or m.get("tool_calls") or m.get("function_call"):
        return False
    content = m.get("content")
    return not (isinstance(content, list) and any(isinstance(p, dict) and p.get("type") in ("tool_use", "server_tool_use")
                                                  for p in content))


def inserted_answers(items: list[Any], answered: Any) -> list[str]:
    """Digests of the assistant messages the client put in from an errand's answer (see the module
    docstring). `answered(name)` is the digest of the request the answer named `name` answered, or
    None. An answer counts when the request it answered is none of this conversation's user messages
    (a chat resends the question with its answer) and it is long enough not to recur by chance."""
    asked = {digest(text_of(m.get("content"))) for m in items
             if isinstance(m, dict) and m.get("role") == "user" and not answers_tools(m.get("content"))}
    found: list[str] = []
    for m in items:
        if not _plain_answer(m):
            continue
        text = text_of(m.get("content"), ("text", "output_text"))
        for name in answer_names(text):
            request = answered(name)
            if request is not None and request not in asked:
                found.append(digest(text))
                break
    return found


def _without_inserted(items: list[Any], inserted: set[str]) -> list[Any]:
    out: list[Any] = []
    dropping = False
    for m in items:
        if _plain_answer(m) and digest(text_of(m.get("content"), ("text", "output_text"))) in inserted:
            dropping = True  # the client's errand answer, and its own words after it
            continue
        if dropping and isinstance(m, dict) and m.get("role") == "user" and not answers_tools(m.get("content")):
            continue
        dropping = False
        out.append(m)
    return out


def tool_names(body: dict[str, Any]) -> tuple[str, ...]:
    """The names of the tools a request offers (chat, Responses or Messages shape)."""
    names = []
    for tool in body.get("tools") if isinstance(body.get("tools"), list) else ():
        spec = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(spec, dict) and isinstance(spec.get("name"), str):
            names.append(spec["name"])
    return tuple(names)


def _named(text: str, names: tuple[str, ...]) -> str:
    """The offered tool the assistant's text calls (the first named in it), else "tool"."""
    text = text[:NAME_SCAN_CHARS]
    found = [(text.find(n), n) for n in names[:MAX_TOOL_NAMES] if n and n in text]
    return min(found)[1] if found else "tool"


def _as_tool_results(items: list[Any], stops: tuple[str, ...], names: tuple[str, ...]) -> list[Any]:
    out: list[Any] = []
    for n, m in enumerate(items):
        if not _is_observation(m, stops):
            out.append(m)
            continue
        call = f"observation-{n}"
        before = out[-1] if out else None
        if isinstance(before, dict) and before.get("role") == "assistant" and not before.get("tool_calls"):
            said = text_of(before.get("content"), ("text", "output_text"))
            out[-1] = {**before, "content": [*([{"type": "text", "text": said}] if said else []),
                                             {"type": "tool_use", "id": call, "name": _named(said, names),
                                              "input": {}}]}
        said = text_of(m.get("content")).lstrip()
        stop = next(s for s in stops if said.startswith(s))
        out.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call,
                                                 "content": said[len(stop):].strip()}]})
    return out


def _loop_stops(items: list[Any], stops: tuple[str, ...]) -> tuple[str, ...]:
    """The stop sequences an observation may open with: none the conversation's first user message
    opens with. A framework's loop opens with the person's task; an app that labels each of the
    person's messages with its stop sequence ("Question: …", stop "Question:") labels the first too."""
    first = next((m for m in items if isinstance(m, dict) and m.get("role") == "user"
                  and not answers_tools(m.get("content"))), None)
    opening = text_of(first.get("content")).lstrip() if first is not None else ""
    return tuple(s for s in stops if not opening.startswith(s))


def read_loop(items: list[Any], stops: tuple[str, ...], inserted: set[str], names: tuple[str, ...] = ()) -> list[Any]:
    """The conversation as memplane reads it: the client's errand answers and its words after them
    left out, its observations read as tool results (see the module docstring). The same list when
    neither applies."""
    if inserted:
        items = _without_inserted(items, inserted)
    if stops:
        stops = _loop_stops(items, stops)
    if stops and any(_is_observation(m, stops) for m in items):
        items = _as_tool_results(items, stops, names)
    return items


def read_body(body: dict[str, Any], inserted: set[str]) -> dict[str, Any]:
    """`read_loop` over a chat body's messages (Responses and Messages bodies carry tool results natively)."""
    items = body.get("messages")
    if not isinstance(items, list):
        return body
    read = read_loop(items, stop_sequences(body), inserted, tool_names(body))
    return body if read is items else {**body, "messages": read}
