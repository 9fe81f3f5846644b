"""One agent turn through the proxy: authenticate, recall, forward, answer, record, retain."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from yarl import URL

from memplane_core.clock import now_rfc3339
from memplane_core.contract import RecallRequest
from memplane_core.tokens import estimate_tokens

from . import memory_tool
from .coding.already_said import drop_already_said
from .coding.reading import CodingTurn, read_turn
from .context_store import AgentContext
from .errors import ProxyError, stream_error_event
from .explanation import RecallDetail, TurnExplanation
from .formats import StreamState, WireFormat, placement_for
from .formats.base import event_json
from .forward_policy import require_model_allowed
from .inject import drop_repeated_lines, render_block
from .ledger.entry import build_entry_json, nests_safely
from .memory_service import MemoryService, RecallOutcome
from .rate_limit import retry_after_header
from .recall_policy import InjectedMemory, PolicyResult, apply_policy, closed_origin
from .sse import SSESplitter, end_stream, parse_event
from .state import ProxyState
from .transport_errors import provider_errors, read_request_body, transport_errors
from .turn_blocks import TurnBlock, TurnKey, conversation_key, conversation_of, offers_tools, question_of, turn_key
from .upstream import agent_token, check_credentials, returned_headers, upstream_headers, upstream_target


async def authenticate(request: web.Request, state: ProxyState) -> AgentContext:
    ctx = state.contexts.authenticate(agent_token(request.headers))
    if ctx is None:
        raise ProxyError(401, "Invalid or missing agent token. Use '<agent-id>:<secret>' as the API key "
                              "(or, for an agent that brings its own provider key, in X-Memplane-Agent).",
                         code="invalid_api_key")
    check_credentials(ctx.metadata.client_provider_key, request.headers)
    wait = await state.rate_limiter.check(ctx.agent_id)
    if wait > 0:
        raise ProxyError(429, "Rate limit exceeded for this agent; retry later.", code="rate_limit_exceeded",
                         headers={"Retry-After": retry_after_header(wait)})
    return ctx


async def read_json_body(request: web.Request) -> dict[str, Any]:
    raw = await read_request_body(request)
    if not raw.strip():
        raise ProxyError(400, "The request body is empty; expected a JSON object.")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ProxyError(400, f"The request body is not valid JSON: {exc.msg}.") from None
    if not isinstance(body, dict):
        raise ProxyError(400, "The request body must be a JSON object.")
    if not nests_safely(body):
        raise ProxyError(400, "The request body is nested too deeply to be forwarded and recorded.")
    return body


def session_id_of(request: web.Request, body: dict[str, Any]) -> str | None:
    sid = request.headers.get("X-Session-Id")
    if not sid and isinstance(body.get("metadata"), dict):
        value = body["metadata"].get("session_id")
        sid = value if isinstance(value, str) else None
    return sid


@dataclass
class RecallSummary:
    """What memory did for one turn: the `X-Memplane-Recall` header."""

    status: str = "off"  # succeeded | failed | timed_out | skipped | off
    blocks: int = 0
    removed: int = 0
    latency_ms: float = 0.0
    detail: RecallDetail = field(default_factory=RecallDetail)  # for the turn's explanation

    def header(self) -> str:
        return f"{self.status}; blocks={self.blocks}; removed={self.removed}; latency_ms={self.latency_ms:.1f}"


def _inject(fmt: WireFormat, manifest: Any, body: dict[str, Any], block: str,
            memories: tuple[InjectedMemory, ...] | list[InjectedMemory]) -> tuple[dict[str, Any], str, str | None]:
    placement, note = placement_for(fmt, manifest.placement, body)
    return fmt.inject(body, block, list(memories), manifest.service, placement), placement, note


def _replay(state: ProxyState, ctx: AgentContext, fmt: WireFormat, body: dict[str, Any],
            turn: TurnBlock) -> tuple[dict[str, Any], RecallSummary, TurnBlock]:
    """A call that continues a user turn gets the byte-identical block the turn's first call got."""
    manifest = ctx.memory
    assert manifest is not None
    placement = note = None
    if turn.block:
        body, placement, note = _inject(fmt, manifest, body, turn.block, turn.memories)
    # CONTRACT §11 names four statuses: no service call was made, so `skipped`, with why
    state.telemetry.memory_op(agent_id=ctx.agent_id, service=manifest.service, op="recall", status="skipped",
                              blocks=len(turn.memories), bytes_=len(turn.block.encode()), removed=0, reused=True,
                              error="continues a user turn: its first call's block again")
    detail = dataclasses.replace(
        RecallDetail.from_dict(turn.detail), placement=placement, placement_note=note,
        reused="the block of this user turn's first call (a continuation: tool results or a chain step)")
    return body, RecallSummary("reused", len(turn.memories), 0, 0.0, detail), turn


