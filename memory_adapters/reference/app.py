"""Build the reference adapter's aiohttp app."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from memplane_core.contract import describe
from memplane_core.redact import Redactor

from ..http.server import build_adapter_app
from .store import ReferenceStore

REFERENCE_STORE = web.AppKey("reference_store", ReferenceStore)


def build_reference_app(data_dir: Path, *, token: str | None = None,
                        redactor: Redactor, shared: bool = False) -> web.Application:
    """`shared`: one of several processes serving `data_dir` (`--workers N`, store.py)."""
    store = ReferenceStore(Path(data_dir), redactor, shared=shared)
    app = build_adapter_app(store, describe(retain_batch=True), token=token)
    app[REFERENCE_STORE] = store

    async def close(app: web.Application) -> None:
        store.close()

    app.on_cleanup.append(close)
    return app
