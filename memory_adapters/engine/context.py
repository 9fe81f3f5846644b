"""Rank a turn in its conversation: the answer sits beside the question that names the topic.

In a dialogue the words a question shares are often in the turn before the one that holds the
answer ("What did you do last weekend?" / "We went camping"), so a turn is judged with the
best of its two neighbours: the head of the ranking (the best `DEPTH` hits and the turns next
to them) is reordered by `score + WEIGHT x best neighbour's score`. A turn whose neighbours are
both off topic drops a little; one next to a strong hit rises. A turn that only asks
(`asks`) states nothing a later question could need, so it moves `ASKS_PENALTY` down.

Leave-one-conversation-out on LoCoMo's dev set chose these values (bench/README.md, "Context").
"""

from __future__ import annotations

import math
from collections.abc import Container, Mapping, Sequence

from .episodes import sentences

WEIGHT = 0.25  # share of the best neighbour's fused score a turn gains (z units)
DEPTH = 100  # hits reordered with their neighbours: a full block holds ~60 hits
ASKS_PENALTY = 8.0  # z units a turn that only asks moves down: below the head's statements


def asks(text: str) -> bool:
    """Every sentence is a question: a turn that asks and says nothing else."""
    if not text.rstrip().endswith("?"):  # most memories: no need to split them
        return False
    said = sentences(text)
    return bool(said) and all(s.endswith("?") for s in said)


def rerank(ranked: list[tuple[str, float]], around: Mapping[str, Sequence[str]], floor: float,
           asking: Container[str], *, weight: float | None = None, depth: int | None = None,
           penalty: float | None = None) -> list[tuple[str, float]]:
    """`ranked` (memory id, fused score), best first, with its head reordered in context; the rest
    after it unchanged. `around[id]`: the turns said just before and after it (none for a memory
    outside a conversation, which is then its own context); `floor`: the fused score of a memory
    no signal found, which a neighbour outside `ranked` counts as; `asking`: ids of turns that only
    ask. Unset weight, depth and penalty: the module's."""
    weight = WEIGHT if weight is None else weight
    depth = DEPTH if depth is None else depth
    penalty = ASKS_PENALTY if penalty is None else penalty
    if weight == 0 and penalty == 0:
        return ranked
    at = {d: i for i, (d, _) in enumerate(ranked)}
    seat, near_of = at.get, around.get
    todo: dict[int, Sequence[str]] = {}  # the head and the turns beside it that `ranked` holds
    for i in range(min(depth, len(ranked))):
        todo[i] = near = near_of(ranked[i][0], ())
        for other in near:
            j = seat(other)
            if j is not None and j not in todo:
                todo[j] = near_of(other, ())
    ordered = []
    for i, near in todo.items():
        d, own = ranked[i]
        best = own
        if near:
            best = -math.inf
            for other in near:
                j = seat(other)
                got = ranked[j][1] if j is not None else floor
                if got > best:
                    best = got
        ordered.append((-(own + weight * best - (penalty if d in asking else 0.0)), d, i))
    ordered.sort()  # best first; equal scores by id, as fusion breaks ties
    return ([(ranked[i][0], -neg) for neg, _, i in ordered]
            + [pair for k, pair in enumerate(ranked) if k not in todo])
