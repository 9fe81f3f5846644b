"""What the docs name works as written, driven as a user drives it: the real CLI, the real servers,
the official SDKs (docs/cli.md, docs/configuration.md, docs/http.md)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import aiohttp
import orjson
import openai
import pytest
from click.testing import CliRunner

from memplane_cli.main import main
from memplane_cli.runner import free_port
from tests.harness import stop


async def _wait_up(proc: subprocess.Popen, *urls: str) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(400):
            assert proc.poll() is None, proc.stderr.read().decode()
            try:
                if all([(await http.get(u)).status == 200 for u in urls]):
                    return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("memplane up did not start")


async def test_memplane_up_reads_the_proxy_settings_from_the_environment_as_serve_does(tmp_path, provider_server):
    """configuration.md names MEMPLANE_OPENAI_BASE_URL (and the other MEMPLANE_* proxy variables) for
    the proxy; `memplane up` (what `make run` runs) is a proxy too, and used to read OPENAI_BASE_URL only."""
    provider, provider_url = provider_server
    proxy_port, adapter_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "MEMPLANE_ADMIN_TOKEN")}
    env.update({"MEMPLANE_OPENAI_BASE_URL": f"{provider_url}/v1", "OPENAI_API_KEY": "sk-operator",
                "MEMPLANE_PASSTHROUGH": "GET /v1/models", "MEMPLANE_EMBEDDINGS": "off",
                "PYTHONPATH": os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)})
    proc = subprocess.Popen([sys.executable, "-c", "from memplane_cli.main import main; main()", "up",
                             "--home", str(tmp_path / "home"), "--port", str(proxy_port),
                             "--adapter-port", str(adapter_port), "--workers", "1"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proxy = f"http://127.0.0.1:{proxy_port}"
    try:
        await _wait_up(proc, f"{proxy}/healthz", f"http://127.0.0.1:{adapter_port}/health")
        token = (tmp_path / "home" / "context" / "default" / "token").read_text().strip()
        client = openai.AsyncOpenAI(base_url=f"{proxy}/v1", api_key=token, max_retries=0)
        reply = await client.chat.completions.create(model="fake-model",
                                                     messages=[{"role": "user", "content": "hello"}])
        assert reply.choices[0].message.content
        assert provider.received[-1].path == "/v1/chat/completions"  # not the public endpoint
        assert provider.received[-1].headers["Authorization"] == "Bearer sk-operator"
        # MEMPLANE_PASSTHROUGH narrows the allow-list: embeddings are no longer forwarded
        with pytest.raises(openai.NotFoundError):
            await client.embeddings.create(model="e", input="x")
        await client.close()
    finally:
        stop(proc)


async def test_a_turn_body_that_is_not_json_is_400_invalid_json_as_http_md_says(stack):
    """http.md's 400 row names `invalid_json`; turn endpoints answered `"code": null`."""
    token = stack.add_agent("json-agent")
    async with aiohttp.ClientSession() as http:
        for body in (b"{not json", b"", b"[1, 2]"):
            async with http.post(f"{stack.proxy_url}/v1/chat/completions", data=body,
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"}) as r:
                assert r.status == 400
                error = (await r.json())["error"]
                assert error["code"] == "invalid_json" and error["type"] == "invalid_request_error", body
    assert stack.provider.received == []


POD = """\
x-claw:
  pod: desk
services:
  analyst:
    image: analyst:latest
    x-claw:
      memory: {service: mem-svc}
  mem-svc:
    image: memory:latest
    expose: ["8080"]
"""


async def test_compile_describe_takes_a_running_services_base_url(tmp_path, reference):
    """`--describe SERVICE=URL` with the URL a user has at hand (the service's base URL, as
    `agent add --memory-url` takes it) reads its /.claw-describe.json rather than failing on 404."""
    base_url, _ = reference
    pod = tmp_path / "pod.yml"
    pod.write_text(POD)
    for url in (base_url, base_url + "/", base_url + "/.claw-describe.json"):
        out = tmp_path / f"ctx{len(url)}"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "from memplane_cli.main import main; main()", "compile", str(pod), "--out",
            str(out), "--describe", f"mem-svc={url}", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        manifest = orjson.loads((out / "analyst" / "memory.json").read_bytes())
        assert manifest["retain"]["batch_path"] == "/retain/batch"  # what the running service declares


async def _cli(*args: str) -> tuple[int, bytes, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "from memplane_cli.main import main; main()",
                                                *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out, err.decode()


async def test_memory_import_into_the_store_it_came_from_changes_nothing(tmp_path, aiohttp_server):
    """cli.md: import restores "idempotently (upsert by key)". A turn's episode is agent-wide but
    keeps the session it was said in; the import dropped that session, so restoring an export into
    its own store (or importing twice) doubled every episode said in a session."""
    from memory_adapters.embedded.app import build_embedded_app
    from memplane_core.redact import Redactor
    from memplane_core.telemetry import Telemetry

    server = await aiohttp_server(build_embedded_app(tmp_path / "mem", redactor=Redactor(), telemetry=Telemetry(),
                                                     embeddings="off"))
    base = str(server.make_url("/")).rstrip("/")
    entry = {"id": "hist1_" + "a" * 64, "ts": "2026-11-20T10:00:00.000Z",
             "request_original": {"messages": [{"role": "user", "content": "My sister Ana lives in Porto."}]},
             "response": {"format": "json", "json": {"choices": [{"message": {"content": "OK."}}]}}}
    async with aiohttp.ClientSession() as http:
        r = await http.post(f"{base}/retain", json={"agent_id": "ana", "pod": "p", "entry": entry,
                                                    "metadata": {"session_id": "s1"}})
        assert r.status == 202
    first = tmp_path / "first.jsonl"
    code, _, err = await _cli("memory", "export", "mem", "--agent", "ana", "--url", base, "--out", str(first))
    assert code == 0, err
    exported = [orjson.loads(line) for line in first.read_bytes().splitlines()]
    assert [(m["scope"], m["session_id"]) for m in exported] == [("agent", "s1")]
    for _ in range(2):
        code, _, err = await _cli("memory", "import", "mem", str(first), "--agent", "ana", "--url", base)
        assert code == 0, err
    code, again, err = await _cli("memory", "export", "mem", "--agent", "ana", "--url", base)
    assert [(m["key"], m["session_id"]) for m in map(orjson.loads, again.splitlines())] == \
        [(m["key"], m["session_id"]) for m in exported]


async def _up_once(home, env, adapter_port: int) -> None:
    """`memplane up` until it answers, then stopped (SIGTERM), as a user restarts `make run`."""
    proxy_port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", "from memplane_cli.main import main; main()", "up",
                             "--home", str(home), "--port", str(proxy_port), "--adapter-port", str(adapter_port),
                             "--workers", "1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        await _wait_up(proc, f"http://127.0.0.1:{proxy_port}/healthz")
    finally:
        stop(proc)


async def test_restarting_memplane_up_keeps_what_the_operator_wrote_into_the_agents_files(tmp_path):
    """operating.md and configuration.md say to switch `store_memory` on with `tools` in memory.json
    and to restrict models with `allowed_models` in metadata.json; `memplane up` rewrote both files
    on every start, so a restarted `make run` silently dropped them."""
    env = {**os.environ, "MEMPLANE_EMBEDDINGS": "off",
           "PYTHONPATH": os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)}
    home, agent = tmp_path / "home", tmp_path / "home" / "context" / "default"
    await _up_once(home, env, free_port())
    token = (agent / "token").read_text()
    memory = orjson.loads((agent / "memory.json").read_bytes())
    metadata = orjson.loads((agent / "metadata.json").read_bytes())
    (agent / "memory.json").write_bytes(orjson.dumps({**memory, "tools": ["store_memory"], "budget_tokens": 1200}))
    (agent / "metadata.json").write_bytes(orjson.dumps({**metadata, "allowed_models": ["fake-model"]}))
    moved = free_port()
    await _up_once(home, env, moved)
    memory = orjson.loads((agent / "memory.json").read_bytes())
    assert memory["tools"] == ["store_memory"] and memory["budget_tokens"] == 1200
    assert memory["base_url"] == f"http://127.0.0.1:{moved}"  # still pointed at the engine it runs
    assert orjson.loads((agent / "metadata.json").read_bytes())["allowed_models"] == ["fake-model"]
    assert (agent / "token").read_text() == token
    assert oct((agent / "memory.json").stat().st_mode & 0o777) == "0o600"


def test_agent_add_again_keeps_the_allowed_models_the_operator_set(tmp_path):
    """`allowed_models` (http.md: enforced with 403) has no flag: the operator writes it into
    metadata.json. Re-running `agent add` to change the agent's memory or project used to drop it,
    silently letting the agent name any model again; what the flags say follows the flags."""
    ctx = tmp_path / "ctx"
    first = CliRunner().invoke(main, ["agent", "add", "bot", "--context-root", str(ctx), "--no-memory",
                                      "--client-provider-key"])
    assert first.exit_code == 0, first.output
    meta_path = ctx / "bot" / "metadata.json"
    meta = orjson.loads(meta_path.read_bytes())
    meta_path.write_bytes(orjson.dumps({**meta, "allowed_models": ["gpt-4o-mini"], "timezone": "Europe/Lisbon"}))
    again = CliRunner().invoke(main, ["agent", "add", "bot", "--context-root", str(ctx), "--no-memory",
                                      "--project", "billing"])
    assert again.exit_code == 0, again.output
    meta = orjson.loads(meta_path.read_bytes())
    assert meta["allowed_models"] == ["gpt-4o-mini"] and meta["timezone"] == "Europe/Lisbon"
    assert meta["project"] == "billing" and "provider_key" not in meta  # the flags of this run