def _coding_detail(detail: RecallDetail, coding: CodingTurn) -> RecallDetail:
    """The coding read's part of the explanation: what was set aside, the call's kind, the project."""
    return coding.explain(detail)


async def recall_and_inject(state: ProxyState, ctx: AgentContext, fmt: WireFormat, body: dict[str, Any],
                            session_id: str | None, coding: CodingTurn
                            ) -> tuple[dict[str, Any], RecallSummary, TurnBlock | None]:
    """Recall for this call and inject what policy lets through: the turn's one memory step. The jobs
    (payload, policy + rendering, telemetry, explanation) are the helpers below."""
    body, summary, turn = await _recall_and_inject(state, ctx, fmt, body, session_id, coding)
    _coding_detail(summary.detail, coding)
    return body, summary, turn


async def _recall_and_inject(state: ProxyState, ctx: AgentContext, fmt: WireFormat, body: dict[str, Any],
                             session_id: str | None, coding: CodingTurn
                             ) -> tuple[dict[str, Any], RecallSummary, TurnBlock | None]:
    manifest = ctx.memory
    assert manifest is not None and manifest.recall is not None and state.session is not None
    if not coding.recalls:  # a side call or a compaction request: no block, and not a loop's step
        why = f"a {coding.kind.value} call gets no memories (coding/side_calls.py)"
        state.telemetry.memory_op(agent_id=ctx.agent_id, service=manifest.service, op="recall", status="skipped",
                                  error=why)
        return body, RecallSummary("skipped", detail=RecallDetail(service=manifest.service, skipped=why)), None
    messages = fmt.recall_messages(body)
    tools = offers_tools(body)  # without tools no call can continue this one: nothing to key or keep
    key = turn_key(ctx.agent_id, fmt.name, body, messages) if tools else TurnKey(None, False)
    if key.continues:
        remembered = await state.turn_blocks.fetch(key.key)
        if remembered is not None:
            return _replay(state, ctx, fmt, body, remembered)
    query = fmt.query(coding.body)  # the person's words: the client's scaffolding set aside
    if not query.strip():  # nothing the user said to search with (tool results, images)
        why = "no user text to recall with"
        state.telemetry.memory_op(agent_id=ctx.agent_id, service=manifest.service, op="recall", status="skipped",
                                  error=why)
        return body, RecallSummary("skipped", detail=RecallDetail(service=manifest.service, skipped=why)), None
    # a large request is redacted on worker threads, and never on all of them for one agent; a small
    # one is redacted right here and needs no share (taking one cost ~2% of a turn's CPU)
    large = state.redactor.is_large(body)
    async with _request_work(state, ctx.agent_id, large):
        request = await _recall_request(state, ctx, fmt, body, fmt.recall_messages(coding.body), query,
                                        session_id, coding.project)
    outcome = await MemoryService.of(state.session, manifest, ctx.agent_id, ctx.metadata.pod,
                                     deadlines=state.recall_deadlines).recall(request)
    if outcome.status != "succeeded":
        state.telemetry.memory_op(agent_id=ctx.agent_id, service=manifest.service, op="recall",
                                  status=outcome.status, status_code=outcome.status_code,
                                  latency_ms=outcome.latency_ms, error=outcome.error)
        return body, RecallSummary(outcome.status, latency_ms=outcome.latency_ms,
                                   detail=RecallDetail(service=manifest.service, query=request.query,
                                                       error=outcome.error, deadline_ms=outcome.deadline_ms)), None
    policy = apply_policy(outcome.memories, state.redactor, max_blocks=manifest.max_blocks,
                          budget_tokens=manifest.budget_tokens)
    memories, already = drop_already_said(policy.memories, coding.carried)  # a resumed session's own turns
    memories, repeated = drop_repeated_lines(memories)
    block = placement = note = None
    if memories:
        block = render_block(manifest.service, memories)
        body, placement, note = _inject(fmt, manifest, body, block, memories)
    tokens = sum(estimate_tokens(m.text) for m in memories)
    removed = policy.memory_removed + len(policy.memories) - len(memories)
    _report_recall(state, ctx.agent_id, manifest.service, outcome, policy, memories, block, tokens, repeated,
                   removed)
    detail = _explain_recall(state, manifest.service, request.query or "", outcome, policy, block, placement, note,
                             tokens, repeated)
    if already:
        detail.already_in_request = already
    async with _request_work(state, ctx.agent_id, large):
        question = (await state.redactor.text_async(question_of(messages, key)))[0]  # off the loop: any size
    turn = TurnBlock(block or "", tuple(memories), placement or "", note, question,
                     detail.as_dict() if tools else {})  # the detail is for a continuation's replay
    if tools:
        state.turn_blocks.put(key.key, turn)
        conversation = conversation_of(body)
        if conversation:  # its next tool outputs come without the question (the provider keeps it)
            state.turn_blocks.put(conversation_key(ctx.agent_id, conversation), turn)
    return body, RecallSummary("succeeded", len(memories), removed, outcome.latency_ms, detail), turn


