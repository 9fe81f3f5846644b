"""Server roles for the benchmarks, each started as its own process:

    python -m bench.servers provider|passthrough|memplane|reference|embedded|tiered --port N [...]

Prints `READY <port>` on stdout once it listens.
"""

from __future__ import annotations

import argparse
import io
import math
import re
import sys
import zlib
from pathlib import Path

import aiohttp
from aiohttp import web

from memplane_core.redact import Redactor

REPLY = ("The quarterly numbers look steady: revenue grew four percent, churn fell slightly, and the new "
         "onboarding flow cut time to first value by a third. ") * 6  # ~200 tokens


def embed_text(text: str, dim: int = 256) -> list[float]:
    """A hashed bag-of-words unit vector: a stand-in embedding model for peers that call one
    (texts sharing words point the same way; crc32 so every process agrees)."""
    vec = [0.0] * dim
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        h = zlib.crc32(word.encode())
        vec[h % dim] += 1.0 if h & 1 << 31 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [round(v / norm, 5) for v in vec]


def provider_app() -> web.Application:
    """The fake provider, plus an Ollama-style `/api/embed` for peers that embed through one."""
    from proxy.testing.fake_provider import FakeProvider
    app = FakeProvider(reply=lambda body: REPLY, chunks=50, record=False).app()

    async def embed(request: web.Request) -> web.Response:
        body = await request.json()
        inputs = body.get("input") or []
        inputs = [inputs] if isinstance(inputs, str) else inputs
        return web.json_response({"model": body.get("model"), "embeddings": [embed_text(t) for t in inputs]})

    app.router.add_post("/api/embed", embed)
    return app


def passthrough_app(upstream: str) -> web.Application:
    """The floor a Python proxy can reach: one shared session, bytes forwarded as they come."""
    app = web.Application()
    key = web.AppKey("session", aiohttp.ClientSession)

    async def start(app):
        app[key] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def stop(app):
        await app[key].close()

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        async with app[key].post(upstream + request.path[len("/v1"):], data=body,
                                 headers={"Content-Type": "application/json"}) as up:
            resp = web.StreamResponse(status=up.status, headers={"Content-Type": up.headers.get("Content-Type", "")})
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_post("/v1/{tail:.*}", forward)
    return app


def memplane_app(upstream: str, context_root: Path, history_root: Path, redis_url: str = "",
                 ledger_prefix: str = "memplane") -> web.Application:
    from memplane_core.telemetry import Telemetry, make_logger
    from proxy.app import build_app
    from proxy.config import ProxySettings
    shared = {"ledger": "redis", "redis_url": redis_url, "ledger_prefix": ledger_prefix} if redis_url else {}
    settings = ProxySettings(context_root=context_root, history_root=history_root, openai_base_url=upstream,
                             openai_api_key="sk-bench", **shared)
    return build_app(settings, Telemetry(make_logger(io.StringIO())) if not sys.stderr.isatty() else None)


def embedded_app(data_dir: Path, shared: bool = False, first: bool = True) -> web.Application:
    from memory_adapters.embedded.app import build_embedded_app
    from memory_adapters.embedded.config import EmbeddedSettings
    from memplane_core.telemetry import Telemetry, make_logger
    return build_embedded_app(data_dir, redactor=Redactor(), telemetry=Telemetry(make_logger(io.StringIO())),
                              settings=EmbeddedSettings.from_env(), shared=shared, first=first)


async def serve(app: web.Application, port: int) -> None:
    from memplane_cli.runner import Site
    from memplane_cli.runner import serve as serve_sites

    def ready(ports):
        print(f"READY {ports[0]}", flush=True)

    await serve_sites([Site(app, "127.0.0.1", port)], grace_s=2, on_ready=ready)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["provider", "passthrough", "memplane", "reference", "embedded", "tiered"])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--upstream", default="")
    p.add_argument("--context-root", type=Path)
    p.add_argument("--history-root", type=Path)
    p.add_argument("--data-dir", type=Path)
    p.add_argument("--redis-url", default="")
    p.add_argument("--mongo-url", default="")
    p.add_argument("--ledger-prefix", default="memplane")
    p.add_argument("--workers", type=int, default=1,
                   help="forked workers on one port: memplane (on the Redis ledger), provider, passthrough, embedded, reference")
    a = p.parse_args()
    if a.workers > 1 and a.role in ("memplane", "provider", "passthrough", "embedded", "reference"):
        from memplane_cli.workers import Listener, first_worker, serve_processes

        def build() -> web.Application:
            if a.role == "provider":
                return provider_app()
            if a.role == "passthrough":
                return passthrough_app(a.upstream)
            if a.role == "embedded":
                return embedded_app(a.data_dir, shared=True, first=first_worker())
            if a.role == "reference":
                from memory_adapters.reference.app import build_reference_app
                return build_reference_app(a.data_dir, redactor=Redactor(), shared=True)
            return memplane_app(a.upstream, a.context_root, a.history_root, a.redis_url, a.ledger_prefix)
        listener = Listener(build, "127.0.0.1", a.port)
        raise SystemExit(serve_processes([[listener]] * a.workers, grace_s=2,
                                         on_ready=lambda: print(f"READY {listener.port}", flush=True)))
    if a.role == "provider":
        app = provider_app()
    elif a.role == "passthrough":
        app = passthrough_app(a.upstream)
    elif a.role == "memplane":
        app = memplane_app(a.upstream, a.context_root, a.history_root, a.redis_url, a.ledger_prefix)
    elif a.role == "reference":
        from memory_adapters.reference.app import build_reference_app
        app = build_reference_app(a.data_dir, redactor=Redactor())
    elif a.role == "embedded":
        app = embedded_app(a.data_dir)
    else:
        from memory_adapters.tiered.app import build_tiered_app
        from memory_adapters.tiered.config import TieredSettings
        from memplane_core.telemetry import Telemetry, make_logger
        app = build_tiered_app(TieredSettings.from_env(redis_url=a.redis_url, mongo_url=a.mongo_url),
                               Telemetry(make_logger(io.StringIO())), Redactor())
    from memplane_cli.runner import run
    run(serve(app, a.port))


if __name__ == "__main__":
    main()
