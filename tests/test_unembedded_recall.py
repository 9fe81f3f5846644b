"""A memory retained a moment ago has no vector until the embedding backlog reaches it (seconds
after a burst of retains on a slow CPU). Recall ranks it on its words meanwhile — not as if its
meaning were average, which put a new fact that matches the question below older turns that
match it no better (bench/results/HISTORY.md, "Recall in time on a busy machine")."""

from __future__ import annotations

import numpy as np

from memory_adapters.engine import index
from memory_adapters.engine.dense import VectorIndex
from memory_adapters.engine.index import AgentIndex
from memory_adapters.engine.record import StoredMemory

START = 1_700_000_000.0
DIM = 384
QUESTION = "When is the dentist appointment?"


def said(i: int, text: str) -> StoredMemory:
    return StoredMemory(agent_id="a", scope="agent", key=f"episode:{i}", value=text, type="episode",
                        session_id=f"s{i}", id=f"m{i:02d}", said_at=START + i, created_at=START + i)


def at_cosine(query: np.ndarray, cos: float, rng: np.random.Generator) -> np.ndarray:
    """A unit vector whose cosine to `query` is `cos`."""
    other = rng.standard_normal(DIM)
    other -= (other @ query) * query
    other /= np.linalg.norm(other)
    return (cos * query + np.sqrt(1 - cos * cos) * other).astype(np.float32)


def ranking() -> list[str]:
    rng = np.random.default_rng(7)
    query = np.zeros(DIM, dtype=np.float32)
    query[0] = 1.0
    idx = AgentIndex(vectors=VectorIndex(DIM))
    for i in range(40):  # the rest of the conversation: other topics, cosines spread around 0
        idx.put(said(i + 10, f"Ben: the budget meeting on day {i} ran long"), at_cosine(query, rng.uniform(-0.2, 0.2), rng))
    # two turns that say the same words: one embedded long ago, its meaning no closer than average…
    idx.put(said(1, "Ana: the dentist appointment"), at_cosine(query, 0.0, rng))
    # …and one retained a moment ago, still waiting in the embedding backlog
    idx.put(said(2, "Ana: the dentist appointment"))
    return [m.id for m, _ in idx.rank(QUESTION, query)]


def test_a_memory_not_embedded_yet_is_ranked_on_its_words_not_as_an_average_meaning(monkeypatch):
    got = ranking()
    assert got.index("m02") < got.index("m01")
    monkeypatch.setattr(index, "IMPUTE_DENSE", 0.0)  # as before: the mean cosine, a tie broken by id
    got = ranking()
    assert got.index("m01") < got.index("m02")


def test_a_memory_not_embedded_yet_that_does_not_match_the_words_gains_nothing():
    rng = np.random.default_rng(3)
    query = np.zeros(DIM, dtype=np.float32)
    query[0] = 1.0
    idx = AgentIndex(vectors=VectorIndex(DIM))
    for i in range(20):
        idx.put(said(i + 10, f"Ben: the dentist appointment on day {i}"), at_cosine(query, rng.uniform(0.0, 0.3), rng))
    idx.put(said(1, "Ana: I repainted the garden fence"))  # not embedded, shares no word with the question
    assert "m01" not in [m.id for m, _ in idx.rank(QUESTION, query)]


async def test_a_turn_the_agent_just_asked_about_is_embedded_from_its_recall_query(aiohttp_server, tmp_path):
    """The user's message is first the turn's recall query, then the turn's episode: its vector is
    made once. A leading `[time stamp]` is metadata on both sides (the episode keeps it apart), so
    it does not stop the match."""
    import asyncio
    import io

    import aiohttp

    from memory_adapters.embedded.app import build_embedded_app
    from memplane_core.redact import Redactor
    from memplane_core.telemetry import Telemetry, make_logger

    server = await aiohttp_server(build_embedded_app(tmp_path / "mem", redactor=Redactor(),
                                                     telemetry=Telemetry(make_logger(io.StringIO())),
                                                     embeddings="auto"))
    url = f"http://{server.host}:{server.port}"
    said = [f"[1:56 pm on 8 May, 2023] Ana: I repotted fern number {i} on the balcony this morning." for i in range(6)]
    async with aiohttp.ClientSession() as s:
        for i, text in enumerate(said):
            async with s.post(url + "/recall", json={"agent_id": "ana", "query": text, "deadline_ms": 5000}) as r:
                assert r.status == 200
            entry = {"id": f"hist1_{i}", "ts": "2026-01-10T10:00:00.000Z",
                     "request_original": {"messages": [{"role": "user", "content": text}]},
                     "response": {"format": "json", "json": {"choices": [{"message": {"content": "OK."}}]}}}
            async with s.post(url + "/retain/batch", json={"agent_id": "ana", "items": [{"entry": entry}]}) as r:
                assert r.status == 200
        for _ in range(400):
            async with s.get(url + "/health") as r:
                health = await r.json()
            if not health["embedding_backlog"]:
                break
            await asyncio.sleep(0.05)
        async with s.post(url + "/recall", json={"agent_id": "ana", "query": "which plant went into a new pot?"}) as r:
            got = await r.json()
    assert health["embedded"] == 6 and health["embedded_from_queries"] == 6
    assert got["ranking"] == "dense+lexical" and "fern" in got["memories"][0]["text"]


