"""Build the word table query expansion reads (maintainer script; `expansion.py` loads its output).

    python -m memory_adapters.engine.export_words

Every whole English word of the shipped tokenizer's vocabulary (lower-case letters, 3 or more)
is embedded alone by the shipped encoder and filed under its BM25 term (the lexical index's
stem), one vector per term: the word equal to its stem when there is one, else the shortest.
The vectors are L2-normalised and stored as int8 with one scale per row (`words.npz`, ~8 MB);
the file's sha256 goes into `model.json` under `words`, and `expansion.py` checks it on load.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .dense import Embedder
from .lexical import terms
from .onnx_encoder import sha256

MODEL_DIR = Path(__file__).parent / "model"
WORDS_FILE = "words.npz"


def vocabulary(tokenizer: Path) -> dict[str, str]:
    """term → the word that stands for it."""
    vocab = json.loads(tokenizer.read_text())["model"]["vocab"]
    out: dict[str, str] = {}
    for word in sorted(vocab):
        if not (word.isascii() and word.isalpha() and word.islower() and len(word) >= 3):
            continue
        got = terms(word)
        if len(got) != 1:
            continue  # a stop word, or a word the index splits
        term = got[0]
        best = out.get(term)
        if best is None or (word == term) > (best == term) or (best != term and len(word) < len(best)):
            out[term] = word
    return out


def main() -> None:
    words = vocabulary(MODEL_DIR / "tokenizer.json")
    term_list = sorted(words)
    embedder = Embedder.load()
    vecs = np.concatenate([embedder.embed([words[t] for t in term_list[i:i + 256]])
                           for i in range(0, len(term_list), 256)]).astype(np.float32)
    vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    scale = np.abs(vecs).max(axis=1) / 127.0
    q = np.round(vecs / scale[:, None]).astype(np.int8)
    path = MODEL_DIR / WORDS_FILE
    np.savez_compressed(path, terms=np.array(term_list), vectors=q, scale=scale.astype(np.float32))
    manifest_path = MODEL_DIR / "model.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["words"] = {"file": WORDS_FILE, "sha256": sha256(path), "terms": len(term_list),
                         "built_with": embedder.engine}
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"{len(term_list)} terms -> {path} ({path.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
