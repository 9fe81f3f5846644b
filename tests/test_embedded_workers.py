"""`memplane adapter embedded --workers N`: several processes serve recall over the one SQLite
store, and answer as one process would — before and after writes and forgets made through any of
them. Real processes on loopback, the real MiniLM encoder (or none, where only words matter)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from memplane_cli.runner import free_port
from tests.harness import stop, wait_port

BIN = Path(sys.executable).parent / "memplane"

FACTS = ["My sister Lena lives in Porto and teaches chemistry.",
         "I adopted a grey cat called Miso last spring.",
         "Our team ships the billing service every second Tuesday.",
         "The staging database runs Postgres 16 in Frankfurt.",
         "I am allergic to peanuts, so no satay for me.",
         "My daughter's swimming lessons are on Thursday evenings.",
         "We moved the build cache to an S3 bucket in eu-west-1.",
         "My favourite hiking trail is the one above Lake Bled."]
QUESTIONS = ["Where does my sister live?", "What is my cat called?", "When does billing ship?",
             "which database version is staging on", "what food should I avoid?", "what happens on Thursdays",
             "where is the build cache", "any outdoor plans I like?"]
LATE = "The on-call rotation moved to Mondays starting in December."


def entry(eid: str, user: str) -> dict:
    return {"id": eid, "ts": "2026-11-20T10:00:00.000Z",
            "request_original": {"messages": [{"role": "user", "content": user}]},
            "response": {"format": "json", "json": {"choices": [{"message": {"content": "Noted."}}]}}}


class Adapter:
    """One `memplane adapter embedded` command with N workers over `data`."""

    def __init__(self, data: Path, workers: int, log: Path, embeddings: str = "auto") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workers = workers
        self.proc = subprocess.Popen(
            [str(BIN), "adapter", "embedded", "--workers", str(workers), "--port", str(self.port),
             "--data-dir", str(data)], stdout=subprocess.DEVNULL, stderr=open(log, "wb"),
            env={**os.environ, "MEMPLANE_EMBEDDINGS": embeddings})

    async def health(self) -> dict:  # a new connection each time: the kernel picks a worker per connection
        async with aiohttp.ClientSession() as s, s.get(self.url + "/health") as r:
            return await r.json()

    async def ready(self) -> set[int]:
        """Every worker listens and has its encoder; their pids."""
        await wait_port(self.port, 120)
        pids: set[int] = set()
        for _ in range(400):
            pids.add((await self.health())["pid"])
            if len(pids) == self.workers:
                return pids
            await asyncio.sleep(0.05)
        raise AssertionError(f"only {len(pids)} of {self.workers} workers answered")

    async def settled(self, pids: set[int]) -> None:
        """Until every worker's embedding backlog is empty."""
        idle: set[int] = set()
        for _ in range(1200):
            h = await self.health()
            if h["embedding_backlog"] == 0:
                idle.add(h["pid"])
            else:
                idle.discard(h["pid"])
            if idle >= pids:
                return
            await asyncio.sleep(0.05)
        raise AssertionError("embedding backlog never drained")

    async def post(self, path: str, body: dict) -> tuple[int, dict]:
        async with aiohttp.ClientSession() as s, s.post(self.url + path, json=body) as r:
            return r.status, (await r.json() if r.content_type == "application/json" else {})

    async def answers(self, tries: int = 1) -> dict[str, set[str]]:
        """Each question's answers (texts and ranking), each asked `tries` times on new connections."""
        out: dict[str, set[str]] = {}
        for q in QUESTIONS:
            for _ in range(tries):
                status, got = await self.post("/recall", {"agent_id": "ann", "query": q})
                assert status == 200, got
                out.setdefault(q, set()).add(repr(([m["text"] for m in got["memories"]],
                                                   [m.get("score") for m in got["memories"]], got.get("ranking"))))
        return out


pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="workers fork")


async def test_n_workers_answer_every_question_as_one_process_does_before_and_after_writes(tmp_path):
    pytest.importorskip("onnxruntime")
    data = tmp_path / "memory"
    one = Adapter(data, 1, tmp_path / "one.log")
    try:
        pids = await one.ready()
        status, _ = await one.post("/retain/batch", {"agent_id": "ann", "items": [
            {"entry": entry(f"hist1_{i}", t)} for i, t in enumerate(FACTS)]})
        assert status == 200
        await one.settled(pids)
        alone = await one.answers()
    finally:
        stop(one.proc)

    many = Adapter(data, 3, tmp_path / "many.log")
    try:
        pids = await many.ready()
        spread = await many.answers(tries=6)  # 48 new connections: every worker answers some
        assert spread == alone  # one answer per question, the one process's, whichever worker gave it
        assert all("dense+lexical" in a for answers in alone.values() for a in answers)

        # a write through one worker, a forget through another: every worker applies both
        status, _ = await many.post("/retain", {"agent_id": "ann", "entry": entry("hist1_late", LATE)})
        assert status == 202
        status, _ = await many.post("/forget", {"agent_id": "ann", "entry_ids": ["hist1_1"], "reason": "test"})
        assert status == 204
        await many.settled(pids)
        after = await many.answers(tries=6)
        assert all(len(a) == 1 for a in after.values()), after
        assert not any("Miso" in a for answers in after.values() for a in answers)
        health = [await many.health() for _ in range(12)]
        assert sum(h["changes_applied"] for h in health) > 0  # the others' writes were applied, not reloaded
    finally:
        stop(many.proc)
    assert many.proc.returncode == 0

    again = Adapter(data, 1, tmp_path / "again.log")  # one process over the store the workers left
    try:
        await again.ready()
        assert await again.answers() == after
    finally:
        stop(again.proc)


