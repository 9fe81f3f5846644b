"""JSONL files per agent under the data dir: entries.jsonl (one record per entry id; a tool loop's
steps, named by the proxy's `loop_key`, keep one between them, the latest step's: a loop that ends
on a tool call whose result never returns is still remembered) and tombstones.jsonl. Survives restarts; concurrent retains for one agent are serialized by a
per-agent lock, and each record is one appended line, so the files never interleave.

Recall returns up to 4 summaries: those sharing most words with the latest user turn first (among
equals the newest: by stamp, then the later stored), then the most recent ones. Words found in over half of an agent's memories (once it has 50) do not
count, and a word counts for its newest 256 memories only, so recall cost does not grow with the
store.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import itertools
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from memplane_core.clock import now_rfc3339
from memplane_core.contract import (
    DEFAULT_BUDGET_TOKENS,
    ForgetRequest,
    RecalledMemory,
    RecallRequest,
    RetainRequest,
)
from memplane_core.private_files import open_append
from memplane_core.provenance import BoundedShare, bounded_block, lead_order
from memplane_core.redact import Redactor
from memplane_core.tokens import estimate_tokens
from memplane_core.turn_text import assistant_text, calls_tools, query_from, session_of, tool_steps, user_text

from ..engine.replies import stated

ENTRIES, TOMBSTONES = "entries.jsonl", "tombstones.jsonl"
SUMMARY_CHARS = 280
RECALL_LIMIT = 4
COMMON_WORD_MIN_RECORDS = 50
POSTINGS_SCANNED = 256  # newest memories per query word: recall cost stays flat as a store grows
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an and are as at be but by can did do does for from had has have how i if in is it its "
    "me my no not of on or our so that the their them then there these they this to was we were "
    "what when where which who why will with you your yes ok okay".split()
)


def tokens(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in _STOP}


def _origin(rec: dict[str, Any]) -> str:
    """Who wrote a summary's words: the user's, with the reply's statements labelled the model's and
    what a tool returned the tool's (docs/DESIGN.md, "Memory poisoning"). A summary stored before
    replies were judged holds the whole reply, so it says the model's words are in it too."""
    summary = str(rec.get("summary", ""))
    if rec.get("tools") or "[tools: " in summary:
        return "user tool"
    return "user model" if rec.get("reply") or "Assistant: " in summary else "user"


def provenance_rule(memories: list[RecalledMemory], budget_tokens: int) -> list[RecalledMemory]:
    """The one provenance policy every memplane service applies (memplane_core/provenance.py): bounded
    summaries within their share of the budget, never leading. A summary holds the user's words, so
    none is bounded today; a summary a tool alone wrote would be."""
    share = BoundedShare.of(budget_tokens)
    kept = [m for m in memories if not bounded_block(m.origin, None) or share.admit(estimate_tokens(m.text))]
    return lead_order(kept, lambda m: bounded_block(m.origin, None))


def summarize(user: str, assistant: str) -> str:
    user = " ".join(user.split())
    assistant = " ".join(assistant.split())
    text = f"User: {user}" if user else ""
    if assistant:
        text = f"{text} | Assistant: {assistant}" if text else f"Assistant: {assistant}"
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


