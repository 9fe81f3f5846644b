"""The curator: a background worker that turns retained turns into directives and facts, and
keeps them consolidated. It never runs on the recall or retain path: retain only hands it the
new episodes (`observe`, no I/O), and recall only reads what it wrote.

It talks to its memory service through the same operations as the REST API (`MemoryRest`:
store, get, page, delete), so embedded and tiered share this one implementation.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from memplane_core.telemetry import Telemetry

from ..record import StoredMemory, is_pinned
from .budget import Budget
from .config import CuratorSettings
from .consolidation import Plan, consolidation_prompt, deterministic_plan, plan_from_answer, superseded, topic_of
from .extraction import CURATED_TYPES, memories_from, prompt
from .llm_client import LLMClient, LLMRefused, LLMUnavailable
from .metrics import CuratorMetrics
from .schema import Consolidation, Extraction, response_format
from .window import Window, Windows

WINDOWS_PER_TICK = 8  # extraction calls one tick makes at most (then the next tick goes on)
MAX_CURATED_LISTED = 5000  # curated memories of one agent read for consolidation
STOP_GRACE_S = 10.0  # what shutdown waits for the pass in hand (like the embedding backlog's batch)


class Curator:
    def __init__(self, settings: CuratorSettings, store: Any, telemetry: Telemetry, *,
                 llm: LLMClient | None = None, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.store = store  # memory_adapters.http.rest_api.MemoryRest
        self.telemetry = telemetry
        self.clock = clock
        if llm is None and settings.llm_on:
            llm = LLMClient(settings.base_url, settings.api_key, settings.model, timeout_s=settings.timeout_s)
        self.llm = llm
        self.windows = Windows(settings)
        self.budget = Budget(settings.daily_tokens, clock)
        self.metrics = CuratorMetrics(self.budget.paused_agents, lambda: len(self.windows))
        self._dirty: set[str] = set()  # agents with curated changes since their last consolidation
        self._last_consolidation: float | None = None
        self._task: asyncio.Task | None = None
        self._pass: asyncio.Task | None = None  # the pass in hand, which stop() lets finish

    # -- lifecycle --

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        """Stop the worker; the pass in hand gets STOP_GRACE_S to finish, then is cancelled."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._pass is not None and not self._pass.done():
            try:  # the pass in hand finishes (a write cancelled halfway can hang a store's close), up to 10 s
                await asyncio.wait_for(asyncio.shield(self._pass), STOP_GRACE_S)
            except (asyncio.TimeoutError, Exception):
                self._pass.cancel()
                await asyncio.gather(self._pass, return_exceptions=True)
        if self.llm is not None:
            await self.llm.close()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.interval_s)
            self._pass = asyncio.ensure_future(self.run_once())
            try:
                await asyncio.shield(self._pass)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the worker outlives any one failure
                self.telemetry.warning("curator_failed", error=f"{type(exc).__name__}: {exc}"[:300])

    # -- the retain side: counting only --

    def observe(self, agent_id: str, memories: list[StoredMemory]) -> None:
        """New episodes of `agent_id` (called by retain; counts, never waits)."""
        if self.llm is not None:
            self.windows.observe(agent_id, memories)
        else:  # deterministic mode: consolidation only, of agents that are active
            self._dirty.add(agent_id)

    # -- the worker --

    async def run_once(self) -> dict[str, int]:
        """One pass: due extractions (bounded), then consolidation of touched agents when it is time."""
        now = self.clock()
        done = {"extracted": 0, "consolidated": 0}
        for w in self.windows.due(now)[:WINDOWS_PER_TICK]:
            try:
                if await self.extract(w):
                    done["extracted"] += 1
            except Exception as exc:  # one agent's bad window never stops the next
                self.windows.failed(w, self.clock())
                self.telemetry.warning("curator_extract_failed", agent_id=w.agent_id,
                                       error=f"{type(exc).__name__}: {exc}"[:300])
        last = self._last_consolidation
        if self._dirty and (last is None or now - last >= self.settings.consolidate_every_s):
            self._last_consolidation = now
            for agent_id in sorted(self._dirty):
                self._dirty.discard(agent_id)
                try:
                    await self.consolidate(agent_id)
                    done["consolidated"] += 1
                except Exception as exc:  # tried again at the next period
                    self._dirty.add(agent_id)
                    self.telemetry.warning("curator_consolidate_failed", agent_id=agent_id,
                                           error=f"{type(exc).__name__}: {exc}"[:300])
        return done

    def _may_spend(self, agent_id: str) -> bool:
        if self.budget.newly_paused(agent_id):
            self.telemetry.warning("curator_paused", agent_id=agent_id, daily_tokens=self.settings.daily_tokens,
                                   detail="daily curator token budget spent; curation resumes tomorrow (UTC)")
        return self.budget.allows(agent_id)

    async def _ask(self, agent_id: str, task: str, messages: list[dict[str, str]], model: type, name: str,
                   labels: dict) -> Any | None:
        """One structured call, charged to the agent; the validated answer, or None (logged, counted)."""
        try:
            answer = await self.llm.structured(messages, response_format(model, name))
        except LLMUnavailable as exc:
            self.metrics.calls.labels(task, "unavailable").inc()
            self.budget.failed(agent_id)
            self.telemetry.warning("curator_llm_unavailable", agent_id=agent_id, task=task, error=str(exc)[:300])
            return None
        except LLMRefused as exc:
            self.metrics.calls.labels(task, "refused").inc()
            if exc.answer is not None:
                self._charge(agent_id, exc.answer)
            self.budget.invalid(agent_id)
            self.telemetry.warning("curator_llm_refused", agent_id=agent_id, task=task, error=str(exc)[:300])
            return None
        self._charge(agent_id, answer)
        try:
            parsed = model.model_validate_json(answer.content, context={"labels": set(labels)})
        except ValidationError as exc:
            self.metrics.calls.labels(task, "invalid").inc()
            self.budget.invalid(agent_id)
            err = exc.errors()[0]
            self.telemetry.warning("curator_invalid_output", agent_id=agent_id, task=task,
                                   field=".".join(str(p) for p in err["loc"]) or "<root>", error=err["msg"][:200],
                                   errors=exc.error_count(), answer=answer.content[:200])
            return None
        self.metrics.calls.labels(task, "ok").inc()
        return parsed

    def _charge(self, agent_id: str, answer) -> None:
        self.budget.charge(agent_id, answer.prompt_tokens, answer.completion_tokens)
        self.metrics.tokens.labels("prompt").inc(answer.prompt_tokens)
        self.metrics.tokens.labels("completion").inc(answer.completion_tokens)

    async def extract(self, w: Window) -> bool:
        """Extract one window; True when its memories were written. A failed or invalid answer leaves
        the window pending, to be tried again later (backing off); nothing of it is stored."""
        if not self._may_spend(w.agent_id):
            self.windows.postpone(w, _next_utc_midnight(self.clock()))
            return False
        ids = w.episode_ids[: self.settings.max_window_messages]
        episodes = [m for m in [await self.store.get_memory(i) for i in ids] if m is not None]  # forgotten: gone
        if not episodes:
            self.windows.consumed(w, ids)
            return False
        topics = sorted({t for m in await self.curated(w.agent_id) if m.type == "fact" and not superseded(m)
                         for t in [topic_of(m)] if t})
        messages, labels = prompt(episodes, topics)
        answer = await self._ask(w.agent_id, "extract", messages, Extraction, "memplane_extraction", labels)
        if answer is None:
            self.windows.failed(w, self.clock())
            return False
        made = memories_from(answer, labels, agent_id=w.agent_id, session_id=w.session_id,
                             model=self.settings.model or "")
        await self._write_new(made)
        await self._drop_if_forgotten(made, episodes)
        self.windows.consumed(w, ids)
        self._dirty.add(w.agent_id)
        self.telemetry.info("curator_extracted", agent_id=w.agent_id, messages=len(episodes),
                            directives=len(answer.directives), facts=len(answer.facts))
        return True

    async def _write_new(self, made: list[StoredMemory]) -> None:
        """Write what is not there yet: the same extraction written again changes nothing."""
        for m in made:
            old = await self.store.get_memory(m.id)
            if old is not None and old.value == m.value:
                continue
            await self.store.store_memory(m)
            self.metrics.written.labels(m.type).inc()

    async def _drop_if_forgotten(self, made: list[StoredMemory], episodes: list[StoredMemory]) -> None:
        """A turn forgotten while the model was thinking: what was drawn from it goes too."""
        gone = {e for m in episodes if await self.store.get_memory(m.id) is None for e in m.source_entry_ids}
        for m in made:
            if gone & set(m.source_entry_ids):
                await self.store.delete_memory(m.id)

    async def curated(self, agent_id: str) -> list[StoredMemory]:
        out: list[StoredMemory] = []
        for kind in CURATED_TYPES:
            after = None
            while len(out) < MAX_CURATED_LISTED:
                page = await self.store.page(agent_id=agent_id, scope=None, type_=kind, session_id=None, limit=500,
                                             after=after)
                out += [m for m in page if kind != "fact" or "curator" in m.metadata]
                if len(page) < 500:
                    break
                after = (page[-1].updated_at, page[-1].id)
        return out

    async def consolidate(self, agent_id: str) -> Plan:
        """LLM plan first (when on and within budget), then the deterministic pass; both applied."""
        total = Plan()
        memories = [m for m in await self.curated(agent_id) if m.type in ("directive", "fact")]
        current = [m for m in memories if not superseded(m)]
        if self.llm is not None and len(current) > 1 and self._may_spend(agent_id):
            messages, labels = consolidation_prompt(current)
            answer = await self._ask(agent_id, "consolidate", messages, Consolidation, "memplane_consolidation",
                                     labels)
            if answer is not None:
                plan = plan_from_answer(answer, labels)
                await self._apply(agent_id, plan, {m.id: m for m in memories})
                total = plan
                memories = [m for m in await self.curated(agent_id) if m.type in ("directive", "fact")]
        plan = deterministic_plan(memories, prune_below=self.settings.prune_below, now=self.clock())
        await self._apply(agent_id, plan, {m.id: m for m in memories})
        total.merges += plan.merges
        total.supersede += plan.supersede
        total.prune += plan.prune
        if total:
            self.telemetry.info("curator_consolidated", agent_id=agent_id, merged=len(total.merges),
                                superseded=len(total.supersede), pruned=len(total.prune))
        return total

    async def _apply(self, agent_id: str, plan: Plan, by_id: dict[str, StoredMemory]) -> None:
        now = self.clock()
        pinned = {i for i, m in by_id.items() if is_pinned(m)}  # an operator's pin outranks any plan
        for keep_id, drop_ids in plan.merges:
            keep = by_id.get(keep_id)
            drops = [by_id[i] for i in drop_ids if i in by_id and i not in pinned]
            if keep is None or not drops:
                continue
            for d in drops:
                keep.source_entry_ids = list(dict.fromkeys([*keep.source_entry_ids, *d.source_entry_ids]))
                keep.importance = max(keep.importance, d.importance)
                keep.access_count += d.access_count
            keep.metadata = {**keep.metadata, "merged": [*keep.metadata.get("merged", []), *drop_ids][-50:]}
            keep.updated_at = now
            await self.store.store_memory(keep)
            for d in drops:
                await self.store.delete_memory(d.id)
            self.metrics.written.labels("merged").inc(len(drops))
        for old_id, new_id in plan.supersede:
            old = by_id.get(old_id)
            if old is None or old_id in pinned or superseded(old) or new_id not in by_id:
                continue
            old.metadata = {**old.metadata, "superseded_by": new_id, "superseded_at": now}
            old.updated_at = now
            await self.store.store_memory(old)
            self.metrics.written.labels("superseded").inc()
        for memory_id in plan.prune:
            if memory_id in by_id and memory_id not in pinned and await self.store.delete_memory(memory_id):
                self.metrics.written.labels("pruned").inc()

    def usage(self, agent_id: str | None = None) -> dict[str, Any]:
        return {"mode": self.settings.mode, "model": self.settings.model if self.llm is not None else None,
                "daily_tokens": self.settings.daily_tokens, "agents": self.budget.report(agent_id)}


def _next_utc_midnight(now: float) -> float:
    return (now // 86_400 + 1) * 86_400
