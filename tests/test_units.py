"""The pure units that carry the design, tested in-process beside the end-to-end suite (issue 26):
recall policy, the SSE splitter, the pass-through allow-list and one retain lane."""

from __future__ import annotations

import pytest

from memplane_core.memo import TextMemo
from memplane_core.redact import Redactor
from proxy.ledger.files import Ledger
from proxy.memory_service import recalled_memories
from proxy.recall_policy import apply_policy
from proxy.retain.lane import BufferBudget, Lane
from proxy.forward_policy import allowed, parse_allow_list
from proxy.sse import SSESplitter, parse_event

# -- recall policy: what reaches a prompt ------------------------------------------------------


def policy(raw, *, max_blocks=8, budget_tokens=3000):
    """The policy over `raw` items as the memory-service client reads them off a recall answer."""
    return apply_policy(recalled_memories(raw), Redactor(), max_blocks=max_blocks, budget_tokens=budget_tokens)


def test_transcripts_blanks_and_repeats_never_reach_the_prompt():
    result = policy([
        {"text": "User prefers tea.", "kind": "fact", "score": 0.9},
        {"text": "user: hi\nassistant: hello", "kind": "RAW_TRANSCRIPT"},
        {"text": "tail", "source": "session_tail"},
        {"text": "   "},
        {"text": None},
        {"text": "  User prefers tea.  "},
        {"text": "Lives in Lyon.", "score": True},
    ])
    assert [m.text for m in result.memories] == ["User prefers tea.", "Lives in Lyon."]
    assert result.decisions == ["injected", "transcript_kind", "transcript_kind", "blank", "blank",
                                "duplicate", "injected"]
    assert result.memories[0].score == 0.9 and result.memories[1].score is None  # a bool is no score
    assert result.removed == 5


def test_the_service_order_is_kept_within_block_and_token_limits():
    many = [{"text": f"memory number {i} " + "word " * 40} for i in range(5)]
    by_blocks = policy(many, max_blocks=2)
    assert [m.text.split()[2] for m in by_blocks.memories] == ["0", "1"]
    assert by_blocks.reasons["over_max_blocks"] == 3
    by_budget = policy(many, budget_tokens=120)
    assert 1 <= len(by_budget.memories) < 5 and by_budget.reasons["over_budget"] >= 1
    assert by_budget.memories[0].text.startswith("memory number 0")


def test_a_recalled_secret_is_redacted_before_injection():
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8" * 3
    result = policy([{"text": f"the deploy key is {key}"}])
    assert key not in result.memories[0].text and sum(result.redactions.values()) == 1
    assert result.memory_removed == 1


# -- SSE: whole events, byte for byte ---------------------------------------------------------


def test_events_split_across_chunks_come_back_whole_and_unchanged():
    stream = b"event: a\ndata: {\"x\":1}\n\ndata: caf\xc3\xa9\r\n\r\ndata: last\r\rtrailing"
    splitter, events = SSESplitter(), []
    for i in range(len(stream)):  # the worst case: one byte at a time
        events += splitter.feed(stream[i:i + 1])
    assert events == [b"event: a\ndata: {\"x\":1}\n\n", b"data: caf\xc3\xa9\r\n\r\n", b"data: last\r\r"]
    assert splitter.flush() == b"trailing" and splitter.flush() == b""
    assert parse_event(events[0]) == ("a", '{"x":1}')
    assert parse_event(b"data: one\ndata:two\n\n") == (None, "one\ntwo")


def test_a_100kb_event_without_a_boundary_is_held_not_lost():
    splitter = SSESplitter()
    assert splitter.feed(b"data: " + b"x" * 100_000) == []
    assert splitter.feed(b"\n\n") == [b"data: " + b"x" * 100_000 + b"\n\n"]


# -- pass-through allow-list ------------------------------------------------------------------


def test_allow_list_matches_one_segment_per_placeholder_and_the_method():
    rules = parse_allow_list("GET /v1/models/{id}, * /v1/files/")
    assert allowed(rules, "GET", "/v1/models/gpt-4o")
    assert not allowed(rules, "GET", "/v1/models/a/b")
    assert not allowed(rules, "POST", "/v1/models/gpt-4o")
    assert allowed(rules, "DELETE", "/v1/files")
    assert not allowed(rules, "GET", "/v1/chat/completions")


