"""Two-level ranking: a sitting that matches the question lifts its other turns.

People talk about one thing at a time. When the question's words and meaning find a few turns of
one sitting (one session's conversation on one day), the rest of that sitting is more likely to
hold the parts that share no word with the question ("What does she do with her family on
hikes?" finds the turns about the hike; "We roasted marshmallows" is said three turns on, which
the best neighbour alone, context.py, does not reach). So recall scores the sittings first, by
the mean of their best `TOP` hits, and every turn gains `WEIGHT` x its sitting's score; a sitting
with a single strong hit gains a third as much as one with three. The whole ranking a recall
reads is reordered (the lifted turns rank 200th-300th before this), after the context step.

Only episodes have a sitting: a typed memory (a fact, a preference) is a sitting of its own.
Chosen leave-one-conversation-out on LoCoMo's dev set (bench/README.md, "Memory that connects").
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

WEIGHT = 0.4  # share of its sitting's score a turn gains (fused z units)
TOP = 3  # a sitting's score: the mean of its best TOP hits (fewer hits count as missing)


def sitting_of(m: Any, day: str) -> tuple[str | None, str] | None:
    """The sitting an episode belongs to: its session and the day (or stamp) it was said under."""
    return (m.session_id, day) if m.type == "episode" else None


def lifted(ranked: list[tuple[str, float]], sitting: Mapping[str, Hashable], *, weight: float | None = None,
           top: int | None = None) -> list[tuple[str, float]]:
    """`ranked` (id, score), best first, with each episode's score raised by `weight` x the mean of its
    sitting's best `top` scores in `ranked` (a sitting with fewer counts 0 for each missing); best first
    again. `sitting[id]`: the episode's sitting (`sitting_of`); a memory without one is a sitting of
    its own (it gains `weight / top` x its own score). Unchanged when weight is 0."""
    weight = WEIGHT if weight is None else weight
    top = TOP if top is None else top
    if not weight or len(ranked) < 2:
        return ranked
    get = sitting.get
    scores: dict[Hashable, list[float]] = {}
    for d, s in ranked:
        key = get(d)
        if key is not None:
            got = scores.get(key)
            if got is None:
                scores[key] = [s]
            elif len(got) < top:  # `ranked` is best first: the first `top` are the best
                got.append(s)
    share = weight / top
    # a sitting's scores may be negative (below the mean): its lift then is too; only order matters
    lift = {key: share * sum(got) for key, got in scores.items()}
    out = [(d, s + (lift[key] if (key := get(d)) is not None else share * s)) for d, s in ranked]
    out.sort(key=_by_score)
    return out


def _by_score(pair: tuple[str, float]) -> tuple[float, str]:
    return (-pair[1], pair[0])  # best first; equal scores by id, as fusion breaks ties

