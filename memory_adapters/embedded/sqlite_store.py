"""Durable storage for the embedded service: one SQLite database in WAL mode.

Why SQLite: it is in the standard library, one file holds every agent, a batch of retains is
one transaction (one fsync), and WAL lets the index load read while retains write. All calls
run on one worker thread, so the event loop never waits on disk and the connection is never
shared between threads. The database and its WAL are created 0600 in a 0700 directory: they
hold what agents were told.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..engine.record import NEVER, StoredMemory

DB_FILE = "memory.sqlite3"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (
  id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, scope TEXT NOT NULL, key TEXT NOT NULL,
  session_id TEXT NOT NULL DEFAULT '', type TEXT NOT NULL, updated_at REAL NOT NULL,
  live_until REAL NOT NULL, doc BLOB NOT NULL, vector BLOB);
CREATE UNIQUE INDEX IF NOT EXISTS memories_key ON memories(agent_id, scope, session_id, key);
CREATE INDEX IF NOT EXISTS memories_page ON memories(agent_id, updated_at, id);
CREATE TABLE IF NOT EXISTS retained (agent_id TEXT NOT NULL, entry_id TEXT NOT NULL,
  PRIMARY KEY (agent_id, entry_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tombstones (agent_id TEXT NOT NULL, entry_id TEXT NOT NULL, reason TEXT,
  ts REAL, PRIMARY KEY (agent_id, entry_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sources (agent_id TEXT NOT NULL, entry_id TEXT NOT NULL, memory_id TEXT NOT NULL,
  PRIMARY KEY (agent_id, entry_id, memory_id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS sources_memory ON sources(memory_id);
CREATE TABLE IF NOT EXISTS audit (seq INTEGER PRIMARY KEY AUTOINCREMENT, agent_id TEXT NOT NULL,
  memory_id TEXT NOT NULL, ts REAL NOT NULL, doc BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS audit_agent ON audit(agent_id, seq);
CREATE INDEX IF NOT EXISTS audit_memory ON audit(memory_id, seq);
CREATE TABLE IF NOT EXISTS changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, writer TEXT NOT NULL,
  agent_id TEXT NOT NULL, item TEXT NOT NULL, kind TEXT NOT NULL, ts REAL NOT NULL);
"""
# The change log several processes over one store read to keep their indexes in step (`Changes`):
# written only by a store opened with a `writer` name, pruned after CHANGES_KEPT_S (a process that
# fell further behind reloads the agents it holds).
CHANGES_KEPT_S = 600.0
PRUNE_EVERY = 256  # writes between prunes of the change log
# Version 1 added `sources` (entry id -> memories made from it), so that forget costs what it
# forgets, not a scan of the agent's memories; a database from before is indexed once on open.
SCHEMA_VERSION = 1
_BACKFILL_SOURCES = """
INSERT OR IGNORE INTO sources (agent_id, entry_id, memory_id)
SELECT m.agent_id, j.value, m.id FROM memories m, json_each(m.doc, '$.source_entry_ids') j
WHERE json_valid(m.doc) AND json_type(m.doc, '$.source_entry_ids') = 'array' AND j.type = 'text'
"""
_DOC_FIELDS = ("agent_id", "scope", "key", "value", "type", "importance", "session_id", "id", "access_count",
               "last_accessed_at", "created_at", "updated_at", "expires_at", "said_at", "metadata",
               "source_entry_ids")


def _doc(m: StoredMemory) -> bytes:
    return orjson.dumps({f: getattr(m, f) for f in _DOC_FIELDS})


def _checked(doc: bytes) -> StoredMemory:
    """A row the engine can index; ValueError for one it cannot (see StoredMemory.checked)."""
    return StoredMemory.checked(orjson.loads(doc))


def _shown(doc: bytes) -> StoredMemory:
    """A row as a listing shows it; ValueError when it cannot be shown at all."""
    return StoredMemory.shown(orjson.loads(doc))


def _ignore(row_id: str, error: str) -> None:
    pass


@dataclass
class Changes:
    """What other processes wrote after a position in the change log: `(kind, agent_id, item, memory,
    vector)` in order — kind `put` (memory: the row as it is now, None if gone since), `vector`,
    `drop`, `tomb` (item: a forgotten entry id) — and the new position. `gap`: the log no longer
    reaches back that far; the reader reloads what it holds."""

    position: int
    gap: bool
    items: list[tuple[str, str, str, StoredMemory | None, bytes | None]]