async def test_a_memory_written_through_one_worker_is_found_by_every_worker_at_once(tmp_path):
    """Words only (no encoder), many rounds: no worker ever answers from before a write it could see."""
    a = Adapter(tmp_path / "memory", 2, tmp_path / "a.log", embeddings="off")
    try:
        await a.ready()
        for i in range(12):  # both workers have loaded the agent, still empty
            status, got = await a.post("/recall", {"agent_id": "ann", "query": "where is the staging database"})
            assert got["memories"] == []
        for n in range(8):
            fact = f"Release train {n} leaves from platform {n + 3}."
            status, _ = await a.post("/retain", {"agent_id": "ann", "entry": entry(f"hist1_r{n}", fact)})
            assert status == 202
            for _ in range(4):  # right after the write, on new connections: either worker
                status, got = await a.post("/recall", {"agent_id": "ann", "query": f"release train {n} platform"})
                assert any(fact in m["text"] for m in got["memories"]), (n, got)
            status, _ = await a.post("/forget", {"agent_id": "ann", "entry_ids": [f"hist1_r{n}"], "reason": "t"})
            for _ in range(4):
                status, got = await a.post("/recall", {"agent_id": "ann", "query": f"release train {n} platform"})
                assert not any(fact in m["text"] for m in got["memories"]), (n, got)
            status, again = await a.post("/retain", {"agent_id": "ann", "entry": entry(f"hist1_r{n}", fact)})
            assert status == 202 and again["status"] == "tombstoned"  # either worker knows the tombstone
    finally:
        stop(a.proc)
    assert a.proc.returncode == 0


async def test_memplane_up_serves_its_memory_from_several_processes_when_asked(tmp_path):
    proxy_port, adapter_port = free_port(), free_port()
    proc = subprocess.Popen([str(BIN), "up", "--home", str(tmp_path / "home"), "--port", str(proxy_port),
                             "--adapter-port", str(adapter_port), "--workers", "2", "--memory-workers", "2"],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "up.log", "wb"),
                            env={**os.environ, "MEMPLANE_EMBEDDINGS": "off"})
    memory = Adapter.__new__(Adapter)
    memory.port, memory.url, memory.workers = adapter_port, f"http://127.0.0.1:{adapter_port}", 2
    try:
        pids = await memory.ready()  # two engine processes on the one port, beside the proxy's
        await wait_port(proxy_port, 60)
        status, _ = await memory.post("/retain", {"agent_id": "default", "entry": entry("hist1_up", FACTS[1])})
        assert status == 202
        for _ in range(8):
            status, got = await memory.post("/recall", {"agent_id": "default", "query": "what is my cat called"})
            assert "Miso" in got["memories"][0]["text"]
        assert len(pids) == 2
    finally:
        stop(proc)
    assert proc.returncode == 0


async def test_reference_workers_answer_as_one_process_and_follow_each_others_appends(tmp_path):
    """`memplane adapter reference --workers 2`: each process reads what the others appended."""
    data = tmp_path / "ref"

    def reference(workers: int, log: str) -> Adapter:
        a = Adapter.__new__(Adapter)
        a.port = free_port()
        a.url, a.workers = f"http://127.0.0.1:{a.port}", workers
        a.proc = subprocess.Popen([str(BIN), "adapter", "reference", "--workers", str(workers), "--port", str(a.port),
                                   "--data-dir", str(data)], stdout=subprocess.DEVNULL,
                                  stderr=open(tmp_path / log, "wb"))
        return a

    async def ready(a: Adapter) -> None:  # the reference adapter's /health has no pid: ask until both listen
        await wait_port(a.port, 60)
        for _ in range(100):
            kids = Path(f"/proc/{a.proc.pid}/task/{a.proc.pid}/children").read_text().split()
            if len(kids) >= a.workers:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)

    many = reference(2, "many.log")
    try:
        await ready(many)
        for i in range(12):  # both workers load the agent, still empty
            assert (await many.post("/recall", {"agent_id": "ann", "query": "sister"}))[1]["memories"] == []
        for i, fact in enumerate(FACTS):  # one at a time, on new connections: spread over both workers
            status, _ = await many.post("/retain", {"agent_id": "ann", "entry": entry(f"hist1_{i}", fact)})
            assert status == 202
            for _ in range(4):
                got = (await many.post("/recall", {"agent_id": "ann", "query": fact}))[1]["memories"]
                assert fact in got[0]["text"], (fact, got)
        status, _ = await many.post("/forget", {"agent_id": "ann", "entry_ids": ["hist1_1"], "reason": "test"})
        spread = await many.answers(tries=4)
        assert all(len(a) == 1 for a in spread.values()), spread
        assert not any("Miso" in a for answers in spread.values() for a in answers)
    finally:
        stop(many.proc)
    assert many.proc.returncode == 0
    one = reference(1, "one.log")
    try:
        await ready(one)
        assert await one.answers() == {q: a for q, a in spread.items()}  # one process over the same files
    finally:
        stop(one.proc)


