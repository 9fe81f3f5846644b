"""Consolidation of curated memories: duplicates merged, superseded facts marked, faded ones pruned.

Two planners, one plan. The deterministic planner always runs (with or without a model): it
merges exact and near-duplicate memories of one kind and lets the newest statement on a fact
topic win. The LLM planner, when the model is on and the budget allows, also catches what words
alone miss (a fact restated under another topic). A superseded fact is kept for audit with
`metadata.superseded_by`; recall never shows it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from ..lexical import terms
from ..record import DAY_S, StoredMemory

NEAR_DUPLICATE = 0.8  # Jaccard of content words: the same statement in other words or order
PRUNE_AGE_DAYS = 30


def superseded(m: StoredMemory) -> bool:
    return isinstance(m.metadata, dict) and bool(m.metadata.get("superseded_by"))


def topic_of(m: StoredMemory) -> str | None:
    t = m.metadata.get("topic") if isinstance(m.metadata, dict) else None
    return t if isinstance(t, str) and t else None


def said(m: StoredMemory) -> tuple[float, float, str]:
    """Newest statement first: when it was said, then when it was written."""
    return (m.said_at or m.created_at, m.created_at, m.id)


@dataclass
class Plan:
    merges: list[tuple[str, list[str]]] = field(default_factory=list)   # (keep id, dropped ids)
    supersede: list[tuple[str, str]] = field(default_factory=list)     # (old id, new id)
    prune: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.merges or self.supersede or self.prune)


def _similar(a: set[str], b: set[str]) -> bool:
    return bool(a and b) and len(a & b) / len(a | b) >= NEAR_DUPLICATE


def deterministic_plan(memories: list[StoredMemory], *, prune_below: float, now: float | None = None) -> Plan:
    """Exact and near-duplicate directives/facts merged into the newest; per fact topic, the newest
    current fact supersedes the older ones; old, never-recalled, unimportant ones pruned."""
    now = now or time.time()
    plan = Plan()
    live = sorted((m for m in memories if m.type in ("directive", "fact") and not superseded(m)), key=said,
                  reverse=True)
    words = {m.id: set(terms(m.value)) for m in live}
    gone: set[str] = set()
    for i, keep in enumerate(live):
        if keep.id in gone:
            continue
        norm = " ".join(keep.value.casefold().split())
        dups = [m.id for m in live[i + 1:] if m.id not in gone and m.type == keep.type
                and (" ".join(m.value.casefold().split()) == norm or _similar(words[keep.id], words[m.id]))]
        if dups:
            plan.merges.append((keep.id, dups))
            gone.update(dups)
    newest_on: dict[str, str] = {}
    for m in live:  # newest first
        topic = topic_of(m)
        if m.id in gone or m.type != "fact" or topic is None:
            continue
        if topic in newest_on:
            plan.supersede.append((m.id, newest_on[topic]))
        else:
            newest_on[topic] = m.id
    touched = gone | {old for old, _ in plan.supersede}
    for m in live:
        if m.id not in touched and m.composite_importance(now) < prune_below \
                and now - m.created_at > PRUNE_AGE_DAYS * DAY_S:
            plan.prune.append(m.id)
    return plan


def consolidation_prompt(memories: list[StoredMemory]) -> tuple[list[dict[str, str]], dict[str, StoredMemory]]:
    """The agent's current directives and facts, labelled f1…, for the LLM planner."""
    labels: dict[str, StoredMemory] = {}
    lines = []
    for n, m in enumerate(sorted(memories, key=said), 1):
        label = f"f{n}"
        labels[label] = m
        when = datetime.fromtimestamp(m.said_at or m.created_at, timezone.utc).strftime("%Y-%m-%d")
        lines.append(f"[{label} {when} {m.type}{' ' + topic_of(m) if topic_of(m) else ''}] {m.value}")
    system = ("You maintain an assistant's long-term memory. Given its directives and facts (oldest first), list: "
              "duplicates (the same statement: keep the best one, drop the rest), superseded (an older fact that a "
              "newer one replaces, e.g. an old address after a move), prune (trivia not worth keeping). "
              "Use only the labels given. Answer in the JSON schema given.")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(lines)}], labels


def plan_from_answer(answer, labels: dict[str, StoredMemory]) -> Plan:
    """An LLM consolidation answer (schema.Consolidation) as a plan over memory ids; the newer of a
    superseded pair always wins (the model may swap them)."""
    plan = Plan()
    dropped: set[str] = set()
    for d in answer.duplicates:
        drop = [labels[x].id for x in d.drop if labels[x].id not in dropped and x != d.keep]
        if drop and labels[d.keep].id not in dropped:
            plan.merges.append((labels[d.keep].id, drop))
            dropped.update(drop)
    for s in answer.superseded:
        old, new = labels[s.old], labels[s.new]
        if said(old) > said(new):
            old, new = new, old
        if old.id not in dropped and new.id not in dropped:
            plan.supersede.append((old.id, new.id))
    plan.prune = [labels[x].id for x in answer.prune if labels[x].id not in dropped]
    return plan
