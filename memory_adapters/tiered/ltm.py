"""Long-term memory in MongoDB (PyMongo's async API). The source of truth for every memory."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pymongo import ASCENDING, DESCENDING, AsyncMongoClient, UpdateMany, UpdateOne
from pymongo.errors import BulkWriteError, OperationFailure, PyMongoError

from ..engine.record import GLOBAL_AGENT, StoredMemory
from .documents import from_doc, to_doc

DUPLICATE_KEY = 11000
MARKS_REKEYED = "retained_marks_keyed_by_entry"  # memplane_meta: the one-time rekey of old marks is done


def _mark_id(agent_id: str, entry_id: str) -> str:
    """A retained mark's primary key: the idempotency check is a lookup by key, not a query."""
    return f"{agent_id}/{entry_id}"


class LTMUnavailable(Exception):
    """MongoDB could not be reached; callers answer 503."""


async def _insert_new(collection: Any, docs: list[dict[str, Any]]) -> set[int]:
    """Insert `docs` in one unordered write; returns the positions of those that already existed
    (duplicate key). Any other failure is MongoDB being unavailable."""
    try:
        await collection.insert_many(docs, ordered=False)
    except BulkWriteError as exc:
        errors = exc.details.get("writeErrors", [])
        if any(e.get("code") != DUPLICATE_KEY for e in errors):
            raise LTMUnavailable(str(exc)[:300]) from None
        return {e["index"] for e in errors}
    except PyMongoError as exc:
        raise LTMUnavailable(str(exc)) from None
    return set()


def _ignore(memory_id: str, error: str) -> None:
    pass


def _upsert(m: StoredMemory) -> tuple[dict[str, Any], dict[str, Any]]:
    """The filter and update that insert `m`, or update the memory holding its (agent_id, scope,
    session_id, key): its fields set, its id, creation time and count kept, its sources added."""
    doc = to_doc(m)
    ident = {"agent_id": m.agent_id, "scope": m.scope, "session_id": m.session_id, "key": m.key}
    on_insert = {"_id": doc["_id"], "created_at": doc["created_at"], "access_count": 0}
    fields = {k: v for k, v in doc.items() if k not in on_insert and k not in ident
              and k not in ("last_accessed_at", "source_entry_ids")}
    return ident, {"$set": fields, "$setOnInsert": on_insert,
                   "$addToSet": {"source_entry_ids": {"$each": doc.get("source_entry_ids", [])}}}


