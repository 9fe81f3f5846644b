"""The durable per-agent session ledger, `<history-root>/<agent-id>/history.jsonl` (CONTRACT §6).

One line per entry (`entry.py`: the entry's type and id). Writes go through one thread per ledger so the event loop never
blocks on disk and lines from concurrent turns never interleave. A torn last line (a crash
mid-write) is skipped with a warning on read.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from memplane_core.clock import now_rfc3339
from memplane_core.private_files import append_private, open_append, write_private

from ..errors import ProxyError
from .entry import LedgerEntry, build_entry, entry_id  # noqa: F401 (build_entry, entry_id: imported from here too)

LEDGER_FILE = "history.jsonl"
INDEX_FILE = "history.idx"
TOMBSTONE_FILE = "tombstones.jsonl"
INDEX_EVERY = 512


@dataclass
class LineRef:
    offset: int
    end: int
    entry: LedgerEntry


def _parse_lines(data: bytes, base_offset: int, *, final: bool) -> tuple[list[LineRef], int, int]:
    """Parse complete lines; returns (entries, bytes consumed, torn lines skipped)."""
    out: list[LineRef] = []
    torn = 0
    pos = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:
            if final and data[pos:].strip():
                torn += 1  # no newline at EOF: the writer died mid-line
                pos = len(data)
            break
        line = data[pos:nl]
        if line.strip():
            try:
                out.append(LineRef(base_offset + pos, base_offset + nl + 1, orjson.loads(line)))
            except orjson.JSONDecodeError:
                torn += 1
        pos = nl + 1
    return out, pos, torn


class Ledger:
    def __init__(self, root: Path, *, fsync: bool = False) -> None:
        self.root = Path(root)
        self.fsync = fsync
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger")
        self._files: dict[str, Any] = {}
        self.ends: dict[str, int] = {}  # bytes written per agent, as known to the event loop
        self._lock = threading.Lock()

    def path(self, agent_id: str) -> Path:
        return self.root / agent_id / LEDGER_FILE

    def _append_sync(self, agent_id: str, line: bytes) -> tuple[int, int]:
        with self._lock:  # the loop thread and the ledger thread may both append
            return self._append_locked(agent_id, line)

    def _append_locked(self, agent_id: str, line: bytes) -> tuple[int, int]:
        fh = self._opened(agent_id)
        start = fh.tell()
        fh.write(line)
        if self.fsync:
            os.fsync(fh.fileno())
        return start, start + len(line)

    def _opened(self, agent_id: str) -> Any:
        fh = self._files.get(agent_id)
        if fh is None:
            p = self.path(agent_id)
            fh = open_append(p)
            # A torn line left by a crash must not glue itself to the next entry.
            if fh.tell() > 0:
                with open(p, "rb") as rf:
                    rf.seek(-1, os.SEEK_END)
                    if rf.read(1) != b"\n":
                        fh.write(b"\n")
            self._files[agent_id] = fh
        return fh

    def _open_sync(self, agent_id: str) -> None:
        with self._lock:
            self._opened(agent_id)

    async def ready(self, agent_id: str) -> None:
        """Before the provider is called: the agent's ledger can take the turn (its file opens),
        else 503 — a turn the proxy could not record is never answered, and is better refused
        before it is paid for than after."""
        if agent_id in self._files:
            return
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._open_sync, agent_id)
        except OSError as exc:
            raise _unavailable(exc) from None

    async def append(self, agent_id: str, entry: LedgerEntry, line: bytes | None = None, *,
                     retain: bool = True) -> tuple[int, int]:
        """Append one entry (`line`: its JSON, when the caller has it: `build_entry_json`); returns
        its (start, end) byte offsets in the agent's ledger. (`retain`: the Redis ledger's; here
        retain reads the ledger files after the caller's `submit`.)

        Without fsync the line is one write() into the page cache (microseconds), cheaper than
        the hop to a thread (~150 µs measured), so it happens inline; it is durable against a
        process crash. With fsync (durable against power loss) the write and fsync run on the
        ledger thread, off the event loop.
        """
        line = (orjson.dumps(entry) if line is None else line) + b"\n"
        try:
            if self.fsync or agent_id not in self._files:
                span = await asyncio.get_running_loop().run_in_executor(self._executor, self._append_sync, agent_id,
                                                                        line)
            else:
                span = self._append_sync(agent_id, line)
        except OSError as exc:  # a full disk, a file that went away: the caller's 503, never a traceback
            raise _unavailable(exc) from None
        self.ends[agent_id] = max(self.ends.get(agent_id, 0), span[1])
        return span

    def append_blocking(self, agent_id: str, entry: LedgerEntry) -> tuple[int, int]:
        span = self._executor.submit(self._append_sync, agent_id, orjson.dumps(entry) + b"\n").result()
        self.ends[agent_id] = max(self.ends.get(agent_id, 0), span[1])
        return span

    def size(self, agent_id: str) -> int:
        known = self.ends.get(agent_id)
        if known is not None:
            return known
        try:
            return self.path(agent_id).stat().st_size
        except FileNotFoundError:
            return 0

    async def run(self, fn, *args):
        """Run blocking file work on the ledger's own thread (serialized with appends)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def close(self) -> None:
        """Flush every ledger to disk and stop the writer thread."""
        self._executor.shutdown(wait=True)
        for fh in self._files.values():
            try:
                os.fsync(fh.fileno())
            except OSError:
                pass
            fh.close()
        self._files.clear()

    def agents(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / LEDGER_FILE).exists())

    def read(self, agent_id: str, *, start_offset: int = 0, on_torn=None) -> Iterator[LineRef]:
        """Every valid entry from `start_offset` on, in file order."""
        p = self.path(agent_id)
        if not p.exists():
            return
        chunk = 1 << 20
        with open(p, "rb") as fh:
            fh.seek(start_offset)
            offset = start_offset
            buf = b""
            while True:
                data = fh.read(chunk)
                final = not data
                buf += data
                refs, used, torn = _parse_lines(buf, offset, final=final)
                if torn and on_torn:
                    on_torn(torn)
                yield from refs
                offset += used
                buf = buf[used:]
                if final:
                    return

    # -- the --after index: every INDEX_EVERY-th line's (ts, offset), extended incrementally --

    def index_path(self, agent_id: str) -> Path:
        return self.root / agent_id / INDEX_FILE

    def update_index(self, agent_id: str) -> list[tuple[str, int]]:
        """Bring the sparse ts→offset index up to date, reading only what is new."""
        ip = self.index_path(agent_id)
        points: list[tuple[str, int]] = []
        scanned_to = 0
        count = 0
        if ip.exists():
            for raw in ip.read_bytes().splitlines():
                try:
                    rec = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if "scanned_to" in rec:
                    scanned_to, count = rec["scanned_to"], rec["count"]
                else:
                    points.append((rec["ts"], rec["offset"]))
        size = self.path(agent_id).stat().st_size if self.path(agent_id).exists() else 0
        if size < scanned_to:  # ledger replaced: rebuild
            points, scanned_to, count = [], 0, 0
        if size == scanned_to and ip.exists():
            return points
        for ref in self.read(agent_id, start_offset=scanned_to):
            if count % INDEX_EVERY == 0:
                points.append((ref.entry.get("ts", ""), ref.offset))
            count += 1
            scanned_to = ref.end
        lines = [orjson.dumps({"ts": ts, "offset": off}) + b"\n" for ts, off in points]
        lines.append(orjson.dumps({"scanned_to": scanned_to, "count": count}) + b"\n")
        write_private(ip, b"".join(lines))
        return points

    # -- tombstones and dead letters, as the shared ledger (redis_streams.py) offers them too --

    def tombstones(self, agent_id: str) -> set[str]:
        return read_tombstones(self.root, agent_id)

    def add_tombstones(self, agent_id: str, entry_ids: list[str], reason: str) -> None:
        append_tombstones(self.root, agent_id, entry_ids, reason)

    def dead_letters(self, agent_id: str) -> set[str]:
        from ..retain.files import read_dead_letters

        return read_dead_letters(self.root, agent_id)

    def has_agent(self, agent_id: str) -> bool:
        return (self.root / agent_id).is_dir()

    def seek_offset(self, agent_id: str, after: str) -> int:
        """A byte offset at or before the first entry whose ts is after `after`."""
        points = self.update_index(agent_id)
        if not points:
            return 0
        keys = [ts for ts, _ in points]
        i = bisect.bisect_left(keys, after) - 1
        return points[i][1] if i >= 0 else 0


def read_tombstones(root: Path, agent_id: str) -> set[str]:
    p = Path(root) / agent_id / TOMBSTONE_FILE
    if not p.exists():
        return set()
    ids = set()
    for raw in p.read_bytes().splitlines():
        try:
            ids.add(orjson.loads(raw)["entry_id"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            continue
    return ids


def append_tombstones(root: Path, agent_id: str, entry_ids: list[str], reason: str) -> None:
    ts = now_rfc3339()
    append_private(Path(root) / agent_id / TOMBSTONE_FILE,
                   b"".join(orjson.dumps({"entry_id": eid, "reason": reason, "ts": ts}) + b"\n" for eid in entry_ids))


def _unavailable(exc: OSError) -> ProxyError:
    return ProxyError(503, f"The ledger cannot record this turn ({type(exc).__name__}: {exc.strerror or exc}); "
                           "retry later.", code="ledger_unavailable", headers={"Retry-After": "1"})
