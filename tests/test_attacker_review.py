"""An attacker's review of the running stack: what a black-box prober found, each through the real
servers on loopback (the proxy, the memory engines, the strict fake provider), as the prober sent it.

The probe classes that held are listed in docs/operating.md ("Attacker's review"); the tests here
are for the ones that did not.
"""

from __future__ import annotations

import asyncio
import io
import json

import httpx
import pytest

from manifests.agents import memory_manifest, write_agent
from memplane_cli.runner import Site, start_site
from memplane_core.contract import RETAIN_BATCH_PATH
from memplane_core.telemetry import Telemetry, make_logger
from proxy.app import build_app
from proxy.config import ProxySettings

pytestmark = pytest.mark.asyncio

# A turn an OpenAI-compatible provider answered although its history is not what the official API
# takes: an assistant message whose `tool_calls` or whose call's `function` is not an object. The
# ledger records it (the provider said 200); its memory service must not choke on it for good.
ODD_TOOL_CALLS = [True, [{"id": "c1", "type": "function", "function": True}], [{"id": "c1", "function": "f()"}]]


def _turn(history_tool_calls) -> dict:
    return {"model": "gpt-4o-mini", "messages": [
        {"role": "assistant", "content": None, "tool_calls": history_tool_calls},
        {"role": "tool", "tool_call_id": "c1", "content": "the tool's answer"}]}


@pytest.mark.parametrize("tool_calls", ODD_TOOL_CALLS, ids=["tool_calls-true", "function-true", "function-string"])
async def test_one_odd_turn_never_stops_the_agents_later_turns_reaching_memory(stack, engine, tool_calls):
    stack.provider.strict = False  # an OpenAI-compatible server that takes what the official API refuses
    stack.add_agent("victim", None)
    stack.context_root.joinpath("victim", "memory.json").write_text(__import__("json").dumps(
        memory_manifest("engine", engine, retain_batch_path=RETAIN_BATCH_PATH)))
    headers = {"Authorization": f"Bearer {stack.tokens['victim']}"}
    async with httpx.AsyncClient(base_url=stack.proxy_url, timeout=30) as client:
        odd = await client.post("/v1/chat/completions", json=_turn(tool_calls), headers=headers)
        assert odd.status_code == 200, odd.text
        later = await client.post("/v1/chat/completions", headers=headers, json={
            "model": "gpt-4o-mini", "messages": [{"role": "user", "content": "My sister Ingrid lives in Tromsø."}]})
        assert later.status_code == 200
    await stack.caught_up(timeout=30)  # every ledgered turn acknowledged: none retried for ever
    async with httpx.AsyncClient(base_url=engine, timeout=30) as client:
        found = (await client.post("/recall", json={
            "agent_id": "victim", "messages": [{"role": "user", "content": "Where does Ingrid live?"}]})).json()
    assert any("Tromsø" in m["text"] for m in found["memories"])
    assert not stack.events("retain", memory_status="failed", will_retry=True)
    assert not stack.events("retain", dead_letter=True)  # the odd turn itself is retained, not parked


@pytest.mark.parametrize("tool_calls", ODD_TOOL_CALLS, ids=["tool_calls-true", "function-true", "function-string"])
async def test_an_odd_entry_in_a_retain_batch_is_its_own_answer_and_the_rest_are_stored(engine, tool_calls):
    """The memory service's own endpoint: one item it cannot read is that item's error, never a
    500 for the whole call (which the proxy retries, for ever)."""
    def entry(n: int, request: dict) -> dict:
        return {"version": 1, "id": f"hist1_{n:064x}", "ts": "2026-11-29T10:00:00.000Z", "claw_id": "victim",
                "path": "/v1/chat/completions", "requested_model": "m", "effective_provider": "openai",
                "effective_model": "m", "status_code": 200, "stream": False, "request_original": request,
                "request_effective": request, "usage": {},
                "response": {"format": "json", "json": {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}}}
    good = {"model": "m", "messages": [{"role": "user", "content": "My sister Ingrid lives in Tromsø."}]}
    async with httpx.AsyncClient(base_url=engine, timeout=30) as client:
        alone = await client.post("/retain", json={"agent_id": "victim", "entry": entry(1, _turn(tool_calls))})
        assert alone.status_code < 500, alone.text
        batch = await client.post(RETAIN_BATCH_PATH, json={"agent_id": "victim", "items": [
            {"entry": entry(2, _turn(tool_calls))}, {"entry": entry(3, good)}]})
        assert batch.status_code == 200, batch.text
        assert batch.json()["results"][1]["code"] == 202
        found = (await client.post("/recall", json={
            "agent_id": "victim", "messages": [{"role": "user", "content": "Where does Ingrid live?"}]})).json()
    assert any("Tromsø" in m["text"] for m in found["memories"])