@dataclass
class _Agent:
    """One agent's records, with a newest-first order and a word → ids index, so recall
    touches only the records that share a word with the query."""

    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    tombstones: set[str] = field(default_factory=set)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    words: dict[str, set[str]] = field(default_factory=dict)
    postings: dict[str, dict[str, None]] = field(default_factory=dict)  # word → ids, oldest first
    order: list[str] = field(default_factory=list)  # ids by ts, oldest first
    rank: dict[str, tuple[str, int]] = field(default_factory=dict)  # id → (ts, when stored): `order`'s key
    stored: int = 0  # records added so far (the second half of a rank)
    read_to: dict[str, int] = field(default_factory=dict)  # file name → bytes read (several processes: `follow`)
    loops: dict[str, list[str]] = field(default_factory=dict)  # loop_key → its steps' ids, oldest first
    loop_of: dict[str, str] = field(default_factory=dict)  # a step's id → its loop_key

    def add(self, rec: dict[str, Any]) -> None:
        eid = rec["id"]
        if not self._newest_step(rec):
            return
        self.records[eid] = rec
        self.stored += 1
        self.rank[eid] = (rec["ts"], self.stored)
        words = tokens(rec.get("summary", ""))
        self.words[eid] = words
        for w in words:
            self.postings.setdefault(w, {})[eid] = None
        if not self.order or self.records[self.order[-1]]["ts"] <= rec["ts"]:
            self.order.append(eid)
        else:  # concurrent turns finish out of order: insert in place, not re-sort
            bisect.insort(self.order, eid, key=self.rank.__getitem__)

    def _newest_step(self, rec: dict[str, Any]) -> bool:
        """A step of a tool loop replaces the loop's step kept before it (one memory per loop, from its
        latest step); False: an older step than the one kept (noted as the loop's, not kept)."""
        loop = rec.get("loop")
        if not isinstance(loop, str):
            return True
        steps = self.loops.setdefault(loop, [])
        self.loop_of[rec["id"]] = loop
        steps.append(rec["id"])
        kept = next((e for e in reversed(steps[:-1]) if e in self.records), None)
        if kept is not None and self.records[kept]["ts"] > rec["ts"]:
            return False
        if kept is not None:
            self.drop(kept)
        return True

    def with_loops(self, ids: list[str]) -> list[str]:
        """`ids` and every step of a loop one of them is a step of: forgetting any call of a loop
        forgets the memory its latest step left."""
        out = dict.fromkeys(ids)
        for eid in ids:
            out.update(dict.fromkeys(self.loops.get(self.loop_of.get(eid, ""), ())))
        return list(out)

    def drop(self, eid: str) -> bool:
        rec = self.records.pop(eid, None)
        self.rank.pop(eid, None)
        for w in self.words.pop(eid, ()):
            self.postings.get(w, {}).pop(eid, None)
        if rec is not None:
            self.order.remove(eid)
        return rec is not None


