"""The turn's coding read, the scope step of the turn (`proxy/turn/steps.py`): what kind of call it is (and which
rule said so), the project it works in (declared, inherited from its session, or the agent's
default), the person's words with the scaffolding set aside, and the request's own text (what
recall must not hand back).

A call that declares no project, of an agent whose main calls declared one within the last hour,
in a session memplane cannot place, leaves no memory: stored agent-wide it would show in every
repository's block. An agent that declares none at all is told once (a log line; every such turn's
explanation and the inspector say it) how to scope it: `NO_PROJECT`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from memplane_core.turn_text import answers_tools, assistant_text, latest_user_index, text_of

from .already_said import request_shingles
from .handed import handed_texts
from .project import project_of
from .scaffolding import RECUR_MIN_CHARS, SetAside, digest, named_session, session_of_request, sift_body, user_texts
from .sessions import SessionBook
from .side_calls import Decision, Shape, SideCall, decide, shape_of
from .text_loops import MIN_ANSWER_CHARS, inserted_answers, read_body

LARGE_CHARS = 200_000  # a request this large is read in a worker thread
NO_PROJECT = ("this agent's client declares no working directory or repository, so its work memories are "
              "agent-wide (every repository's block can show them). Scope them: send the header "
              "`X-Memplane-Project: NAME` from the client, or give the agent a default project: "
              "`memplane agent add ID --project NAME` (pod file: `x-claw: {project: NAME}`).")
UNSCOPED = ("this call declares no project while the agent's recent calls did, and its session names none: "
            "it leaves no memory rather than an agent-wide one")


@dataclass
class CodingTurn:
    kind: SideCall = SideCall.TURN
    project: str | None = None
    body: dict[str, Any] = field(default_factory=dict)  # the request with the scaffolding set aside
    set_aside: SetAside = field(default_factory=SetAside)
    carried: set[tuple[str, ...]] = field(default_factory=set)  # word shingles of the person's words sent
    rule: str = ""  # which rule decided the kind (side_calls.py)
    project_from: str = ""  # header-or-declared | session | agent-default
    note: str = ""  # NO_PROJECT or UNSCOPED, for the explanation
    unscoped: bool = False  # leaves no memory (UNSCOPED)
    first: str = ""  # digest of the conversation's first message (side_calls.Shape.first)
    asked: str = ""  # digest of the newest user message, what a call without tools answers (text_loops.py)
    tools: bool = False  # the call offers tools
    inserted: list[str] = field(default_factory=list)  # the client's errand answers it carries (text_loops.py)
    said: set[str] = field(default_factory=set)  # digests of the conversation's user messages (note_answer)

    @property
    def recalls(self) -> bool:
        """Side calls and compaction requests get no block (side_calls.py)."""
        return self.kind in (SideCall.TURN, SideCall.SUBAGENT)

    def ledger_marks(self) -> dict[str, Any]:
        """What the turn's ledger line carries for retain (live or backfilled) to do the same."""
        marks: dict[str, Any] = {}
        if self.set_aside.recurring:
            marks["recurring"] = sorted(set(self.set_aside.recurring))
        if self.set_aside.parts:
            marks["set_aside"] = self.set_aside.parts
        if self.kind is not SideCall.TURN:
            marks["side_call"] = self.kind.value
            marks["rule"] = self.rule
        if self.unscoped:
            marks["unscoped"] = True
        if self.inserted:
            marks["inserted"] = sorted(set(self.inserted))
        return marks

    def explain(self, detail: Any) -> Any:
        """The coding read's part of a turn's explanation (`RecallDetail`): what was set aside, the
        call's kind and the rule that decided it, the project and where it came from."""
        if self.set_aside.parts:
            detail.set_aside = self.set_aside.as_dict()
        if self.kind is not SideCall.TURN:
            detail.call_kind = self.kind.value
        if self.rule:
            detail.call_rule = self.rule
        if self.project:
            detail.project = self.project
            if self.project_from:
                detail.project_from = self.project_from
        if self.note:
            detail.project_note = self.note
        return detail


def _conversation_texts(body: dict[str, Any]) -> list[str]:
    """The person's words the request carries (scaffolding already set aside)."""
    items = body.get("messages") if isinstance(body.get("messages"), list) else body.get("input")
    if isinstance(items, str):
        return [items]
    return [text_of(m.get("content"))
            for m in items or () if isinstance(m, dict) and m.get("role") == "user"]


def _read(headers: Any, body: dict[str, Any], recurring: set[str], project_scope: bool
          ) -> tuple[Shape, str | None, dict[str, Any], SetAside, set[tuple[str, ...]]]:
    """The pure part: no shared state is touched, so a large request can be read in a thread."""
    shape = shape_of(body)
    project = project_of(headers, body, project_scope)
    sifted, aside = sift_body(body, (lambda t: digest(t) in recurring) if recurring else None)
    return shape, project, sifted, aside, request_shingles(_conversation_texts(sifted))


