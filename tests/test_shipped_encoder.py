"""The MiniLM that ships with memplane: it points where the fp32 model does, it loads with no
torch and no network, and a damaged model file is refused with a clear error while recall
goes on by words."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from memory_adapters.engine import dense, onnx_encoder
from memory_adapters.engine.onnx_encoder import (GRAPHS, MODEL_DIR, TOKENIZER, ModelIntegrityError, OnnxEncoder,
                                                 graph_for_cpu)
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "minilm_reference.json").read_text())["rows"]


@pytest.mark.parametrize("graph", sorted(GRAPHS))
def test_each_sentence_gets_the_vector_the_fp32_model_gives_it(graph):
    """Reference vectors: sentence-transformers' fp32 all-MiniLM-L6-v2, normalised, stored as a
    fixture by the export script. Asked one at a time (a recall query) and all together (a backlog
    batch, texts of every length), every vector keeps cosine ≥ 0.99 and unit length — with either
    shipped graph, whichever CPU runs the test."""
    embedder = dense.Embedder(OnnxEncoder.load(graph=graph))
    assert embedder.engine == f"onnxruntime-int8-{graph}"
    texts = [r["text"] for r in REFERENCE]
    reference = np.array([r["vector"] for r in REFERENCE], dtype=np.float32)
    assert len(texts) >= 20 and any(len(t) > 2000 for t in texts)  # one past the model's 256 tokens
    one_by_one = np.array([embedder.embed([t])[0] for t in texts])
    together = embedder.embed(texts)
    for name, vecs in (("one by one", one_by_one), ("in one batch", together)):
        agreement = (vecs * reference).sum(axis=1)
        low = {texts[i][:40]: round(float(c), 4) for i, c in enumerate(agreement) if c < 0.99}
        assert low == {}, f"{name}: {low}"
        assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    # and it is a sentence embedding, not noise that happens to be close: meaning ranks first
    q, pets, work = embedder.embed(["pets cat", "I adopted a kitten last spring", "The quarterly report is due Friday"])
    assert q @ pets > q @ work


def test_loading_needs_no_torch_and_no_network():
    """A fresh process loads the model and embeds with sockets forbidden and torch never imported
    (the shared dev venv has torch installed, so importing it would show here)."""
    script = textwrap.dedent("""
        import socket, sys
        def refuse(*a, **k):
            raise OSError("network use while loading the model")
        socket.socket.connect = socket.socket.connect_ex = socket.create_connection = refuse
        import memory_adapters.engine.dense as dense
        heavy = ("torch", "transformers", "sentence_transformers", "sklearn", "scipy", "onnx")
        assert "onnxruntime" not in sys.modules, "importing dense must not load the model"
        vec = dense.Embedder.load().embed(["a question about my garden"])
        print(vec.shape, sorted(m for m in heavy if m in sys.modules))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "(1, 384) []"


def damaged_copy(tmp_path: Path, name: str) -> Path:
    model = tmp_path / "model"
    shutil.copytree(MODEL_DIR, model)
    data = bytearray((model / name).read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit, as a bad disk or a bad download would leave
    (model / name).write_bytes(bytes(data))
    return model


@pytest.mark.parametrize("graph,name", [*((g, f) for g, f in sorted(GRAPHS.items())), ("blocked", TOKENIZER)])
def test_a_model_file_with_one_flipped_bit_is_refused_by_its_checksum(tmp_path, graph, name):
    model = damaged_copy(tmp_path, name)
    with pytest.raises(ModelIntegrityError) as refused:
        OnnxEncoder.load(model, graph=graph)
    message = str(refused.value)
    assert name in message and "checksum" in message and "reinstall memplane" in message


def test_a_missing_model_file_is_named(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(MODEL_DIR, model)
    graph = GRAPHS[graph_for_cpu()]  # the one this machine loads
    (model / graph).unlink()
    with pytest.raises(ModelIntegrityError, match="model file missing: .*" + graph.replace(".", r"\.")):
        OnnxEncoder.load(model)


CPUINFO = "processor\t: 0\nvendor_id\t: {vendor}\nflags\t\t: fpu sse sse2 {flags}\n"


@pytest.mark.parametrize("vendor,flags,graph", [
    ("AuthenticAMD", "avx fma avx2 bmi2", "smooth"),  # Zen 2/3: AVX2, no VNNI
    ("GenuineIntel", "avx fma avx2 avx512f avx512_vnni", "blocked"),  # Cascade Lake, Ice Lake servers
    ("GenuineIntel", "avx fma avx2 avx512f avx512_vnni amx_tile amx_int8", "smooth"),  # Sapphire Rapids on
    ("GenuineIntel", "avx fma avx2 avx_vnni", "blocked"),  # Alder Lake and later desktops
    ("GenuineIntel", "sse4_2 avx", "blocked"),  # no AVX2: neither kernel is fast; the one measured longest
])
def test_the_graph_is_chosen_for_the_cpu(vendor, flags, graph):
    assert graph_for_cpu(CPUINFO.format(vendor=vendor, flags=flags)) == graph
    assert graph_for_cpu("processor : 0\nFeatures : fp asimd asimddp\n") == "blocked"  # Arm: no x86 flags


@pytest.fixture
def damaged_install(tmp_path, monkeypatch):
    """The installed model directory with a flipped bit in the graph, for a service starting now."""
    monkeypatch.setattr(onnx_encoder, "MODEL_DIR", damaged_copy(tmp_path, GRAPHS[graph_for_cpu()]))
    dense._load_encoder.cache_clear()
    yield
    dense._load_encoder.cache_clear()


async def test_a_service_with_a_damaged_model_says_why_and_still_recalls_by_words(damaged_install, tmp_path,
                                                                                  aiohttp_server):
    from memory_adapters.embedded.app import build_embedded_app
    log = io.StringIO()
    app = build_embedded_app(tmp_path / "mem", redactor=Redactor(), telemetry=Telemetry(make_logger(log)),
                             embeddings="auto")
    server = await aiohttp_server(app)
    url = f"http://{server.host}:{server.port}"
    entry = {"id": "hist1_k", "ts": "2026-01-10T10:00:00.000Z",
             "request_original": {"messages": [{"role": "user", "content": "I adopted a kitten last spring"}]},
             "response": {"format": "json", "json": {"choices": [{"message": {"content": "OK."}}]}}}
    async with aiohttp.ClientSession() as s:
        async with s.get(url + "/health") as r:
            health = await r.json()
        async with s.post(url + "/retain/batch", json={"agent_id": "m", "items": [{"entry": entry}]}) as r:
            assert r.status == 200 and (await r.json())["results"][0]["status"] == "stored"
        async with s.post(url + "/recall", json={"agent_id": "m", "query": "kitten"}) as r:
            got = await r.json()
    assert health["embeddings"] is False and health["encoder"] is None
    assert "kitten" in got["memories"][0]["text"]
    events = [json.loads(line) for line in log.getvalue().splitlines() if line.startswith("{")]
    warning = next(e for e in events if e.get("event") == "embeddings_unavailable")
    assert "ModelIntegrityError" in warning["error"] and "checksum" in warning["error"]


def test_encoder_threads_are_bounded_by_the_setting():
    """One intra-op thread by default (recall, background embedding and the event loop share two
    cores); MEMPLANE_ENCODER_THREADS=2 gives the encoder two."""
    for threads in (1, 2):
        encoder = OnnxEncoder.load(threads=threads)
        assert encoder.session.get_session_options().intra_op_num_threads == threads