def test_allow_list_defaults_and_refuses_paths_outside_v1():
    assert allowed(parse_allow_list(None), "GET", "/v1/models")
    assert parse_allow_list("") == ()
    for bad in ["GET /admin", "/v1/models", "GET /v1/a extra"]:
        with pytest.raises(ValueError, match="expected 'METHOD /v1/path'"):
            parse_allow_list(bad)


def test_allow_list_patterns_are_literal_not_regex():
    rules = parse_allow_list(["GET /v1/a.b"])
    assert allowed(rules, "GET", "/v1/a.b") and not allowed(rules, "GET", "/v1/axb")


# -- one retain lane --------------------------------------------------------------------------


async def test_a_lane_reads_the_ledger_when_the_shared_buffer_is_full(tmp_path):
    ledger = Ledger(tmp_path)
    budget = BufferBudget(limit=1)
    lane = Lane("agent-a", budget)
    refs = [await ledger.append("agent-a", {"n": i}) for i in range(3)]
    lane.offer((refs[0][0], refs[0][1], {"n": 0}))
    assert budget.used == 1 and not lane.from_file
    lane.offer((refs[1][0], refs[1][1], {"n": 1}))  # budget spent: the ledger has it
    assert lane.from_file and budget.used == 0 and not lane.pending

    first = await lane.next_items(ledger, 2, on_torn=lambda: None)
    assert [e["n"] for _, _, e in first] == [0, 1]
    lane.cursor = first[-1][1]
    rest = await lane.next_items(ledger, 10, on_torn=lambda: None)
    assert [e["n"] for _, _, e in rest] == [2]
    lane.cursor = rest[-1][1]
    assert await lane.next_items(ledger, 10, on_torn=lambda: None) == []
    assert not lane.from_file  # caught up: back to the in-memory fast path
    ledger.close()


async def test_a_gap_in_the_buffer_sends_the_lane_to_the_ledger(tmp_path):
    ledger = Ledger(tmp_path)
    lane = Lane("agent-a", BufferBudget(limit=10))
    refs = [await ledger.append("agent-a", {"n": i}) for i in range(2)]
    lane.offer((refs[1][0], refs[1][1], {"n": 1}))  # entry 0 was never buffered
    items = await lane.next_items(ledger, 10, on_torn=lambda: None)
    assert [e["n"] for _, _, e in items] == [0, 1] and lane.budget.used == 0
    ledger.close()


def test_backlog_counts_entries_not_yet_settled_per_agent_and_in_total():
    from proxy.retain.backlog import Backlog

    backlog = Backlog()
    for agent in ["a", "a", "a", "b"]:
        backlog.add(agent)
    backlog.settle("a", 2)
    assert backlog("a") == 1 and backlog("b") == 1 and backlog() == 2
    backlog.settle("b", 5)  # a previous run's leftovers settling never make it negative
    assert backlog("b") == 0 and backlog() == 1 and backlog("nobody") == 0


def test_a_retain_setting_out_of_range_is_refused_before_the_proxy_starts(tmp_path):
    from click.testing import CliRunner

    from memplane_cli.main import main

    out = CliRunner().invoke(main, ["serve", "--context-root", str(tmp_path), "--retain-in-flight", "0"])
    assert out.exit_code == 2 and "--retain-in-flight" in out.output
    out = CliRunner().invoke(main, ["serve", "--help"])
    assert "MEMPLANE_RETAIN_BATCH" not in out.output and "--retain-linger" in out.output


def test_an_explanation_names_only_what_recall_did():
    """A skipped recall's explanation says why and nothing else; a reused block keeps the first call's
    memories and says it was reused (the typed record serialises to the documented shape)."""
    from proxy.explanation import RecallDetail, TurnExplanation

    skipped = TurnExplanation("turn_1", "a", "2026-01-01T00:00:00Z", 1.0, "openai", "/v1/chat/completions",
                              "skipped", 0, 0, 0.0, RecallDetail(service="mem", skipped="no user text")).as_dict()
    assert skipped["skipped"] == "no user text" and skipped["tokens"] == 0 and skipped["memories"] == []
    assert "block" not in skipped and "error" not in skipped
    first = RecallDetail(service="mem", query="q", block="<memories/>", placement="system", tokens=7,
                         ranking=None, redactions={}, memories=[{"decision": "injected", "text": "t"}])
    again = RecallDetail.from_dict({**first.as_dict(), "unknown": 1})
    assert again == first and again.as_dict()["ranking"] is None and again.injected_tokens() == 7


