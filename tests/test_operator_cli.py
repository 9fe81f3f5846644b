"""An operator forgets entries, backfills a new service from the ledger, and audits memory ops."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from memplane_core.contract import RecallRequest
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry
from proxy.operator.audit import summarize
from memplane_cli.main import main
from proxy.context_store import ContextStore
from proxy.operator.memory_ops import OperatorError, backfill, forget
from memplane_cli.runner import free_port


async def _turns(stack, agent, texts):
    client = stack.openai(agent)
    for text in texts:
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
    await stack.settle()
    return stack.ledger(agent)


async def test_forget_then_backfill_does_not_resurrect(stack, reference, aiohttp_server, tmp_path):
    ref_url, store = reference
    stack.add_agent("ops", ref_url)
    entries = await _turns(stack, "ops", ["My PIN hint is birds", "I like chess", "I live in Oslo"])
    assert store.count("ops") == 3
    contexts = ContextStore(stack.context_root, Telemetry())
    forgotten = entries[0]["id"]
    [outcome] = await forget(contexts, stack.history_root, "mem-svc", [forgotten], "user asked",
                               telemetry=Telemetry())
    assert outcome.remote == "ok" and store.count("ops") == 2
    assert forgotten in (stack.history_root / "ops" / "tombstones.jsonl").read_text()

    # a brand-new reference service, filled from the ledger
    from memory_adapters.reference.app import REFERENCE_STORE, build_reference_app
    fresh_app = build_reference_app(tmp_path / "fresh", redactor=Redactor())
    fresh = await aiohttp_server(fresh_app)
    url = f"http://{fresh.host}:{fresh.port}/retain"
    stats = await backfill(contexts, stack.history_root, "mem-svc", url=url, redactor=Redactor(), telemetry=Telemetry())
    assert (stats.sent, stats.skipped_tombstoned, stats.failed) == (2, 1, 0)
    fresh_store = fresh_app[REFERENCE_STORE]
    assert fresh_store.count("ops") == 2
    again = await backfill(contexts, stack.history_root, "mem-svc", url=url, redactor=Redactor(), telemetry=Telemetry())
    assert again.sent == 2 and fresh_store.count("ops") == 2  # nothing new created
    recalled = await fresh_store.recall(RecallRequest(
        agent_id="ops", query="PIN hint birds"))
    assert all(m.id != forgotten for m in recalled)


async def test_backfill_after_and_limit(stack, reference, aiohttp_server, tmp_path):
    ref_url, _ = reference
    stack.add_agent("hist", ref_url)
    entries = await _turns(stack, "hist", [f"fact {i}" for i in range(6)])
    from memory_adapters.reference.app import REFERENCE_STORE, build_reference_app
    app = build_reference_app(tmp_path / "fresh", redactor=Redactor())
    server = await aiohttp_server(app)
    url = f"http://{server.host}:{server.port}/retain"
    contexts = ContextStore(stack.context_root, Telemetry())
    stats = await backfill(contexts, stack.history_root, "mem-svc", url=url, after=entries[2]["ts"], redactor=Redactor(),
                           telemetry=Telemetry())
    assert stats.sent == 3
    stats = await backfill(contexts, stack.history_root, "mem-svc", url=url, limit=2, agents=("hist",), redactor=Redactor(),
                           telemetry=Telemetry())
    assert stats.sent == 2
    assert app[REFERENCE_STORE].count("hist") == 5  # 3 after the cut + entries 0 and 1


async def test_forget_with_service_down_still_tombstones(stack):
    stack.add_agent("offline", f"http://127.0.0.1:{free_port()}")
    [entry] = await _turns(stack, "offline", ["my locker code is 4411"])
    contexts = ContextStore(stack.context_root, Telemetry())
    [outcome] = await forget(contexts, stack.history_root, "mem-svc", [entry["id"]], "gdpr", telemetry=Telemetry())
    assert outcome.remote.startswith("failed")
    assert entry["id"] in (stack.history_root / "offline" / "tombstones.jsonl").read_text()


async def test_forget_refuses_unknown_ids_and_agents_instead_of_tombstoning_everyone(stack, tmp_path):
    stack.add_agent("one", f"http://127.0.0.1:{free_port()}")
    stack.add_agent("two", f"http://127.0.0.1:{free_port()}")
    [entry] = await _turns(stack, "one", ["first thing"])
    contexts = ContextStore(stack.context_root, Telemetry())
    with pytest.raises(OperatorError, match="hist1_nowhere"):
        await forget(contexts, stack.history_root, "mem-svc", ["hist1_nowhere"], "r", telemetry=Telemetry())
    with pytest.raises(OperatorError, match="invalid agent id"):
        await forget(contexts, stack.history_root, "mem-svc", [entry["id"]], "r", agents=("../../escape",),
                     telemetry=Telemetry())
    with pytest.raises(OperatorError, match="unknown agent"):
        await forget(contexts, stack.history_root, "mem-svc", [entry["id"]], "r", agents=("ghost",),
                     telemetry=Telemetry())
    [outcome] = await forget(contexts, stack.history_root, "mem-svc", [entry["id"]], "r", telemetry=Telemetry())
    assert outcome.agent_id == "one"  # only the agent whose ledger holds it
    assert not (stack.history_root / "two" / "tombstones.jsonl").exists()
    assert not (tmp_path / "escape").exists() and not (stack.history_root.parent / "escape").exists()


def test_cli_forget_and_backfill_report_to_the_operator(tmp_path):
    from manifests.agents import memory_manifest, write_agent
    ctx, hist = tmp_path / "ctx", tmp_path / "hist"
    write_agent(ctx, "solo", memory=memory_manifest("mem-svc", f"http://127.0.0.1:{free_port()}"))
    runner = CliRunner()
    result = runner.invoke(main, ["memory", "forget", "mem-svc", "--entry-id", "hist1_x", "--reason", "r",
                                  "--context-root", str(ctx), "--history-root", str(hist)])
    assert result.exit_code == 1 and "hist1_x" in result.output and "not found" in result.output
    result = runner.invoke(main, ["memory", "backfill", "mem-svc", "--after", "yesterday",
                                  "--context-root", str(ctx), "--history-root", str(hist)])
    assert result.exit_code == 2 and "RFC3339" in result.output
    result = runner.invoke(main, ["memory", "backfill", "nobody", "--context-root", str(ctx), "--history-root", str(hist)])
    assert result.exit_code == 1 and "no agent subscribes" in result.output
    result = runner.invoke(main, ["memory", "backfill", "mem-svc", "--url", "not-a-url", "--context-root", str(ctx),
                                  "--history-root", str(hist)])
    assert result.exit_code == 2 and "not an http(s) URL" in result.output


def test_audit_summarizes_a_recorded_log(tmp_path):
    events = [
        {"type": "memory_op", "claw_id": "a", "memory_service": "s", "memory_op": "recall", "memory_status": "succeeded",
         "latency_ms": ms, "memory_blocks": 2, "memory_bytes": 100, "memory_removed": 1, "ts": "2026-11-20T10:00:00Z"}
        for ms in (1.0, 2.0, 3.0, 4.0, 50.0)]
    events.append({"type": "memory_op", "claw_id": "a", "memory_service": "s", "memory_op": "recall",
                   "memory_status": "timed_out", "latency_ms": 300.0, "ts": "2026-11-20T10:00:01Z"})
    events.append({"type": "memory_op", "claw_id": "b", "memory_service": "s", "memory_op": "retain",
                   "memory_status": "failed", "latency_ms": 7.0, "ts": "2026-11-20T10:00:02Z"})
    events.append({"type": "request", "claw_id": "a", "status_code": 200, "latency_ms": 12.0, "ts": "2026-11-20T10:00:03Z"})
    log = tmp_path / "proxy.log"
    log.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\nnot json\n")

    summary = summarize(log.read_bytes().splitlines())
    recall = next(r for r in summary["memory"] if r["agent"] == "a")
    assert recall["ops"] == 6 and recall["succeeded"] == 5 and recall["timed_out"] == 1
    assert recall["latency_p50_ms"] == 3.0 and recall["latency_p95_ms"] == 300.0 and recall["latency_max_ms"] == 300.0
    assert recall["blocks"] == 10 and recall["bytes"] == 500 and recall["removed"] == 5
    assert summary["unparsed_lines"] == 1

    runner = CliRunner()
    table = runner.invoke(main, ["audit", str(log)])
    assert table.exit_code == 0 and "TIMED_OUT" in table.output and "retain" in table.output
    as_json = runner.invoke(main, ["audit", str(log), "--json", "--agent", "b"])
    doc = orjson.loads(as_json.output)
    assert [r["op"] for r in doc["memory"]] == ["retain"] and doc["memory"][0]["failed"] == 1
    piped = runner.invoke(main, ["audit", "-", "--json", "--since", "2026-11-20T10:00:01Z"], input=log.read_text())
    since = orjson.loads(piped.output)
    recall_since = next(r for r in since["memory"] if r["agent"] == "a")
    assert recall_since["ops"] == 1 and recall_since["timed_out"] == 1


def test_audit_takes_odd_lines_and_refuses_a_bad_since(tmp_path):
    log = tmp_path / "odd.log"
    log.write_text("\n".join([
        '{"type":"memory_op","claw_id":"a","memory_op":"recall","memory_status":["x"],"memory_blocks":"lots"}',
        '{"type":"request","claw_id":"a","status_code":"teapot","latency_ms":"slow"}',
        '[1,2,3]', '"string"', '{"type":"memory_op","claw_id":{"x":1},"ts":5}', "\x00\x01garbage"]))
    runner = CliRunner()
    result = runner.invoke(main, ["audit", str(log)])
    assert result.exit_code == 0 and "Traceback" not in result.output
    result = runner.invoke(main, ["audit", str(log), "--since", "last tuesday"])
    assert result.exit_code == 2 and "RFC3339" in result.output


async def test_ledger_tombstones_and_cursor_are_private(stack, reference):
    ref_url, _ = reference
    stack.add_agent("private", ref_url)
    [entry] = await _turns(stack, "private", ["my passport number is X123"])
    contexts = ContextStore(stack.context_root, Telemetry())
    await forget(contexts, stack.history_root, "mem-svc", [entry["id"]], "r", telemetry=Telemetry())
    await stack.state.retain.close(1.0)
    import os
    import stat as st
    agent_dir = stack.history_root / "private"
    assert st.S_IMODE(os.stat(agent_dir).st_mode) == 0o700
    for name in ("history.jsonl", "tombstones.jsonl", "retain.cursor"):
        assert st.S_IMODE(os.stat(agent_dir / name).st_mode) == 0o600, name


async def test_backfill_applies_the_operators_redaction_rules(stack, aiohttp_server, tmp_path):
    from aiohttp import web
    got: list[bytes] = []

    async def retain(request):
        got.append(await request.read())
        return web.json_response({}, status=202)

    app = web.Application()
    app.router.add_post("/retain", retain)
    server = await aiohttp_server(app)
    stack.add_agent("rules", f"http://127.0.0.1:{free_port()}")
    await _turns(stack, "rules", ["our ticket TKT-12345678 holds the plan"])
    rules = tmp_path / "rules.yml"
    rules.write_text("rules:\n  - kind: ticket\n    pattern: 'TKT-[0-9]{8}'\n    keywords: ['TKT-']\n")
    contexts = ContextStore(stack.context_root, Telemetry())
    stats = await backfill(contexts, stack.history_root, "mem-svc", url=f"http://{server.host}:{server.port}/retain",
                           redactor=Redactor.from_file(rules), telemetry=Telemetry())
    assert stats.sent == 1 and b"TKT-12345678" not in got[0] and b"[redacted:ticket]" in got[0]


async def test_backfill_sends_the_metadata_live_retain_sent(stack, aiohttp_server):
    """A memory rebuilt from the ledger keeps its session, timezone and model: backfill builds each
    retain as live delivery does, and only adds `backfill: true`."""
    from aiohttp import web

    seen: list[dict] = []

    async def retain(request: web.Request) -> web.Response:
        seen.append(orjson.loads(await request.read())["metadata"])
        return web.json_response({"status": "stored"}, status=202)

    app = web.Application()
    app.router.add_post("/retain", retain)
    app.router.add_post("/recall", lambda r: web.json_response({"memories": []}))
    server = await aiohttp_server(app)
    stack.add_agent("meta", f"http://{server.host}:{server.port}")
    await stack.openai("meta").chat.completions.create(
        model="m", messages=[{"role": "user", "content": "I moved to Oslo"}],
        extra_headers={"X-Session-Id": "s-42"})
    await stack.settle()
    [live] = seen
    assert live.get("session_id") == "s-42"
    stats = await backfill(ContextStore(stack.context_root, Telemetry()), stack.history_root, "mem-svc",
                           redactor=Redactor(), telemetry=Telemetry())
    assert stats.sent == 1
    assert seen[1] == {**live, "backfill": True}


async def test_backfill_waits_out_a_busy_service_as_live_delivery_does(stack, aiohttp_server):
    """A service that answers 503 with Retry-After is busy, not broken: backfill comes back when it
    said (live delivery's sender and retries) instead of counting the entries as failed."""
    from aiohttp import web

    busy = [2]
    stored: list[str] = []

    async def retain(request: web.Request) -> web.Response:
        if busy[0]:
            busy[0] -= 1
            return web.json_response({"error": {"message": "busy"}}, status=503, headers={"Retry-After": "0"})
        stored.append(orjson.loads(await request.read())["entry"]["id"])
        return web.json_response({"status": "stored"}, status=202)

    app = web.Application()
    app.router.add_post("/retain", retain)
    server = await aiohttp_server(app)
    stack.add_agent("busy", f"http://127.0.0.1:{free_port()}")
    entries = await _turns(stack, "busy", ["I keep bees", "I play the oboe"])
    stats = await backfill(ContextStore(stack.context_root, Telemetry()), stack.history_root, "mem-svc",
                           url=f"http://{server.host}:{server.port}/retain", redactor=Redactor(), telemetry=Telemetry())
    assert (stats.sent, stats.failed) == (2, 0)
    assert sorted(stored) == sorted(e["id"] for e in entries)
