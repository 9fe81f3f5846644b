"""The memory service's API as an OpenAPI 3.1 document, made from the typed models it validates with.

Why: CONTRACT.md is prose; a service written in another language, a client generator, and a
fuzzer (tests/test_contract_fuzz.py) need the same contract in a form a program reads. Built
from the pydantic models the handlers parse and answer with (memplane_core/contract.py,
rest_bodies.py), so the document cannot drift from what the service accepts. Every service
memplane ships serves it at `GET /openapi.json`, with the contract's paths its descriptor names.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from memplane_core.contract import (
    ErrorResponse,
    ForgetRequest,
    RecallRequest,
    RecallResponse,
    RetainAnswer,
    RetainBatchRequest,
    RetainBatchResponse,
    RetainRequest,
)

from .rest_bodies import AuditQuery, ListQuery, PatchBody, SearchBody, StoreBody

REF = "#/components/schemas/{model}"
JSON = "application/json"

_REQUESTS: tuple[type[BaseModel], ...] = (RecallRequest, RetainRequest, RetainBatchRequest, ForgetRequest,
                                          StoreBody, PatchBody, SearchBody)
_ANSWERS: tuple[type[BaseModel], ...] = (RecallResponse, RetainAnswer, RetainBatchResponse, ErrorResponse)

# A memory as the REST API shows it (record.StoredMemory.public): the fields a reader can count on.
MEMORY = {
    "type": "object",
    "required": ["id", "agent_id", "scope", "key", "value", "type", "importance", "metadata", "origin"],
    "properties": {
        "id": {"type": "string"}, "agent_id": {"type": "string"},
        "scope": {"enum": ["session", "agent", "global"]}, "session_id": {"type": ["string", "null"]},
        "key": {"type": "string"}, "value": {"type": "string"}, "type": {"type": "string"},
        "importance": {"type": "number"}, "access_count": {"type": "integer"},
        "last_accessed_at": {"type": ["string", "null"]}, "created_at": {"type": ["string", "null"]},
        "updated_at": {"type": ["string", "null"]}, "expires_at": {"type": ["string", "null"]},
        "said_at": {"type": ["string", "null"]}, "metadata": {"type": "object"},
        "source_entry_ids": {"type": "array", "items": {"type": "string"}},
        "origin": {"type": "string"}, "origins": {"type": ["array", "null"], "items": {"type": "string"}},
        "writer": {"type": ["string", "null"]}, "tainted": {"type": "boolean"},
    },
}
DESCRIPTOR = {
    "type": "object", "required": ["version", "memory"],
    "properties": {"version": {"type": "integer"}, "memory": {
        "type": "object",
        "additionalProperties": {"type": "object", "required": ["path"],
                                 "properties": {"path": {"type": "string"}, "batch_path": {"type": "string"}}}}},
}


def _ref(model: type[BaseModel] | str) -> dict[str, str]:
    return {"$ref": REF.format(model=model if isinstance(model, str) else model.__name__)}


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {JSON: {"schema": schema}}}


def _answer(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"description": description, **({"content": {JSON: {"schema": schema}}} if schema else {})}


# What any route may answer before or beside its handler (guard.py, auth.py, bodies.py, admission.py).
_REFUSALS = {
    "400": "the body or a parameter is not what the operation takes (`error.field` names it)",
    "401": "missing or invalid bearer token",
    "403": "another agent's memory, or a cross-site browser",
    "408": "the body did not arrive within the service's body deadline (MEMPLANE_BODY_TIMEOUT_S)",
    "413": "the body is over the service's limit",
    "415": "the body is not sent as application/json",
    "421": "a host name this loopback-only service does not answer",
}


def _refusals(*extra: str) -> dict[str, Any]:
    codes = dict(_REFUSALS)
    for code in extra:
        codes[code] = {"404": "no such memory (or not the caller's)", "409": "a change the memory cannot take",
                       "422": "the service could not read this entry (`unreadable`); it is not retried",
                       "503": "busy: retry after the `Retry-After` seconds"}[code]
    return {code: _answer(text, _ref(ErrorResponse)) for code, text in codes.items()}


def _query(model: type[BaseModel]) -> list[dict[str, Any]]:
    """A query model's parameters; an optional one may also be given empty (`?since=`: absent)."""
    schema = model.model_json_schema()
    need = set(schema.get("required", ()))
    return [{"name": name, "in": "query", "required": name in need,
             "schema": prop if name in need else {"anyOf": [prop, {"const": ""}]}}
            for name, prop in schema["properties"].items()]


