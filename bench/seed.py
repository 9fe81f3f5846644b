"""Seed memories for benchmarks: reference JSONL files and tiered Mongo documents, written directly."""

from __future__ import annotations

import random
import time
from pathlib import Path

import orjson

WORDS = ("project budget launch deadline customer invoice meeting travel flight hotel dentist sister brother "
         "garden recipe pasta coffee tea running marathon guitar piano python rust database server cluster "
         "report quarterly revenue churn onboarding design review holiday birthday gift train ticket museum "
         "novel podcast jacket bicycle apartment lease insurance doctor vaccine puppy kitten violin chess").split()


def _vocabulary(size: int = 3000, seed: int = 11) -> list[str]:
    """Real words first, then pronounceable made-up ones: a vocabulary the size of a person's chat."""
    syllables = ["ka", "lo", "mi", "ren", "tas", "vor", "quel", "bri", "son", "dax", "mur", "pel", "tion", "sa",
                 "ge", "fu"]
    made_up = [a + b + c for a in syllables for b in syllables for c in ("", *syllables[:6])]
    random.Random(seed).shuffle(made_up)
    seen = set(WORDS)
    words = list(WORDS)
    for w in made_up:
        if len(words) >= size:
            break
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


VOCAB = _vocabulary()
_ZIPF = list(__import__("itertools").accumulate(1 / (r + 1) ** 1.05 for r in range(len(VOCAB))))


def sentence(rng: random.Random, n: int = 12) -> str:
    """Words drawn with Zipf frequencies, as in natural text (a few common, most rare)."""
    return " ".join(rng.choices(VOCAB, cum_weights=_ZIPF, k=n)).capitalize() + "."


def seeded_memory(agent_id: str, i: int, rng: random.Random, now: float, embedding: list[float] | None = None):
    """The `i`-th memory the benches seed: a Zipf sentence kept as an episode, up to 90 days old."""
    from memory_adapters.engine.record import StoredMemory

    return StoredMemory(agent_id=agent_id, scope="agent", key=f"episode:seed{i}", value=sentence(rng), type="episode",
                        created_at=now - rng.random() * 90 * 86400, updated_at=now - i, embedding=embedding)


def unit_vectors(gen, n: int, dim: int):
    """`n` random unit vectors (float32): search cost does not depend on what a vector means."""
    import numpy as np

    v = gen.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def turn_summaries(count: int, seed: int = 1) -> list[str]:
    """The stored turns every memory-on row of the overhead bench holds (memplane's and peers')."""
    rng = random.Random(seed)
    return [f"User: {sentence(rng)} | Assistant: Noted." for _ in range(count)]


def seed_reference(data_dir: Path, agent_id: str, count: int, seed: int = 1) -> None:
    d = data_dir / agent_id
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "entries.jsonl", "wb") as fh:
        for i, summary in enumerate(turn_summaries(count, seed)):
            rec = {"id": f"hist1_{agent_id}_{i:08d}", "ts": f"2026-11-{1 + i % 28:02d}T10:00:00.000Z",
                   "summary": summary, "session_id": None}
            fh.write(orjson.dumps(rec) + b"\n")


async def seed_tiered(mongo_url: str, agent_counts: dict[str, int], dim: int | None = None, seed: int = 1) -> None:
    """Insert memories straight into MongoDB; with `dim`, each gets a random unit vector
    (search cost does not depend on what a vector means)."""
    from memory_adapters.tiered.documents import to_doc
    from memory_adapters.tiered.ltm import MongoLTM

    ltm = MongoLTM(mongo_url)
    await ltm.ensure_indexes()
    rng = random.Random(seed)
    vectors = None
    if dim:
        import numpy as np
        vectors = np.random.default_rng(seed)
    now = time.time()
    batch = []
    for agent_id, count in agent_counts.items():
        for i in range(count):
            vec = None
            if vectors is not None:
                v = vectors.standard_normal(dim).astype("float32")
                vec = [round(float(x), 4) for x in v / float((v @ v) ** 0.5)]
            batch.append(to_doc(seeded_memory(agent_id, i, rng, now, vec)))
            if len(batch) >= 2000:
                await ltm.memories.insert_many(batch, ordered=False)
                batch = []
    if batch:
        await ltm.memories.insert_many(batch, ordered=False)
    await ltm.close()


async def seed_embedded(data_dir: Path, agent_counts: dict[str, int], dim: int | None = None, seed: int = 1) -> None:
    """Write memories straight into the embedded store's SQLite file, each with a random unit
    vector when `dim` is given (as seed_tiered)."""
    import numpy as np

    from memory_adapters.embedded.sqlite_store import SQLiteStore

    store = SQLiteStore(data_dir)
    await store.open()
    rng, vectors, now = random.Random(seed), np.random.default_rng(seed), time.time()
    for agent_id, count in agent_counts.items():
        for start in range(0, count, 5000):
            batch = [seeded_memory(agent_id, i, rng, now) for i in range(start, min(count, start + 5000))]
            await store.write(batch)
            if dim:
                v = unit_vectors(vectors, len(batch), dim)
                await store.set_vectors([(m.id, row.tobytes()) for m, row in zip(batch, v)])
    await store.close()
