"""all-MiniLM-L6-v2 as an int8 ONNX Runtime graph that ships with memplane (`engine/model/`).

Why shipped: the graph is exported once by a maintainer (`export_minilm.py`, needs torch) and
committed, so a user's install needs only onnxruntime, tokenizers and numpy — no torch, no
first-start export, no network. Loading checks each file's SHA-256 against `model.json` and
refuses a file that does not match (a truncated download, an edited file) with a clear error.

Why int8 ONNX, and two graphs: embedding a recall query is on the agent's hot path, and the
background backlog embeds every retained turn. Both shipped graphs keep cosine ≥ 0.99 to the fp32
model on every text (tests/test_shipped_encoder.py); which one loads depends on the CPU
(`graph_for_cpu`), by what was measured on each kind (bench/README.md, "The shipped encoder"):
* an x86 CPU with AVX2 and no VNNI (a 2-core EPYC): the SmoothQuant graph, ~15 % less per query and
  half the CPU per backlog text;
* one with AVX-512 VNNI and AMX (a 2-core Xeon): the SmoothQuant graph too, ~10 % more per query but
  30 % less per backlog text — at the acceptance scale (ten agents beside a busy core) the backlog
  then keeps up: 189-314 turns unembedded when the feed ended instead of ~1,460, 0.885-0.889
  against 0.869-0.875 on the dev set;
* one with VNNI and no AMX (an AVX-512 VNNI Xeon): the blocked graph, ~1.1 ms per query there; the
  smooth graph was never measured on such a CPU;
* Arm and x86 without AVX2: the blocked graph (the smooth graph's kernels unmeasured there).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

MODEL_DIR = Path(__file__).with_name("model")
# two int8 graphs of the same model (bench/README.md, "The shipped encoder"):
# "smooth" (SmoothQuant + MatMulInteger, some MatMuls fp32) on x86 CPUs with AVX2, unless they have
# int8 dot products (VNNI) without AMX; "blocked" (MatMulNBits) on those, on Arm and on x86 without AVX2
GRAPHS = {"blocked": "all-MiniLM-L6-v2-int8.onnx", "smooth": "all-MiniLM-L6-v2-int8-smooth.onnx"}
TOKENIZER = "tokenizer.json"
MANIFEST = "model.json"
BATCH = 32


class ModelIntegrityError(RuntimeError):
    """A shipped model file is missing or is not the file the manifest names."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def graph_for_cpu(cpuinfo: str | None = None) -> str:
    """Which graph runs fast here: "smooth" on an x86 CPU with AVX2 — plain, or with AMX — and
    "blocked" on one with VNNI but no AMX, on other CPUs, and when the CPU cannot be read."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return "blocked"
    flags = next((set(line.split(":", 1)[1].split()) for line in cpuinfo.splitlines()
                  if line.startswith("flags")), None)
    if flags is None or "avx2" not in flags:  # not x86 (Arm has its own kernels), or an old or unknown CPU
        return "blocked"
    if {"avx512_vnni", "avx_vnni"} & flags and "amx_int8" not in flags:
        return "blocked"  # measured fast there (~1.1 ms a query); the smooth graph never was
    return "smooth"


def verified_manifest(model_dir: Path, graph: str) -> dict[str, Any]:
    """The manifest, once the graph to load and the tokenizer have the checksums it records."""
    try:
        manifest = json.loads((model_dir / MANIFEST).read_text())
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelIntegrityError(f"cannot read the model manifest {model_dir / MANIFEST}: {exc}") from exc
    for name in (graph, TOKENIZER):
        path = model_dir / name
        if name not in files:
            raise ModelIntegrityError(f"the model manifest lists no checksum for {name}")
        if not path.is_file():
            raise ModelIntegrityError(f"model file missing: {path}")
        if (actual := sha256(path)) != files[name]:
            raise ModelIntegrityError(
                f"model file {path} fails its checksum (sha256 {actual}, expected {files[name]}); "
                "reinstall memplane, or rebuild it with `python -m memory_adapters.engine.export_minilm`")
    return manifest


def session_of(graph: Path, threads: int = 1) -> Any:
    """An ONNX Runtime session for `graph` with the options recall needs (bench.encoder times other
    graphs with the same ones)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, int(threads))
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # a thread that has no work sleeps instead of spinning on a core that recall needs
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(graph), opts, providers=["CPUExecutionProvider"])


class OnnxEncoder:
    """Tokenize with the model's own fast tokenizer, run the int8 graph, return unit vectors
    (mean pooling and L2 normalisation are inside the graph, as sentence-transformers does them)."""

    def __init__(self, session: Any, tokenizer: Any, dim: int, graph: str = "blocked") -> None:
        self.session = session
        self.tokenizer = tokenizer
        self.dim = dim
        self.engine = f"onnxruntime-int8-{graph}"  # which graph: /health and the start-up log say

    @classmethod
    def load(cls, model_dir: Path | None = None, threads: int = 1, graph: str | None = None) -> "OnnxEncoder":
        """`model_dir`: the shipped model unless given. `threads`: ONNX Runtime intra-op threads; one
        by default, so that query embedding, background embedding and the event loop never
        oversubscribe a 2-core machine. `graph`: a key of GRAPHS, else the one for this CPU."""
        model_dir = model_dir or MODEL_DIR
        from tokenizers import Tokenizer

        graph = graph or graph_for_cpu()
        if graph not in GRAPHS:
            raise ValueError(f"unknown encoder graph {graph!r}; one of {', '.join(GRAPHS)}")
        manifest = verified_manifest(model_dir, GRAPHS[graph])
        session = session_of(model_dir / GRAPHS[graph], threads)
        tokenizer = Tokenizer.from_file(str(model_dir / TOKENIZER))
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=int(manifest["max_seq_length"]))
        return cls(session, tokenizer, int(manifest["dim"]), graph)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Texts of similar length are run together (as sentence-transformers does), and a batch
        ends before a text half again longer than its shortest: padding is wasted work."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        # one text at a time: faster than encode_batch for a recall's or a backlog batch's few dozen,
        # and it starts no tokenizer thread pool beside the encoder's threads
        encoded = [self.tokenizer.encode(t).ids for t in texts]
        for rows in _batches(sorted(range(len(texts)), key=lambda i: len(encoded[i])), encoded):
            width = len(encoded[rows[-1]])
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for r, i in enumerate(rows):
                n = len(encoded[i])
                ids[r, :n] = encoded[i]
                mask[r, :n] = 1
            out[rows] = self.session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        return out


def _batches(order: list[int], encoded: list[list[int]]) -> list[list[int]]:
    """`order` (shortest first) cut into batches of at most BATCH, none padded past 1.5x + 4 tokens."""
    out: list[list[int]] = []
    for i in order:
        if not out or len(out[-1]) == BATCH or len(encoded[i]) > 1.5 * len(encoded[out[-1][0]]) + 4:
            out.append([])
        out[-1].append(i)
    return out
