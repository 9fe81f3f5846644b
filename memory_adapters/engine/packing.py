"""Pack ranked memories into a few dated blocks that fit the proxy's budget.

The proxy keeps at most `max_blocks` blocks and `budget_tokens` tokens (≈ 4 characters each),
and refuses a recall answer over 16 KiB. A block may hold several snippets: best hits come with
the turns said just before and after them (the question and its answer are usually adjacent),
consecutive turns form one run, and runs are grouped in time order into at most `max_blocks`
blocks, each run under its date. Budget binds, not the block count.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import lru_cache
from itertools import islice
from typing import NamedTuple

import orjson

from memplane_core.contract import ORIGINS
from memplane_core.provenance import BoundedShare, lead_order, trusted_lead
from memplane_core.tokens import estimate_tokens

from .dates import note
from .record import (StoredMemory, bounded, iso, joined_origins, joined_writers, origin_of, origins_of, untrusted,
                     writer_of)

MAX_ANSWER_BYTES = 15_000  # the proxy refuses answers over 16 KiB; leave room for the JSON around blocks
BLOCK_OVERHEAD_BYTES = 160  # kind, source, ts, score, id and punctuation of one block
MAX_HITS = 200  # ranked hits considered for one recall
NEIGHBOURS_FOR = 10  # the best hits bring their neighbours; past them, breadth beats depth (bench/README.md)
# At most provenance.UNTRUSTED_SHARE of a recall's room goes to bounded text (what a tool wrote, writes
# from tainted turns): thirty turns that carry the same injected page cannot crowd the user's own words
# out of the block, and one such memory still fits an empty one (docs/provenance.md).


@dataclass
class Packed:
    text: str
    score: float
    kind: str
    ts: str | None
    id: str
    memory_ids: list[str] = field(default_factory=list)
    origin: str | None = None  # its memories' origins (record.origin_attr)
    writer: str | None = None  # the agents that wrote its memories (record.writer_of)
    bounded: bool = False  # only bounded text (record.bounded): capped by the proxy too, never leading


def said_time(m: StoredMemory) -> float:
    return m.said_at or m.created_at


def _day(m: StoredMemory) -> str:
    """The date a run is filed under: the stamp the message carried, else the day it was logged."""
    said = m.metadata.get("said") if isinstance(m.metadata, dict) else None
    return said if isinstance(said, str) else datetime.fromtimestamp(said_time(m), timezone.utc).strftime("%Y-%m-%d")


_ROLE_MARK = re.compile(r"^([ \t]*)((?:user|human|assistant|ai|system|developer|tool|tools|model|function)[ \t]*:)",
                        re.I | re.M)


def quoted_roles(text: str) -> str:
    """Every line that begins like a speaker's label ('System:', 'user:') quoted with '> ': in a
    typed memory such a line is never a turn of the conversation (only episodes label their parts)."""
    return _ROLE_MARK.sub(r"\1> \2", text) if ":" in text else text


def memory_line(m: StoredMemory) -> str:
    """An episode as said; a typed memory with its type, and its key when a person chose one
    (one line, whatever an older row holds). What a model or a tool wrote says so on its line
    ('model-written fact (key): …'), so that a block mixing it with the user's words tells them apart."""
    if m.type == "episode":
        return m.value + note(m.metadata)  # "yesterday" with the day it meant (dates.py)
    kind = f"{'/'.join(o for o in ORIGINS if o in origins_of(m))}-written {m.type}" if untrusted(m) else m.type
    if ":" in m.key and m.key.split(":", 1)[0] in ("episode", "fact", "preference", "constraint", "profile"):
        return f"{kind}: {quoted_roles(m.value)}"
    return f"{kind} ({' '.join(m.key.split())}): {quoted_roles(m.value)}"


@dataclass(frozen=True, slots=True)
class Snippet:
    """What packing needs of a memory, computed once when it is indexed (not on every recall)."""

    line: str  # memory_line()
    day: str  # the date its run is filed under
    norm: str  # casefolded, whitespace-collapsed text: two memories that say the same thing
    doubtful: bool = False  # bounded (record.bounded): what a tool wrote, a tainted write; capped in a block
    origin: str = "user"  # record.origin_of: a block's `origin` names its memories' (read once, not per recall)
    writer: str | None = None  # record.writer_of: the agent that wrote it (a model's write, a shared memory)


def snippet_of(m: StoredMemory) -> Snippet:
    return Snippet(line=memory_line(m), day=_day(m), norm=" ".join(m.value.casefold().split()),
                   doubtful=bounded(m), origin=origin_of(m), writer=writer_of(m))


PAST_MARK = "[since changed, see Current facts] "


def past_marked(snippet: Callable[[StoredMemory], Snippet], past: frozenset[str]) -> Callable[[StoredMemory], Snippet]:
    """`snippet`, with the memories in `past` (turns that stated what a newer fact replaced) marked so
    the model does not take them for the current state."""
    def marked(m: StoredMemory) -> Snippet:
        sn = snippet(m)
        return replace(sn, line=PAST_MARK + sn.line) if m.id in past else sn
    return marked


def _render(runs: list[list[Snippet]]) -> str:
    """Runs apart by a blank line; a date line whenever the date a turn was said changes."""
    lines: list[str] = []
    last_day = None
    for run in runs:
        if lines:
            lines.append("")  # the blank line between runs
        for sn in run:
            if sn.day != last_day:
                lines.append(f"[{sn.day}]")
                last_day = sn.day
            lines.append(sn.line)
    return "\n".join(lines)