def _request_work(state: ProxyState, agent_id: str, large: bool) -> Any:
    return state.request_work.held(agent_id) if large else contextlib.nullcontext()


async def _recall_request(state: ProxyState, ctx: AgentContext, fmt: WireFormat, body: dict[str, Any],
                          messages: Any, query: str, session_id: str | None,
                          project: str | None = None) -> RecallRequest:
    """The recall body (CONTRACT §5). Secrets never leave for a memory service: it is scrubbed like a
    retain. Built, not validated: its parts were checked when the agent's context was loaded."""
    manifest = ctx.memory
    assert manifest is not None
    redact = state.redactor
    system = fmt.recall_system(body)
    return RecallRequest.model_construct(
        agent_id=ctx.agent_id, pod=ctx.metadata.pod,
        messages=(await redact.json_async(messages))[0], query=(await redact.text_async(query))[0],
        metadata=ctx.memory_metadata(fmt.name, body.get("model"), session_id, project),
        # memplane's extension: how much the proxy will inject, so a service can pack to fit
        budget_tokens=manifest.budget_tokens, max_blocks=manifest.max_blocks,
        system=None if system is None else (await redact.json_async(system))[0])


def _report_recall(state: ProxyState, agent_id: str, service: str, outcome: RecallOutcome, policy: PolicyResult,
                   memories: list[InjectedMemory], block: str | None, tokens: int, repeated: int,
                   removed: int) -> None:
    """The recall's memory_op event (CONTRACT §11)."""
    extra: dict[str, Any] = {"memory_tokens": tokens, **({"ranking": outcome.ranking} if outcome.ranking else {})}
    if policy.redactions:
        extra["redactions"] = dict(policy.redactions)
    if policy.reasons:
        extra["policy_reasons"] = dict(policy.reasons)
    if repeated:
        extra["repeated_lines"] = repeated
    state.telemetry.memory_op(agent_id=agent_id, service=service, op="recall",
                              status="succeeded", status_code=outcome.status_code,
                              latency_ms=outcome.latency_ms, blocks=len(memories),
                              bytes_=len(block.encode()) if block else 0, removed=removed, **extra)


