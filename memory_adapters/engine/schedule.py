"""Recall first, fairly, and in time: who may rank now, how long a recall may wait for its query
vector, and when background work may use the CPU.

Why: on a small shared machine a recall that waits behind another agent's burst, behind background
embedding or behind a slow encoder comes too late to be used (the proxy's 300 ms budget) — and a
late answer is no memory at all. So:

* each agent has at most `per_agent` recalls in hand; the rest wait their own agent's turn, so one
  agent's flood of recalls cannot push another agent's recall past its deadline;
* a recall told its deadline (`deadline_ms`, CONTRACT §5) waits for its query vector only while
  there is still time to rank after it; otherwise it ranks by words alone ("lexical: deadline") and
  the vector, finished later, goes to the cache for the next time the question is asked;
* background work (embedding backlogs, consolidation) pauses between small steps while recalls are
  in hand, at most `max_pause_s` at a time so that it still progresses under constant load.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from dataclasses import dataclass
from typing import Any

from .character import asks

PER_AGENT = 4  # recalls one agent may have in hand at once (2 cores: more only queue inside)
MAX_PAUSE_S = 1.0  # longest a background step waits for recalls to finish
MIN_RESERVE_S = 0.004  # time kept for ranking and packing after the vector, at the least
MAX_RESERVE_S = 0.04  # and at the most: one stalled ranking must not leave every later recall no time
DENSE_LEXICAL = "dense+lexical"
LEXICAL = "lexical"  # the service has no vectors (embeddings off)
LEXICAL_DEADLINE = "lexical: deadline"  # the query's vector was not ready in time
LEXICAL_ENCODER_FAILED = "lexical: encoder failed"
FEWER_CANDIDATES = "; fewer candidates"
NONE_BUSY = "none: agent busy"  # the agent's own earlier recalls held every slot until the deadline
NONE_LOADING = "none: index loading"
STALE_INDEX = "; index reloading"  # served from the index a reload will replace (tiered)  # the agent's memories were still loading at the deadline
# CONTRACT §5 `degraded` (memplane's extension): a recall answered with less than the service's usual
# ranking says so in one word, so the proxy can mark the turn instead of calling it a success
DEGRADED = {LEXICAL_DEADLINE: "lexical", LEXICAL_ENCODER_FAILED: "lexical", NONE_BUSY: "shed",
            NONE_LOADING: "loading"}


def degraded(ranking: str | None) -> str | None:
    """`lexical` (no dense ranking: the query vector was late or failed), `shed` (turned away to keep
    the deadline), `loading` (the index was not there in time), or None: the usual ranking answered
    (a service without vectors ranks by words by design: `lexical` alone is not degraded)."""
    if not ranking:
        return None
    return DEGRADED.get(ranking.split(";", 1)[0])


class Deadline:
    """A point on the event loop's clock; `None` for a recall that was told no deadline."""

    def __init__(self, deadline_ms: int | None) -> None:
        self.at = None if deadline_ms is None else time.monotonic() + deadline_ms / 1000

    def left(self) -> float | None:
        return None if self.at is None else self.at - time.monotonic()

    def passed(self, reserve: float = 0.0) -> bool:
        left = self.left()
        return left is not None and left <= reserve


@dataclass
class SchedulerStats:
    """Counters `/health` reports: what a user or test can see of the scheduling."""

    recalls: int = 0
    lexical_deadline: int = 0  # answered by words because the vector was late
    fewer_candidates: int = 0
    shed_busy: int = 0  # an agent's own earlier recalls held every slot until the deadline
    background_pauses: int = 0  # background steps that waited for recalls
    background_paused_s: float = 0.0
    lexical_estimate: int = 0  # of lexical_deadline: the encoder's expected wait was already too long
    # where recalls' time went (sums over recalls, seconds): slot, index, query vector, ranking
    slot_s: float = 0.0
    index_s: float = 0.0
    vector_s: float = 0.0
    ranking_s: float = 0.0
    ranking_cpu_s: float = 0.0  # of ranking_s, the loop thread's own CPU (the rest: waiting for a core)

    def as_dict(self) -> dict[str, Any]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


@dataclass
class Asked:
    """A query vector asked of the encoder (`QueryBatcher.submit`), and when it should be ready."""

    queries: Any
    future: asyncio.Future
    ready_at: float  # on time.monotonic(): now plus the encoder's expected wait when asked
    given_up: bool = False

    def give_up(self) -> None:
        """Stop waiting (once; a no-op once the vector is there)."""
        if not self.given_up and not self.future.done():
            self.given_up = True
            _give_up(self.queries, self.future)


