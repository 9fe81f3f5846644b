"""A person or tool reading /api/memories and /api/audit with a bad query string gets a 400
that names the parameter; an agent's token never reads another agent's listing or trail."""

from __future__ import annotations

import io
import json

import aiohttp
import pytest

from memory_adapters.embedded.app import build_embedded_app
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from tests.conftest import url_of


@pytest.fixture
async def service(aiohttp_server, tmp_path):
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"ana": "ana-token"}))
    from memory_adapters.http.auth import load_agent_tokens
    app = build_embedded_app(tmp_path / "mem", redactor=Redactor(), telemetry=Telemetry(make_logger(io.StringIO())),
                             embeddings="off", token="admin-token", agent_tokens=load_agent_tokens(str(tokens)))
    return url_of(await aiohttp_server(app))


async def get(url: str, path: str, params: dict, token: str = "admin-token") -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s, s.get(url + path, params=params,
                                                   headers={"Authorization": f"Bearer {token}"}) as r:
        return r.status, await r.json()


@pytest.mark.parametrize("path,params,field", [
    ("/api/memories", {}, "agent_id"),
    ("/api/memories", {"agent_id": "ana", "limit": "501"}, "limit"),
    ("/api/memories", {"agent_id": "ana", "limit": "ten"}, "limit"),
    ("/api/memories", {"agent_id": "ana", "scope": "everyone"}, "scope"),
    ("/api/memories", {"agent_id": "ana", "until": "next week"}, "until"),
    ("/api/memories", {"agent_id": "ana", "since": "0001-01-01T00:00:00+14:00"}, "since"),
    ("/api/memories", {"agent_id": "ana", "cursor": "not-ours"}, "cursor"),
    ("/api/audit", {"agent_id": "ana", "limit": "0"}, "limit"),
    ("/api/audit", {"limit": "5"}, "agent_id"),
])
async def test_a_bad_parameter_is_named(service, path, params, field):
    status, body = await get(service, path, params)
    assert status == 400 and body["error"]["field"] == field, body


async def test_empty_parameters_count_as_absent_and_a_page_comes_back(service):
    async with aiohttp.ClientSession() as s:
        async with s.post(service + "/api/memories", json={"agent_id": "ana", "key": "k", "value": "Ana rows."},
                          headers={"Authorization": "Bearer admin-token"}) as r:
            assert r.status == 201
    status, body = await get(service, "/api/memories", {"agent_id": "ana", "scope": "", "type": "", "since": ""})
    assert status == 200 and [m["value"] for m in body["memories"]] == ["Ana rows."] and body["next_cursor"] is None


@pytest.mark.parametrize("path", ["/api/memories", "/api/audit"])
async def test_an_agents_token_reads_only_its_own(service, path):
    status, body = await get(service, path, {"agent_id": "bob"}, token="ana-token")
    assert status == 403 and body["error"]["field"] == "agent_id"
    status, _ = await get(service, path, {"agent_id": "ana"}, token="ana-token")
    assert status == 200
