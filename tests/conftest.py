"""Shared fixtures: every part runs as a real server on loopback."""

from __future__ import annotations

import io

import pytest

from memory_adapters.reference.app import REFERENCE_STORE, build_reference_app
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from proxy.app import STATE, build_app
from proxy.config import ProxySettings
from proxy.testing.fake_provider import FakeProvider
from tests.harness import Stack


# `make test` spreads the suite over the cores (pytest-xdist, `--dist loadgroup`). Two hints keep
# the wall time near the suite's CPU time divided by the cores:
# * tests that take many seconds (servers killed and restarted, thousands of turns) start first, so
#   they run beside the short ones instead of after them;
# * the real-client tests of one framework run on one worker, so each framework's heavy import
#   (litellm ~4.5 s of CPU, langgraph ~3 s, openai-agents ~2 s) is paid once, not once per worker.
SLOW_FIRST = (
    "tests/test_scale.py::test_two_proxies_and_two_memory_replicas_lose_nothing_when_one_of_each_dies",
    "tests/test_recall_deadline.py::",
    "tests/test_late_answers.py::",
    "tests/test_inspector_curating.py::",
    "tests/test_fault_suite.py::",
    "tests/test_coding_clis.py::test_twenty_sessions",  # real coding CLIs, 2 x 20 sessions each
)
FRAMEWORKS = ("litellm", "langgraph", "openai_agents", "pydantic_ai")


def _share_the_default_tls_context() -> None:
    """The suite makes thousands of OpenAI and Anthropic SDK clients, and each one's transport builds a
    default TLS context that loads the machine's CA bundle: ~50 ms of CPU apiece (a fifth of the
    suite's CPU), for loopback http:// calls that never use it. The suite's clients share one, as a
    long-lived process's would; which certificates a client trusts does not change."""
    try:
        import httpcore2
    except ImportError:  # an SDK release on plain httpx: nothing to share
        return
    build, made = httpcore2.default_ssl_context, {}

    def shared(*, _trust_env: bool = True):
        if _trust_env not in made:
            made[_trust_env] = build(_trust_env=_trust_env)
        return made[_trust_env]

    httpcore2.default_ssl_context = shared


_share_the_default_tls_context()


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        framework = next((f for f in FRAMEWORKS if f"[{f}" in item.nodeid), None)
        if framework and item.nodeid.startswith("tests/test_real_clients.py::"):
            item.add_marker(pytest.mark.xdist_group(framework))
    items.sort(key=lambda item: not item.nodeid.startswith(SLOW_FIRST))  # stable: the rest keep their order


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
    app = build_reference_app(tmp_path / "reference-memory", redactor=Redactor())
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


# -- real Redis and a real Mongo-wire server for the tiered adapter --

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from memplane_cli.runner import free_port

# Each pytest-xdist worker (gw0, gw1, ...) gets its own db, so one worker's flush never empties
# another's keys; a run without xdist uses db 13.
REDIS_TEST_DB = 13 + int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


@pytest.fixture(scope="session")
def redis_base_url():
    """MEMPLANE_TEST_REDIS_URL (default 127.0.0.1:6379); a private redis-server if none answers."""
    import redis as redis_sync
    url = os.environ.get("MEMPLANE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    try:
        redis_sync.Redis.from_url(url, socket_connect_timeout=1).ping()
        yield url.rsplit("/", 1)[0] if url.count("/") > 2 else url
        return
    except Exception:
        pass
    binary = shutil.which("redis-server")
    if not binary:
        pytest.skip("no Redis answers and redis-server is not installed (.ci/run installs it)")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if _port_open("127.0.0.1", port):
            break
        time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(5)


@pytest.fixture
def redis_url(redis_base_url):
    """A separate db number, emptied before each test."""
    import redis as redis_sync
    url = f"{redis_base_url}/{REDIS_TEST_DB}"
    redis_sync.Redis.from_url(url).flushdb()
    return url


@pytest.fixture(scope="session")
def mongo_base_url(tmp_path_factory):
    """MEMPLANE_TEST_MONGO_URL when set; else nx-27017 (a Mongo-wire server) on a free loopback port."""
    if os.environ.get("MEMPLANE_TEST_MONGO_URL"):
        yield os.environ["MEMPLANE_TEST_MONGO_URL"].rstrip("/").rsplit("/", 1)[0] \
            if os.environ["MEMPLANE_TEST_MONGO_URL"].count("/") > 2 else os.environ["MEMPLANE_TEST_MONGO_URL"]
        return
    binary = Path(sys.executable).parent / "nx-27017"
    if not binary.exists():
        pytest.skip("nx-27017 is not installed (pip install -e '.[test]')")
    port = free_port()
    work = tmp_path_factory.mktemp("nx")
    proc = subprocess.Popen([str(binary), "--data-dir", "memory", "--host", "127.0.0.1", "--port", str(port),
                             "--log-file", str(work / "nx.log"), "--pid-file", str(work / "nx.pid")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=work)
    for _ in range(200):
        if _port_open("127.0.0.1", port):
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("nx-27017 did not start")
    yield f"mongodb://127.0.0.1:{port}"
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture
def mongo_url(mongo_base_url):
    """A fresh database per test."""
    return f"{mongo_base_url}/memplane_test_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def tiered_settings(redis_url, mongo_url):
    from memory_adapters.tiered.config import TieredSettings
    return TieredSettings(redis_url=redis_url, mongo_url=mongo_url, key_prefix=f"t{uuid.uuid4().hex[:6]}")


@pytest.fixture(params=["embedded", "tiered"])
async def engine(request, aiohttp_server, tmp_path) -> str:
    """The base URL of each memory engine (embedded, tiered: they share memory_adapters/engine),
    ranking by words alone so a story's outcome does not wait on the encoder."""
    from memory_adapters.embedded.app import build_embedded_app
    quiet = Telemetry(make_logger(io.StringIO()))
    if request.param == "embedded":
        app = build_embedded_app(tmp_path / "memory", redactor=Redactor(), telemetry=quiet, embeddings="off")
    else:
        from memory_adapters.tiered.app import build_tiered_app
        settings = request.getfixturevalue("tiered_settings")
        settings.embeddings = "off"
        app = build_tiered_app(settings, quiet, Redactor())
    return url_of(await aiohttp_server(app))


@pytest.fixture
async def tiered(aiohttp_server, tiered_settings):
    """A live tiered adapter; returns (base_url, service)."""
    from memory_adapters.tiered.app import TIERED_SERVICE, build_tiered_app
    app = build_tiered_app(tiered_settings, Telemetry(make_logger(io.StringIO())), Redactor())
    server = await aiohttp_server(app)
    return url_of(server), app[TIERED_SERVICE]
