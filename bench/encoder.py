"""The shipped MiniLM encoder: how faithful and how costly, measured in one run.

    python -m bench.encoder
    python -m bench.encoder --compare OLD.onnx NEW.onnx [--threads 2]   # graphs side by side


Agreement: cosine to the fp32 model's vectors stored in tests/fixtures/minilm_reference.json
(sentence-transformers, made by the export script). Cost: CPU time of this thread (less sensitive
to other processes than wall time) per short query and per text of a backlog batch, each also as a
ratio to tokenising alone in the same run. Load: checksum verification and session start.

--compare: each graph (an .onnx file; the shipped tokenizer) over the same texts, rounds
interleaved so load from other processes falls on all of them alike; cosine to the fp32 reference
one text at a time and in one batch; CPU per short query and per text of a 16-text batch (this
thread's CPU time with one intra-op thread, the process's with more, since ONNX Runtime's other
threads then do part of the work).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from statistics import median

import numpy as np

from memory_adapters.engine.onnx_encoder import (GRAPHS, MODEL_DIR, OnnxEncoder, graph_for_cpu, session_of,
                                                 verified_manifest)

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


def compare(graphs: list[Path], threads: int, rounds: int = 60) -> None:
    shipped = OnnxEncoder.load(threads=threads)
    encoders = {str(graph): OnnxEncoder(session_of(graph, threads), shipped.tokenizer, shipped.dim)
                for graph in graphs}
    rows = json.loads(FIXTURE.read_text())["rows"]
    texts = [r["text"] for r in rows]
    reference = np.array([r["vector"] for r in rows], dtype=np.float32)
    clock = time.thread_time if threads == 1 else time.process_time
    batch = [texts[i % 13] for i in range(16)]  # chat-length fixture sentences
    query_s: dict[str, list[float]] = {g: [] for g in encoders}
    batch_s: dict[str, list[float]] = {g: [] for g in encoders}
    for encoder in encoders.values():
        encoder.encode(batch)
    for r in range(rounds):
        for graph, encoder in encoders.items():
            for q in QUERIES:
                start = clock()
                encoder.encode([q])
                query_s[graph].append(clock() - start)
            if r % 4 == 0:
                start = clock()
                encoder.encode(batch)
                batch_s[graph].append((clock() - start) / len(batch))
    for graph, encoder in encoders.items():
        alone = (np.array([encoder.encode([t])[0] for t in texts]) * reference).sum(axis=1)
        together = (encoder.encode(texts) * reference).sum(axis=1)
        print(json.dumps({
            "graph": graph, "threads": threads, "mb": round(Path(graph).stat().st_size / 1e6, 1),
            "cosine_min_alone": round(float(alone.min()), 4), "cosine_min_batched": round(float(together.min()), 4),
            "cosine_mean": round(float(alone.mean()), 4), "worst": texts[int(alone.argmin())][:40],
            "query_cpu_ms": round(median(query_s[graph]) * 1000, 2),
            "batch_text_cpu_ms": round(median(batch_s[graph]) * 1000, 2)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", nargs="+", type=Path, metavar="GRAPH",
                        help=f"compare these .onnx graphs (e.g. {GRAPHS['blocked']} and {GRAPHS['smooth']} in {MODEL_DIR})")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.compare:
        compare(args.compare, args.threads)
        return
    start = time.perf_counter()
    verified_manifest(MODEL_DIR, GRAPHS[graph_for_cpu()])
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
