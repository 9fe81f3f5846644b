"""Peer proxies as rows of the overhead benchmark, against the same fake provider.

Each peer is installed from PyPI into its own virtualenv under `bench/.peers/` (once; nothing of
theirs enters memplane's environment) and started as its own process. A peer that will not install
or start is skipped with the reason printed, never faked. `BENCH_PEERS=off` skips them all.

- LiteLLM's proxy: pass-through, no memory (a model alias pointing at the fake provider).
- engram-proxy: the closest peer, a transparent memory sidecar. Memory on, with the same number of
  stored memories as memplane's reference row. It embeds through an Ollama-style `/api/embed`, which
  the bench provider serves with a hashed bag-of-words vector (`bench.servers.embed_text`), so its
  embedding hop costs one local HTTP exchange, as memplane's recall does.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from .harness import free_port, stop

PEERS_DIR = Path(__file__).parent / ".peers"
LITELLM = "litellm[proxy]==1.106.2"
ENGRAM = "engram-proxy==0.7.0"


class PeerUnavailable(Exception):
    """The peer could not be installed or started here; the message says why."""


def enabled() -> bool:
    return os.environ.get("BENCH_PEERS", "on") != "off"


def peer_python(name: str, requirement: str) -> Path:
    """The interpreter of a virtualenv holding `requirement`, installed on first use."""
    venv = PEERS_DIR / name
    python, marker = venv / "bin" / "python", venv / ".installed"
    if marker.exists() and marker.read_text() == requirement:
        return python
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, capture_output=True)
        done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", requirement],
                              capture_output=True, text=True, timeout=1200)
    except (OSError, subprocess.SubprocessError) as exc:
        raise PeerUnavailable(f"could not install {requirement}: {exc}") from exc
    if done.returncode:
        tail = [ln for ln in done.stderr.splitlines() if ln and not ln.startswith("WARNING")][-1:]
        raise PeerUnavailable(f"pip install {requirement} failed: {' '.join(tail) or done.returncode}")
    marker.write_text(requirement)
    return python


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError as exc:
        return exc.code < 500
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def _process(name: str, cmd: list[str], env: dict[str, str], ready_url: str, tmp: Path,
             wait_s: float = 120) -> Iterator[None]:
    log = open(tmp / f"{name}.log", "w+")
    proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
    try:
        deadline = time.monotonic() + wait_s
        while not _answers(ready_url):
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                tail = " | ".join(log.read().strip().splitlines()[-3:])
                raise PeerUnavailable(f"{name} did not start within {wait_s:.0f} s: {tail[-400:]}")
            time.sleep(0.25)
        yield
    finally:
        stop(proc, grace_s=10)
        log.close()


@contextlib.contextmanager
def litellm_proxy(provider_port: int, tmp: Path) -> Iterator[tuple[str, str]]:
    """LiteLLM's proxy with one model alias to the fake provider; yields its chat URL and key."""
    python = peer_python("litellm", LITELLM)
    port, key = free_port(), f"sk-{secrets.token_hex(24)}"
    config = tmp / "litellm.yaml"
    config.write_text(json.dumps({  # JSON is YAML
        "model_list": [{"model_name": "bench-model", "litellm_params": {
            "model": "openai/bench-model", "api_base": f"http://127.0.0.1:{provider_port}/v1",
            "api_key": "sk-bench"}}],
        "litellm_settings": {"telemetry": False, "drop_params": True, "set_verbose": False},
        "general_settings": {"master_key": key},
    }))
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False"}
    cmd = [str(python.parent / "litellm"), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
           "--num_workers", "1"]
    with _process("litellm", cmd, env, f"http://127.0.0.1:{port}/health/liveliness", tmp):
        yield f"http://127.0.0.1:{port}/v1/chat/completions", key


SEED_ENGRAM = """
import json, sys, hashlib
import numpy as np
from engram.store import Store
db, rows = sys.argv[1], json.load(sys.stdin)
store = Store(db, 256)
for i, (text, vec) in enumerate(rows):
    sha = hashlib.sha256(text.encode()).hexdigest()
    eid = store.add_episode(f"seed{i % 97}", text, "Noted.", "bench-model", sha)
    store.db.execute("DELETE FROM jobs WHERE episode_id=?", (eid,))
    store.add_trace(eid, text[:60], text, f"seed{i % 97}", np.array(vec, dtype=np.float32), "extractive",
                    fts_extra=text)
"""


@contextlib.contextmanager
def engram_proxy(provider_port: int, tmp: Path, memories: list[str]) -> Iterator[str]:
    """engram-proxy in front of the fake provider with `memories` stored; yields its chat URL."""
    from .servers import embed_text
    python = peer_python("engram", ENGRAM)
    db = tmp / "engram" / "engram.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    rows = json.dumps([[m, embed_text(m)] for m in memories])
    seeded = subprocess.run([str(python), "-c", SEED_ENGRAM, str(db)], input=rows, capture_output=True,
                            text=True, timeout=600)
    if seeded.returncode:
        raise PeerUnavailable(f"could not seed engram's store: {seeded.stderr.strip().splitlines()[-1:]}")
    port = free_port()
    provider = f"http://127.0.0.1:{provider_port}"
    env = {"ENGRAM_PORT": str(port), "ENGRAM_DB": str(db), "ENGRAM_UPSTREAM": provider,
           "ENGRAM_OPENAI_UPSTREAM": provider, "ENGRAM_SERVICES": provider}
    with _process("engram", [str(python), "-m", "engram", "up"], env, f"http://127.0.0.1:{port}/engram/stats", tmp):
        yield f"http://127.0.0.1:{port}/v1/chat/completions"