def _explain_recall(state: ProxyState, service: str, query: str, outcome: RecallOutcome, policy: PolicyResult,
                    block: str | None, placement: str | None, note: str | None, tokens: int,
                    repeated: int) -> RecallDetail:
    """The recall part of the turn's explanation. It shows what the block showed: policy-redacted
    text, never the recalled raw text."""
    kept = iter(policy.memories)
    detail = RecallDetail(
        service=service, query=query, block=block, placement=placement, tokens=tokens, ranking=outcome.ranking,
        deadline_ms=outcome.deadline_ms, redactions=dict(policy.redactions),
        memories=[{"kind": m.kind, "source": m.source, "origin": closed_origin(m.origin), "writer": m.writer,
                   "score": m.score, "id": m.id, "decision": decision,
                   "text": (next(kept).text if decision == "injected"
                            else state.redactor.text(m.text[:2000])[0])[:500]}
                  for m, decision in zip(outcome.memories, policy.decisions)])
    if note:
        detail.placement_note = note
    if repeated:
        detail.repeated_lines_dropped = repeated
    return detail


def _upstream_timeout(state: ProxyState) -> aiohttp.ClientTimeout:
    s = state.settings
    return aiohttp.ClientTimeout(total=None, sock_connect=s.upstream_connect_timeout_s,
                                 sock_read=s.upstream_read_timeout_s)


async def open_upstream(state: ProxyState, method: str, url: str | URL, *, data: bytes | None,
                        headers: dict[str, str], params: Any = None) -> aiohttp.ClientResponse:
    assert state.session is not None
    with provider_errors():
        return await state.session.request(method, url, data=data, headers=headers, params=params,
                                           timeout=_upstream_timeout(state), allow_redirects=False)


async def handle_turn(request: web.Request, fmt: WireFormat, state: ProxyState) -> web.StreamResponse:
    state.active_turns += 1
    status = 500
    try:
        resp = await _turn(request, fmt, state)
        status = resp.status
        return resp
    except ProxyError as err:
        status = err.status
        raise
    finally:
        state.active_turns -= 1
        state.metrics.child(state.metrics.turns, fmt.name, str(status)).inc()


