"""The placement rules every wire format follows, checked in-process against the strict provider's
own checkers: whatever the placement, the request memplane builds is one the real API accepts."""

from __future__ import annotations

import pytest

from memory_adapters.engine.episodes import episodes_from_entry
from memplane_core.redact import Redactor
from proxy.formats import FORMATS, placement_for
from proxy.formats.rules import after_tool_results, safe_chat_index, safe_item_index
from proxy.inject import drop_repeated_lines, render_block
from proxy.recall_policy import InjectedMemory
from proxy.testing.fake_provider import anthropic_problem, chat_problem, responses_problem
from proxy.turn_blocks import turn_key

CHAT, ANTHROPIC, RESPONSES = FORMATS
MEMS = [InjectedMemory("Ana lives in Porto.", kind="fact", id="m1")]
BLOCK = render_block("svc", MEMS)

CHAT_LOOP = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "t", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "21C"},
    {"role": "tool", "tool_call_id": "c2", "content": "noon"},
]
ANTHROPIC_LOOP = [
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": [{"type": "text", "text": "Let me check."},
                                      {"type": "tool_use", "id": "tu1", "name": "w", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu1", "content": "21C"},
                                 {"type": "text", "text": "also: hurry", "cache_control": {"type": "ephemeral"}}]},
]
RESPONSES_LOOP = [
    {"role": "user", "content": "weather?"},
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {"type": "function_call", "call_id": "f1", "name": "w", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "f1", "output": "21C"},
]


@pytest.mark.parametrize("placement", ["trailing", "system", "latest", "bogus"])
def test_chat_tool_loop_stays_valid_in_every_placement(placement):
    body = {"model": "m", "messages": CHAT_LOOP}
    placed, _ = placement_for(CHAT, placement, body)
    sent = CHAT.inject(body, BLOCK, MEMS, "svc", placed)
    assert chat_problem(sent) is None and BLOCK in "".join(str(m["content"]) for m in sent["messages"])
    if placed == "trailing":
        assert sent["messages"][:-1] == CHAT_LOOP


def test_chat_latest_never_splits_tool_calls_from_their_results():
    messages = [*CHAT_LOOP, {"role": "user", "content": "and now?"}]
    assert safe_chat_index(messages, 3) == 5 and safe_chat_index(messages, 4) == 5
    assert safe_chat_index(messages, 2) == 2 and safe_chat_index(messages, 5) == 5


@pytest.mark.parametrize("thinking", [False, True], ids=["plain", "thinking"])
@pytest.mark.parametrize("placement", ["trailing", "system", "latest", "search_results"])
def test_anthropic_tool_loop_stays_valid_in_every_placement(placement, thinking):
    body = {"model": "c", "max_tokens": 5, "messages": ANTHROPIC_LOOP,
            **({"thinking": {"type": "enabled", "budget_tokens": 1024}} if thinking else {})}
    placed, _ = placement_for(ANTHROPIC, placement, body)
    sent = ANTHROPIC.inject(body, BLOCK, MEMS, "svc", placed)
    assert anthropic_problem(sent) is None
    if placed == "trailing" and not thinking:  # after everything the client sent, its results included
        assert sent["messages"][:-1] == ANTHROPIC_LOOP[:-1]
        assert sent["messages"][-1]["content"] == [*ANTHROPIC_LOOP[-1]["content"], {"type": "text", "text": BLOCK}]
        return
    # the step's tool results (and the note beside them) go as sent: with extended thinking, any
    # other content there would strip the loop's thinking and its cache
    assert sent["messages"][1:] == ANTHROPIC_LOOP[1:]
    question = sent["messages"][0]["content"]
    if placed == "trailing":  # where the turn's first call put it: after the question
        assert question == [{"type": "text", "text": "weather?"}, {"type": "text", "text": BLOCK}]
    elif placed != "system":
        assert question[-1] == {"type": "text", "text": "weather?"} and len(question) > 1


def test_anthropic_search_results_fall_back_when_citations_cannot_be_on():
    structured = {"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": "q"}],
                  "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}}
    placed, why = placement_for(ANTHROPIC, "search_results", structured)
    assert placed == "latest" and "structured output" in why
    assert anthropic_problem(ANTHROPIC.inject(structured, BLOCK, MEMS, "svc", placed)) is None
    own_off = {"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "search_result", "source": "kb", "title": "t", "content": [{"type": "text", "text": "x"}]},
        {"type": "text", "text": "q"}]}]}
    placed, why = placement_for(ANTHROPIC, "search_results", own_off)
    assert placed == "latest" and "all-or-nothing" in why
    assert anthropic_problem(ANTHROPIC.inject(own_off, BLOCK, MEMS, "svc", placed)) is None
    own_on = {**own_off, "messages": [{"role": "user", "content": [
        {**own_off["messages"][0]["content"][0], "citations": {"enabled": True}}, {"type": "text", "text": "q"}]}]}
    placed, why = placement_for(ANTHROPIC, "search_results", own_on)
    assert placed == "search_results" and why is None
    assert anthropic_problem(ANTHROPIC.inject(own_on, BLOCK, MEMS, "svc", placed)) is None


