"""Shared fixtures: every part runs as a real server on loopback."""

from __future__ import annotations

import io

import pytest

from memory_adapters.reference.app import REFERENCE_STORE, build_reference_app
from proxy.app import STATE, build_app
from proxy.config import ProxySettings
from proxy.telemetry import Telemetry, make_logger
from proxy.testing.fake_provider import FakeProvider
from tests.harness import Stack


def url_of(server) -> str:
    return f"http://{server.host}:{server.port}"


@pytest.fixture
async def provider_server(aiohttp_server):
    provider = FakeProvider()
    server = await aiohttp_server(provider.app())
    return provider, url_of(server)


@pytest.fixture
async def reference(aiohttp_server, tmp_path):
    """A live reference adapter; yields (base_url, store)."""
    app = build_reference_app(tmp_path / "reference-memory")
    server = await aiohttp_server(app)
    return url_of(server), app[REFERENCE_STORE]


@pytest.fixture
def make_stack(aiohttp_server, provider_server, tmp_path):
    async def make(**settings_overrides) -> Stack:
        provider, provider_url = provider_server
        log = io.StringIO()
        settings = ProxySettings(
            context_root=tmp_path / "context", history_root=tmp_path / "history",
            openai_base_url=f"{provider_url}/v1", openai_api_key="sk-operator-openai-key",
            anthropic_base_url=provider_url, anthropic_api_key="sk-ant-operator-anthropic-key",
            **settings_overrides,
        )
        app = build_app(settings, Telemetry(make_logger(log)))
        server = await aiohttp_server(app)
        return Stack(provider, provider_url, url_of(server), app[STATE], log,
                     settings.context_root, settings.history_root)
    return make


@pytest.fixture
async def stack(make_stack) -> Stack:
    return await make_stack()
