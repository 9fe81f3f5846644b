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

from collections.abc import Callable, Sequence

from .episodes import sentences

WEIGHT = 0.25  # share of the best neighbour's fused score a turn gains (z units)
DEPTH = 100  # hits reordered with their neighbours: a full block holds ~60 hits
ASKS_PENALTY = 8.0  # z units a turn that only asks moves down: below the head's statements


def asks(text: str) -> bool:
    """Every sentence is a question: a turn that asks and says nothing else."""
    said = sentences(text)
    return bool(said) and all(s.endswith("?") for s in said)


def rerank(ids: list[str], scores: list[float], adjacent: Callable[[str], Sequence[str]], floor: float,
           asking: Callable[[str], bool], *, weight: float | None = None, depth: int | None = None,
           penalty: float | None = None) -> list[tuple[int, float]]:
    """The ranking `ids` (best first, fused `scores`) with its head reordered in context, as
    (index into `ids`, score) pairs; the rest after it unchanged. `adjacent(id)`: the turns said
    just before and after it (none for a memory outside a conversation, which is then its own
    context); `floor`: the fused score of a memory no signal found, which a neighbour outside
    `ids` counts as. Unset weight, depth and penalty: the module's."""
    weight = WEIGHT if weight is None else weight
    depth = DEPTH if depth is None else depth
    penalty = ASKS_PENALTY if penalty is None else penalty
    if weight == 0 and penalty == 0:
        return list(enumerate(scores))
    at = {doc: i for i, doc in enumerate(ids)}
    todo: dict[int, Sequence[str]] = {}  # the head and the turns beside it that `ids` holds
    for i in range(min(depth, len(ids))):
        todo[i] = near = adjacent(ids[i])
        for other in near:
            j = at.get(other)
            if j is not None and j not in todo:
                todo[j] = adjacent(other)
    out = []
    for i, near in todo.items():
        own = scores[i]
        best = max([scores[at[n]] if n in at else floor for n in near]) if near else own
        out.append((i, own + weight * best - (penalty if asking(ids[i]) else 0.0)))
    out.sort(key=lambda pair: (-pair[1], ids[pair[0]]))
    return out + [(i, scores[i]) for i in range(len(ids)) if i not in todo]
