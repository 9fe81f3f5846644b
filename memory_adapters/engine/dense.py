"""Dense embeddings: all-MiniLM-L6-v2 as the int8 ONNX graph that ships with memplane
(`onnx_encoder.py`, `model/`), run by ONNX Runtime and tokenised by `tokenizers` — no torch, no
download, no export at start. `MEMPLANE_EMBEDDINGS=off` leaves recall lexical only.

Memories are embedded on retain (off the hot path, on a worker thread); recall embeds only
the query. Vectors live beside the lexical index in a growable matrix searched by one
matrix-vector product, which stays in the low milliseconds at tens of thousands of memories.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

MODEL_NAME = "all-MiniLM-L6-v2"


@functools.lru_cache(maxsize=None)
def _load_encoder(threads: int) -> Any:
    """Load once per process and thread setting: the weights are read-only and shared by every
    adapter instance. Nothing happens at import; this runs when an adapter starts."""
    try:
        from threadpoolctl import threadpool_limits
        # Vector search is one matrix-vector product per query: BLAS threads spinning on the second
        # core beside the encoder and the event loop slowed recall (bench/README.md).
        threadpool_limits(limits=1, user_api="blas")
    except ImportError:  # a speed-up, not a requirement
        pass
    from .onnx_encoder import OnnxEncoder
    return OnnxEncoder.load(threads=threads)


async def load_embedder(mode: str, telemetry: Any, threads: int = 1) -> "Embedder | None":
    """The one loader both stores use: the shipped MiniLM unless `mode` is 'off'; None (lexical
    recall only) when it is off or cannot load — a broken model never stops the service."""
    if mode == "off":
        telemetry.info("embeddings_off", detail="dense embeddings disabled; lexical recall only")
        return None
    try:
        embedder = await asyncio.to_thread(Embedder.load, threads)
    except Exception as exc:  # a corrupted model file (checksum), a broken onnxruntime install
        telemetry.warning("embeddings_unavailable", error=f"{type(exc).__name__}: {exc}"[:500],
                          detail="dense recall off, lexical only; reinstall memplane to restore the model")
        return None
    telemetry.info("embeddings_on", model=MODEL_NAME, dim=embedder.dim, engine=embedder.engine,
                   encoder_threads=threads)
    return embedder


class Embedder:
    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder
        self.dim = int(encoder.dim)
        self.engine: str = encoder.engine
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()  # queries are embedded on worker threads

    @classmethod
    def load(cls, threads: int = 1) -> "Embedder":
        """The shipped model; raises ModelIntegrityError when a model file fails its checksum.
        `threads`: ONNX Runtime intra-op threads (MEMPLANE_ENCODER_THREADS)."""
        embedder = cls(_load_encoder(max(1, int(threads))))
        try:  # the word table query expansion reads (expansion.py), read now so no recall waits for it
            from .expansion import table
            table()
        except Exception:  # noqa: BLE001 - without it recall is not expanded; the encoder still works
            pass
        return embedder

    def embed(self, texts: list[str]) -> "np.ndarray":
        return self.encoder.encode(texts)

    def cached(self, text: str) -> "np.ndarray | None":
        key = cache_key(text)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
            return hit

    def embed_queries(self, texts: list[str]) -> list["np.ndarray"]:
        """Queries' vectors in one encoder call, from the cache where a query was asked before
        (in any case or spacing: the model's tokenizer lower-cases and splits on whitespace)."""
        keys = [cache_key(t) for t in texts]
        found = {k: v for k in dict.fromkeys(keys) if (v := self.cached(k)) is not None}
        todo = [k for k in dict.fromkeys(keys) if k not in found]
        if todo:
            found.update(zip(todo, self.embed(todo)))
            with self._lock:
                for k in todo:
                    self._cache[k] = found[k]
                while len(self._cache) > QUERY_CACHE:
                    self._cache.popitem(last=False)
        return [found[k] for k in keys]


QUERY_CACHE = 4096  # query vectors kept (1.5 KB each)


def cache_key(text: str) -> str:
    """A query as the encoder sees it: all-MiniLM-L6-v2's tokenizer is uncased and splits on
    whitespace, so case and spacing do not change the vector (and it caps at 256 tokens)."""
    return " ".join(text.lower().split())


def _yield_to_serving() -> None:
    """Run this worker thread at a lower CPU priority (Linux: nice applies per thread), so that
    embedding retained turns never slows an agent's recall on a busy host."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):  # not Linux, or not allowed: same priority, still correct
        pass


class EmbeddingBacklog:
    """What waits for its vector after a retain was acknowledged: drained by two tasks (lanes),
    embedded on one low-priority thread. `len()` — ready, waiting and in hand — is what `/health`
    reports as `embedding_backlog`. Each store says what an item is and how a batch's vectors are kept.

    Why two lanes: a turn's user message is first its recall query, then its episode, so most
    vectors are made by the query encoder (at recall's priority) moments before or after the
    retain. An item whose vector is in the query cache is ready: it is stored at once, in batches,
    without encoding. The rest wait in arrival order and are encoded a short call at a time. Under
    load a first-come line stalled on the one text nobody had encoded while thousands behind it sat
    ready in the cache (the acceptance scale, ten agents on a busy 2-core AVX2 host: 3,900 of 4,700
    turns still waiting when the feed ended; bench/README.md)."""

    BATCH = 64  # ready memories stored per step (one store write of their vectors)
    CHUNK = 16  # texts per encoder call at most: between calls the backlog yields to waiting recalls
    STEP_S = 0.05  # and about this long a call: a slow CPU takes fewer texts a call, not longer calls

    def __init__(self, embedder: Embedder, scheduler: Any = None) -> None:
        self.embedder = embedder
        self.scheduler = scheduler  # engine.schedule.RecallScheduler: pauses while recalls wait
        self.embedded = 0  # texts embedded so far (the bench's catch-up rate)
        self.per_text_s = 0.004  # moving average of one text's encoder time on this machine
        self.reused = 0  # of `embedded`: vectors a recall's query had already made (query cache)
        self._ready: list[Any] = []  # items whose vector is in the query cache
        # cache key → the items waiting for that text, in the order the texts first arrived
        self._waiting: OrderedDict[str, list[Any]] = OrderedDict()
        self._waiting_items = 0
        self._wake = asyncio.Event()  # something waits for encoding
        self._wake_ready = asyncio.Event()  # something is ready to store
        self._in_hand = 0
        self._stopping = False
        self._tasks: list[asyncio.Task] = []
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memplane-embed",
                                        initializer=_yield_to_serving)

    def __len__(self) -> int:
        return len(self._ready) + self._waiting_items + self._in_hand

    def add(self, item: Any, text: str) -> None:
        """`item` needs the vector of `text` (what the store's batch handler will embed)."""
        key = cache_key(text)
        if self.embedder.cached(key) is not None:
            self._ready.append(item)
            self._wake_ready.set()
        else:
            self._waiting.setdefault(key, []).append(item)
            self._waiting_items += 1
            self._wake.set()

    def encoded(self, texts: list[str]) -> None:
        """The query encoder just cached these texts' vectors: items waiting for them are ready."""
        moved = False
        for text in texts:
            items = self._waiting.pop(cache_key(text), None)
            if items:
                self._ready += items
                self._waiting_items -= len(items)
                moved = True
        if moved:
            self._wake_ready.set()

    def chunk(self) -> int:
        """Texts for the next encoder call: as many as take about STEP_S here (CHUNK at most).
        Why: on a CPU without int8 dot-product instructions a text costs several times what it
        costs elsewhere, and a fixed 16-text call held the encoder for a quarter of a second —
        recalls that arrived meanwhile waited for it, and the backlog rarely saw them to yield."""
        return max(1, min(self.CHUNK, int(self.STEP_S / max(self.per_text_s, 1e-6))))

    def _take_ready(self) -> list[Any]:
        batch, self._ready = self._ready[:self.BATCH], self._ready[self.BATCH:]
        return batch

    def _take_waiting(self) -> list[Any]:
        """The items of the oldest waiting texts, one encoder call's worth of texts."""
        batch = []
        for _ in range(min(self.chunk(), len(self._waiting))):
            batch += self._waiting.popitem(last=False)[1]
        self._waiting_items -= len(batch)
        return batch

    async def embed(self, texts: list[str]) -> "np.ndarray":
        """Vectors in short encoder calls (`chunk`); before each, wait while recalls are in hand
        (a recall's query then has the CPU and the encoder to itself). A text a recall already
        asked comes from the query cache: encoding it twice was half the backlog's work."""
        loop = asyncio.get_running_loop()
        out = np.zeros((len(texts), self.embedder.dim), dtype=np.float32)
        todo = self._from_cache(texts, list(range(len(texts))), out)
        while todo:
            if self.scheduler is not None:
                await self.scheduler.background_turn()
                todo = self._from_cache(texts, todo, out)  # a recall may have asked it meanwhile
                if not todo:
                    break
            n = self.chunk()
            part, todo = todo[:n], todo[n:]
            began = time.perf_counter()
            out[part] = await loop.run_in_executor(self._pool, self.embedder.embed, [texts[i] for i in part])
            self.per_text_s = 0.7 * self.per_text_s + 0.3 * (time.perf_counter() - began) / len(part)
            self.embedded += len(part)
        return out

    def _from_cache(self, texts: list[str], todo: list[int], out: "np.ndarray") -> list[int]:
        left = []
        for i in todo:
            hit = self.embedder.cached(texts[i])
            if hit is None:
                left.append(i)
            else:
                out[i] = hit
                self.reused += 1
                self.embedded += 1
        return left

    def start(self, handle: Callable[[list[Any]], Awaitable[None]], on_error: Callable[[Exception], None]) -> None:
        """Hand each batch to `handle` until stopped, in two lanes: ready items (stored without
        encoding) never wait for an encoder call of the other lane. A batch that fails goes to
        `on_error` and the next one is handled as usual (its memories keep being found by their words)."""
        self._tasks = [asyncio.create_task(self._run(handle, on_error, self._take_ready, self._wake_ready)),
                       asyncio.create_task(self._run(handle, on_error, self._take_waiting, self._wake))]

    async def _run(self, handle: Callable[[list[Any]], Awaitable[None]], on_error: Callable[[Exception], None],
                   take: Callable[[], list[Any]], wake: asyncio.Event) -> None:
        while not self._stopping:
            batch = take()
            if not batch:
                wake.clear()
                await wake.wait()
                continue
            self._in_hand += len(batch)
            try:
                await handle(batch)
            except Exception as exc:
                on_error(exc)
            finally:
                self._in_hand -= len(batch)

    async def stop(self, grace_s: float = 10.0) -> None:
        """Let the batches in hand finish — their vectors are saved, and a database write cancelled
        halfway can leave the driver's connection in doubt — then stop; what is still waiting is
        embedded at the next start (both stores find memories without a vector)."""
        self._stopping = True
        self._wake.set()
        self._wake_ready.set()
        tasks, self._tasks = self._tasks, []
        if tasks:
            if self._in_hand:
                await asyncio.wait(tasks, timeout=grace_s)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self._pool.shutdown(wait=False, cancel_futures=True)


class QueryBatcher:
    """Recall queries that wait at the same moment are embedded in one encoder call on a worker
    thread: under load a query waits at most one encoder call, and a batch costs less per query
    than single calls (bench/README.md, "Ingest and recall at the service").

    One per service and event loop; callers that give up (a recall timeout) just stop waiting.
    """

    MAX_BATCH = 16
    SPARE_BATCH = 4  # a cache-only call is short: a question arriving meanwhile waits little
    SPARE = 64  # given-up questions kept for the cache; older ones are dropped
    WORKERS = 2  # encoder calls at once

    def __init__(self, embedder: Embedder, on_encoded: Callable[[list[str]], None] | None = None) -> None:
        self.embedder = embedder
        self.on_encoded = on_encoded  # told the texts of each call (EmbeddingBacklog.encoded)
        self._waiting: list[tuple[str, asyncio.Future]] = []  # questions a recall still waits for
        self._spare: list[tuple[str, asyncio.Future]] = []  # given up on: encoded for the cache when idle
        self._workers: set[asyncio.Task] = set()
        self._running = 0  # encoder calls under way
        self.call_s = 0.01  # moving average of one encoder call, as this machine runs it now
        # where a question's wait goes (/health): calls, their time on the worker thread, and the
        # same calls as the event loop saw them (thread hand-off, GIL, a loop busy ranking)
        self.stats = {"calls": 0, "questions": 0, "in_thread_s": 0.0, "call_s": 0.0}
        # recall's own threads: never queued behind background work on a shared default executor;
        # two, so that a question arriving during a call is encoded at once on the other core
        # instead of behind it (ONNX Runtime runs one session from several threads)
        self._pool = ThreadPoolExecutor(max_workers=self.WORKERS, thread_name_prefix="memplane-query")

    def submit(self, text: str) -> asyncio.Future:
        """The query's vector as a future: done at once from the cache; else computed with the
        questions waiting beside it, and cached even when no one awaits it any more."""
        future = asyncio.get_running_loop().create_future()
        hit = self.embedder.cached(text)
        if hit is not None:
            future.set_result(hit)
            return future
        self._waiting.append((text, future))
        if len(self._workers) < self.WORKERS:
            worker = asyncio.create_task(self._drain())
            self._workers.add(worker)
            worker.add_done_callback(self._workers.discard)
        return future

    def abandon(self, future: asyncio.Future) -> None:
        """The recall stopped waiting for this vector (its deadline). Why: left in line, questions
        no one awaits pushed every later question past its deadline in turn — under load the whole
        line went lexical and stayed so. It moves to a spare line, encoded for the cache only while
        no recall waits; past SPARE the oldest is dropped."""
        for i, (text, f) in enumerate(self._waiting):
            if f is future:
                del self._waiting[i]
                self._spare.append((text, f))
                if len(self._spare) > self.SPARE:
                    self._spare.pop(0)[1].cancel()
                return

    async def vector(self, text: str) -> "np.ndarray":
        return await self.submit(text)

    def expected_wait(self) -> float:
        """How long the question submitted last will likely wait for its vector: the call under
        way, the full batches before it, its own."""
        ahead = (len(self._waiting) - 1) // self.MAX_BATCH + (1 if self._running >= self.WORKERS else 0)
        return (ahead + 1) * self.call_s

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _timed(self, texts: list[str]) -> list["np.ndarray"]:
        started = time.perf_counter()
        try:
            return self.embedder.embed_queries(texts)
        finally:
            self.stats["in_thread_s"] += time.perf_counter() - started

    async def _drain(self) -> None:
        while self._waiting or self._spare:
            if self._waiting:
                batch, self._waiting = self._waiting[:self.MAX_BATCH], self._waiting[self.MAX_BATCH:]
            else:
                batch, self._spare = self._spare[-self.SPARE_BATCH:], self._spare[:-self.SPARE_BATCH]
            batch = [(t, f) for t, f in batch if not f.cancelled()]  # a cancelled caller costs nothing
            if not batch:
                continue
            started = time.perf_counter()
            self._running += 1
            try:
                vecs = await asyncio.get_running_loop().run_in_executor(
                    self._pool, self._timed, [t for t, _ in batch])
            except Exception as exc:  # every waiter learns why; the next batch tries again
                for _, f in batch:
                    if not f.done():
                        f.set_exception(exc)
                continue
            finally:
                self._running -= 1
                self.call_s = 0.7 * self.call_s + 0.3 * (time.perf_counter() - started)
                self.stats["calls"] += 1
                self.stats["questions"] += len(batch)
                self.stats["call_s"] += time.perf_counter() - started
            for (_, f), vec in zip(batch, vecs):
                if not f.done():
                    f.set_result(vec)
            if self.on_encoded is not None:
                self.on_encoded([t for t, _ in batch])


class VectorIndex:
    """Normalized vectors by id; cosine search by one matrix product over the live rows.

    Past EXACT_UP_TO rows, a float32 scan is bound by memory bandwidth (150 MB at 100k x 384),
    so search first ranks every row by the Hamming distance of sign bits (48 bytes a row),
    then scores the RESCORED closest of those exactly (at least k): the usual binary-quantization
    prefilter with rescoring. A memory that is actually close to the query shares most of its
    signs, so it survives the prefilter; a recall's fusion needs the dense signal's best few dozen,
    which 2,000 rescored rows keep with a wide margin.
    """

    EXACT_UP_TO = 20_000
    RESCORED = 2_000
    SAMPLE = 2_000  # rows the moments are estimated on, past EXACT_UP_TO

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.words = (dim + 63) // 64
        self.matrix = np.zeros((64, dim), dtype=np.float32)
        self.bits = np.zeros((self.words, 64), dtype=np.uint64)  # word-major: one pass per 64 dims
        self.dead = np.zeros(64, dtype=bool)  # removed rows, kept out of the prefilter's pool
        self.ids: list[str | None] = []
        self.rows: dict[str, int] = {}
        self.removed = 0  # dead rows (never reused): the prefilter's mask is skipped while there are none
        self._sample: tuple[tuple[int, int], Any] | None = None  # ((rows, removed), contiguous sample rows)

    def __len__(self) -> int:
        return len(self.rows)

    def _signs(self, vecs: Any) -> Any:
        packed = np.packbits(np.asarray(vecs) > 0, axis=-1)
        pad = self.words * 8 - packed.shape[-1]
        if pad:
            packed = np.pad(packed, [(0, 0)] * (packed.ndim - 1) + [(0, pad)])
        return packed.view(np.uint64)

    def add(self, doc_id: str, vec: Any) -> None:
        if vec is None:
            return
        vec = np.asarray(vec, dtype=np.float32)
        if vec.shape != (self.dim,):
            return
        row = self.rows.get(doc_id)
        if row is None:
            row = len(self.ids)
            if row >= self.matrix.shape[0]:
                self.matrix = np.concatenate([self.matrix, np.zeros_like(self.matrix)])
                self.bits = np.concatenate([self.bits, np.zeros_like(self.bits)], axis=1)
                self.dead = np.concatenate([self.dead, np.zeros_like(self.dead)])
            self.ids.append(doc_id)
            self.rows[doc_id] = row
        self.matrix[row] = vec
        self.bits[:, row] = self._signs(vec)
        self.dead[row] = False

    def remove(self, doc_id: str) -> None:
        row = self.rows.pop(doc_id, None)
        if row is not None:
            self.ids[row] = None
            self.matrix[row] = 0.0
            self.dead[row] = True
            self.removed += 1

    def search(self, query: Any, k: int = 50) -> list[tuple[str, float]]:
        n = len(self.ids)
        if n == 0 or query is None:
            return []
        k = min(k, n)
        return self._best(*self._candidates(query, n, k), k)

    def _candidates(self, query: Any, n: int, k: int) -> tuple[Any, Any]:
        """Rows worth scoring and their cosines: every row up to EXACT_UP_TO, else the prefilter's."""
        if n <= self.EXACT_UP_TO or not hasattr(np, "bitwise_count"):
            return np.arange(n), self.matrix[:n] @ query
        signs = self._signs(query)
        distance = np.bitwise_count(self.bits[0, :n] ^ signs[0]).astype(np.uint16)
        for w in range(1, self.words):
            distance += np.bitwise_count(self.bits[w, :n] ^ signs[w])
        if self.removed:
            distance[self.dead[:n]] = self.dim + 1
        # the closest `pool` rows by a histogram cut: cheaper than a partition of n
        pool = min(n, max(k, self.RESCORED))
        cutoff = int(np.searchsorted(np.cumsum(np.bincount(distance)), pool))
        rows = np.flatnonzero(distance <= cutoff)
        return rows, self.matrix[rows] @ query

    def _best(self, rows: Any, scores: Any, k: int) -> list[tuple[str, float]]:
        """The `k` best of `scores` (cosines of `rows`), best first, removed rows left out."""
        best, cos = self._best_rows(rows, scores, k)
        ids = self.ids  # tolist(): one conversion for all, not a numpy scalar per hit
        return list(zip(map(ids.__getitem__, best.tolist()), cos.tolist()))

    def _best_rows(self, rows: Any, scores: Any, k: int) -> tuple[Any, Any]:
        """`_best` as arrays: rows and their cosines (float64)."""
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top])]
        best = rows[top]
        live = ~self.dead[best]
        return best[live], scores[top][live].astype(np.float64)

    def scored(self, query: Any, k: int = 50) -> tuple[list[tuple[str, float]], float, float]:
        """The best `k` by cosine with the mean and standard deviation of cosine over the live rows
        (exact up to EXACT_UP_TO rows; past that, over an evenly spread sample of them)."""
        if not len(self.ids) or query is None:
            return [], 0.0, 0.0
        rows, cos, mean, std = self.top(query, k)
        ids = self.ids  # tolist(): one conversion for all, not a numpy scalar per hit
        return list(zip(map(ids.__getitem__, rows.tolist()), cos.tolist())), mean, std

    def top(self, query: Any, k: int = 50) -> tuple[Any, Any, float, float]:
        """`scored` as arrays: the best `k` live rows (`ids[row]` is the memory) and their cosines
        (float64), with the mean and standard deviation of cosine."""
        n = len(self.ids)
        if n > self.EXACT_UP_TO:
            return *self._best_rows(*self._candidates(query, n, min(k, n)), min(k, n)), *_moments(self._sampled() @ query)
        scores = self.matrix[:n] @ query  # one product serves both the top k and the moments
        live = scores[~self.dead[:n]] if self.removed else scores
        return *self._best_rows(np.arange(n), scores, min(k, n)), *_moments(live)

    def _sampled(self) -> Any:
        """An evenly spread sample of the live rows, copied contiguous once per change of the index
        (a gather of 2,000 rows on every recall cost more than the product)."""
        n = len(self.ids)
        if self._sample is None or self._sample[0] != (n, self.removed):
            rows = np.linspace(0, n - 1, self.SAMPLE).astype(np.int64)
            if self.removed:
                rows = rows[~self.dead[rows]]
            self._sample = ((n, self.removed), np.ascontiguousarray(self.matrix[rows]))
        return self._sample[1]


def _moments(scores: Any) -> tuple[float, float]:
    return (float(scores.mean()), float(scores.std())) if len(scores) else (0.0, 0.0)


async def query_vector(queries: QueryBatcher | None, text: str) -> Any:
    """A query's embedding, computed off the event loop; None when embeddings are off."""
    if queries is None or not text.strip():
        return None
    return await queries.vector(text)