class RecallScheduler:
    """One per service and event loop."""

    def __init__(self, per_agent: int = PER_AGENT, max_pause_s: float = MAX_PAUSE_S) -> None:
        self.per_agent = max(1, per_agent)
        self.max_pause_s = max_pause_s
        self.stats = SchedulerStats()
        self.in_flight = 0  # recalls entered (waiting for a slot or ranking)
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._users: dict[str, int] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self.rank_s = 0.005  # moving average of ranking + packing time: what to keep after the vector

    # -- recalls --

    async def enter(self, agent_id: str, deadline: Deadline) -> bool:
        """Take one of the agent's slots, waiting at most until the deadline; False: none in time
        (the caller answers without memories, and must still call `leave(agent_id, False)`)."""
        self.in_flight += 1
        self.stats.recalls += 1
        self._idle.clear()
        self._users[agent_id] = self._users.get(agent_id, 0) + 1
        slot = self._slots.get(agent_id)
        if slot is None:
            slot = self._slots[agent_id] = asyncio.Semaphore(self.per_agent)
        left = deadline.left()
        try:
            if left is None or not slot.locked():  # a free slot is taken at once: no timer to arm
                await slot.acquire()
            else:
                async with asyncio.timeout(max(0.0, left - self.reserve())):
                    await slot.acquire()
        except TimeoutError:
            self.stats.shed_busy += 1
            return False
        except BaseException:
            self.leave(agent_id, False)
            raise
        return True

    def leave(self, agent_id: str, held: bool) -> None:
        if held:
            self._slots[agent_id].release()
        self._users[agent_id] -= 1
        if not self._users[agent_id]:  # no one of this agent waits: forget its slots
            del self._users[agent_id]
            del self._slots[agent_id]
        self.in_flight -= 1
        if not self.in_flight:
            self._idle.set()

    def reserve(self) -> float:
        """Time kept after waiting (for a slot, for the vector): ranking, packing and the reply."""
        return min(MAX_RESERVE_S, MIN_RESERVE_S + 3 * self.rank_s)

    def ranked(self, seconds: float) -> None:
        self.rank_s = 0.8 * self.rank_s + 0.2 * min(seconds, MAX_RESERVE_S)

    def ask(self, queries: Any, text: str) -> "Asked | None":
        """Start the query's vector now, so that the encoder works while the agent's index is
        checked or loaded (tiered: a Redis round trip, a MongoDB load); None: no vector to ask for."""
        if queries is None or not text.strip():
            return None
        future = queries.submit(text)
        wait = 0.0 if future.done() else queries.expected_wait()
        return Asked(queries, future, time.monotonic() + wait)

    async def vector(self, asked: "Asked | None", deadline: Deadline) -> tuple[Any, str]:
        """The asked vector if it is ready in time, with the ranking that will answer."""
        if asked is None:
            return None, LEXICAL
        future = asked.future
        if not future.done():
            left = deadline.left()
            if left is not None and asked.ready_at - time.monotonic() > left - self.reserve():
                # the encoder is too far behind for this one: words now, not at the deadline
                asked.give_up()
                self.stats.lexical_deadline += 1
                self.stats.lexical_estimate += 1
                return None, LEXICAL_DEADLINE
            try:
                if left is None:
                    await asyncio.shield(future)
                else:
                    async with asyncio.timeout(max(0.0, left - self.reserve())):
                        await asyncio.shield(future)  # the encoder goes on; its vector is cached
            except TimeoutError:
                if not _ready(future):  # a vector that came in the same loop turn as the deadline is used
                    asked.give_up()
                    self.stats.lexical_deadline += 1
                    return None, LEXICAL_DEADLINE
        if future.cancelled() or future.exception() is not None:
            return None, LEXICAL_ENCODER_FAILED
        return future.result(), DENSE_LEXICAL

    def candidates(self, deadline: Deadline, full: int, size: int) -> int:
        """Fewer candidates per signal when the index is large and what is left barely covers a
        full ranking."""
        left = deadline.left()
        if size > full and left is not None and left < 1.5 * self.rank_s:
            self.stats.fewer_candidates += 1
            return max(50, full // 4)
        return full

    # -- background work --

    async def background_turn(self) -> None:
        """Wait (up to max_pause_s) while recalls are in hand: called before each small step."""
        if self._idle.is_set():
            return
        self.stats.background_pauses += 1
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.max_pause_s):
                await self._idle.wait()
        except TimeoutError:
            pass
        self.stats.background_paused_s += time.monotonic() - started


