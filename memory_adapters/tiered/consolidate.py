"""Consolidation: merge near-duplicate memories, prune the faded ones, and report what changed.

Near-duplicates are memories of one agent, scope, type and project whose content words overlap almost
entirely (the same meaning in different word order or inflection). The newest value wins;
access counts add up; every source entry id is kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..engine.lexical import terms
from ..engine.project_scope import memory_project
from ..engine.record import DAY_S, StoredMemory, is_pinned
from .service import TieredMemory

DUPLICATE_JACCARD = 0.8
PRUNE_AGE_DAYS = 7
YIELD_EVERY = 50  # memories compared between pauses for waiting recalls


def similarity(a: StoredMemory, b: StoredMemory) -> float:
    ta, tb = set(terms(a.value)), set(terms(b.value))
    if not ta or not tb:
        return 0.0
    return len(ta & tb) / len(ta | tb)


@dataclass
class ConsolidationReport:
    merged: list[dict] = field(default_factory=list)
    pruned: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"merged": self.merged, "pruned": self.pruned}


async def consolidate(service: TieredMemory, agent_ids: list[str] | None = None, *,
                      threshold: float | None = None, now: float | None = None) -> ConsolidationReport:
    now = now or time.time()
    threshold = service.settings.consolidation_threshold if threshold is None else threshold
    report = ConsolidationReport()
    for agent_id in agent_ids or await service.ltm.agents():
        memories = sorted(await service.ltm.all_for(agent_id), key=lambda m: m.updated_at, reverse=True)
        gone: set[str] = set()
        for i, keep in enumerate(memories):
            if keep.id in gone:
                continue
            if i % YIELD_EVERY == 0:  # background work: recalls in hand go first
                await service.scheduler.background_turn()
            group = [m for m in memories[i + 1:] if m.id not in gone and not is_pinned(m) and m.type == keep.type
                     and m.scope == keep.scope and m.session_id == keep.session_id
                     and memory_project(m) == memory_project(keep)  # one project's work never merges into another's
                     and similarity(keep, m) >= DUPLICATE_JACCARD]
            if not group:
                continue
            for m in group:
                keep.access_count += m.access_count
                keep.importance = max(keep.importance, m.importance)
                keep.created_at = min(keep.created_at, m.created_at)
                keep.source_entry_ids = sorted(set(keep.source_entry_ids) | set(m.source_entry_ids))
                gone.add(m.id)
            await service.merge(agent_id, keep, [m.id for m in group])
            report.merged.append({"agent_id": agent_id, "kept": keep.id, "value": keep.value,
                                  "merged": [m.id for m in group]})
        for m in memories:
            if m.id in gone or is_pinned(m):
                continue
            if m.composite_importance(now) < threshold and (now - m.created_at) > PRUNE_AGE_DAYS * DAY_S:
                await service.remove(agent_id, [m.id])
                report.pruned.append({"agent_id": agent_id, "id": m.id, "value": m.value[:80],
                                      "composite_importance": round(m.composite_importance(now), 4)})
    return report
