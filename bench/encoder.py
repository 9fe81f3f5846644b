"""The shipped MiniLM encoder: how faithful and how costly, measured in one run.

    python -m bench.encoder

Agreement: cosine to the fp32 model's vectors stored in tests/fixtures/minilm_reference.json
(sentence-transformers, made by the export script). Cost: CPU time of this thread (less sensitive
to other processes than wall time) per short query and per text of a backlog batch, each also as a
ratio to tokenising alone in the same run. Load: checksum verification and session start.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from statistics import median

import numpy as np

from memory_adapters.engine.onnx_encoder import MODEL_DIR, OnnxEncoder, verified_manifest

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "minilm_reference.json"
QUERIES = ["When did I run the half marathon?", "What is my sister's name?", "Which herb do I dislike?"]


def cpu_ms(fn, repeat: int) -> float:
    """Median over 5 rounds of this thread's CPU time per call."""
    rounds = []
    for _ in range(5):
        start = time.thread_time()
        for _ in range(repeat):
            fn()
        rounds.append((time.thread_time() - start) / repeat * 1000)
    return median(rounds)


def main() -> None:
    start = time.perf_counter()
    verified_manifest(MODEL_DIR)
    checksum_ms = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    encoder = OnnxEncoder.load()
    load_ms = (time.perf_counter() - start) * 1000
    rows = json.loads(FIXTURE.read_text())["rows"]
    texts = [r["text"] for r in rows]
    reference = np.array([r["vector"] for r in rows], dtype=np.float32)
    single = np.array([encoder.encode([t])[0] for t in texts])
    agreement = (single * reference).sum(axis=1)
    batch = texts[:-1] * 4  # the backlog's case: dozens of chat-length texts (the 256-token one left out)
    encoder.encode(QUERIES)
    query = cpu_ms(lambda: [encoder.encode([q]) for q in QUERIES], 20) / len(QUERIES)
    tokenise = cpu_ms(lambda: [encoder.tokenizer.encode(q) for q in QUERIES], 200) / len(QUERIES)
    per_text = cpu_ms(lambda: encoder.encode(batch), 2) / len(batch)
    print(json.dumps({
        "model_dir": str(MODEL_DIR), "graph_mb": round(sum(p.stat().st_size for p in MODEL_DIR.iterdir()) / 1e6, 1),
        "checksum_ms": round(checksum_ms, 1), "load_ms_incl_checksum": round(load_ms, 1),
        "cosine_to_fp32_min": round(float(agreement.min()), 4), "cosine_to_fp32_mean": round(float(agreement.mean()), 4),
        "query_cpu_ms": round(query, 3), "tokenise_cpu_ms": round(tokenise, 3),
        "query_vs_tokenise": round(query / tokenise, 1), "batch_text_cpu_ms": round(per_text, 3),
    }, indent=2))


if __name__ == "__main__":
    main()
