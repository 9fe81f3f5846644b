"""An attacker's review of the running stack: what a black-box prober found, each through the real
servers on loopback (the proxy, the memory engines, the strict fake provider), as the prober sent it.

The probe classes that held are listed in docs/operating.md ("Attacker's review"); the tests here
are for the ones that did not.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from manifests.agents import memory_manifest
from memplane_core.contract import RETAIN_BATCH_PATH

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