def _contract_paths(memory: dict[str, Any]) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    if "recall" in memory:
        paths[memory["recall"]["path"]] = {"post": {
            "operationId": "recall", "summary": "Memories for the agent's turn, packed to its budget (CONTRACT §5).",
            "requestBody": _body(_ref(RecallRequest)),
            "responses": {"200": _answer("the blocks to inject, best first", _ref(RecallResponse)), **_refusals()}}}
    if "retain" in memory:
        paths[memory["retain"]["path"]] = {"post": {
            "operationId": "retain", "summary": "Keep one ledger entry (CONTRACT §6); idempotent by entry.id.",
            "requestBody": _body(_ref(RetainRequest)),
            "responses": {"202": _answer("taken (or already held)", _ref(RetainAnswer)),
                          **_refusals("422", "503")}}}
        if memory["retain"].get("batch_path"):
            paths[memory["retain"]["batch_path"]] = {"post": {
                "operationId": "retain_batch", "summary": "Several of one agent's retains; each item answered alone.",
                "requestBody": _body(_ref(RetainBatchRequest)),
                "responses": {"200": _answer("one result per item, in order", _ref(RetainBatchResponse)),
                              **_refusals("503")}}}
    if "forget" in memory:
        paths[memory["forget"]["path"]] = {"post": {
            "operationId": "forget", "summary": "Tombstone entries: never recalled, never retained again (CONTRACT §7).",
            "requestBody": _body(_ref(ForgetRequest)),
            "responses": {"204": _answer("forgotten"), **_refusals()}}}
    return paths


def _rest_paths() -> dict[str, Any]:
    one = [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}]
    memory, listing = _ref("Memory"), {"type": "object", "required": ["memories"], "properties": {
        "memories": {"type": "array", "items": _ref("Memory")}, "next_cursor": {"type": ["string", "null"]}}}
    audit = {"type": "object", "required": ["audit"], "properties": {"audit": {"type": "array", "items": {"type": "object"}}}}
    found = {"type": "object", "required": ["results"], "properties": {"results": {"type": "array", "items": _ref("Memory")}}}
    return {
        "/api/memories": {
            "post": {"operationId": "store_memory", "summary": "Store a memory (the operator's or an agent's own).",
                     "requestBody": _body(_ref(StoreBody)),
                     "responses": {"201": _answer("stored", memory), "200": _answer("replaced the memory of that key", memory),
                                   **_refusals()}},
            "get": {"operationId": "list_memories", "summary": "One agent's memories, newest change first, a page at a time.",
                    "parameters": _query(ListQuery), "responses": {"200": _answer("a page", listing), **_refusals()}}},
        "/api/memories/search": {"post": {
            "operationId": "search_memories", "summary": "One agent's memories ranked for a query.",
            "requestBody": _body(_ref(SearchBody)), "responses": {"200": _answer("best first", found), **_refusals()}}},
        "/api/memories/{id}": {
            "get": {"operationId": "get_memory", "parameters": one,
                    "responses": {"200": _answer("the memory", memory), **_refusals("404")}},
            "patch": {"operationId": "edit_memory", "parameters": one, "requestBody": _body(_ref(PatchBody)),
                      "responses": {"200": _answer("the memory as changed", memory), **_refusals("404", "409")}},
            "delete": {"operationId": "delete_memory", "parameters": one,
                       "responses": {"204": _answer("deleted, with an audit line"), **_refusals("404")}}},
        "/api/memories/{id}/audit": {"get": {
            "operationId": "memory_audit", "parameters": one,
            "responses": {"200": _answer("the memory's audit trail", audit), **_refusals("404")}}},
        "/api/audit": {"get": {
            "operationId": "agent_audit", "parameters": _query(AuditQuery),
            "responses": {"200": _answer("the agent's audit trail, newest first", audit), **_refusals()}}},
    }


def openapi_document(descriptor: dict[str, Any], *, rest: bool, title: str = "memplane memory service") -> dict[str, Any]:
    """The OpenAPI 3.1 document of a service offering what `descriptor` names (and the REST API when
    `rest`)."""
    _, defs = models_json_schema([(m, "validation") for m in _REQUESTS] + [(m, "serialization") for m in _ANSWERS],
                                 ref_template=REF)
    schemas = {**defs.get("$defs", {}), "Memory": MEMORY, "Descriptor": DESCRIPTOR}
    paths = _contract_paths(descriptor.get("memory", {}))
    paths["/.claw-describe.json"] = {"get": {"operationId": "describe", "summary": "The service descriptor (CONTRACT §3).",
                                             "responses": {"200": _answer("what the service offers", _ref("Descriptor")),
                                                           **_refusals()}}}
    paths["/health"] = {"get": {"operationId": "health", "summary": "Liveness and backlog; no paths or URLs.",
                                "responses": {"200": _answer("up", {"type": "object"}), **_refusals()}}}
    if rest:
        paths.update(_rest_paths())
    return {"openapi": "3.1.0", "info": {"title": title, "version": str(descriptor.get("version", 2))},
            "paths": paths, "components": {"schemas": schemas, "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "the service's token, or an agent's own (`--agent-tokens`); "
                                          "a token-less service answers loopback callers only"}}},
            "security": [{"bearer": []}, {}]}