# -- a body that cannot be read as sent: gzip that is not gzip, or cut short by a caller that hung up --

NOT_GZIP = {"Content-Encoding": "gzip", "Content-Type": "application/json"}


async def test_a_body_that_is_not_what_its_content_encoding_says_is_400_on_every_proxy_route(stack, reference):
    """/mcp and the inspector's forms read their bodies as the turn endpoints do: the caller's 400,
    not an internal error (500) with an `unhandled_error` line in the operator's log."""
    token = stack.add_agent("a", reference[0])
    async with httpx.AsyncClient(base_url=stack.proxy_url, timeout=30) as client:
        mcp = await client.post("/mcp", content=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', headers={
            **NOT_GZIP, "Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"})
        form = await client.post("/memplane/ui/agents/a/forget", content=b"entry_id=x", headers={
            "Content-Encoding": "gzip", "Content-Type": "application/x-www-form-urlencoded"})
    assert mcp.status_code == 400, mcp.text
    assert "could not be read" in mcp.json()["error"]["message"]
    assert form.status_code == 400, form.text
    assert not [e for e in stack.log_lines() if e.get("event") == "unhandled_error"]


async def test_a_body_that_is_not_what_its_content_encoding_says_is_400_on_the_memory_services(engine, reference):
    """Every body-reading endpoint of the engines and the reference adapter: a JSON 400, never
    aiohttp's own text/plain 500 ("Server got itself in trouble")."""
    for base in (engine, reference[0]):
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            for method, path in [("POST", "/recall"), ("POST", "/retain"), ("POST", RETAIN_BATCH_PATH),
                                 ("POST", "/forget"), ("POST", "/api/memories"), ("POST", "/api/memories/search"),
                                 ("DELETE", "/api/memories/mem_x?agent_id=a"), ("PATCH", "/api/memories/mem_x?agent_id=a")]:
                r = await client.request(method, path, content=b'{"agent_id": "a"}', headers=NOT_GZIP)
                if r.status_code in (404, 405) and base == reference[0]:
                    continue  # the reference adapter has no REST API
                assert r.status_code == 400, (base, method, path, r.status_code, r.text)
                assert r.json()["error"]["message"]


TWICE_GZIP = {"Content-Encoding": "gzip, gzip", "Content-Type": "application/json"}


async def test_a_body_in_stacked_content_codings_is_415_in_the_callers_format(stack, engine, reference):
    """`Content-Encoding: gzip, gzip` (RFC 9110: codings applied in order) was decoded once and then
    refused as JSON that is "not valid UTF-8": a misleading 400. memplane takes one coding: more is
    the caller's 415, named as such, on a turn (the provider's error shape), /mcp and every service."""
    import gzip
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    twice = gzip.compress(gzip.compress(json.dumps(body).encode()))
    token = stack.add_agent("a", reference[0])
    async with httpx.AsyncClient(base_url=stack.proxy_url, timeout=30) as client:
        turn = await client.post("/v1/chat/completions", content=twice,
                                 headers={**TWICE_GZIP, "Authorization": f"Bearer {token}"})
        mcp = await client.post("/mcp", content=twice, headers={
            **TWICE_GZIP, "Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"})
        once = await client.post("/v1/chat/completions", content=gzip.compress(json.dumps(body).encode()),
                                 headers={**NOT_GZIP, "Authorization": f"Bearer {token}"})
    assert turn.status_code == 415, turn.text
    assert turn.json()["error"]["code"] == "unsupported_content_encoding"
    assert "gzip, gzip" in turn.json()["error"]["message"]
    assert mcp.status_code == 415, mcp.text
    assert once.status_code == 200, once.text  # one coding is read as before
    for base in (engine, reference[0]):
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            r = await client.post("/recall", content=twice, headers=TWICE_GZIP)
        assert r.status_code == 415, (base, r.status_code, r.text)
        assert r.json()["error"]["field"] == "Content-Encoding"