class MongoLTM:
    """`on_bad_row(memory_id, error)` hears of each stored document skipped because it cannot be
    indexed (written by an older version or by hand): one bad row never fails a load or a listing."""

    on_bad_row: Callable[[str, str], None] = staticmethod(_ignore)

    def __init__(self, url: str, *, timeout_ms: int = 3000) -> None:
        self.client: AsyncMongoClient = AsyncMongoClient(url, serverSelectionTimeoutMS=timeout_ms,
                                                         connectTimeoutMS=timeout_ms, tz_aware=True)
        db = self.client.get_default_database(default="memplane")
        self.memories = db["memories"]
        self.retained = db["retained_entries"]
        self.tombstones = db["tombstones"]
        self.meta = db["memplane_meta"]  # one-time migrations done
        self.audit_trail = db["memory_audit"]  # edits made through the REST API (who, when, before/after)

    async def close(self) -> None:
        await self.client.close()

    def _decode(self, doc: dict[str, Any], lenient: bool = False) -> StoredMemory | None:
        """The memory in a document, or None (reported) when it cannot be indexed (`lenient`:
        shown, for listings and lookups by id, so that it can be found and deleted)."""
        try:
            return from_doc(doc, lenient=lenient)
        except ValueError as exc:
            self.on_bad_row(str(doc.get("_id")), str(exc).replace("\n", " ")[:300])
            return None

    async def _decoded(self, cursor: Any, lenient: bool = False) -> list[StoredMemory]:
        return [m for m in [self._decode(d, lenient) async for d in cursor] if m is not None]

    async def ensure_indexes(self) -> list[str]:
        """Create the indexes that do not exist yet (matched by key spec); returns the ones that failed.

        No correctness rests on an index: writes are upserts by the unique key and expiry is
        filtered in every query, so a failed build is reported, not fatal.
        """
        wanted = [
            (self.memories, [("agent_id", ASCENDING), ("scope", ASCENDING), ("session_id", ASCENDING),
                             ("key", ASCENDING)], {"unique": True, "name": "agent_scope_session_key"}),
            (self.memories, [("expires_on", ASCENDING)], {"expireAfterSeconds": 0, "name": "ttl"}),
            (self.memories, [("agent_id", ASCENDING), ("updated_at", DESCENDING)], {"name": "agent_recent"}),
            (self.memories, [("agent_id", ASCENDING), ("source_entry_ids", ASCENDING)], {"name": "agent_sources"}),
            (self.retained, [("agent_id", ASCENDING), ("entry_id", ASCENDING)], {"unique": True, "name": "agent_entry"}),
            (self.tombstones, [("agent_id", ASCENDING), ("entry_id", ASCENDING)], {"unique": True, "name": "agent_entry"}),
            (self.audit_trail, [("agent_id", ASCENDING), ("ts", DESCENDING)], {"name": "agent_ts"}),
        ]
        failed = []
        try:
            # Earlier versions kept a MongoDB text index that no query uses any more (search runs the
            # engine in process); every write paid for it.
            if "text_search" in await self.memories.index_information():
                await self.memories.drop_index("text_search")
            existing: dict[str, list[list]] = {}
            for collection, keys, options in wanted:
                if collection.name not in existing:
                    existing[collection.name] = [list(ix["key"].items()) async for ix in await collection.list_indexes()]
                if [list(k) for k in keys] in [[list(k) for k in ix] for ix in existing[collection.name]]:
                    continue
                try:
                    await collection.create_index(keys, **options)
                except OperationFailure as exc:
                    failed.append(f"{collection.name}.{options['name']}: {exc}")
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None
        return failed

    async def ping(self) -> bool:
        try:
            await self.client.admin.command("ping")
            return True
        except PyMongoError:
            return False

    # -- writes --

    async def upsert(self, m: StoredMemory) -> tuple[StoredMemory, bool]:
        """Insert, or update the memory with the same (agent_id, scope, session_id, key).

        Returns the stored memory and whether it was newly created.
        """
        ident, update = _upsert(m)
        sources = update["$addToSet"]["source_entry_ids"]["$each"]
        try:
            res = await self.memories.update_one(ident, update, upsert=True)
            if res.upserted_id is not None:  # inserted: what we wrote is what is stored
                return replace(m, access_count=0, last_accessed_at=None,
                               source_entry_ids=list(dict.fromkeys(sources))), True
            stored = await self.memories.find_one(ident)
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None
        got = self._decode(stored) if stored else None
        return (got if got is not None else replace(m, id=stored["_id"] if stored else m.id)), False

    async def replace(self, m: StoredMemory) -> None:
        try:
            await self.memories.replace_one({"_id": m.id}, to_doc(m), upsert=True)
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None

    async def delete(self, ids: list[str]) -> int:
        if not ids:
            return 0
        try:
            res = await self.memories.delete_many({"_id": {"$in": ids}})
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None
        return res.deleted_count

    async def enforce_cap(self, agent_id: str, cap: int) -> list[str]:
        """Remove the oldest of the agent's memories beyond `cap`; returns the removed ids."""
        if cap <= 0 or agent_id == GLOBAL_AGENT:
            return []
        try:
            total = await self.memories.count_documents({"agent_id": agent_id})
            if total <= cap:
                return []
            # pinned memories are never the ones removed (the cap may then hold more than `cap`)
            cursor = self.memories.find({"agent_id": agent_id, "metadata.pinned": {"$ne": True}}, {"_id": 1}).sort(
                [("updated_at", ASCENDING), ("_id", ASCENDING)]).limit(total - cap)
            ids = [d["_id"] async for d in cursor]
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None
        await self.delete(ids)
        return ids

    async def bump_access(self, counts: dict[str, int] | list[str], now: float) -> None:
        """Add recall counts ({id: n}, or a list of ids counted once each)."""
        if isinstance(counts, list):
            counts = {i: 1 for i in counts}
        if not counts:
            return
        by_count: dict[int, list[str]] = {}  # one update of many documents per count, not one per memory
        for i, n in counts.items():
            by_count.setdefault(n, []).append(i)
        try:
            await self.memories.bulk_write([UpdateMany({"_id": {"$in": ids}}, {"$inc": {"access_count": n},
                                                                              "$set": {"last_accessed_at": now}})
                                            for n, ids in by_count.items()], ordered=False)
        except PyMongoError:
            pass  # access counts are a ranking hint; losing one bump is harmless

    # -- reads --

    async def get(self, memory_id: str) -> StoredMemory | None:
        try:
            doc = await self.memories.find_one({"_id": memory_id})
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None
        return self._decode(doc, lenient=True) if doc else None

    async def by_key(self, agent_id: str, scope: str, session_id: str | None, key: str) -> StoredMemory | None:
        try:
            doc = await self.memories.find_one({"agent_id": agent_id, "scope": scope, "session_id": session_id,
                                                "key": key})
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None
        return self._decode(doc) if doc else None  # an unreadable one is overwritten

    async def all_for(self, agent_id: str) -> list[StoredMemory]:
        try:
            return await self._decoded(self.memories.find({"agent_id": agent_id}))
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None

    async def newest(self, agent_id: str, limit: int, now: float | None = None) -> list[StoredMemory]:
        now = now or time.time()
        query = {"agent_id": agent_id, "live_until": {"$gt": now}}
        try:
            cursor = self.memories.find(query).sort([("updated_at", DESCENDING)]).limit(limit)
            return await self._decoded(cursor)
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None

    async def add_audit(self, entry: dict[str, Any]) -> None:
        try:
            await self.audit_trail.insert_one(dict(entry))
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None

    async def audit(self, *, agent_id: str, memory_id: str | None, limit: int) -> list[dict[str, Any]]:
        q: dict[str, Any] = {"agent_id": agent_id}
        if memory_id is not None:
            q["memory_id"] = memory_id
        try:
            cursor = self.audit_trail.find(q, {"_id": 0}).sort([("ts", DESCENDING), ("_id", DESCENDING)]).limit(limit)
            return [d async for d in cursor]
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None

    async def page(self, *, agent_id: str, scope: str | None, type_: str | None, session_id: str | None,
                   now: float, limit: int, after: tuple[float, str] | None,
                   since: float | None = None, until: float | None = None) -> list[StoredMemory]:
        """One agent's memories alive at `now`, optionally filtered; keyset pagination on
        (updated_at, _id), newest first."""
        q: dict[str, Any] = {"agent_id": agent_id, "live_until": {"$gt": now}}
        for name, value in (("scope", scope), ("type", type_), ("session_id", session_id)):
            if value is not None:
                q[name] = value
        slack = 64  # rows sharing the cursor's updated_at, skipped below
        when: dict[str, float] = {}
        if since is not None:
            when["$gte"] = since
        if until is not None:
            when["$lt"] = until
        if after is not None:
            when["$lte"] = min(after[0], when.get("$lte", after[0]))
        if when:
            q["updated_at"] = when
        try:
            cursor = self.memories.find(q).sort([("updated_at", DESCENDING), ("_id", DESCENDING)]).limit(limit + slack)
            rows = await self._decoded(cursor, lenient=True)
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None
        if after is not None:
            rows = [m for m in rows if (m.updated_at, m.id) < after]
        return rows[:limit]

    async def by_source(self, agent_id: str, entry_ids: list[str]) -> list[str]:
        try:
            cursor = self.memories.find({"agent_id": agent_id, "source_entry_ids": {"$in": entry_ids}}, {"_id": 1})
            return [d["_id"] async for d in cursor]
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None

    async def agents(self) -> list[str]:
        try:
            return [a for a in await self.memories.distinct("agent_id") if a != GLOBAL_AGENT]
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None

    # -- idempotency and tombstones --

    async def seen_entries(self, agent_id: str, entry_ids: list[str]) -> dict[str, str]:
        """entry id → 'tombstoned' | 'duplicate' for the ids already seen (two queries for a batch;
        retained marks are found by primary key)."""
        async def ids(cursor: Any) -> set[str]:
            return {d["entry_id"] async for d in cursor}

        try:  # both at once: one round trip's wait, not two
            tomb, done = await asyncio.gather(
                ids(self.tombstones.find({"agent_id": agent_id, "entry_id": {"$in": entry_ids}}, {"entry_id": 1})),
                ids(self.retained.find({"_id": {"$in": [_mark_id(agent_id, e) for e in entry_ids]}}, {"entry_id": 1})))
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None
        return {**{e: "duplicate" for e in done}, **{e: "tombstoned" for e in tomb}}

    async def upsert_many(self, memories: list[StoredMemory]) -> None:
        """Write new memories in one unordered insert; any that already exist by (agent, scope,
        session, key) — a batch resent after a crash between its writes — are upserted instead."""
        if not memories:
            return
        failed = await _insert_new(self.memories, [to_doc(m) for m in memories])
        if not failed:
            return
        ops = []
        for m in (memories[i] for i in sorted(failed)):
            doc = to_doc(m)
            ident = {"agent_id": m.agent_id, "scope": m.scope, "session_id": m.session_id, "key": m.key}
            on_insert = {"_id": doc["_id"], "created_at": doc["created_at"], "access_count": 0}
            fields = {k: v for k, v in doc.items() if k not in on_insert and k not in ident
                      and k not in ("last_accessed_at", "source_entry_ids")
                      and not (k == "embedding" and v is None)}  # a vector comes later; never erase one
            ops.append(UpdateOne(ident, {"$set": fields, "$setOnInsert": on_insert,
                                         "$addToSet": {"source_entry_ids": {"$each": m.source_entry_ids}}},
                                 upsert=True))
        try:
            await self.memories.bulk_write(ops, ordered=False)
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None

    async def by_keys(self, agent_id: str, keys: list[str]) -> list[StoredMemory]:
        """The agent's memories under any of `keys` (any scope and session), in one query."""
        if not keys:
            return []
        try:
            return await self._decoded(self.memories.find({"agent_id": agent_id, "key": {"$in": list(dict.fromkeys(keys))}}))
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None

    async def upsert_keyed(self, memories: list[StoredMemory]) -> set[int]:
        """`upsert` for several memories in one unordered bulk write; returns the positions that
        were inserted (the others updated the memory their (agent, scope, session, key) holds)."""
        if not memories:
            return set()
        ops = [UpdateOne(*_upsert(m), upsert=True) for m in memories]
        try:
            res = await self.memories.bulk_write(ops, ordered=False)
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None
        return set(res.upserted_ids)

    async def set_vectors(self, vectors: list[tuple[StoredMemory, list[float]]]) -> None:
        """Embeddings computed after the write, in one bulk write; a memory whose value changed
        meanwhile is left for the vector of its new value."""
        if not vectors:
            return
        try:
            await self.memories.bulk_write([UpdateOne({"_id": m.id, "value": m.value}, {"$set": {"embedding": v}})
                                            for m, v in vectors], ordered=False)
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None

    async def unembedded(self) -> list[StoredMemory]:
        """Memories stored without a vector (a process stopped before it embedded them)."""
        try:
            return await self._decoded(self.memories.find({"embedding": None}))
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None

    async def rekey_marks(self) -> int:
        """Give retained marks written by earlier versions (a random `_id`) the key the
        idempotency lookup uses, so a resent old entry is still a duplicate; returns how many.

        The unique (agent, entry) index forbids old and new side by side, so the old are removed
        first: a crash in between loses only "duplicate" answers — a resent turn's episodes are
        upserted by key, never stored twice — and the next start finds nothing left to rekey."""
        try:
            if await self.meta.find_one({"_id": MARKS_REKEYED}):
                return 0
            old = [d async for d in self.retained.find({}) if not isinstance(d["_id"], str)]  # once, ever
            if old:
                await self.retained.delete_many({"_id": {"$in": [d["_id"] for d in old]}})
                # a mark another process rekeyed at the same time already exists: fine
                await _insert_new(self.retained, [{**{k: v for k, v in d.items() if k != "_id"},
                                                   "_id": _mark_id(d["agent_id"], d["entry_id"])} for d in old])
            await self.meta.update_one({"_id": MARKS_REKEYED}, {"$set": {"at": time.time()}}, upsert=True)
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None
        return len(old)

    async def mark_retained_many(self, agent_id: str, entry_ids: list[str]) -> None:
        """Record entries as retained: one unordered insert keyed by (agent, entry); an entry
        marked already (a resent batch) is not an error."""
        if not entry_ids:
            return
        now = time.time()
        await _insert_new(self.retained, [{"_id": _mark_id(agent_id, e), "agent_id": agent_id, "entry_id": e,
                                           "ts": now} for e in entry_ids])

    async def tombstone(self, agent_id: str, entry_ids: list[str], reason: str) -> None:
        """One unordered insert keyed by (agent, entry), like retained marks: a forget's cost
        follows its ids, in one round trip; an entry tombstoned already (by any version: the
        unique (agent, entry) index) keeps its first reason."""
        if not entry_ids:
            return
        now = time.time()
        await _insert_new(self.tombstones, [{"_id": _mark_id(agent_id, e), "agent_id": agent_id, "entry_id": e,
                                             "reason": reason, "ts": now} for e in dict.fromkeys(entry_ids)])

    async def tombstoned(self, agent_id: str) -> set[str]:
        try:
            return {d["entry_id"] async for d in self.tombstones.find({"agent_id": agent_id}, {"entry_id": 1})}
        except PyMongoError as exc:
            raise LTMUnavailable(str(exc)) from None