def test_adapters_name_a_bad_redaction_rules_file_before_they_listen(tmp_path):
    from click.testing import CliRunner

    from memplane_cli.main import main

    bad = tmp_path / "rules.yml"
    bad.write_text("rules: [ {id: x, regex: '(' } ]\n")
    for args in (["adapter", "reference", "--data-dir", str(tmp_path / "ref")], ["adapter", "tiered"]):
        out = CliRunner(env={"MEMPLANE_REDACTION_RULES": str(bad)}).invoke(main, args)
        assert out.exit_code == 1 and "Error:" in out.output, (args, out.output)
        assert not (tmp_path / "ref").exists()  # refused before anything was created


def test_a_multi_megabyte_message_searches_memory_with_its_head_and_tail_only():
    """Every word of a query is looked up and scored on the memory service's event loop: a pasted
    4 MB document would hold every agent's recall for seconds."""
    from memory_adapters.engine.episodes import recall_query
    from memplane_core.turn_text import MAX_QUERY_CHARS, query_from

    pasted = "Please summarise this log. " + "ERROR disk full on node-7 " * 160_000 + "Which node failed first?"
    query = query_from([{"role": "user", "content": pasted}])
    assert len(query) <= MAX_QUERY_CHARS + 3
    assert query.startswith("Please summarise this log.") and query.endswith("Which node failed first?")
    served = recall_query("[1:56 pm on 8 May, 2023] " + pasted)  # a client may send any query itself
    assert len(served) <= MAX_QUERY_CHARS + 3 and served.startswith("Please") and served.endswith("first?")
    assert query_from([{"role": "user", "content": "where does my sister live?"}]) == "where does my sister live?"


async def test_an_agent_waits_for_its_own_share_while_another_agent_goes_first():
    import asyncio

    from proxy.agent_shares import AgentShares
    shares, order = AgentShares(8, per_agent=2), []
    release = asyncio.Event()

    async def work(agent, n):
        async with shares.held(agent):
            order.append(f"{agent}{n}")
            if agent == "greedy":
                await release.wait()

    greedy = [asyncio.create_task(work("greedy", n)) for n in range(5)]
    await asyncio.sleep(0.01)
    await asyncio.wait_for(work("polite", 0), 1)  # not behind greedy's three waiting ones
    assert order == ["greedy0", "greedy1", "polite0"]
    release.set()
    await asyncio.gather(*greedy)
    assert sorted(order) == ["greedy0", "greedy1", "greedy2", "greedy3", "greedy4", "polite0"]
    assert not shares._agents  # nothing kept for agents with no work left


def test_text_pasted_with_invisible_characters_is_remembered_as_a_reader_sees_it():
    """Zero-width spaces, soft hyphens, bidi marks and BOMs ride along with pasted web and chat text:
    a question ending in '?\\u200b' must still read as a question, and the memory holds what shows."""
    from memory_adapters.engine.context import asks
    from memory_adapters.engine.episodes import episodes_from_entry, recall_query
    from memplane_core.redact import Redactor

    pasted = "\ufeffWhere did Ana move\u00ad to last year?\u200b\u200e"
    entry = {"id": "hist1_z", "ts": "2026-11-20T10:00:00.000Z",
             "request_original": {"messages": [{"role": "user", "content": pasted}]},
             "response": {"format": "json", "json": {"choices": [{"message": {"content": "OK."}}]}}}
    [episode] = episodes_from_entry("ana", entry, {}, Redactor())
    assert episode.value == "Where did Ana move to last year?" and asks(episode.value)
    assert recall_query(pasted) == episode.value  # the question's vector is the episode's (query cache)


def test_a_hot_path_memo_never_grows_past_its_bound_whatever_texts_arrive():
    """A caller's endless distinct texts (hostile or not) only refill a memo: too long a text is
    never kept, and a full memo starts afresh instead of growing."""
    by_count: TextMemo[int] = TextMemo(entries=3, key_chars=10)
    for n in range(100):
        by_count.put(f"k{n}", n)
        assert len(by_count._items) <= 3
    assert by_count.get("k99") == 99 and by_count.get("k0") is None
    by_count.put("x" * 11, 1)
    assert "x" * 11 not in by_count

    by_chars: TextMemo[None] = TextMemo(chars=20, key_chars=10)
    by_chars.put("a" * 10, None)
    assert by_chars.get("a" * 10, "missing") is None  # a remembered None is told apart from a miss
    for n in range(50):
        by_chars.put(f"{n:010d}", None)
        assert sum(map(len, by_chars._items)) <= 20