def _give_up(queries: Any, future: asyncio.Future) -> None:
    """Stop waiting for a query vector: it no longer holds the line for the questions after it."""
    future.add_done_callback(_consume)  # a late failure is not an unretrieved error
    abandon = getattr(queries, "abandon", None)
    if abandon is not None:
        abandon(future)


def _consume(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


def _ready(future: asyncio.Future) -> bool:
    """Done with a result. Why ask after a timeout: when the event loop was held up (a long ranking,
    the process off the CPU), the result and the timeout come due in the same loop turn, and the
    timeout wins that tie although the result is there."""
    return future.done() and not future.cancelled() and future.exception() is None


async def within(awaitable: Any, deadline: Deadline, reserve: float = 0.0) -> tuple[bool, Any]:
    """(True, result) if `awaitable` finishes `reserve` seconds before the deadline, else (False,
    None) while it goes on in the background (an index load another recall will use). A result
    that is already there (not awaitable: the indexes are loaded) is used as it is. Why: a task and
    a yield for it cost the recall a whole turn of a busy event loop while it holds one of its
    agent's slots — at 32 recalls of one agent in flight a third of them waited past their deadline
    for a slot (`none: agent busy`)."""
    if not inspect.isawaitable(awaitable):
        return True, awaitable
    task = asyncio.ensure_future(awaitable)
    left = deadline.left()
    if left is None:
        return True, await task
    await asyncio.sleep(0)  # its first step: an index already loaded is ready now, whatever the time
    if task.done():
        return True, task.result()
    try:
        async with asyncio.timeout(max(0.0, left - reserve)):
            return True, await asyncio.shield(task)
    except TimeoutError:
        if _ready(task):  # done in the same loop turn as the deadline
            return True, task.result()
        task.add_done_callback(_consume)
        return False, None


async def timely_recall(scheduler: RecallScheduler, queries: Any, agent_id: str, deadline: Deadline,
                        indexes: Any, q: Any, visible: Any = None, stale: Any = None, recall: Any = None) -> Any:
    """A recall that answers before its deadline with the best it has: a slot among the agent's
    own recalls, the agent's index (`indexes()` → (own, shared), or an awaitable of them while they
    are not all loaded; a load that cannot finish in time
    goes on for the next recall, and `stale()` → (own, shared) | None serves the index it
    replaces meanwhile), the query vector if ready in time, then the fused ranking — lexical alone,
    or with fewer candidates, when time is short; `recall` packs (default `index.recall_with_shared`).
    Returns an `index.RecallAnswer` that says which."""
    from dataclasses import replace

    from .index import RecallAnswer, recall_with_shared

    stats = scheduler.stats
    t0 = time.perf_counter()
    held = await scheduler.enter(agent_id, deadline)
    t1 = time.perf_counter()
    asked = None
    stats.slot_s += t1 - t0
    try:
        if not held:
            return RecallAnswer([], NONE_BUSY)
        got = indexes()
        known = not inspect.isawaitable(got)  # loaded: the vector is asked of what it says (query_text)
        asked = scheduler.ask(queries, got[0].query_text(q.text) if known else q.text)  # encoded while it loads
        loaded, pair = await within(got, deadline, scheduler.reserve())
        t2 = time.perf_counter()
        stats.index_s += t2 - t1
        suffix = ""
        if not loaded:
            pair = stale() if stale is not None else None
            if pair is None:
                return RecallAnswer([], NONE_LOADING)
            suffix = STALE_INDEX
        own, shared = pair
        if asked is not None and not known and asks(q.text):  # about a speaker's character: asked again without
            text = own.query_text(q.text)  # the names, now that the index says who the speakers are
            if text != q.text:
                asked.give_up()
                asked = scheduler.ask(queries, text)
        vector, ranking = await scheduler.vector(asked, deadline)
        stats.vector_s += time.perf_counter() - t2
        ranking += suffix
        if own.vectors is None:
            vector, ranking = None, LEXICAL
        k = scheduler.candidates(deadline, q.candidates, len(own))
        if k < q.candidates:
            ranking += FEWER_CANDIDATES
        started, cpu = time.perf_counter(), time.thread_time()
        packed = (recall or recall_with_shared)(own, shared, replace(q, vector=vector, candidates=k), visible=visible)
        took = time.perf_counter() - started
        scheduler.ranked(took)
        stats.ranking_s += took
        stats.ranking_cpu_s += time.thread_time() - cpu
        return RecallAnswer(packed, ranking)
    finally:
        if asked is not None:
            asked.give_up()  # not awaited (no index in time, an error): encoded for the cache when idle
        scheduler.leave(agent_id, held)
