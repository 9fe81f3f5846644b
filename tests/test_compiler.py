"""An operator compiles a pod file into agent context dirs, and gets exact errors when it is wrong."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from manifests.compiler import CompileError, compile_pod
from manifests.validate import load_json
from memplane_cli.main import main

REPO = Path(__file__).resolve().parent.parent
DESCRIBE = {"version": 2, "memory": {"retain": {"path": "/retain"}, "recall": {"path": "/recall"},
                                     "forget": {"path": "/forget"}}}


def pod(tmp_path: Path, text: str, describe: dict | None = DESCRIBE) -> Path:
    (tmp_path / "mem").mkdir(exist_ok=True)
    if describe is not None:
        (tmp_path / "mem" / ".claw-describe.json").write_text(json.dumps(describe))
    path = tmp_path / "pod.yml"
    path.write_text(text)
    return path


BASE = """
x-claw:
  pod: desk
  memory-defaults: {service: mem-svc, timeout-ms: 2000}
services:
  analyst:
    image: a
    x-claw: {agent: ./a.md, memory: {service: mem-svc, timeout-ms: 5000}}
  researcher:
    image: r
    x-claw: {agent: ./r.md}
  mem-svc:
    image: m
    build: ./mem
    expose: ["9090"]
"""


def test_example_pods_compile(tmp_path):
    for pod_file in (REPO / "examples/pod/claw-pod.yml", REPO / "compose/docker-compose.yml"):
        result = compile_pod(pod_file, tmp_path / pod_file.stem)
        assert {a.agent_id for a in result.agents} >= {"analyst", "researcher"}
        for agent in result.agents:
            load_json(tmp_path / pod_file.stem / agent.agent_id / "metadata.json", "metadata")


def test_defaults_overrides_ports_and_files(tmp_path):
    out = tmp_path / "out"
    compile_pod(pod(tmp_path, BASE), out)
    analyst = json.loads((out / "analyst" / "memory.json").read_text())
    researcher = json.loads((out / "researcher" / "memory.json").read_text())
    assert analyst["base_url"] == "http://mem-svc:9090" and analyst["recall"]["timeout_ms"] == 5000
    assert researcher["recall"]["timeout_ms"] == 2000  # from memory-defaults
    meta = json.loads((out / "analyst" / "metadata.json").read_text())
    token = (out / "analyst" / "token").read_text().strip()
    import hashlib
    assert meta["pod"] == "desk" and meta["token_sha256"] == hashlib.sha256(token.encode()).hexdigest()
    assert stat.S_IMODE((out / "analyst" / "token").stat().st_mode) == 0o600
    assert not (out / "mem-svc").exists()  # the memory service is not an agent


def test_tokens_survive_recompiles(tmp_path):
    out = tmp_path / "out"
    path = pod(tmp_path, BASE)
    first = {a.agent_id: a.token for a in compile_pod(path, out).agents}
    second = compile_pod(path, out)
    assert {a.agent_id: a.token for a in second.agents} == first
    assert not any(a.new_token for a in second.agents)


def test_read_only_and_ingest_only_services(tmp_path):
    out = tmp_path / "out"
    compile_pod(pod(tmp_path, BASE, {"version": 2, "memory": {"recall": {"path": "/q"}}}), out)
    doc = json.loads((out / "analyst" / "memory.json").read_text())
    assert doc["recall"]["path"] == "/q" and "retain" not in doc and "forget" not in doc
    compile_pod(pod(tmp_path, BASE, {"version": 2, "memory": {"retain": {"path": "/ingest"}}}), out)
    doc = json.loads((out / "analyst" / "memory.json").read_text())
    assert doc["retain"]["path"] == "/ingest" and "batch_path" not in doc["retain"] and "recall" not in doc
    # a service that takes retains in batches says so in its descriptor; the manifest carries it
    compile_pod(pod(tmp_path, BASE, {"version": 2, "memory": {"retain": {"path": "/ingest", "batch_path": "/many"}}}),
                out)
    assert json.loads((out / "analyst" / "memory.json").read_text())["retain"]["batch_path"] == "/many"


def test_describe_override_and_label(tmp_path):
    (tmp_path / "d.json").write_text(json.dumps({"version": 2, "memory": {"recall": {"path": "/r2"}}}))
    text = BASE.replace("build: ./mem", "labels: {claw.describe: d.json}")
    out = tmp_path / "out"
    compile_pod(pod(tmp_path, text, describe=None), out)
    assert json.loads((out / "analyst" / "memory.json").read_text())["recall"]["path"] == "/r2"
    compile_pod(pod(tmp_path, BASE), out, describe={"mem-svc": str(tmp_path / "d.json")})
    assert json.loads((out / "analyst" / "memory.json").read_text())["recall"]["path"] == "/r2"


@pytest.mark.parametrize("text,describe,expect", [
    (BASE.replace("memory: {service: mem-svc, timeout-ms: 5000}", "memory: {service: nope}"), DESCRIBE,
     ["analyst", "nope", "services.analyst.x-claw.memory.service"]),
    (BASE, {"version": 2, "memory": {}}, ["analyst", "mem-svc", "no memory capability"]),
    (BASE, {"version": 2}, ["mem-svc", "no memory capability"]),
    (BASE.replace("timeout-ms: 5000", "timeout-ms: -1"), DESCRIBE, ["services.analyst.x-claw.memory.timeout-ms"]),
    (BASE.replace("timeout-ms: 5000", "timeout-ms: fast"), DESCRIBE, ["timeout-ms", "'fast'"]),
    (BASE.replace("x-claw: {agent: ./r.md}", "x-claw: {agent: ./r.md, agent-id: analyst}"), DESCRIBE,
     ["duplicate agent id 'analyst'"]),
    ("- just\n- a list\n", DESCRIBE, ["pod.yml", "must be a YAML mapping"]),
    (BASE, None, ["mem-svc", "no memory descriptor found"]),
])
def test_errors_name_the_file_the_agent_or_service_and_the_field(tmp_path, text, describe, expect):
    out = tmp_path / "out"
    with pytest.raises(CompileError) as exc:
        compile_pod(pod(tmp_path, text, describe), out)
    for fragment in expect:
        assert fragment in str(exc.value)
    assert str(tmp_path / "pod.yml") in str(exc.value)
    assert not out.exists()  # no partial output


def test_failed_recompile_leaves_previous_output_untouched(tmp_path):
    out = tmp_path / "out"
    compile_pod(pod(tmp_path, BASE), out)
    before = (out / "analyst" / "memory.json").read_text()
    with pytest.raises(CompileError):
        compile_pod(pod(tmp_path, BASE.replace("timeout-ms: 5000", "timeout-ms: 0")), out)
    assert (out / "analyst" / "memory.json").read_text() == before


def test_cli_compile_print_env_and_errors(tmp_path):
    path = pod(tmp_path, BASE)
    runner = CliRunner()
    result = runner.invoke(main, ["compile", str(path), "--out", str(tmp_path / "out"), "--print-env"])
    assert result.exit_code == 0, result.output
    token = (tmp_path / "out" / "analyst" / "token").read_text().strip()
    assert f"OPENAI_API_KEY={token}" in result.stdout and "OPENAI_BASE_URL=http://memplane:8080/v1" in result.stdout
    bad = pod(tmp_path, BASE.replace("{service: mem-svc, timeout-ms: 5000}", "{service: ghost}"))
    result = runner.invoke(main, ["compile", str(bad), "--out", str(tmp_path / "out2")])
    assert result.exit_code != 0 and "ghost" in result.output and "Traceback" not in result.output


def test_out_dir_that_compile_did_not_make_is_never_replaced(tmp_path, monkeypatch):
    pod_file = pod(tmp_path, BASE)
    mine = tmp_path / "work"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    with pytest.raises(CompileError, match="not made by"):
        compile_pod(pod_file, mine)
    assert (mine / "notes.txt").read_text() == "precious"
    out = tmp_path / "ctx"
    compile_pod(pod_file, out)
    compile_pod(pod_file, out)  # its own output is replaced on recompile
    assert (out / "analyst" / "metadata.json").exists()
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["compile", str(pod_file), "--out", "."])
    assert result.exit_code == 1 and "Traceback" not in result.output and "--out" in result.output
    models = BASE.replace("x-claw: {agent: ./r.md}", "x-claw: {agent: ./r.md, models: gpt-4o}")
    with pytest.raises(CompileError, match="models must be a list"):
        compile_pod(pod(tmp_path, models), tmp_path / "m")


def test_agent_add_never_writes_through_a_planted_symlink(tmp_path):
    ctx = tmp_path / "ctx"
    (ctx / "victim").mkdir(parents=True)
    target = tmp_path / "target.txt"
    target.write_text("do not touch")
    target.chmod(0o644)
    for name in (".memory.json.tmp", ".token.tmp", ".metadata.json.tmp"):
        (ctx / "victim" / name).symlink_to(target)
    result = CliRunner().invoke(main, ["agent", "add", "victim", "--context-root", str(ctx)])
    assert result.exit_code == 0
    assert target.read_text() == "do not touch" and stat.S_IMODE(target.stat().st_mode) == 0o644
    for name in ("token", "metadata.json", "memory.json"):
        assert stat.S_IMODE((ctx / "victim" / name).stat().st_mode) == 0o600
    assert stat.S_IMODE((ctx / "victim").stat().st_mode) == 0o700


def test_store_memory_is_opted_into_per_agent_or_for_the_pod(tmp_path):
    from manifests.models import MemoryManifest
    text = BASE.replace("memory-defaults: {service: mem-svc, timeout-ms: 2000}",
                        "memory-defaults: {service: mem-svc, timeout-ms: 2000, tools: [store_memory]}")
    text = text.replace("memory: {service: mem-svc, timeout-ms: 5000}", "memory: {service: mem-svc, tools: []}")
    out = tmp_path / "out"
    compile_pod(pod(tmp_path, text), out)
    researcher = json.loads((out / "researcher" / "memory.json").read_text())
    analyst = json.loads((out / "analyst" / "memory.json").read_text())
    assert researcher["tools"] == ["store_memory"] and analyst["tools"] == []  # the agent's own choice wins
    assert MemoryManifest.from_doc(researcher).tools == ("store_memory",)
    assert MemoryManifest.from_doc(analyst).tools == ()
    with pytest.raises(CompileError) as exc:  # a tool memplane does not have is named, not ignored
        compile_pod(pod(tmp_path, BASE.replace("timeout-ms: 5000", "timeout-ms: 5000, tools: [rm_rf]")), out)
    assert "analyst" in str(exc.value) and "rm_rf" in str(exc.value)


async def test_a_descriptor_url_is_read_by_the_memory_service_client(tmp_path, aiohttp_server):
    """`--describe SERVICE=URL`: the descriptor a running service publishes; a URL that gives none
    is a one-line error naming the service, not a traceback."""
    import asyncio
    import sys

    from aiohttp import web

    from memory_adapters.embedded.app import build_embedded_app
    from memplane_core.redact import Redactor
    from memplane_core.telemetry import Telemetry

    service = await aiohttp_server(build_embedded_app(tmp_path / "memdata", redactor=Redactor(),
                                                      telemetry=Telemetry(), embeddings="off"))
    broken = web.Application()
    async def not_a_descriptor(request: web.Request) -> web.Response:
        return web.json_response({"version": 2, "memory": "nope"})
    broken.router.add_get("/d.json", not_a_descriptor)
    broken_server = await aiohttp_server(broken)
    pod_file = pod(tmp_path, BASE, describe=None)
    memplane = str(Path(sys.executable).parent / "memplane")

    async def compile_with(url: str, out: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            memplane, "compile", str(pod_file), "--out", str(tmp_path / out), "--describe", f"mem-svc={url}",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await proc.communicate()
        return proc.returncode, err.decode()

    code, err = await compile_with(str(service.make_url("/.claw-describe.json")), "out")
    assert code == 0, err
    manifest = json.loads((tmp_path / "out" / "analyst" / "memory.json").read_text())
    assert manifest["retain"]["batch_path"] == "/retain/batch"  # what this service offers, read from it

    code, err = await compile_with(str(broken_server.make_url("/d.json")), "out2")
    assert code != 0 and "mem-svc" in err and "descriptor" in err and "Traceback" not in err
    code, err = await compile_with("http://127.0.0.1:9/.claw-describe.json", "out3")
    assert code != 0 and "mem-svc" in err and "did not answer" in err and "Traceback" not in err
