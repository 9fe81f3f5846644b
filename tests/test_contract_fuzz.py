"""Every memory service memplane ships, driven by schemathesis from the OpenAPI document it serves.

An operator's other proxy, a hand-written client or an attacker sends the service whatever it likes:
bodies that fit the contract, bodies that nearly do (a wrong type, a missing field, a number out of
range) and bodies that do not at all. Each must get an answer the document names — a 2xx of the
documented shape or a 4xx `{"error": {...}}` — never a 500, never a body of another shape. The
document is the one the service serves at `GET /openapi.json` (memory_adapters/http/openapi.py),
so what is checked is what a client generator would read.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.specs.openapi.checks import positive_data_acceptance

from memory_adapters.http.openapi import openapi_document
from memplane_core.contract import describe

from .harness import stop

TOKEN = "fuzz-admin-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
# the document every shipped service serves (embedded and tiered add the REST API; the reference
# adapter serves the contract alone, and its own document says so: test_served_documents)
# A time the services take: RFC 3339 inside their range (0001-01-02 to 9999-12-30 UTC, refused outside it,
# which JSON Schema cannot say; tests/test_attacker_review.py and test_adapter_settings.py try the edges).
schemathesis.openapi.format("date-time", st.builds(
    lambda when, zone: when.isoformat(timespec="milliseconds") + zone,
    st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1)),
    st.sampled_from(["Z", "+00:00", "+14:00", "-05:30"])))
SCHEMA = schemathesis.openapi.from_dict(openapi_document(describe(retain_batch=True), rest=True))

pytestmark = pytest.mark.xdist_group("contract_fuzz")
# a Redis db of its own: the module's tiered service lives across tests that empty theirs (13-15, conftest)
FUZZ_DB = 12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _serving(factory, args: list[str], **env_extra: str) -> Iterator[str]:
    """`memplane adapter ARGS…` in a temporary directory of its own, for a module's tests: its URL."""
    tmp = factory.mktemp(f"fuzz-{args[0]}")
    proc, url = _serve([*args[:1], *[a.replace("{tmp}", str(tmp)) for a in args[1:]]], tmp, **env_extra)
    try:
        yield url
    finally:
        stop(proc)


def _serve(args: list[str], tmp: Path, **env_extra: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {**os.environ, "MEMPLANE_EMBEDDINGS": "off", **env_extra}  # the wire is under test; the encoder has its own tests
    proc = subprocess.Popen([sys.executable, "-c", "from memplane_cli.main import main; main()", "adapter", *args, "--port", str(port),
                             "--token", TOKEN], cwd=tmp, env=env,
                            stdout=subprocess.DEVNULL, stderr=open(tmp / "service.log", "wb"))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", headers=HEADERS, timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    stop(proc)
    raise RuntimeError(f"memplane adapter {args[0]} did not start: {(tmp / 'service.log').read_text()[-2000:]}")


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    with _serving(tmp_path_factory, ["embedded", "--data-dir", "{tmp}/memory"]) as url:
        yield url


@pytest.fixture(scope="module")
def tiered(tmp_path_factory, redis_base_url, mongo_base_url):
    import redis as redis_sync
    db = f"{redis_base_url}/{FUZZ_DB}"
    redis_sync.Redis.from_url(db).flushdb()
    with _serving(tmp_path_factory, ["tiered", "--redis-url", db, "--mongo-url",
                                     f"{mongo_base_url}/memplane_fuzz_{uuid.uuid4().hex[:8]}"],
                  MEMPLANE_REDIS_PREFIX=f"fuzz{uuid.uuid4().hex[:6]}") as url:
        yield url


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    with _serving(tmp_path_factory, ["reference", "--data-dir", "{tmp}/data"]) as url:
        yield url


FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=list(HealthCheck))


def _call(case, base_url: str) -> None:
    opaque = case.operation.path == "/api/memories" and "cursor" in (case.query or {})
    # a page cursor is opaque: one this API never issued is the caller's 400, though any string fits
    case.call_and_validate(base_url=base_url, headers=HEADERS,
                           excluded_checks=[positive_data_acceptance] if opaque else [])


@SCHEMA.parametrize()
@FUZZ
def test_embedded_answers_every_body_as_documented(case, embedded):
    _call(case, embedded)


@SCHEMA.parametrize()
@FUZZ
def test_tiered_answers_every_body_as_documented(case, tiered):
    _call(case, tiered)


CONTRACT_ONLY = SCHEMA.include(path_regex=r"^/(recall|retain|forget|\.claw-describe\.json|health)")


@CONTRACT_ONLY.parametrize()
@FUZZ
def test_reference_answers_every_body_as_documented(case, reference):
    _call(case, reference)


def test_served_documents(embedded, reference):
    """What a client generator reads: the embedded engine documents the contract and its REST API,
    the reference adapter the contract alone; both behind the service's token like every route."""
    got = httpx.get(f"{embedded}/openapi.json", headers=HEADERS).json()
    assert got["openapi"] == "3.1.0"
    assert {"/recall", "/retain", "/retain/batch", "/forget", "/api/memories"} <= set(got["paths"])
    ref = httpx.get(f"{reference}/openapi.json", headers=HEADERS).json()
    assert "/recall" in ref["paths"] and "/api/memories" not in ref["paths"]
    assert httpx.get(f"{embedded}/openapi.json").status_code == 401