async def _turn(request: web.Request, fmt: WireFormat, state: ProxyState) -> web.StreamResponse:
    started = time.perf_counter()
    ctx = await authenticate(request, state)
    original = await read_json_body(request)  # as the agent sent it: the ledger's request_original
    body, thread = original, None
    state.response_owners.check(ctx.agent_id, original)  # no agent continues another agent's conversation
    if fmt.provider == "anthropic" and ctx.memory is not None and ctx.memory.recall is not None:
        await state.threads.prefetch(ctx.agent_id, original)  # (another proxy's thread, with --ledger redis)
        body, thread = state.threads.expand(ctx.agent_id, original)  # memplane holds the agent's threads
    fmt.validate(body)
    require_model_allowed(ctx.metadata.allowed_models, body.get("model"))
    session_id = session_id_of(request, body)
    turn_id = "turn_" + uuid.uuid4().hex[:24]
    state.tracing.agent(ctx.agent_id, turn_id)
    effective, recall, turn, coding = body, RecallSummary(), None, None
    if ctx.memory is not None:
        coding = await read_turn(state, ctx, request.headers, body, session_id)  # kind, project, person's words
    if coding is not None and ctx.memory is not None and ctx.memory.recall is not None:
        with state.tracing.step("memplane.recall"):
            effective, recall, turn = await recall_and_inject(state, ctx, fmt, body, session_id, coding)
    said = {"X-Memplane-Turn-Id": turn_id, "X-Memplane-Recall": recall.header()}
    state.explanations.record(turn_id, TurnExplanation(
        turn_id, ctx.agent_id, now_rfc3339(), time.time(), fmt.name, request.path, recall.status, recall.blocks,
        recall.removed, recall.latency_ms, recall.detail).as_dict())
    effective, store_tool = memory_tool.offered(state, ctx, fmt.name, effective, turn,  # opt-in (memory.json tools)
                                                continues=recall.status == "reused")
    effective, hidden_usage = fmt.prepare_upstream(effective)
    stream = bool(body.get("stream"))
    url = upstream_target(state.settings, fmt.provider, fmt.upstream_path)
    headers = upstream_headers(state.settings, fmt.provider, request.headers,
                               client_key=ctx.metadata.client_provider_key)  # the agent's own key, or the operator's

    question = turn.question if turn is not None and recall.status == "reused" else None

    link = None
    if fmt.chains and turn is not None and offers_tools(body):
        def link(response_id: str | None) -> None:
            """The answer's id continues this user turn (a `previous_response_id` chain step)."""
            state.turn_blocks.link(ctx.agent_id, response_id, turn)

    async def finish(record: dict[str, Any]) -> None:
        rid = record.pop("response_id", None)
        reply = record.pop("reply", None)
        if fmt.chains:
            state.response_owners.record(ctx.agent_id, rid)
        if reply is not None and isinstance(original.get("thread"), dict):
            state.response_owners.record(ctx.agent_id, reply[0], "message")
        if link is not None:
            link(rid)
        if thread is not None and reply is not None:
            state.threads.record(ctx.agent_id, thread, *reply)
        # shielded: a client that goes away mid-write must not cost the ledger its line
        await asyncio.shield(record_turn(state, ctx, fmt, request.path, original, effective, upstream.status, stream,
                                         record, session_id, turn_id, question, coding))

    await state.ledger.ready(ctx.agent_id)  # a turn that could not be recorded is refused before it is paid for
    async with state.upstream_slots.held(ctx.agent_id), state.tracing.upstream(fmt.provider, effective, url):
        sent = time.perf_counter()
        upstream = await open_upstream(state, "POST", url, data=orjson.dumps(effective), headers=headers,
                                       params=request.query or None)  # e.g. the anthropic SDK's ?beta=true
        state.metrics.upstream_latency.observe(time.perf_counter() - sent)
        async with upstream:
            is_sse = upstream.content_type == "text/event-stream"
            if 200 <= upstream.status < 300 and is_sse and store_tool:
                resp = await memory_tool.relay_stream(
                    fmt_name=fmt.name, request=request, state=state, ctx=ctx, body=effective, upstream=upstream,
                    headers={**returned_headers(upstream.headers), **said}, hidden_usage=hidden_usage,
                    reopen=lambda b: _reopen(state, url, headers, request, b), finish=finish,
                    stream_record=lambda sent, incomplete: _stream_record(fmt, sent, False, incomplete),
                    session_id=session_id, turn_id=turn_id)
            elif 200 <= upstream.status < 300 and is_sse:
                resp = await _relay_stream(request, upstream, fmt, hidden_usage, finish, said, link)
            elif store_tool and 200 <= upstream.status < 300:
                resp = await memory_tool.relay_whole(
                    request=request, state=state, ctx=ctx, fmt=fmt, body=effective, upstream=upstream,
                    resend=lambda b: _resend(state, url, headers, request, b), finish=finish,
                    whole_record=_whole_record, said=said, session_id=session_id, turn_id=turn_id,
                    read=lambda: _read_answer(upstream))
            else:
                resp = await _relay_whole(request, upstream, fmt, finish, said)

    state.telemetry.request(agent_id=ctx.agent_id, path=request.path, status_code=upstream.status,
                            stream=stream, latency_ms=round((time.perf_counter() - started) * 1000, 3))
    return resp


async def _relay_whole(request: web.Request, upstream: aiohttp.ClientResponse, fmt: WireFormat,
                       finish, said: dict[str, str]) -> web.StreamResponse:
    """Read the whole answer, ledger it (2xx only), then send it: every answer seen is durable."""
    with provider_errors(answering=True):
        data = await upstream.read()
    resp = web.Response(status=upstream.status, body=data, headers={**returned_headers(upstream.headers), **said})
    if 200 <= upstream.status < 300:
        await finish(_whole_record(fmt, data))
    return resp


async def _read_answer(upstream: aiohttp.ClientResponse) -> bytes:
    with provider_errors(answering=True):
        return await upstream.read()


