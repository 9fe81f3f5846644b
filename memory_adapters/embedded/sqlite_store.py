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
from concurrent.futures import ThreadPoolExecutor
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
"""
_DOC_FIELDS = ("agent_id", "scope", "key", "value", "type", "importance", "session_id", "id", "access_count",
               "last_accessed_at", "created_at", "updated_at", "expires_at", "said_at", "metadata",
               "source_entry_ids")


def _doc(m: StoredMemory) -> bytes:
    return orjson.dumps({f: getattr(m, f) for f in _DOC_FIELDS})


def _memory(doc: bytes, vector: bytes | None) -> tuple[StoredMemory, Any]:
    m = StoredMemory(**orjson.loads(doc))
    return m, vector


class SQLiteStore:
    """Memories, retained entry ids and tombstones of every agent, in one file."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memplane-sqlite")
        self._db: sqlite3.Connection | None = None

    # -- on the worker thread --

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(self.data_dir, 0o700)
            path = self.data_dir / DB_FILE
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
            finally:
                os.umask(old)
            self._db = db
        return self._db

    def _run(self, fn, *args):
        import asyncio
        return asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # -- API (coroutines) --

    async def open(self) -> None:
        await self._run(self._conn)

    async def close(self) -> None:
        def shut() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None
        await self._run(shut)
        self._pool.shutdown(wait=True)

    async def load(self, agent_id: str) -> list[tuple[StoredMemory, bytes | None]]:
        def read() -> list[tuple[StoredMemory, bytes | None]]:
            rows = self._conn().execute("SELECT doc, vector FROM memories WHERE agent_id = ?", (agent_id,))
            return [_memory(doc, vec) for doc, vec in rows]
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
                db.executemany("INSERT OR IGNORE INTO retained (agent_id, entry_id) VALUES (?, ?)", list(retained))
                db.executemany("DELETE FROM memories WHERE id = ?", [(i,) for i in dropped])
        await self._run(tx)

    async def set_vectors(self, rows: list[tuple[str, bytes]]) -> None:
        def tx() -> None:
            db = self._conn()
            with db:
                db.execute("BEGIN")
                db.executemany("UPDATE memories SET vector = ? WHERE id = ?", [(v, i) for i, v in rows])
        await self._run(tx)

    async def by_key(self, agent_id: str, scope: str, session_id: str | None, key: str) -> StoredMemory | None:
        def read() -> StoredMemory | None:
            row = self._conn().execute(
                "SELECT doc, vector FROM memories WHERE agent_id=? AND scope=? AND session_id=? AND key=?",
                (agent_id, scope, session_id or "", key)).fetchone()
            return _memory(*row)[0] if row else None
        return await self._run(read)

    async def get(self, memory_id: str) -> StoredMemory | None:
        def read() -> StoredMemory | None:
            row = self._conn().execute("SELECT doc, vector FROM memories WHERE id = ?", (memory_id,)).fetchone()
            return _memory(*row)[0] if row else None
        return await self._run(read)

    async def page(self, *, agent_id: str, scope: str | None, type_: str | None, session_id: str | None,
                   now: float, limit: int, after: tuple[float, str] | None) -> list[StoredMemory]:
        """Newest first by (updated_at, id), after the cursor's position."""
        def read() -> list[StoredMemory]:
            sql = "SELECT doc, vector FROM memories WHERE agent_id = ? AND live_until > ?"
            args: list[Any] = [agent_id, now]
            for column, value in (("scope", scope), ("type", type_), ("session_id", session_id)):
                if value is not None:
                    sql += f" AND {column} = ?"
                    args.append(value)
            if after is not None:
                sql += " AND (updated_at < ? OR (updated_at = ? AND id < ?))"
                args += [after[0], after[0], after[1]]
            sql += " ORDER BY updated_at DESC, id DESC LIMIT ?"
            args.append(limit)
            return [_memory(doc, vec)[0] for doc, vec in self._conn().execute(sql, args)]
        return await self._run(read)

    async def forget(self, agent_id: str, entry_ids: list[str], reason: str, now: float) -> list[str]:
        """Tombstone the entries and delete their memories; the ids of the memories removed."""
        def tx() -> list[str]:
            db = self._conn()
            removed: list[str] = []
            with db:
                db.execute("BEGIN")
                db.executemany("INSERT OR IGNORE INTO tombstones (agent_id, entry_id, reason, ts) VALUES (?,?,?,?)",
                               [(agent_id, e, reason, now) for e in entry_ids])
                for doc, _ in db.execute("SELECT doc, vector FROM memories WHERE agent_id = ? AND type IN"
                                         " ('episode', 'summary', 'directive', 'fact')", (agent_id,)).fetchall():
                    m = StoredMemory(**orjson.loads(doc))  # episodes, and what the curator drew from them
                    if (m.type == "episode" or "curator" in m.metadata) and set(m.source_entry_ids) & set(entry_ids):
                        removed.append(m.id)
                db.executemany("DELETE FROM memories WHERE id = ?", [(i,) for i in removed])
            return removed
        return await self._run(tx)

    async def count(self, agent_id: str | None = None) -> int:
        def read() -> int:
            if agent_id is None:
                return self._conn().execute("SELECT count(*) FROM memories").fetchone()[0]
            return self._conn().execute("SELECT count(*) FROM memories WHERE agent_id = ?", (agent_id,)).fetchone()[0]
        return await self._run(read)
