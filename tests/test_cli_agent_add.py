"""`memplane agent add --memory-url` asks the service what it offers, as `memplane compile` does:
an agent added by hand retains in batches where the service offers it (else tiered turns its
one-call-a-turn retains away under load), and a dead or lying service never blocks adding it."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path

from aiohttp import web
from click.testing import CliRunner

from memplane_cli.main import main

MEMPLANE = str(Path(sys.executable).parent / "memplane")
NOTICE = "agent added with the default paths, without batch retain"


async def add(ctx: Path, agent: str, url: str, *more: str) -> tuple[int, str, dict]:
    """The real CLI in its own process (the services below run on this test's event loop)."""
    proc = await asyncio.create_subprocess_exec(
        MEMPLANE, "agent", "add", agent, "--context-root", str(ctx), "--memory-url", url, *more,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, err.decode(), json.loads((ctx / agent / "memory.json").read_text())


async def test_an_agent_added_for_a_running_service_gets_the_batch_retain_it_offers(tmp_path, aiohttp_server):
    from memory_adapters.embedded.app import build_embedded_app
    from memplane_core.redact import Redactor
    from memplane_core.telemetry import Telemetry

    service = await aiohttp_server(build_embedded_app(tmp_path / "memdata", redactor=Redactor(),
                                                      telemetry=Telemetry(), embeddings="off"))
    code, err, manifest = await add(tmp_path / "ctx", "worker", str(service.make_url("/")))
    assert code == 0, err
    assert manifest["retain"]["batch_path"] == "/retain/batch"
    assert manifest["base_url"] == str(service.make_url("/")).rstrip("/")
    assert NOTICE not in err


async def test_the_descriptor_is_asked_with_the_memory_token_and_a_lying_one_is_not_trusted(tmp_path, aiohttp_server):
    seen: list[str | None] = []
    descriptors = {
        "/honest": {"version": 2, "memory": {"retain": {"path": "/retain", "batch_path": "/r/many"}}},
        "/number": {"version": 2, "memory": {"retain": {"path": "/retain", "batch_path": 42}}},
        "/elsewhere": {"version": 2, "memory": {"retain": {"path": "/retain",
                                                            "batch_path": "http://attacker.example/x"}}},
    }

    async def describe(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response(descriptors[request.path.removesuffix("/.claw-describe.json")])

    app = web.Application()
    for prefix in descriptors:
        app.router.add_get(prefix + "/.claw-describe.json", describe)
    server = await aiohttp_server(app)

    code, err, manifest = await add(tmp_path / "ctx", "a", str(server.make_url("/honest")),
                                    "--memory-token", "s3cret")
    assert code == 0, err
    assert manifest["retain"]["batch_path"] == "/r/many" and seen == ["Bearer s3cret"]
    for i, prefix in enumerate(("/number", "/elsewhere")):
        code, err, manifest = await add(tmp_path / "ctx", f"liar{i}", str(server.make_url(prefix)))
        assert code == 0, err
        assert "batch_path" not in manifest["retain"]
        assert NOTICE in err and "batch_path" in err and "Traceback" not in err
        assert len([line for line in err.splitlines() if NOTICE in line]) == 1


def test_a_service_that_does_not_answer_never_stops_or_holds_up_adding_the_agent(tmp_path, monkeypatch):
    # the descriptor is asked once with a deadline (ops.DESCRIBE_SECONDS): a stalled service that
    # never answers would otherwise hold the command until the suite's faulthandler stops it
    monkeypatch.setattr("memplane_cli.ops.DESCRIBE_SECONDS", 0.5)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    silent = socket.socket()  # accepts connections (the kernel does) but never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        for agent, port in (("refused", closed), ("stalled", silent.getsockname()[1])):
            result = CliRunner().invoke(main, ["agent", "add", agent, "--context-root", str(tmp_path / "ctx"),
                                               "--memory-url", f"http://127.0.0.1:{port}"])
            assert result.exit_code == 0, result.output
            assert NOTICE in result.stderr and "did not answer" in result.stderr
            assert result.stdout.startswith(f"{agent}:")  # the token, printed as always
            manifest = json.loads((tmp_path / "ctx" / agent / "memory.json").read_text())
            assert manifest["base_url"] == f"http://127.0.0.1:{port}" and "batch_path" not in manifest["retain"]
    finally:
        silent.close()


def test_a_url_that_is_not_http_is_never_read_as_a_local_descriptor_file(tmp_path, monkeypatch):
    (tmp_path / "svc").mkdir()
    (tmp_path / "svc" / ".claw-describe.json").write_text(json.dumps(
        {"version": 2, "memory": {"retain": {"path": "/retain", "batch_path": "/from/a/file"}}}))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["agent", "add", "a", "--context-root", str(tmp_path / "ctx"),
                                       "--memory-url", "svc"])
    assert result.exit_code == 0, result.output
    assert NOTICE in result.stderr and "not an http(s) URL" in result.stderr
    assert "batch_path" not in json.loads((tmp_path / "ctx" / "a" / "memory.json").read_text())["retain"]


async def test_an_agent_added_for_a_service_with_its_own_paths_recalls_and_retains_there(stack, aiohttp_server):
    # a third-party memory service that serves the contract under /v2 and offers no forget: the
    # agent added by hand must call what the service declares, as a compiled agent would
    calls: list[tuple[str, str]] = []

    async def describe(request: web.Request) -> web.Response:
        return web.json_response({"version": 2, "memory": {"recall": {"path": "/v2/recall"},
                                                            "retain": {"path": "/v2/retain"}}})

    async def recall(request: web.Request) -> web.Response:
        calls.append(("recall", request.path))
        return web.json_response({"memories": [{"text": "Ana lives in Porto.", "score": 0.9, "kind": "fact",
                                                "source": "v2"}]})

    async def retain(request: web.Request) -> web.Response:
        calls.append(("retain", request.path))
        return web.json_response({"ok": True}, status=202)

    app = web.Application()
    app.router.add_get("/.claw-describe.json", describe)
    app.router.add_post("/v2/recall", recall)
    app.router.add_post("/v2/retain", retain)
    service = await aiohttp_server(app)

    proc = await asyncio.create_subprocess_exec(
        MEMPLANE, "agent", "add", "v2agent", "--context-root", str(stack.context_root),
        "--memory-url", str(service.make_url("/")), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert NOTICE not in err.decode()
    manifest = json.loads((stack.context_root / "v2agent" / "memory.json").read_text())
    assert manifest["recall"]["path"] == "/v2/recall" and manifest["retain"]["path"] == "/v2/retain"
    assert "forget" not in manifest  # the service offers none: nothing is sent to a path it never served

    stack.tokens["v2agent"] = out.decode().split()[0]
    await stack.openai("v2agent").chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Where does Ana live?"}])
    await stack.caught_up()
    assert "Porto" in (stack.provider.received[-1].memories_block or "")
    assert calls == [("recall", "/v2/recall"), ("retain", "/v2/retain")]


async def test_a_service_that_offers_no_memory_capability_is_refused_with_a_clear_error(tmp_path, aiohttp_server):
    async def describe(request: web.Request) -> web.Response:
        return web.json_response({"version": 2, "memory": {}})

    app = web.Application()
    app.router.add_get("/.claw-describe.json", describe)
    server = await aiohttp_server(app)
    proc = await asyncio.create_subprocess_exec(
        MEMPLANE, "agent", "add", "nomem", "--context-root", str(tmp_path / "ctx"),
        "--memory-url", str(server.make_url("/")), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode != 0 and out == b""  # no token printed for an agent that was not added
    assert "declares no memory capability" in err.decode() and "Traceback" not in err.decode()
    assert not (tmp_path / "ctx" / "nomem").exists()