def _reopen(state: ProxyState, url: str, headers: Any, request: web.Request, body: dict[str, Any]) -> Any:
    """A streamed provider call of the same turn (memory_tool: the store_memory results handed back)."""
    assert state.session is not None
    return state.session.request("POST", url, data=orjson.dumps(body), headers=headers, params=request.query or None,
                                 timeout=_upstream_timeout(state), allow_redirects=False)


async def _resend(state: ProxyState, url: str, headers: Any, request: web.Request,
                  body: dict[str, Any]) -> tuple[int, bytes]:
    """One more provider call of the same turn (memory_tool: the store_memory results handed back)."""
    assert state.session is not None
    with transport_errors():  # a TransportError: memory_tool answers the agent without the follow-up
        async with state.session.request("POST", url, data=orjson.dumps(body), headers=headers,
                                         params=request.query or None, timeout=_upstream_timeout(state),
                                         allow_redirects=False) as again:
            return again.status, await again.read()


def _safe_feed(fmt: WireFormat, state: StreamState, event: str | None, data: str, hidden_usage: bool) -> bool:
    """Parsing for the ledger is best effort: an event of an unexpected shape is relayed as it is."""
    try:
        return fmt.feed_event(state, event, data, hidden_usage)
    except Exception:
        state.extra["unparsed_events"] = state.extra.get("unparsed_events", 0) + 1
        return True


def _whole_record(fmt: WireFormat, data: bytes) -> dict[str, Any]:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        doc = data
    if doc is data or not nests_safely(doc):  # not JSON, or deeper than the ledger can write: kept as text
        return {"response": {"format": "text", "text": data.decode("utf-8", "replace")}, "usage": None, "model": None}
    usage = None
    try:  # an answer of an unexpected shape is still ledgered, whole, as the JSON it was
        usage = fmt.usage(doc) if isinstance(doc, dict) else None
    except Exception:
        usage = None
    model = doc.get("model") if isinstance(doc, dict) and isinstance(doc.get("model"), str) else None
    record: dict[str, Any] = {"response": {"format": "json", "json": doc}, "usage": usage, "model": model,
                              "response_id": fmt.response_id(doc) if isinstance(doc, dict) else None}
    if isinstance(doc, dict) and hasattr(fmt, "reply"):
        record["reply"] = fmt.reply(doc)
    if isinstance(doc, dict):
        try:
            cites = fmt.citations(doc)
        except Exception:
            cites = None
        if cites:
            record["citations"] = cites
    return record


async def _relay_stream(request: web.Request, upstream: aiohttp.ClientResponse, fmt: WireFormat,
                        hidden_usage: bool, finish, said: dict[str, str],
                        link: Callable[[str | None], None] | None = None) -> web.StreamResponse:
    """Forward SSE events as they arrive; ledger the assembled answer before closing the stream.

    A client that disconnects mid-stream ends the upstream call (leaving the loop closes it),
    and what was received is still ledgered, marked incomplete. `link` gets the response id as
    soon as an event names it, before the client can continue from it.
    """
    resp = web.StreamResponse(status=upstream.status, headers={**returned_headers(upstream.headers), **said})
    resp.headers["Cache-Control"] = "no-cache"
    await resp.prepare(request)
    splitter = SSESplitter()
    watch = SSESplitter() if link is not None else None
    received: list[bytes] = []
    incomplete = None
    try:
        async for chunk in upstream.content.iter_any():
            received.append(chunk)
            if watch is not None and link is not None:
                rid = _first_response_id(fmt, watch.feed(chunk))
                if rid:
                    link(rid)
                    watch = None
            if not hidden_usage:
                await resp.write(chunk)  # bytes go out as they arrive; parsing waits until the end
                continue
            # one write per upstream chunk; only a usage-only event (empty choices) is parsed,
            # to drop the usage chunk memplane asked for on the agent's behalf
            events = splitter.feed(chunk)
            kept = [raw for raw in events if b'"choices":[]' not in raw
                    or _safe_feed(fmt, StreamState(), *parse_event(raw), True)]
            if kept:
                await resp.write(b"".join(kept))
        tail = splitter.flush()
        if tail:
            await resp.write(tail)
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        incomplete = "client_disconnected"
    except asyncio.CancelledError:  # servers that cancel handlers when the client goes away
        await finish(_stream_record(fmt, received, hidden_usage, "client_disconnected"))
        raise
    except (asyncio.TimeoutError, aiohttp.ClientError):
        incomplete = "upstream_broke_off"
    except Exception as exc:  # headers are sent: never a second response inside this one
        incomplete = f"relay_failed: {type(exc).__name__}"
    await finish(_stream_record(fmt, received, hidden_usage, incomplete))
    return await end_stream(resp, incomplete, stream_error_event(fmt.name))