@pytest.mark.parametrize("placement", ["trailing", "system", "latest"])
@pytest.mark.parametrize("store", [True, False])
def test_responses_input_stays_valid_and_unstored(placement, store):
    body = {"model": "r", "input": RESPONSES_LOOP, "store": store}
    placed, why = placement_for(RESPONSES, placement, body)
    sent = RESPONSES.inject(body, BLOCK, MEMS, "svc", placed)
    assert responses_problem(sent, lambda _: None) is None
    if store:  # an input item would be stored and carried by the chain: instructions instead
        assert sent["input"] == RESPONSES_LOOP and BLOCK in sent["instructions"]
        assert placement == "system" or "stored" in why


def test_responses_latest_keeps_reasoning_and_calls_together():
    assert safe_item_index(RESPONSES_LOOP, 1) == 1  # before the reasoning item: fine
    assert safe_item_index(RESPONSES_LOOP, 2) == 4  # never between reasoning and its call, nor call and output
    assert safe_item_index(RESPONSES_LOOP, 3) == 4


def test_tool_results_lead_a_user_message():
    assert after_tool_results([{"type": "tool_result"}, {"type": "tool_result"}, {"type": "text"}]) == 2
    assert after_tool_results([{"type": "text"}, {"type": "tool_result"}]) == 0


def test_a_sliding_breakpoint_does_not_change_the_turn():
    first = [{"role": "user", "content": [{"type": "text", "text": "q", "cache_control": {"type": "ephemeral"}}]}]
    later = [{"role": "user", "content": [{"type": "text", "text": "q"}]}, ANTHROPIC_LOOP[1],
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu1", "content": "21C",
                                           "cache_control": {"type": "ephemeral"}}]}]
    a, b = turn_key("agent", "anthropic", {}, first), turn_key("agent", "anthropic", {}, later)
    assert a.key == b.key and not a.continues and b.continues
    assert turn_key("other", "anthropic", {}, later).key != b.key
    chained = turn_key("agent", "responses", {"previous_response_id": "resp_1"},
                       [{"type": "function_call_output", "call_id": "f1", "output": "x"}])
    assert chained.continues and chained.key


def test_a_block_never_repeats_a_line():
    mems = [InjectedMemory("[2026-01-01]\nuser: where is Ana?\nassistant: Porto."),
            InjectedMemory("[2026-01-01]\nuser: where is Ana?\n\n[2026-01-02]\nuser: she moved to Braga."),
            InjectedMemory("user: where is Ana?")]
    kept, dropped = drop_repeated_lines(mems)
    lines = [ln for m in kept for ln in m.text.splitlines() if ln and not ln.startswith("[")]
    assert len(lines) == len(set(lines)) and dropped == 2 and len(kept) == 2
    assert kept[1].text == "[2026-01-02]\nuser: she moved to Braga."
    big = [InjectedMemory("x" * 50_000 + "\n" + "y\n" * 20_000)]  # hostile sizes stay linear
    assert drop_repeated_lines(big)[1] == 19_999


def test_automatic_caching_keeps_its_breakpoint_on_the_clients_last_block():
    eph = {"type": "ephemeral", "ttl": "1h"}
    body = {"model": "c", "max_tokens": 5, "cache_control": eph, "messages": [{"role": "user", "content": "q"}]}
    sent = ANTHROPIC.inject(body, BLOCK, MEMS, "svc", "trailing")
    assert "cache_control" not in sent
    assert sent["messages"][0]["content"] == [{"type": "text", "text": "q", "cache_control": eph},
                                              {"type": "text", "text": BLOCK}]
    assert anthropic_problem(sent) is None
    # a tool loop's step: the block after the step's results, the breakpoint on the client's last block
    results = [{"type": "tool_result", "tool_use_id": "tu1", "content": "21C"}]
    loop = {**body, "messages": [*ANTHROPIC_LOOP[:2], {"role": "user", "content": results}]}
    sent = ANTHROPIC.inject(loop, BLOCK, MEMS, "svc", "trailing")
    assert "cache_control" not in sent and anthropic_problem(sent) is None
    assert sent["messages"][-1]["content"] == [{**results[0], "cache_control": eph}, {"type": "text", "text": BLOCK}]
    # with extended thinking the step ends with the client's own tool results (the block is in the
    # question's message): automatic caching is left to put its breakpoint there, as without memplane
    sent = ANTHROPIC.inject({**loop, "thinking": {"type": "adaptive"}}, BLOCK, MEMS, "svc", "trailing")
    assert sent["cache_control"] == eph and sent["messages"][-1] == loop["messages"][-1]
    assert anthropic_problem(sent) is None