class ReferenceStore:
    """`shared`: one of several processes over these files (`memplane adapter reference --workers
    N`). Each appends its records in one write (O_APPEND: whole lines, never interleaved) and, on
    each call for an agent, reads what the others appended since it last looked (`_follow`)."""

    def __init__(self, data_dir: Path, redactor: Redactor, shared: bool = False) -> None:
        self.data_dir = Path(data_dir)
        self.redactor = redactor
        self.shared = shared
        self._agents: dict[str, _Agent] = {}
        self._loading: dict[str, asyncio.Lock] = {}
        self._files: dict[tuple[str, str], Any] = {}  # open append handles

    async def _agent(self, agent_id: str) -> _Agent:
        agent = self._agents.get(agent_id)
        if agent is not None:
            if self.shared:
                self._follow(agent_id, agent)
            return agent
        lock = self._loading.setdefault(agent_id, asyncio.Lock())
        async with lock:
            if agent_id not in self._agents:
                self._agents[agent_id] = await asyncio.to_thread(self._load, agent_id)
        return self._agents[agent_id]

    def _load(self, agent_id: str) -> _Agent:
        agent = _Agent()
        base = self.data_dir / agent_id
        tombs, agent.read_to[TOMBSTONES] = _read_jsonl(base / TOMBSTONES, torn=not self.shared)
        for rec in tombs:
            if _tombstone(rec):
                agent.tombstones.add(rec["entry_id"])
        entries, agent.read_to[ENTRIES] = _read_jsonl(base / ENTRIES, torn=not self.shared)
        rows = [r for r in entries if _record(r) and r["id"] not in agent.tombstones]
        rows.sort(key=lambda r: r.get("ts", ""))
        for rec in rows:
            if rec["id"] not in agent.records:
                agent.add(rec)
        return agent

    def _follow(self, agent_id: str, agent: _Agent) -> None:
        """What other processes appended for the agent since this one last read: their forgets
        first, then their records (in file order; one this process holds already is skipped). A stat
        per file when nothing changed; the new lines are a few KB from the page cache."""
        for name in (TOMBSTONES, ENTRIES):
            path = self.data_dir / agent_id / name
            try:
                size = os.stat(path).st_size
            except FileNotFoundError:
                continue
            start = agent.read_to.get(name, 0)
            if size <= start:
                continue
            rows, used = _read_jsonl(path, start, torn=False)
            agent.read_to[name] = start + used
            for rec in rows:
                if name == TOMBSTONES:
                    if _tombstone(rec):
                        agent.tombstones.add(rec["entry_id"])
                        agent.drop(rec["entry_id"])
                elif _record(rec) and rec["id"] not in agent.tombstones and rec["id"] not in agent.records:
                    agent.add(rec)

    def _append(self, agent_id: str, name: str, rows: list[dict[str, Any]]) -> None:
        """One unbuffered write per call, so every record is in the file when retain returns;
        the handle stays open (an open and a mkdir per record cost more than the write)."""
        fh = self._files.get((agent_id, name))
        if fh is None:
            fh = self._files[(agent_id, name)] = open_append(self.data_dir / agent_id / name)
        fh.write(b"".join(orjson.dumps(r) + b"\n" for r in rows))

    def close(self) -> None:
        for fh in self._files.values():
            fh.close()
        self._files.clear()

    async def retain(self, req: RetainRequest) -> str:
        return (await self.retain_many([req]))[0]

    async def retain_many(self, reqs: list[RetainRequest]) -> list[str]:
        """Each entry's outcome, as if retained one by one in order; one agent's run of them is
        stored under one hold of its lock with one write. Why: the proxy sends a busy agent's turns
        32 to a call, and a write and a lock per entry were a fifth of the retain work. A failed
        write stores none of the run (the call fails, and the proxy sends it again)."""
        outcomes: list[str] = []
        for agent_id, run in itertools.groupby(reqs, key=lambda r: r.agent_id):
            outcomes += await self._retain_run(agent_id, list(run))
        return outcomes

    async def _retain_run(self, agent_id: str, reqs: list[RetainRequest]) -> list[str]:
        agent = await self._agent(agent_id)
        async with agent.lock:
            outcomes: list[str] = []
            records: list[dict[str, Any]] = []
            taken: set[str] = set()  # stored earlier in this run
            for req in reqs:
                outcome, record = self._record(agent, req, taken)
                outcomes.append(outcome)
                if record is not None:
                    records.append(record)
                    taken.add(record["id"])
            if records:
                # One short write into the page cache: cheaper inline than a hop to a thread.
                self._append(agent_id, ENTRIES, records)
                for record in records:
                    agent.add(record)
            return outcomes

    def _record(self, agent: _Agent, req: RetainRequest, taken: set[str]) -> tuple[str, dict[str, Any] | None]:
        """What retaining `req` comes to: its outcome, and the record to store when it is "stored"."""
        entry = req.entry
        eid = entry["id"]
        if eid in agent.tombstones:
            return "tombstoned", None
        if eid in agent.records or eid in taken or eid in agent.loop_of:
            return "duplicate", None
        loop = entry.get("loop_key") if isinstance(entry.get("loop_key"), str) and entry["loop_key"] else None
        if calls_tools(entry) and loop is None:  # a step of an unnamed tool loop: its last call carries the turn
            return "empty", None
        steps = tool_steps(entry)
        user = user_text(entry)
        # the reply's sentences that state something beyond the user's words (engine/replies.py): its
        # acknowledgements, questions back and echoes are not the person's memory, nor anyone's
        answer = " ".join(stated(assistant_text(entry), user, enough=SUMMARY_CHARS))
        said = bool(answer)
        if steps:
            answer = f"{answer} [tools: {'; '.join(steps)}]".strip()  # the answer first: summaries are short
        summary, _ = self.redactor.text(summarize(user, answer))
        if not summary:
            return "empty", None
        return "stored", {"id": eid, "ts": entry.get("ts") or now_rfc3339(), "summary": summary,
                          "session_id": session_of(entry, req.metadata), **({"tools": True} if steps else {}),
                          **({"reply": True} if said else {}), **({"loop": loop} if loop else {})}

    async def recall(self, req: RecallRequest) -> list[RecalledMemory]:
        agent = await self._agent(req.agent_id)
        query = tokens(req.query if req.query is not None else query_from(req.messages))
        limit = min(req.top_k or RECALL_LIMIT, RECALL_LIMIT)
        # A word found in over half of an agent's memories says nothing about which one is meant
        # (an agent's own boilerplate); skipping it keeps recall proportional to the matches
        # that discriminate, not to the size of the store.
        common = len(agent.records) // 2 if len(agent.records) >= COMMON_WORD_MIN_RECORDS else len(agent.records)
        overlap: Counter[str] = Counter()  # id → query words it shares, counted in C
        for w in query:
            ids = agent.postings.get(w, {})
            if len(ids) > common:
                continue
            overlap.update(itertools.islice(reversed(ids), POSTINGS_SCANNED))
        best = _most_shared(agent, overlap, limit)
        picked = [(round(n / len(query), 3), agent.records[eid]) for n, eid in best]
        seen = {eid for _, eid in best}
        for eid in reversed(agent.order):
            if len(picked) >= limit:
                break
            if eid not in seen:
                picked.append((0.0, agent.records[eid]))
        out = [RecalledMemory(text=rec["summary"], score=score, kind="episode", source="reference",
                              ts=rec["ts"], id=rec["id"], origin=_origin(rec)) for score, rec in picked]
        return provenance_rule(out, req.budget_tokens or DEFAULT_BUDGET_TOKENS)

    async def forget(self, req: ForgetRequest) -> int:
        agent = await self._agent(req.agent_id)
        async with agent.lock:
            ts = now_rfc3339()
            ids = agent.with_loops(req.entry_ids)
            rows = [{"entry_id": eid, "reason": req.reason, "ts": ts} for eid in ids]
            self._append(req.agent_id, TOMBSTONES, rows)
            removed = 0
            for eid in ids:
                agent.tombstones.add(eid)
                removed += agent.drop(eid)
            return removed

    async def health(self) -> dict[str, Any]:
        return {"status": "ok", "adapter": "reference", "data_dir": str(self.data_dir)}

    def loaded_memories(self) -> int:
        return sum(len(a.records) for a in self._agents.values())

    def count(self, agent_id: str) -> int:
        agent = self._agents.get(agent_id)
        return len(agent.records) if agent else 0