def _first_response_id(fmt: WireFormat, events: list[bytes]) -> str | None:
    """The response id an event of the stream carries (Responses: `response.created` comes first)."""
    for raw in events:
        ev = event_json(parse_event(raw)[1])
        if ev is not None and isinstance(ev.get("response"), dict):
            rid = fmt.response_id(ev["response"])
            if rid:
                return rid
    return None


def _stream_record(fmt: WireFormat, received: list[bytes], hidden_usage: bool,
                   incomplete: str | None) -> dict[str, Any]:
    st = StreamState()
    body = b"".join(received)
    for raw in SSESplitter().feed(body + b"\n\n"):
        _safe_feed(fmt, st, *parse_event(raw), hidden_usage)
    response: dict[str, Any] = {"format": "sse", "text": st.text}
    if not st.text and not st.extra.get("tool_calls"):
        response["raw"] = body.decode("utf-8", "replace")  # nothing could be read out: keep what was relayed
    if st.extra.get("tool_calls"):
        response["tool_calls"] = list(st.extra["tool_calls"].values())
    if incomplete:
        response["incomplete"] = incomplete
    record: dict[str, Any] = {"response": response, "usage": st.usage, "model": st.model,
                              "response_id": st.extra.get("response_id")}
    if hasattr(fmt, "streamed_reply") and not incomplete:
        record["reply"] = fmt.streamed_reply(st)
    if st.extra.get("citations"):
        record["citations"] = st.extra["citations"]
    return record


async def record_turn(state: ProxyState, ctx: AgentContext, fmt: WireFormat, path: str,
                      original: dict[str, Any], effective: dict[str, Any], status: int, stream: bool,
                      record: dict[str, Any], session_id: str | None, turn_id: str | None = None,
                      question: str | None = None, coding: CodingTurn | None = None) -> None:
    """Ledger first (the durable record), then hand the entry to the retain queue.

    A call that continues a user turn carries the turn's question (`turn_question`, redacted): a
    Responses chain step sends only tool outputs, and memory keeps the turn whole at its last step.
    """
    extra: dict[str, Any] = {"turn_id": turn_id} if turn_id else {}
    if question:
        extra["turn_question"] = question
    if session_id:
        extra["session_id"] = session_id
    if record.get("citations"):
        extra["citations"] = record["citations"]
    if coding is not None:  # what retain, live or backfilled, sets aside and scopes (coding/for_memory.py)
        if marks := coding.ledger_marks():
            extra["scaffolding"] = marks
        if coding.project:
            extra["project"] = coding.project
    entry, line = build_entry_json(
        agent_id=ctx.agent_id, path=path, requested_model=original.get("model"),
        provider=fmt.provider, effective_model=record.get("model") or effective.get("model"),
        status_code=status, stream=stream, request_original=original, request_effective=effective,
        response=record["response"], usage=record.get("usage"), extra=extra,
    )
    retained = state.retain is not None and ctx.memory is not None and ctx.memory.retain is not None
    if retained:
        state.retain.prepare(ctx.agent_id)
    with state.tracing.ledger_write(entry):
        start, end = await state.ledger.append(ctx.agent_id, entry, line)
    if turn_id:
        state.explanations.update(turn_id, entry_id=entry["id"], ledger_end=end, status_code=status)
    if retained:
        with state.tracing.step("memplane.retain.enqueue"):
            state.retain.submit(ctx.agent_id, start, end, entry)