def open_store(data_dir: Path) -> sqlite3.Connection:
    """The store's file opened (made 0600 in a 0700 directory, never through a symlink), in WAL mode,
    its schema current."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(data_dir, 0o700)
    path = data_dir / DB_FILE
    if path.is_symlink():
        raise OSError(f"refusing to open {path}: it is a symlink")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)
    old = os.umask(0o077)  # the -wal and -shm files SQLite creates next to it
    try:
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(_SCHEMA)
        if db.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
            with db:
                db.execute("BEGIN")
                db.execute(_BACKFILL_SOURCES)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    finally:
        os.umask(old)
    return db


def prepare_store(data_dir: Path) -> None:
    """Make the store once, before several processes open it. Why: two processes that made a new
    file at once both asked SQLite to turn it to WAL, which takes the file alone and does not wait
    for a lock: one worker failed with "database is locked" and `--workers 2` did not start."""
    open_store(Path(data_dir)).close()


class SQLiteStore:
    """Memories, retained entry ids and tombstones of every agent, in one file.

    `on_bad_row(memory_id, error)` hears of each stored row that is skipped because it cannot be
    read (written by an older version or by hand): one bad row never fails a load or a listing."""

    def __init__(self, data_dir: Path, on_bad_row: Callable[[str, str], None] = _ignore,
                 writer: str | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.on_bad_row = on_bad_row
        self.writer = writer  # set when several processes share the store: each logs its changes (`Changes`)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memplane-sqlite")
        self._db: sqlite3.Connection | None = None
        self._watch: sqlite3.Connection | None = None  # the event loop's own connection: `data_version` only
        self._writes = 0

    def _rows(self, rows, decode: Callable[[bytes], StoredMemory]) -> list[tuple[StoredMemory, bytes | None]]:
        out = []
        for row_id, doc, vector in rows:
            try:
                out.append((decode(doc), vector))
            except ValueError as exc:
                self.on_bad_row(str(row_id), str(exc).replace("\n", " ")[:300])
        return out

    # -- on the worker thread --

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = open_store(self.data_dir)
        return self._db

    def _run(self, fn, *args):
        import asyncio
        return asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # -- API (coroutines) --

    async def open(self) -> None:
        await self._run(self._conn)
        if self.writer is not None:
            self._watch = sqlite3.connect(self.data_dir / DB_FILE, check_same_thread=False, isolation_level=None)

    # -- several processes over one store --

    async def last_change(self) -> int:
        """The change log's position now: where a process that has loaded nothing yet starts."""
        def read() -> int:
            top = self._conn().execute("SELECT seq FROM sqlite_sequence WHERE name = 'changes'").fetchone()
            return top[0] if top else 0
        return await self._run(read)

    def data_version(self) -> int | None:
        """SQLite's `PRAGMA data_version` on the loop's own connection: it changes whenever another
        connection (another process, or this one's worker thread) commits. A few microseconds, no
        disk read: what lets every recall ask "did anyone write?" without a trip to the store's thread."""
        return None if self._watch is None else self._watch.execute("PRAGMA data_version").fetchone()[0]

    async def changes_since(self, seq: int) -> "Changes":
        """Other writers' changes after `seq`, with the rows they touched as they are now."""
        def read() -> Changes:
            db = self._conn()
            with db:
                db.execute("BEGIN")  # one snapshot: the log and the rows agree
                top = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'changes'").fetchone()
                top = top[0] if top else 0
                first = db.execute("SELECT min(seq) FROM changes").fetchone()[0]
                gap = top > seq and (first is None or first > seq + 1)
                rows = [] if gap else db.execute(
                    "SELECT c.kind, c.agent_id, c.item, m.doc, m.vector FROM changes c"
                    " LEFT JOIN memories m ON m.id = c.item AND c.kind IN ('put', 'vector')"
                    " WHERE c.seq > ? AND c.writer != ? ORDER BY c.seq", (seq, self.writer)).fetchall()
            out = []
            for kind, agent_id, item, doc, vector in rows:
                memory = None
                if doc is not None:
                    try:
                        memory = _checked(doc)
                    except ValueError as exc:
                        self.on_bad_row(str(item), str(exc).replace("\n", " ")[:300])
                out.append((kind, agent_id, item, memory, vector))
            return Changes(top, gap, out)
        return await self._run(read)

    def _log(self, db: sqlite3.Connection, kind: str, rows: list[tuple[str, str]]) -> None:
        """Inside a write's transaction: (agent, item) pairs other processes must apply."""
        if self.writer is None or not rows:
            return
        now = time.time()
        db.executemany("INSERT INTO changes (writer, agent_id, item, kind, ts) VALUES (?,?,?,?,?)",
                       [(self.writer, a, i, kind, now) for a, i in rows])
        self._writes += 1
        if self._writes % PRUNE_EVERY == 0:
            db.execute("DELETE FROM changes WHERE ts < ?", (now - CHANGES_KEPT_S,))

    def _agents_of(self, db: sqlite3.Connection, ids: list[str]) -> list[tuple[str, str]]:
        if self.writer is None:
            return []
        out: list[tuple[str, str]] = []
        for i in range(0, len(ids), 500):
            part = ids[i:i + 500]
            out += db.execute(f"SELECT agent_id, id FROM memories WHERE id IN ({','.join('?' * len(part))})",
                              part).fetchall()
        return out

    async def close(self) -> None:
        def shut() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        await self._run(shut)
        self._pool.shutdown(wait=True)

    async def load(self, agent_id: str) -> list[tuple[StoredMemory, bytes | None]]:
        def read() -> list[tuple[StoredMemory, bytes | None]]:
            rows = self._conn().execute("SELECT id, doc, vector FROM memories WHERE agent_id = ?", (agent_id,))
            return self._rows(rows, _checked)
        return await self._run(read)

    async def tombstones(self, agent_id: str) -> set[str]:
        def read() -> set[str]:
            rows = self._conn().execute("SELECT entry_id FROM tombstones WHERE agent_id = ?", (agent_id,))
            return {r[0] for r in rows}
        return await self._run(read)

    async def retained(self, agent_id: str, entry_ids: list[str]) -> set[str]:
        def read() -> set[str]:
            db = self._conn()
            out: set[str] = set()
            for i in range(0, len(entry_ids), 500):
                part = entry_ids[i:i + 500]
                marks = ",".join("?" * len(part))
                out.update(r[0] for r in db.execute(
                    f"SELECT entry_id FROM retained WHERE agent_id = ? AND entry_id IN ({marks})", (agent_id, *part)))
            return out
        return await self._run(read)

    async def write(self, put: list[StoredMemory], *, retained: list[tuple[str, str]] = (),
                    dropped: list[str] = ()) -> None:
        """One transaction: memories upserted, entry ids marked retained, memories removed."""
        def tx() -> None:
            db = self._conn()
            with db:
                db.execute("BEGIN")
                db.executemany(
                    "INSERT INTO memories (id, agent_id, scope, key, session_id, type, updated_at, live_until, doc)"
                    " VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET scope=excluded.scope,"
                    " key=excluded.key, session_id=excluded.session_id, type=excluded.type,"
                    " updated_at=excluded.updated_at, live_until=excluded.live_until, doc=excluded.doc",
                    [(m.id, m.agent_id, m.scope, m.key, m.session_id or "", m.type, m.updated_at,
                      m.expires_at if m.expires_at is not None else NEVER, _doc(m)) for m in put])
                db.executemany("DELETE FROM sources WHERE memory_id = ?", [(m.id,) for m in put])
                db.executemany("INSERT OR IGNORE INTO sources (agent_id, entry_id, memory_id) VALUES (?,?,?)",
                               [(m.agent_id, e, m.id) for m in put for e in m.source_entry_ids])
                db.executemany("INSERT OR IGNORE INTO retained (agent_id, entry_id) VALUES (?, ?)", list(retained))
                self._log(db, "put", [(m.agent_id, m.id) for m in put])
                self._log(db, "drop", self._agents_of(db, list(dropped)))
                db.executemany("DELETE FROM memories WHERE id = ?", [(i,) for i in dropped])
                db.executemany("DELETE FROM sources WHERE memory_id = ?", [(i,) for i in dropped])
        await self._run(tx)

    async def set_vectors(self, rows: list[tuple[str, bytes]]) -> None:
        def tx() -> None:
            db = self._conn()
            with db:
                db.execute("BEGIN")
                db.executemany("UPDATE memories SET vector = ? WHERE id = ?", [(v, i) for i, v in rows])
                self._log(db, "vector", self._agents_of(db, [i for i, _ in rows]))
        await self._run(tx)

    async def by_key(self, agent_id: str, scope: str, session_id: str | None, key: str) -> StoredMemory | None:
        def read() -> StoredMemory | None:
            rows = self._conn().execute(
                "SELECT id, doc, vector FROM memories WHERE agent_id=? AND scope=? AND session_id=? AND key=?",
                (agent_id, scope, session_id or "", key)).fetchall()
            got = self._rows(rows, _shown)
            return got[0][0] if got else None
        return await self._run(read)

    async def get(self, memory_id: str) -> StoredMemory | None:
        def read() -> StoredMemory | None:
            rows = self._conn().execute("SELECT id, doc, vector FROM memories WHERE id = ?", (memory_id,)).fetchall()
            got = self._rows(rows, _shown)
            return got[0][0] if got else None
        return await self._run(read)

    async def add_audit(self, entry: dict[str, Any]) -> None:
        """One edit in the audit trail (who, when, what, before and after): kept in this 0600 database."""
        def tx() -> None:
            with self._conn() as db:
                db.execute("INSERT INTO audit (agent_id, memory_id, ts, doc) VALUES (?,?,?,?)",
                           (entry["agent_id"], entry["memory_id"], entry["ts"], orjson.dumps(entry)))
        await self._run(tx)

    async def audit(self, *, agent_id: str, memory_id: str | None, limit: int) -> list[dict[str, Any]]:
        """Newest first."""
        def read() -> list[dict[str, Any]]:
            if memory_id is not None:
                rows = self._conn().execute("SELECT doc FROM audit WHERE memory_id = ? AND agent_id = ?"
                                            " ORDER BY seq DESC LIMIT ?", (memory_id, agent_id, limit))
            else:
                rows = self._conn().execute("SELECT doc FROM audit WHERE agent_id = ? ORDER BY seq DESC LIMIT ?",
                                            (agent_id, limit))
            return [orjson.loads(r[0]) for r in rows]
        return await self._run(read)

    async def page(self, *, agent_id: str, scope: str | None, type_: str | None, session_id: str | None,
                   now: float, limit: int, after: tuple[float, str] | None,
                   since: float | None = None, until: float | None = None) -> list[StoredMemory]:
        """Newest first by (updated_at, id), after the cursor's position."""
        def read() -> list[StoredMemory]:
            sql = "SELECT id, doc, vector FROM memories WHERE agent_id = ? AND live_until > ?"
            args: list[Any] = [agent_id, now]
            for column, value in (("scope", scope), ("type", type_), ("session_id", session_id)):
                if value is not None:
                    sql += f" AND {column} = ?"
                    args.append(value)
            if since is not None:
                sql += " AND updated_at >= ?"
                args.append(since)
            if until is not None:
                sql += " AND updated_at < ?"
                args.append(until)
            if after is not None:
                sql += " AND (updated_at < ? OR (updated_at = ? AND id < ?))"
                args += [after[0], after[0], after[1]]
            sql += " ORDER BY updated_at DESC, id DESC LIMIT ?"
            args.append(limit)
            return [m for m, _ in self._rows(self._conn().execute(sql, args), _shown)]
        return await self._run(read)

    async def forget(self, agent_id: str, entry_ids: list[str], reason: str, now: float) -> list[str]:
        """Tombstone the entries and delete the episodes made from them; the ids of the memories
        removed. Found through `sources`, so the cost follows the ids, not the agent's memories."""
        def tx() -> list[str]:
            db = self._conn()
            removed: list[str] = []
            with db:
                db.execute("BEGIN")
                db.executemany("INSERT OR IGNORE INTO tombstones (agent_id, entry_id, reason, ts) VALUES (?,?,?,?)",
                               [(agent_id, e, reason, now) for e in entry_ids])
                for i in range(0, len(entry_ids), 500):
                    part = entry_ids[i:i + 500]
                    marks = ",".join("?" * len(part))
                    removed += [r[0] for r in db.execute(  # episodes, and what the curator drew from them
                        "SELECT DISTINCT s.memory_id FROM sources s JOIN memories m ON m.id = s.memory_id"
                        f" WHERE s.agent_id = ? AND s.entry_id IN ({marks}) AND (m.type = 'episode'"
                        " OR json_type(m.doc, '$.metadata.curator') IS NOT NULL)",
                        (agent_id, *part))]
                removed = list(dict.fromkeys(removed))
                self._log(db, "tomb", [(agent_id, e) for e in entry_ids])
                self._log(db, "drop", [(agent_id, i) for i in removed])
                db.executemany("DELETE FROM memories WHERE id = ?", [(i,) for i in removed])
                db.executemany("DELETE FROM sources WHERE memory_id = ?", [(i,) for i in removed])
            return removed
        return await self._run(tx)

    async def count(self, agent_id: str | None = None) -> int:
        def read() -> int:
            if agent_id is None:
                return self._conn().execute("SELECT count(*) FROM memories").fetchone()[0]
            return self._conn().execute("SELECT count(*) FROM memories WHERE agent_id = ?", (agent_id,)).fetchone()[0]
        return await self._run(read)