async def test_turns_a_recall_already_embedded_are_stored_while_the_encoder_is_stuck_on_another(
        aiohttp_server, tmp_path):
    """Under load most turns' vectors are made by their own recall, while the backlog's encoder
    works on a text no recall asked. Those turns do not queue behind it: they get their vectors at
    once. (A first-come backlog kept 3,900 of 4,700 turns waiting at the end of a busy feed.)"""
    import asyncio
    import io
    import threading

    import aiohttp

    from memory_adapters.embedded.app import EMBEDDED_SERVICE, build_embedded_app
    from memory_adapters.engine.dense import Embedder
    from memplane_core.redact import Redactor
    from memplane_core.telemetry import Telemetry, make_logger

    class StuckOnOne:
        """The real encoder, except that a call holding the stuck text waits for `gate`."""

        def __init__(self, real):
            self.real, self.engine, self.dim = real, real.engine, real.dim
            self.gate = threading.Event()
            self.stuck = threading.Event()

        def encode(self, texts):
            if any("harbour crane" in t for t in texts):
                self.stuck.set()
                self.gate.wait(60)
            return self.real.encode(texts)

    encoder = StuckOnOne(Embedder.load().encoder)
    server = await aiohttp_server(build_embedded_app(tmp_path / "mem", redactor=Redactor(),
                                                     telemetry=Telemetry(make_logger(io.StringIO())),
                                                     embedder=Embedder(encoder)))
    service = server.app[EMBEDDED_SERVICE]
    url = f"http://{server.host}:{server.port}"

    def entry(i: int, text: str) -> dict:
        return {"entry": {"id": f"hist1_{i}", "ts": "2026-01-10T10:00:00.000Z",
                          "request_original": {"messages": [{"role": "user", "content": text}]},
                          "response": {"format": "json", "json": {"choices": [{"message": {"content": "OK."}}]}}}}

    async def health(s) -> dict:
        async with s.get(url + "/health") as r:
            return await r.json()

    async with aiohttp.ClientSession() as s:
        # retained without a recall (a backfill, an import): only the backlog can embed it
        async with s.post(url + "/retain/batch", json={"agent_id": "ana", "items": [
                entry(0, "Ana: the harbour crane broke down again at noon.")]}) as r:
            assert r.status == 200
        for _ in range(500):
            if encoder.stuck.is_set():
                break
            await asyncio.sleep(0.01)
        assert encoder.stuck.is_set()
        said = [f"Ana: I repotted fern number {i} on the balcony this morning." for i in range(1, 6)]
        for i, text in enumerate(said, 1):  # each turn: its recall (which embeds it), then its retain
            async with s.post(url + "/recall", json={"agent_id": "ana", "query": text, "deadline_ms": 5000}) as r:
                assert r.status == 200
            async with s.post(url + "/retain/batch", json={"agent_id": "ana", "items": [entry(i, text)]}) as r:
                assert r.status == 200
        for _ in range(400):
            during = await health(s)
            if during["embedded"] >= 5 and during["embedding_backlog"] == 1:  # their vectors stored
                break
            await asyncio.sleep(0.05)
        with_vectors = len(service._indexes["ana"].vectors)
        encoder.gate.set()
        for _ in range(400):
            after = await health(s)
            if not after["embedding_backlog"]:
                break
            await asyncio.sleep(0.05)
    assert during["embedded"] == 5 and during["embedding_backlog"] == 1  # only the stuck one waits
    assert with_vectors == 5
    assert after["embedding_backlog"] == 0 and after["embedded"] == 6 and len(service._indexes["ana"].vectors) == 6
