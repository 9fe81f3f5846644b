"""Typed request and response bodies of the memory-service contract (CONTRACT §5–§7)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, with_config
from typing_extensions import Required, TypedDict

from .ids import AGENT_ID_PATTERN
from .instants import RANGE_TEXT, OutOfRange, parse_instant

# The contract's defaults (CONTRACT §2, §5): what a manifest or a recall body that says nothing means.
DEFAULT_RECALL_TIMEOUT_MS = 300
DEFAULT_WRITE_TIMEOUT_MS = 2000  # retain and forget
DEFAULT_BUDGET_TOKENS = 3000
DEFAULT_MAX_BLOCKS = 8
# memplane's services refuse a forget naming more entries (400): one call's cost stays bounded,
# and the CLI splits larger requests into calls of at most this many.
MAX_FORGET_IDS = 1000
# Memory metadata a store writes itself: who wrote it, the operator's pin (recalled first, exempt
# from caps and consolidation), the curator's marks. A stored memory's caller never sets them: a
# pin comes only from the audited PATCH, the rest from the store and its curator.
RESERVED_METADATA = frozenset({"author", "pinned", "curator", "superseded_by", "superseded_at", "merged",
                               "origin", "origins", "writer", "tainted"})
# What the admin token may still restore from an export (`memplane memory import`): the curator's marks
# and the provenance the store gave a memory (an import never makes a model's memory the user's).
RESTORABLE_METADATA = frozenset({"curator", "superseded_by", "superseded_at", "merged",
                                 "origin", "origins", "writer", "tainted"})
# Where a memory's words came from (docs/DESIGN.md, "Memory poisoning"), most trusted first. The
# store sets it, never a body: `user` the person's own words, `operator` the REST API / inspector /
# import, `curator` drawn by the curator (with the origins it was drawn from), `model` the model's own
# `store_memory`, `tool` text from a tool result, a fetched document or another agent.
ORIGINS = ("user", "operator", "curator", "model", "tool")
UNTRUSTED_ORIGINS = frozenset({"model", "tool"})


# `single_line` as a pattern, for a schema's readers (no control character, no line or paragraph separator)
ONE_LINE = "^[^\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]*$"


def single_line(key: str) -> str:
    """A memory's key is a name on one line: a line break, tab or other control character in it
    could be rendered as lines of its own and pose as a heading of the block (ValueError)."""
    if any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 or c in "\u2028\u2029" for c in key):
        raise ValueError("a key is one line: no line breaks, tabs or control characters")
    return key


def _a_number(value: Any) -> Any:
    """A count is a JSON number: `false`, `true` and `"300"` are refused, not read as 0, 1 and 300
    (a recall told `deadline_ms: false` had no time left). A whole float (`8.0`) is still a count."""
    if isinstance(value, (bool, str, bytes)):
        raise ValueError("must be a number")
    return value


Share = Annotated[float, Field(ge=0.0, le=1.0), BeforeValidator(_a_number)]  # an importance
# bounds inside the type, so that `X | None` still documents them (openapi.py)
TopK = Annotated[int, Field(ge=1, le=100), BeforeValidator(_a_number)]
BudgetTokens = Annotated[int, Field(ge=1, le=1_000_000), BeforeValidator(_a_number)]
MaxBlocks = Annotated[int, Field(ge=1, le=1_000), BeforeValidator(_a_number)]
DeadlineMs = Annotated[int, Field(ge=0, le=3_600_000), BeforeValidator(_a_number)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")  # readers ignore fields they do not know


class RecallRequest(_Body):
    agent_id: str = Field(pattern=AGENT_ID_PATTERN)
    pod: str = ""
    messages: list[Any] = Field(default_factory=list)
    system: Any = None
    query: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    top_k: TopK | None = None
    # memplane's extension: what the proxy will inject at most, so a service can pack to fit
    budget_tokens: BudgetTokens | None = None
    max_blocks: MaxBlocks | None = None
    # memplane's extension: how long the proxy will still wait, so a service answers with the best
    # it has in time (CONTRACT §5)
    deadline_ms: DeadlineMs | None = None


class RecalledMemory(BaseModel):
    """One item of a recall answer on the wire (CONTRACT §5)."""

    text: str
    score: float | None = None
    kind: str | None = None
    source: str | None = None
    ts: str | None = None
    id: str | None = None
    title: str | None = None  # a heading for the block (Anthropic search_result placement); optional
    # memplane's extension: where the words came from (ORIGINS, space-separated when a block mixes
    # them) and, for shared memories, the agents that wrote them
    origin: str | None = None
    writer: str | None = None
    # memplane's extension: whether a block only a model or a tool wrote is held to its share of the
    # budget (memplane_core/provenance.py); `false` only for a model's untainted writes, left out otherwise
    bounded: bool | None = None


def _date_shaped(text: str) -> bool:
    """Written as a date: a year of four or more digits, a dash, a digit (`0000-01-01`, `+275760-09-13`)."""
    head = text.lstrip()[:32].lstrip("+-")
    digits = len(head) - len(head.lstrip("0123456789"))
    return digits >= 4 and head[digits:digits + 1] == "-" and head[digits + 1:digits + 2].isdigit()


def _entry_time(ts: Any) -> Any:
    """A ledger stamp is a string (the proxy writes RFC 3339). One out of range is refused — also
    when written as a date that no calendar can hold (year 0000, a six-digit year); free text that
    is no date at all is left to the service, which uses the time of receipt (as before)."""
    if ts is None:
        return ts
    if not isinstance(ts, str):
        raise ValueError("must be an RFC 3339 time string")
    try:
        parse_instant(ts)
    except OutOfRange:
        raise
    except ValueError:
        if _date_shaped(ts):
            raise OutOfRange(f"time out of range or not a valid date: must be {RANGE_TEXT}") from None
    return ts


@with_config(ConfigDict(extra="allow"))
class RetainEntry(TypedDict, total=False):
    """A ledger entry (CONTRACT §6): the rest is kept as sent (the model gives a plain dict), and
    a time out of range is a 400 naming `entry.ts`."""

    id: Required[Annotated[str, Field(min_length=1)]]
    ts: Annotated[str | None, AfterValidator(_entry_time)]


class RetainRequest(_Body):
    agent_id: str = Field(pattern=AGENT_ID_PATTERN)
    pod: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)
    entry: RetainEntry  # its `id` a non-empty string (the dedupe key, CONTRACT §9)


class RetainBatchRequest(_Body):
    """memplane's extension: several of one agent's retains in one call (`retain.batch_path`).

    Items are validated one by one, so one bad item is refused alone (see server.py)."""

    agent_id: str = Field(pattern=AGENT_ID_PATTERN)
    pod: str = ""
    items: list[dict[str, Any]] = Field(min_length=1, max_length=256)


class ForgetRequest(_Body):
    agent_id: str = Field(pattern=AGENT_ID_PATTERN)
    pod: str = ""
    entry_ids: list[str] = Field(min_length=1, max_length=MAX_FORGET_IDS)
    reason: str = ""


RETAIN_BATCH_PATH = "/retain/batch"
# a retain outcome: the service could not read the entry (answered 422, never retried into a 5xx loop)
UNREADABLE = "unreadable"


def describe(recall: bool = True, retain: bool = True, forget: bool = True,
             retain_batch: bool = False) -> dict[str, Any]:
    """The service descriptor served at /.claw-describe.json (CONTRACT §3); `retain_batch`
    offers memplane's batched retain, which other readers ignore."""
    memory: dict[str, Any] = {}
    for name, on in (("retain", retain), ("recall", recall), ("forget", forget)):
        if on:
            memory[name] = {"path": f"/{name}"}
    if retain and retain_batch:
        memory["retain"]["batch_path"] = RETAIN_BATCH_PATH
    return {"version": 2, "memory": memory}


# -- the answers, typed as the other side reads them (docs/openapi.md) --

class RecallResponse(BaseModel):
    """A recall's `200` (CONTRACT §5); `ranking` and `degraded` are memplane's extensions."""

    memories: list[RecalledMemory]
    ranking: str | None = None  # which ranking answered (memplane's engines)
    degraded: str | None = None  # why less than the usual ranking answered; the proxy marks the turn


class RetainAnswer(BaseModel):
    """A retain's `202` (and, with `error`, its `422 unreadable`)."""

    status: str  # stored, duplicate, tombstoned, empty, unreadable, ...
    id: str


class RetainItemResult(BaseModel):
    """One item of a batched retain's answer: its own code, as if posted alone."""

    id: str | None = None
    code: int
    status: str | None = None
    error: str | None = None
    field: str | None = None


class RetainBatchResponse(BaseModel):
    results: list[RetainItemResult]


class ErrorDetail(BaseModel):
    message: str
    field: str | None = None


class ErrorResponse(BaseModel):
    """Every refusal of a memplane memory service: `{"error": {"message", "field"}}`."""

    error: ErrorDetail