def place(state: Any, ctx: Any, turn: CodingTurn, decision: Decision, shape: Shape, session: str | None,
          scope: bool) -> None:
    """The call's kind and project against what the agent's main calls were (`sessions.py`); a main
    call becomes part of that yardstick."""
    book: SessionBook = state.coding_sessions
    seen = book.of(ctx.agent_id)
    turn.kind, turn.rule, turn.first = decision.kind, decision.rule, shape.first
    if turn.project:
        turn.project_from = "declared"
    elif scope:
        known = seen.sessions.get(session) if session else None
        default = getattr(ctx.metadata, "project", None)
        if known is not None and known.project:
            turn.project, turn.project_from = known.project, "session"
        elif default:
            turn.project, turn.project_from = default, "agent-default"
        elif turn.kind in (SideCall.SIDE, SideCall.SUBAGENT):
            pass  # leaves no memory: nothing to scope
        elif seen.declared_recently():
            turn.unscoped, turn.note = True, UNSCOPED
        else:
            turn.note = NO_PROJECT
            if not seen.told:
                seen.told = True
                state.telemetry.info("coding_no_project", agent_id=ctx.agent_id, fix=NO_PROJECT)
    if turn.kind is SideCall.TURN and (shape.tools or shape.history):
        book.main_call(ctx.agent_id, session, shape.system, shape.model, shape.first,
                       turn.project if turn.project_from in ("declared", "agent-default") else None, shape.tools,
                       shape.toolset)


def note_answer(state: Any, agent_id: str, turn: CodingTurn, response: Any) -> None:
    """The texts the answer hands to its tools (handed.py), unless they are one of the conversation's
    user messages (a model that passes the person's message on verbatim hands on the person's words: a
    chat whose window later opens with that message is still theirs);
    a side call without tools: its answer, with what it answered (text_loops.py)."""
    book: SessionBook = state.coding_sessions
    # only an errand's answer (a side call's: a plan, a summary) is one a framework puts in; a chat turn's
    # answer is the chat's own, even where the app's window cut the question it answered
    if not turn.tools and turn.asked and isinstance(response, dict) and turn.kind is SideCall.SIDE:
        text = assistant_text({"response": response}).strip()
        if len(text) >= MIN_ANSWER_CHARS:
            book.answered(agent_id, digest(text), turn.asked)
    if turn.kind not in (SideCall.TURN, SideCall.SUBAGENT):
        return
    digests = [d for d in map(digest, handed_texts(response)) if d != turn.first and d not in turn.said]
    if digests:
        book.handed(agent_id, digests)


def _read_loop(state: Any, agent_id: str, turn: CodingTurn, body: dict[str, Any], shape: Shape) -> None:
    """What the call asked (for its answer's note), and the person's words without the client's
    errand answers and observations (text_loops.py): the recall query reads `turn.body`."""
    items = body.get("messages") if isinstance(body.get("messages"), list) else body.get("input")
    items = items if isinstance(items, list) else [{"role": "user", "content": items}] if isinstance(items, str) else []
    turn.tools = shape.tools
    newest = latest_user_index(items, skip_tool_results=True)
    turn.asked = digest(text_of(items[newest].get("content"))) if newest is not None else ""
    turn.said = {digest(text_of(m.get("content"))) for m in items
                 if isinstance(m, dict) and m.get("role") == "user" and not answers_tools(m.get("content"))}
    answers = state.coding_sessions.of(agent_id).answers
    if shape.history and len(answers):
        turn.inserted = inserted_answers(items, answers.get)
    turn.body = read_body(turn.body, set(turn.inserted))


async def read_turn(state: Any, ctx: Any, headers: Any, body: dict[str, Any],
                    session_id: str | None) -> CodingTurn:
    """The coding read of a call to an agent with memory (a large request off the event loop).
    Which parts recur, which kind the call is and where it belongs are decided here, on the loop,
    where the recurrence counts and the agents' main calls live."""
    items = body.get("messages") if isinstance(body.get("messages"), list) else body.get("input")
    texts = user_texts(items if isinstance(items, list) else [])
    recurrence = state.scaffolding
    recurrence.observe(ctx.agent_id, session_of_request(headers, body, session_id), texts)
    is_recurring = recurrence.of(ctx.agent_id)
    recurring = {digest(t) for t in texts if len(t.strip()) >= RECUR_MIN_CHARS and is_recurring(t)}
    scope = getattr(ctx.metadata, "project_scope", True)
    large = sum(len(t) for t in texts) > LARGE_CHARS
    shape, project, sifted, aside, carried = (
        await asyncio.to_thread(_read, headers, body, recurring, scope) if large
        else _read(headers, body, recurring, scope))
    session = named_session(headers, body, session_id)
    decision = decide(shape, state.coding_sessions.of(ctx.agent_id), session)
    turn = CodingTurn(decision.kind, project, sifted, aside, carried)
    place(state, ctx, turn, decision, shape, session, scope)
    _read_loop(state, ctx.agent_id, turn, body, shape)
    metrics = state.metrics
    for rule, n in turn.set_aside.by_rule.items():
        metrics.scaffolding_parts.labels(rule).inc(n)
    if turn.set_aside.chars:
        metrics.scaffolding_chars.inc(turn.set_aside.chars)
    metrics.child(metrics.calls_by_kind, turn.kind.value).inc()
    metrics.child(metrics.calls_by_rule, turn.kind.value, turn.rule).inc()
    return turn