async def test_a_caller_that_hangs_up_mid_body_is_no_internal_error(provider_server, tmp_path):
    """A client that announces more body than it sends and goes away is the caller's cut-short body
    (400), not the proxy's 500 with an `unhandled_error` line, on a turn, a pass-through and /mcp.
    Served the way `memplane serve` serves (memplane_cli/runner.py: a lost connection is an error
    in the handler, where aiohttp's test server would cancel it instead)."""
    _, provider_url = provider_server
    log = io.StringIO()
    settings = ProxySettings(context_root=tmp_path / "context", history_root=tmp_path / "history",
                             openai_base_url=f"{provider_url}/v1", openai_api_key="sk-operator-openai-key")
    token, _ = write_agent(settings.context_root, "a")
    runner, port = await start_site(Site(build_app(settings, Telemetry(make_logger(log))), "127.0.0.1", 0))
    try:
        for path in ("/v1/chat/completions", "/v1/embeddings", "/mcp"):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
                         f"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"model\":".encode())
            await writer.drain()
            writer.close()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            for _ in range(400):  # until the proxy has read (and lost) the cut-short turn
                metrics = (await client.get("/metrics")).text
                if 'memplane_turns_total{format="openai"' in metrics:
                    break
                await asyncio.sleep(0.05)
    finally:
        await runner.cleanup()
    assert 'memplane_turns_total{format="openai",status="400"} 1.0' in metrics
    assert not [line for line in log.getvalue().splitlines() if "unhandled_error" in line]


# -- requests aiohttp refuses before any app sees them --

def _raw(port: int, head: str, body: bytes = b"") -> tuple[int, dict, bytes]:
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head.encode("utf-8") + body)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    status_line, _, rest = out.partition(b"\r\n")
    headers, _, payload = rest.partition(b"\r\n\r\n")
    fields = dict(line.split(": ", 1) for line in headers.decode("latin-1").split("\r\n") if ": " in line)
    return int(status_line.split()[1]), {k.lower(): v for k, v in fields.items()}, payload


async def test_a_request_the_http_parser_refuses_gets_a_json_error_that_quotes_nothing_sent(provider_server, tmp_path):
    """Served as `memplane serve`/`up` serve (memplane_cli/runner.py): a raw non-ASCII path, a header
    over the limit, Transfer-Encoding with Content-Length, a second Host, a NUL in a header, a
    Content-Encoding the server cannot decode — each a 400 whose body is a JSON error both SDKs read,
    not aiohttp's text/plain page quoting the request's bytes back (the token among them)."""
    _, provider_url = provider_server
    settings = ProxySettings(context_root=tmp_path / "context", history_root=tmp_path / "history",
                             openai_base_url=f"{provider_url}/v1", openai_api_key="sk-operator-openai-key")
    token, _ = write_agent(settings.context_root, "a")
    runner, port = await start_site(Site(build_app(settings, Telemetry(make_logger(io.StringIO()))), "127.0.0.1", 0))
    body = b'{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}'
    auth = f"Authorization: Bearer {token}\r\n"
    host = f"Host: 127.0.0.1:{port}\r\n"
    tail = f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    probes = {
        "non-ascii path": f"POST /v1/chat/completions/ü HTTP/1.1\r\n{host}{auth}{tail}",
        "header too long": f"POST /v1/chat/completions HTTP/1.1\r\n{host}{auth}X-Pad: {'p' * 9000}\r\n{tail}",
        "TE and CL": f"POST /v1/chat/completions HTTP/1.1\r\n{host}{auth}Transfer-Encoding: chunked\r\n{tail}",
        "two Hosts": f"POST /v1/chat/completions HTTP/1.1\r\n{host}Host: evil.example\r\n{auth}{tail}",
        "NUL in a header": f"POST /v1/chat/completions HTTP/1.1\r\n{host}Authorization: Bearer {token}\x00\r\n{tail}",
        "br body": f"POST /v1/chat/completions HTTP/1.1\r\n{host}{auth}Content-Encoding: br\r\n{tail}",
    }
    try:
        answers = {name: await asyncio.to_thread(_raw, port, head, body) for name, head in probes.items()}
    finally:
        await runner.cleanup()
    secret = token.split(":", 1)[1].encode()
    for name, (status, headers, payload) in answers.items():
        assert status == 400, (name, status, payload[:200])
        assert headers["content-type"].startswith("application/json"), (name, headers, payload[:200])
        doc = __import__("json").loads(payload)
        assert doc["error"]["message"].startswith("The request could not be read as HTTP"), (name, doc)
        assert doc["error"]["type"] == "invalid_request_error"
        assert secret not in payload and b"ppppppppp" not in payload, name


