"""One ledger entry (CONTRACT §6): the turn as the ledger keeps it, and as retain sends it.

A TypedDict, not a class: the entry is written and read as the JSON object it is (orjson, no
conversion on the hot path), so ledgers and Redis streams written before read exactly as they did;
the type names the keys every reader — delivery, backfill, forget, the inspector — relies on.
Its `id` is `hist1_` + SHA-256 of the entry without `id` (orjson: compact, insertion order, UTF-8),
so anyone can re-derive it: `orjson.loads(line)`, drop `id`, `orjson.dumps(...)`, hash.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from typing_extensions import NotRequired, TypedDict

from memplane_core.clock import now_rfc3339


def nests_safely(doc: Any) -> bool:
    """Whether `doc` still serialises nested as deep as the ledger and a batched retain nest it
    (orjson stops at 255 levels): a body or answer that does not would fail the turn's record."""
    try:
        orjson.dumps([[[[[[[[doc]]]]]]]])
    except orjson.JSONEncodeError:
        return False
    return True


class LedgerEntry(TypedDict):
    version: int
    id: str
    ts: str
    claw_id: str  # the contract's name for the agent on the wire
    path: str
    requested_model: str | None
    effective_provider: str
    effective_model: str | None
    status_code: int
    stream: bool
    request_original: Any  # as the agent sent it
    request_effective: Any  # as forwarded, memories injected
    response: dict[str, Any]  # {"format": "json", "json": …} or {"format": "sse", "text": …}
    usage: dict[str, Any] | None
    # memplane's additions, present when they apply
    turn_id: NotRequired[str]
    turn_question: NotRequired[str]  # a continuing call's user question (redacted)
    # the user turn a tool loop's calls share (turn_blocks.turn_key, a digest): memory keeps one
    # episode per loop from its latest step, so a loop that ends on a tool call is not lost
    loop_key: NotRequired[str]
    session_id: NotRequired[str]
    citations: NotRequired[Any]


def entry_id(entry: dict[str, Any]) -> str:
    body = {k: v for k, v in entry.items() if k != "id"}
    return "hist1_" + hashlib.sha256(orjson.dumps(body)).hexdigest()


def build_entry(*, agent_id: str, path: str, requested_model: str | None, provider: str,
                effective_model: str | None, status_code: int, stream: bool,
                request_original: Any, request_effective: Any, response: dict[str, Any],
                usage: dict[str, Any] | None, ts: str | None = None,
                extra: dict[str, Any] | None = None) -> LedgerEntry:
    """A ledger entry with its keys in contract order and its id filled in."""
    return build_entry_json(agent_id=agent_id, path=path, requested_model=requested_model, provider=provider,
                            effective_model=effective_model, status_code=status_code, stream=stream,
                            request_original=request_original, request_effective=request_effective,
                            response=response, usage=usage, ts=ts, extra=extra)[0]


_HEAD = b'{"version":1,'


def build_entry_json(*, agent_id: str, path: str, requested_model: str | None, provider: str,
                     effective_model: str | None, status_code: int, stream: bool,
                     request_original: Any, request_effective: Any, response: dict[str, Any],
                     usage: dict[str, Any] | None, ts: str | None = None,
                     extra: dict[str, Any] | None = None) -> tuple[LedgerEntry, bytes]:
    """`build_entry`, and the entry's JSON as the ledger writes it (`orjson.dumps(entry)`).

    The entry is serialised once: its id hashes the JSON of the entry without `id`, and the JSON
    with it is that text with `"id":"…",` put after `"version":1,` (orjson writes compact JSON in
    insertion order). A turn's entry holds its request twice (as sent, as forwarded) and its answer:
    for an agent that resends a long history, each serialisation of it was a real cost."""
    entry: dict[str, Any] = {
        "version": 1,
        "ts": ts or now_rfc3339(),
        "claw_id": agent_id,
        "path": path,
        "requested_model": requested_model,
        "effective_provider": provider,
        "effective_model": effective_model,
        "status_code": status_code,
        "stream": stream,
        "request_original": request_original,
        "request_effective": request_effective,
        "response": response,
        "usage": usage,
    }
    if extra:
        entry.update(extra)
    if "id" in entry:  # (an `extra` that names an id: hashed without it, as `entry_id` says)
        eid = entry_id(entry)
        out: dict[str, Any] = {"version": 1, "id": eid}
        out.update(entry)
        return out, orjson.dumps(out)  # type: ignore[return-value]
    body = orjson.dumps(entry)
    eid = "hist1_" + hashlib.sha256(body).hexdigest()
    out = {"version": 1, "id": eid}
    out.update(entry)  # `version` keeps its place, first: the same keys in the same order as ever
    return out, _HEAD + b'"id":"' + eid.encode() + b'",' + body[len(_HEAD):]  # type: ignore[return-value]