def test_new_agents_and_compiled_pods_get_the_trailing_placement(tmp_path):
    import json

    from click.testing import CliRunner

    from manifests.compiler import CompileError, compile_pod
    from manifests.models import MemoryManifest
    from memplane_cli.main import main
    from tests.test_compiler import BASE, pod

    out = tmp_path / "out"
    compile_pod(pod(tmp_path, BASE), out)
    assert json.loads((out / "analyst" / "memory.json").read_text())["placement"] == "trailing"
    chosen = BASE.replace("memory: {service: mem-svc, timeout-ms: 5000}",
                          "memory: {service: mem-svc, timeout-ms: 5000, placement: latest}")
    compile_pod(pod(tmp_path, chosen), out)
    assert json.loads((out / "analyst" / "memory.json").read_text())["placement"] == "latest"
    with pytest.raises(CompileError, match="placement"):
        compile_pod(pod(tmp_path, BASE.replace("timeout-ms: 5000}", "timeout-ms: 5000, placement: middle}")),
                    tmp_path / "bad")
    result = CliRunner().invoke(main, ["agent", "add", "newbie", "--context-root", str(tmp_path / "ctx"),
                                       "--memory-url", "http://127.0.0.1:9"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "ctx" / "newbie" / "memory.json").read_text())["placement"] == "trailing"
    # a memory.json written before placements had a default keeps working, with the new default
    assert MemoryManifest.from_doc({"service": "s", "base_url": "http://x"}).placement == "trailing"


def test_odd_shapes_never_break_reading_a_tool_loop():
    from memplane_core.turn_text import assistant_text, calls_tools, tool_steps, user_text

    odd = [{"response": {"format": "json", "json": {"choices": ["x"]}}},
           {"response": {"format": "json", "json": {"content": "text", "output": [1, None]}}},
           {"request_original": {"messages": [{"role": "user", "content": "q"},
                                              {"role": "assistant", "tool_calls": "calls", "content": [1, "x"]},
                                              {"role": "tool", "tool_call_id": None, "content": {"a": 1}},
                                              {"type": "function_call", "name": None, "arguments": 5}]},
            "response": "weird", "turn_question": 7}]
    for entry in odd:
        calls_tools(entry), tool_steps(entry), user_text(entry), assistant_text(entry)
        episodes_from_entry("a", {"id": "hist1_x", **entry}, {}, Redactor())
    assert user_text({"request_original": {"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]},
                      "turn_question": "What is the weather?"}) == "What is the weather?"


def test_a_hostile_thread_field_is_a_clear_400():
    from proxy.errors import ProxyError
    from proxy.threads import Threads

    threads = Threads()
    for thread in ("x", {"type": "fork"}, {"type": "continue", "previous_message_id": 5}, {"type": "continue"}):
        with pytest.raises(ProxyError) as bad:
            threads.expand("a", {"model": "c", "messages": [], "thread": thread})
        assert bad.value.status == 400
    body, pending = threads.expand("a", {"model": "c", "messages": [{"role": "user", "content": "q"}],
                                         "thread": {"type": "create"}, "system": "s"})
    assert "thread" not in body and pending.fields == {"system": "s"}
    threads.record("a", pending, "msg_1", [{"type": "text", "text": "hi"}])
    body, _ = threads.expand("a", {"model": "c", "messages": [{"role": "user", "content": "more"}],
                                   "thread": {"type": "continue", "previous_message_id": "msg_1"}})
    assert body["system"] == "s" and [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    with pytest.raises(ProxyError):  # another agent never continues it
        threads.expand("b", {"model": "c", "messages": [], "thread": {"type": "continue", "previous_message_id": "msg_1"}})


@pytest.mark.parametrize("placement", ["trailing", "latest"])
def test_a_question_asked_with_a_picture_alone_gets_the_block_in_its_own_message(placement):
    """Not a tool loop: the newest message is the turn, words or not; earlier turns stay as sent."""
    picture = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"},
               {"role": "user", "content": [picture]}]
    sent = ANTHROPIC.inject({"model": "c", "max_tokens": 5, "messages": history}, BLOCK, MEMS, "svc", placement)
    assert sent["messages"][:2] == history[:2] and anthropic_problem(sent) is None
    assert {"type": "text", "text": BLOCK} in sent["messages"][2]["content"] and picture in sent["messages"][2]["content"]