# -- an agent that brings its own provider key --

@pytest.mark.parametrize("slot", ["Authorization", "x-api-key"])
async def test_another_agents_memplane_token_in_the_provider_key_slot_never_goes_upstream(stack, slot):
    """An own-key agent names itself in X-Memplane-Agent and its provider key goes upstream as sent.
    A memplane token there instead — its own (refused before) or any other agent's — would be
    handed to the provider: 401, nothing forwarded."""
    other = stack.add_agent("other", None)
    token = stack.add_agent("own", None)
    meta_path = stack.context_root / "own" / "metadata.json"
    meta = __import__("json").loads(meta_path.read_text())
    meta["provider_key"] = "client"  # what `memplane agent add --client-provider-key` writes
    meta_path.write_text(__import__("json").dumps(meta))
    credential = f"Bearer {other}" if slot == "Authorization" else other
    async with httpx.AsyncClient(base_url=stack.proxy_url, timeout=30) as client:
        r = await client.post("/v1/chat/completions", headers={"X-Memplane-Agent": token, slot: credential}, json={
            "model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
        passed = await client.get("/v1/models", headers={"X-Memplane-Agent": token, slot: credential})
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == "invalid_api_key"
    assert passed.status_code == 401, passed.text
    secret = other.split(":", 1)[1]
    assert not [seen for seen in stack.provider.received if secret in str(seen.headers)]


# -- the memory services' REST API with hostile metadata --

DEEP: dict = {}
_node = DEEP
for _ in range(150):
    _node["d"] = {}
    _node = _node["d"]


@pytest.mark.parametrize("metadata", [{"\x00": 1}, {"a": [{"b\x00c": 1}]}, DEEP], ids=["nul-key", "nested-nul-key", "150-deep"])
async def test_metadata_no_store_can_keep_is_a_400_naming_the_field_on_every_engine(engine, metadata):
    """A NUL in a metadata key failed the tiered store's write (BSON field names cannot hold one)
    with a 500; MongoDB also refuses documents nested over 100 levels. Both engines now refuse such
    metadata alike, before any store sees it."""
    async with httpx.AsyncClient(base_url=engine, timeout=30) as client:
        r = await client.post("/api/memories", json={"agent_id": "a", "key": "k", "value": "v", "metadata": metadata})
        fine = await client.post("/api/memories", json={"agent_id": "a", "key": "k", "value": "v",
                                                         "metadata": {"a.b": 1, "$where": "x", "nested": {"d": [1]}}})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["field"] == "metadata"
    assert fine.status_code == 201, fine.text


# -- a reverse proxy on the operator's machine --

RELAYS = [{"X-Forwarded-For": "203.0.113.9"}, {"Forwarded": "for=203.0.113.9;proto=https"}, {"X-Real-IP": "203.0.113.9"}]


@pytest.mark.parametrize("relay", RELAYS, ids=["x-forwarded-for", "forwarded", "x-real-ip"])
async def test_a_request_a_local_reverse_proxy_relays_is_not_trusted_as_the_operator(stack, relay):
    """Without an admin token the operator routes trust loopback callers. A reverse proxy on the same
    machine (TLS in front of memplane, Host rewritten to 127.0.0.1 as nginx does by default) makes
    everyone a loopback caller: the inspector and /metrics must not open to whoever it relays for."""
    async with httpx.AsyncClient(base_url=stack.proxy_url, timeout=30) as client:
        for path in ("/metrics", "/memplane/ui/"):
            direct = await client.get(path)
            relayed = await client.get(path, headers=relay)
            assert direct.status_code == 200, path
            assert relayed.status_code in (401, 403), (path, relayed.status_code)
            assert b"memplane_turns_total" not in relayed.content


@pytest.mark.parametrize("relay", RELAYS, ids=["x-forwarded-for", "forwarded", "x-real-ip"])
async def test_a_tokenless_memory_service_serves_no_relayed_request(aiohttp_server, tmp_path, relay):
    """The embedded engine `memplane up` runs answers tokenless on loopback only; relayed by a local
    reverse proxy, a request reads and writes nothing."""
    from memory_adapters.embedded.app import build_embedded_app
    from memplane_core.redact import Redactor
    app = build_embedded_app(tmp_path / "memory", redactor=Redactor(), embeddings="off",
                             telemetry=Telemetry(make_logger(io.StringIO())))
    server = await aiohttp_server(app)
    async with httpx.AsyncClient(base_url=f"http://{server.host}:{server.port}", timeout=30) as client:
        assert (await client.get("/api/memories?agent_id=a")).status_code == 200
        listed = await client.get("/api/memories?agent_id=a", headers=relay)
        stored = await client.post("/api/memories", headers=relay, json={"agent_id": "a", "key": "k", "value": "v"})
    assert listed.status_code == 421 and stored.status_code == 421
    assert listed.json()["error"]["message"]


# -- directories memplane makes for turns and memories --

async def test_every_directory_memplane_makes_on_the_way_to_turns_or_memories_is_private(stack, aiohttp_server,
                                                                                         tmp_path):
    """`private_dir` made only the last directory 0700: missing parents (a `--data-dir` or history
    root that did not exist yet) were left to the umask (0755), so any local user listed which
    agents have memories or turns there."""
    import stat
    from memory_adapters.reference.app import build_reference_app
    from memplane_core.redact import Redactor
    data_dir = tmp_path / "fresh" / "reference"
    server = await aiohttp_server(build_reference_app(data_dir, redactor=Redactor()))
    memory = f"http://{server.host}:{server.port}"
    stack.add_agent("private", memory)
    await stack.openai("private").chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "My sister Ingrid lives in Tromsø."}])
    await stack.caught_up(timeout=30)
    made = [tmp_path / "fresh", data_dir, data_dir / "private"]
    assert (data_dir / "private").is_dir()
    for d in made:
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, (d, oct(d.stat().st_mode))


async def test_a_ledger_directory_planted_as_a_symlink_is_refused_without_naming_the_operators_paths(stack, tmp_path):
    """A symlink planted where an agent's ledger directory goes is refused (503, nothing written
    through it, nothing sent to the provider), and the agent's error names no path on the
    operator's machine."""
    token = stack.add_agent("planted", None)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    stack.history_root.mkdir(parents=True, exist_ok=True)
    (stack.history_root / "planted").symlink_to(elsewhere)
    async with httpx.AsyncClient(base_url=stack.proxy_url, timeout=30) as client:
        r = await client.post("/v1/chat/completions", headers={"Authorization": f"Bearer {token}"}, json={
            "model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 503 and r.json()["error"]["code"] == "ledger_unavailable"
    assert str(tmp_path) not in r.text and "planted" not in r.json()["error"]["message"].split("(", 1)[-1]
    assert not list(elsewhere.iterdir()) and not stack.provider.received