class Chosen(NamedTuple):
    """A memory packing took; sorted, these are in time order (`position` first)."""

    position: int
    id: str
    memory: StoredMemory
    score: float  # of the hit it came with
    rank: int  # of the hit it came with
    snippet: Snippet


def pack(ranked: Iterable[tuple[StoredMemory, float]], neighbours: Callable[[StoredMemory], list[StoredMemory]],
         position: Callable[[StoredMemory], int], snippet: Callable[[StoredMemory], Snippet], *,
         budget_tokens: int, max_blocks: int, max_bytes: int = MAX_ANSWER_BYTES,
         neighbours_for: int | None = None) -> list[Packed]:
    """Blocks of the best hits and their neighbours, at most `budget_tokens` and `max_blocks`.
    `ranked` may be lazy: it is read only until the budget is full. `neighbours_for`: how many of
    the best hits bring `neighbours` (unset: NEIGHBOURS_FOR)."""
    neighbours_for = NEIGHBOURS_FOR if neighbours_for is None else neighbours_for
    budget_tokens = max(0, budget_tokens)
    max_blocks = max(1, max_blocks)
    # characters for text, leaving each block's date header and separators some room
    room = budget_tokens * 4 - max_blocks * 16
    chosen: dict[str, Chosen] = {}
    used = 0
    share = BoundedShare.of(room)  # bounded text: a share of the room, not of what the block holds
    for rank, (hit, score) in enumerate(islice(ranked, MAX_HITS)):
        for m in (hit, *(neighbours(hit) if rank < neighbours_for else ())):
            if m.id in chosen:
                continue
            sn = snippet(m)
            cost = len(sn.line) + 2
            if used + cost > room:
                continue
            if sn.doubtful and not share.admit(cost):
                continue
            chosen[m.id] = Chosen(position(m), m.id, m, score, rank, sn)
            used += cost
        if room - used < 40:
            break
    while chosen:  # a pass over a limit builds no blocks: only their texts are measured
        groups = _group(sorted(chosen.values()), max_blocks)  # in time order
        texts = [_render([[c.snippet for c in run] for run in group]) for group in groups]
        size = sum(len(orjson.dumps(text)) + BLOCK_OVERHEAD_BYTES for text in texts)
        tokens = sum(estimate_tokens(text) for text in texts)
        if size <= max_bytes and tokens <= budget_tokens:
            blocks = [_block(group, text) for group, text in zip(groups, texts)]
            blocks.sort(key=lambda b: -b.score)  # best first; a block of only bounded text never leads
            return lead_order(blocks, lambda b: b.bounded)
        # over a limit (wide characters, date headers): drop the lowest-ranked snippets that cover
        # the excess, then pack again
        excess = max((tokens - budget_tokens) * 4, size - max_bytes, 1)
        for worst in sorted(chosen.values(), key=lambda c: (-c.rank, c.score)):
            del chosen[worst.id]
            excess -= len(worst.snippet.line.encode()) + 1
            if excess <= 0:
                break
    return []


_block_time = lru_cache(maxsize=4096)(iso)  # a block's date: the same memories lead block after block (~3 µs each)


def _runs(members: list[Chosen]) -> list[list[Chosen]]:
    """`members` as runs of consecutive memories (each position following the one before)."""
    runs: list[list[Chosen]] = []
    follows = None  # the position that continues the last run
    for c in members:
        if c.position == follows:
            runs[-1].append(c)
        else:
            runs.append([c])
        follows = c.position + 1
    return runs


def _group(chosen: list[Chosen], max_blocks: int) -> list[list[list[Chosen]]]:
    """`chosen` (in time order) as runs of consecutive memories, split into at most `max_blocks`
    groups of similar size; in each, the person's words before bounded text (`_trusted_lead`)."""
    runs = _runs(chosen)
    sizes = [sum(len(c.snippet.line) for c in run) for run in runs]  # characters of each run's lines
    per_block = math.ceil(sum(sizes) / max_blocks)
    groups: list[list[list[Chosen]]] = [[]]
    size = 0
    for run, run_size in zip(runs, sizes):
        if groups[-1] and size + run_size > per_block and len(groups) < max_blocks:
            groups.append([])
            size = 0
        groups[-1].append(run)
        size += run_size
    return [_trusted_lead(group) for group in groups]


def _trusted_lead(group: list[list[Chosen]]) -> list[list[Chosen]]:
    """A block that holds trusted text begins with it (provenance.trusted_lead); moved bounded
    memories make runs of their own at its end."""
    members = [c for run in group for c in run]
    led = trusted_lead(members, lambda c: c.snippet.doubtful)
    return group if led is members else _runs(led)


def _block(group: list[list[Chosen]], text: str) -> Packed:
    """One group's block: scored and named by its best hit, dated by its first memory."""
    members = [c for run in group for c in run]
    best = min(members, key=lambda c: (c.rank, -c.score))
    return Packed(text=text, score=round(best.score, 4),
                  kind="episode" if all(c.memory.type == "episode" for c in members) else best.memory.type,
                  ts=_block_time(said_time(members[0].memory)), id=best.id, memory_ids=[c.id for c in members],
                  origin=joined_origins(c.snippet.origin for c in members),
                  writer=joined_writers(c.snippet.writer for c in members),
                  bounded=all(c.snippet.doubtful for c in members))