NEWEST_SCANNED = 512  # memories looked through, newest first, for the best of equals before ranking them all


def _most_shared(agent: _Agent, overlap: Counter[str], limit: int) -> list[tuple[int, str]]:
    """(shared words, id) of the `limit` memories sharing most words, newest first among equals.

    Why not rank every candidate: a question shares a word with ~250 memories, most of them
    sharing as many words as the best do, and building a key for each was a quarter of the
    service's CPU a turn. Those sharing more than the `limit`-th best are few and are ranked; the
    rest of the answer are the newest sharing exactly as many, found by walking the memories
    newest first (`order`), which usually meets them within a few dozen steps."""
    if len(overlap) <= limit:
        return [(n, eid) for n, _, eid in sorted(((n, agent.rank[e], e) for e, n in overlap.items()), reverse=True)]
    above = 0
    for least, count in sorted(Counter(overlap.values()).items(), reverse=True):
        if above + count >= limit:
            break
        above += count
    top = sorted(((n, agent.rank[e], e) for e, n in overlap.items() if n > least), reverse=True) if above else []
    need = limit - above
    equals: list[str] = []
    for eid in itertools.islice(reversed(agent.order), NEWEST_SCANNED):
        if overlap.get(eid) == least:
            equals.append(eid)
            if len(equals) == need:
                break
    else:  # they are older: rank them all
        equals = [e for _, e in heapq.nlargest(need, ((agent.rank[e], e) for e, n in overlap.items() if n == least))]
    return [(n, eid) for n, _, eid in top] + [(least, eid) for eid in equals]


def _record(rec: dict[str, Any]) -> bool:
    """A line this store can index: a string id and time (a line another process or a hand wrote
    that is JSON but not a record is passed over, as a torn one is: the lines after it still count)."""
    return isinstance(rec.get("id"), str) and bool(rec["id"]) and isinstance(rec.get("ts"), str) and \
        isinstance(rec.get("summary", ""), str)


def _tombstone(rec: dict[str, Any]) -> bool:
    return isinstance(rec.get("entry_id"), str)


def _read_jsonl(path: Path, start: int = 0, torn: bool = True) -> tuple[list[dict[str, Any]], int]:
    """The records from byte `start` on, and how many bytes of whole lines they took. A last line
    without its newline is a torn line from a crash when `torn` (one process: passed over, as
    before); with several processes it may be one being written, read next time."""
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            data = fh.read()
    except FileNotFoundError:
        return [], 0
    used = data.rfind(b"\n") + 1
    if torn:
        used = len(data)
    out = []
    for raw in data[:used].splitlines():
        try:
            rec = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue  # a torn last line from a crash
        if isinstance(rec, dict):
            out.append(rec)
    return out, used
