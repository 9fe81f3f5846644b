"""Pack ranked memories into a few dated blocks that fit the proxy's budget.

The proxy keeps at most `max_blocks` blocks and `budget_tokens` tokens (≈ 4 characters each),
and refuses a recall answer over 16 KiB. A block may hold several snippets: best hits come with
the turns said just before and after them (the question and its answer are usually adjacent),
consecutive turns form one run, and runs are grouped in time order into at most `max_blocks`
blocks, each run under its date. Budget binds, not the block count.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import islice

import orjson

from memplane_core.tokens import estimate_tokens

from .record import StoredMemory, iso

MAX_ANSWER_BYTES = 15_000  # the proxy refuses answers over 16 KiB; leave room for the JSON around blocks
BLOCK_OVERHEAD_BYTES = 160  # kind, source, ts, score, id and punctuation of one block
MAX_HITS = 200  # ranked hits considered for one recall
NEIGHBOURS_FOR = 10  # the best hits bring their neighbours; past them, breadth beats depth (bench/README.md)


@dataclass
class Packed:
    text: str
    score: float
    kind: str
    ts: str | None
    id: str
    memory_ids: list[str] = field(default_factory=list)


def said_time(m: StoredMemory) -> float:
    return m.said_at or m.created_at


def _day(m: StoredMemory) -> str:
    """The date a run is filed under: the stamp the message carried, else the day it was logged."""
    said = m.metadata.get("said") if isinstance(m.metadata, dict) else None
    return said if isinstance(said, str) else datetime.fromtimestamp(said_time(m), timezone.utc).strftime("%Y-%m-%d")


def memory_line(m: StoredMemory) -> str:
    """An episode as said; a typed memory with its type, and its key when a person chose one."""
    if m.type == "episode":
        return m.value
    if ":" in m.key and m.key.split(":", 1)[0] in ("episode", "fact", "preference", "constraint", "profile"):
        return f"{m.type}: {m.value}"
    return f"{m.type} ({m.key}): {m.value}"


@dataclass(frozen=True, slots=True)
class Snippet:
    """What packing needs of a memory, computed once when it is indexed (not on every recall)."""

    line: str  # memory_line()
    day: str  # the date its run is filed under
    norm: str  # casefolded, whitespace-collapsed text: two memories that say the same thing


def snippet_of(m: StoredMemory) -> Snippet:
    return Snippet(line=memory_line(m), day=_day(m), norm=" ".join(m.value.casefold().split()))


def _render(runs: list[list[Snippet]]) -> str:
    """Runs apart by a blank line; a date line whenever the date a turn was said changes."""
    out: list[str] = []
    last_day = None
    for run in runs:
        lines = []
        for sn in run:
            if sn.day != last_day:
                lines.append(f"[{sn.day}]")
                last_day = sn.day
            lines.append(sn.line)
        out.append("\n".join(lines))
    return "\n\n".join(out)


def pack(ranked: Iterable[tuple[StoredMemory, float]], neighbours: Callable[[StoredMemory], list[StoredMemory]],
         position: Callable[[StoredMemory], int], snippet: Callable[[StoredMemory], Snippet], *,
         budget_tokens: int, max_blocks: int, max_bytes: int = MAX_ANSWER_BYTES) -> list[Packed]:
    """Blocks of the best hits and their neighbours, at most `budget_tokens` and `max_blocks`.
    `ranked` may be lazy: it is read only until the budget is full."""
    budget_tokens = max(0, budget_tokens)
    max_blocks = max(1, max_blocks)
    # characters for text, leaving each block's date header and separators some room
    room = budget_tokens * 4 - max_blocks * 16
    chosen: dict[str, tuple[StoredMemory, float, int]] = {}  # id → (memory, score of the hit it came with, rank)
    shown: dict[str, Snippet] = {}  # id → its snippet, looked up once
    used = 0
    for rank, (hit, score) in enumerate(islice(ranked, MAX_HITS)):
        for m in (hit, *(neighbours(hit) if rank < NEIGHBOURS_FOR else ())):
            if m.id in chosen:
                continue
            sn = snippet(m)
            cost = len(sn.line) + 2
            if used + cost > room:
                continue
            chosen[m.id] = (m, score, rank)
            shown[m.id] = sn
            used += cost
        if room - used < 40:
            break
    where = {memory_id: position(m) for memory_id, (m, _, _) in chosen.items()}  # in time order
    while chosen:
        blocks = _group(list(chosen.values()), where, shown, max_blocks)
        size = sum(len(orjson.dumps(b.text)) + BLOCK_OVERHEAD_BYTES for b in blocks)
        tokens = sum(estimate_tokens(b.text) for b in blocks)
        if size <= max_bytes and tokens <= budget_tokens:
            return blocks
        # over a limit (wide characters, date headers): drop the lowest-ranked snippets that cover
        # the excess, then pack again
        excess = max((tokens - budget_tokens) * 4, size - max_bytes, 1)
        for worst in sorted(chosen.values(), key=lambda c: (-c[2], c[1])):
            chosen.pop(worst[0].id)
            excess -= len(shown[worst[0].id].line.encode()) + 1
            if excess <= 0:
                break
    return []


def _group(chosen: list[tuple[StoredMemory, float, int]], where: dict[str, int],
           shown: dict[str, Snippet], max_blocks: int) -> list[Packed]:
    """Runs of consecutive memories, in time order, split into at most `max_blocks` blocks of
    similar size; the blocks are returned best first. `shown`: each memory's snippet by id."""
    chosen.sort(key=lambda c: (where[c[0].id], c[0].id))
    runs: list[list[tuple[StoredMemory, float, int]]] = []
    for c in chosen:
        if runs and where[c[0].id] == where[runs[-1][-1][0].id] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    size_of = {c[0].id: len(shown[c[0].id].line) for c in chosen}
    total = sum(size_of.values())
    per_block = math.ceil(total / max_blocks)
    groups: list[list[list[tuple[StoredMemory, float, int]]]] = [[]]
    size = 0
    for run in runs:
        run_size = sum(size_of[c[0].id] for c in run)
        if groups[-1] and size + run_size > per_block and len(groups) < max_blocks:
            groups.append([])
            size = 0
        groups[-1].append(run)
        size += run_size
    blocks = []
    for group in groups:
        members = [c for run in group for c in run]
        best = min(members, key=lambda c: (c[2], -c[1]))
        first = members[0][0]
        blocks.append(Packed(
            text=_render([[shown[c[0].id] for c in run] for run in group]),
            score=round(best[1], 4),
            kind="episode" if all(c[0].type == "episode" for c in members) else best[0].type,
            ts=iso(said_time(first)), id=best[0].id, memory_ids=[c[0].id for c in members]))
    blocks.sort(key=lambda b: -b.score)
    return blocks