async def test_a_garbled_change_row_is_skipped_and_the_changes_after_it_still_apply(tmp_path):
    """Two processes' services over one store (in one process here, each with its own connection and
    writer name, as `--workers` runs them): a change whose row holds a garbled vector (a torn or
    hand-made write) is reported and skipped; recall does not fail, and what was written after it is
    found."""
    import io
    import sqlite3

    from memory_adapters.embedded.service import EmbeddedMemory
    from memory_adapters.embedded.sqlite_store import DB_FILE, SQLiteStore
    from memory_adapters.engine.dense import Embedder
    from memplane_core.contract import RecallRequest, RetainRequest
    from memplane_core.redaction import Redactor
    from memplane_core.telemetry import Telemetry, make_logger

    log = io.StringIO()
    embedder = Embedder.load()
    one, two = (EmbeddedMemory(SQLiteStore(tmp_path, writer=w), Redactor(), Telemetry(make_logger(log)))
                for w in ("w1", "w2"))
    await one.start(embedder)
    await two.start(embedder)
    try:
        await one.retain(RetainRequest(agent_id="ann", entry=entry("hist1_a", FACTS[0])))
        assert [m.text for m in await two.recall(RecallRequest(agent_id="ann", query=QUESTIONS[0]))]
        db = sqlite3.connect(tmp_path / DB_FILE)
        (item,) = db.execute("SELECT id FROM memories WHERE agent_id = 'ann' LIMIT 1").fetchone()
        for _ in range(600):  # until the writer's own vector is stored: the garbled one comes after it
            if db.execute("SELECT vector FROM memories WHERE id = ?", (item,)).fetchone()[0] is not None:
                break
            await asyncio.sleep(0.05)
        with db:
            db.execute("UPDATE memories SET vector = ? WHERE id = ?", (b"\x01\x02\x03\x04\x05", item))
            db.execute("INSERT INTO changes (writer, agent_id, item, kind, ts) VALUES ('w9', 'ann', ?, 'vector', 0)",
                       (item,))
        db.close()
        await one.retain(RetainRequest(agent_id="ann", entry=entry("hist1_b", FACTS[1])))
        got = await two.recall(RecallRequest(agent_id="ann", query=QUESTIONS[1]))
        assert any("Miso" in m.text for m in got)
        assert "memory_row_skipped" in log.getvalue()
        # a process that loads the agent afresh reads the garbled row by its words
        three = EmbeddedMemory(SQLiteStore(tmp_path, writer="w3"), Redactor(), Telemetry(make_logger(log)))
        await three.start(embedder)
        try:
            got = await three.recall(RecallRequest(agent_id="ann", query="Lena Porto chemistry"))
            assert any("Lena" in m.text for m in got)
        finally:
            await three.close()
    finally:
        await one.close()
        await two.close()


async def test_a_reference_worker_skips_a_garbled_line_and_reads_the_lines_after_it(tmp_path):
    """`memplane adapter reference --workers N`: a line another process (or a hand) appended that is
    JSON but not a record (no time, an id that is a list, a number for a time) is passed over; the
    records before and after it are found by a worker following the file and by one loading it."""
    from memory_adapters.reference.store import ENTRIES, TOMBSTONES, ReferenceStore
    from memplane_core.contract import RecallRequest, RetainRequest
    from memplane_core.redact import Redactor

    one, two = ReferenceStore(tmp_path, Redactor(), shared=True), ReferenceStore(tmp_path, Redactor(), shared=True)
    try:
        await one.retain(RetainRequest(agent_id="ann", entry=entry("hist1_a", FACTS[0])))
        assert await two.recall(RecallRequest(agent_id="ann", query="sister Lena Porto"))
        with open(tmp_path / "ann" / ENTRIES, "ab") as fh:
            fh.write(b'{"id": "x1"}\n{"id": ["l"], "ts": "2026-11-20T10:00:00Z", "summary": "s"}\n'
                     b'{"id": "x3", "ts": 5, "summary": "s"}\n')
        with open(tmp_path / "ann" / TOMBSTONES, "ab") as fh:
            fh.write(b'{"entry_id": ["l"]}\n')
        await one.retain(RetainRequest(agent_id="ann", entry=entry("hist1_b", FACTS[1])))
        got = await two.recall(RecallRequest(agent_id="ann", query="grey cat called Miso"))
        assert any("Miso" in m.text for m in got)
        fresh = ReferenceStore(tmp_path, Redactor(), shared=True)
        got = await fresh.recall(RecallRequest(agent_id="ann", query="sister Lena Porto"))
        assert any("Lena" in m.text for m in got)
        fresh.close()
    finally:
        one.close()
        two.close()
