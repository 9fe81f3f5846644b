"""The person's words are the person's memory (issue 53): an assistant's reply is never merged into
them. A reply that states something is kept as a memory of its own, the model's (`origin="model"`):
findable on its own words, bounded (a quarter of the block's budget at most, never leading) and
never a turn of the person's conversation, so it neither brings nor lifts the person's turns. A
reply that states nothing is not remembered.

End to end: the real proxy, each engine (embedded, tiered on Redis and the Mongo-wire server), the
strict fake provider replying as an assistant does, the official openai SDK. In-process: the
index's neighbours and sittings around a reply.
"""

from __future__ import annotations

import re

import pytest

from memory_adapters.engine.episodes import episodes_from_entry
from memory_adapters.engine.index import AgentIndex, RecallQuery
from memory_adapters.engine.record import bounded
from memplane_core.redact import Redactor
from proxy.testing.fake_provider import small_talk
from proxy.testing.fake_provider.repliers import latest_message
from tests.test_memory_poisoning import memory_elements, presented_as_users

SIGNED_UP = "[2:00 pm on 3 June, 2023] Rosa: I signed up for the Thursday night pottery class at the community studio."
# what an assistant says back: it names her, echoes her turn, adds a long generic sentence in new words
# (general knowledge: not remembered) and a sentence that names something (remembered, as the model's)
GENERIC = "Creative hobbies often help people unwind and process difficult emotions after a stressful week."
ADVICE = "Many beginners unwind at open evenings, and the Ceramic Arts Guild runs them every month."
ADVICE_REPLY = (f"That's wonderful, Rosa! It sounds like you signed up for a pottery class. {GENERIC} {ADVICE} "
                "How do you feel?")
KILN = "Kilns in most community studios fire to about 1,200 degrees."


def replying(replies: dict[str, str]):
    """A provider that answers each message as `replies` says, else with small talk."""
    def reply(body: dict) -> str:
        message = latest_message(body)
        for start, text in replies.items():
            if message.startswith(start):
                return text
        return small_talk(message)
    return reply


async def ask(stack, agent: str, text: str) -> str:
    await stack.openai(agent).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": text}])
    return stack.provider.received[-1].memories_block or ""


def origins(attrs: str) -> set[str]:
    found = re.search(r'origin="([^"]*)"', attrs)
    return set(found.group(1).split()) if found else set()


async def test_the_persons_fact_comes_back_as_theirs_without_the_replys_advice(stack, engine):
    stack.add_agent("rosa", engine)
    stack.provider.reply = replying({SIGNED_UP: ADVICE_REPLY})
    for text in (SIGNED_UP, "[2:05 pm on 3 June, 2023] Tomas: Nice, I might join you one of these days.",
                 "[2:07 pm on 3 June, 2023] Rosa: The first session is about centering clay on the wheel."):
        await ask(stack, "rosa", text)
    await stack.settle()

    block = await ask(stack, "rosa", "Which class did Rosa sign up for at the community studio?")
    said = [line for line in presented_as_users(block) if "signed up for the Thursday night pottery class" in line]
    assert said, block  # the person's words, as theirs
    assert all(origins(a) >= {"user"} for a, t in memory_elements(block) if "Thursday night" in t)
    assert "Ceramic Arts Guild" not in block and "It sounds like" not in block  # the reply is not beside them

    # a question that matches only the reply's words finds the reply, as the model's, and brings
    # nothing of the person's labelled as theirs
    block = await ask(stack, "rosa", "Who runs open evenings where beginners unwind?")
    assert not [line for line in presented_as_users(block) if "pottery" in line or "Ceramic" in line], block
    holding = [(a, t) for a, t in memory_elements(block) if "Ceramic Arts Guild" in t]
    assert holding, block
    for attrs, text in holding:
        assert "model" in origins(attrs) and f"assistant: {ADVICE}" in text.split("\n"), (attrs, text)

    # general knowledge in new words is not remembered at all; nor is the reply's echo of her turn
    block = await ask(stack, "rosa", "What helps people process difficult emotions after a stressful week?")
    assert "Creative hobbies" not in block and "It sounds like" not in block, block


async def test_a_reply_that_states_a_fact_is_findable_as_the_models_and_bounded(stack, engine):
    stack.add_agent("potter", engine, budget_tokens=400)
    replies = {"What temperature": KILN}
    for n in range(30):  # thirty replies that each state a matching fact, beside short turns
        replies[f"Studio note {n}:"] = (f"Kilns in community studio number {n} fire to about {1100 + n} degrees, and a "
                                        f"glaze firing there takes {n + 5} hours to cool down completely.")
    stack.provider.reply = replying(replies)
    await ask(stack, "potter", "What temperature does a community studio kiln reach?")
    await stack.settle()
    block = await ask(stack, "potter", "How hot do the kilns in community studios fire?")
    holding = [(a, t) for a, t in memory_elements(block) if KILN in t]
    assert holding, block  # findable on its own words...
    for attrs, text in holding:  # ...labelled the model's, on the reply's line, never as the person's
        assert "model" in origins(attrs) and f"assistant: {KILN}" in text.split("\n")
    assert not [line for line in presented_as_users(block) if "1,200 degrees" in line]

    for n in range(30):
        await ask(stack, "potter", f"Studio note {n}: ok.")
    await ask(stack, "potter", "For the record: the community studio kilns I fire in reach stoneware heat.")
    await stack.settle()
    block = await ask(stack, "potter", "How hot do the kilns in community studios fire?")
    elements = memory_elements(block)
    replied = sum(len(line) for _, t in elements for line in t.split("\n") if line.startswith("assistant: "))
    assert 0 < replied <= 0.25 * 400 * 4  # a quarter of the budget (~4 characters a token)
    assert origins(elements[0][0]) != {"model"}  # the person's words lead
    assert "For the record: the community studio kilns I fire in" in block


def entry(n: int, user: str, reply: str, session: str = "s1") -> dict:
    return {"id": f"t{n:03d}", "ts": f"2026-11-28T21:{n // 60:02d}:{n % 60:02d}.000Z", "session_id": session,
            "request_original": {"messages": [{"role": "user", "content": user}]},
            "response": {"format": "json", "json": {"choices": [{"message": {"content": reply}}]}}}


def turns(*said: tuple[str, str]):
    return [m for n, (user, reply) in enumerate(said) for m in episodes_from_entry("a", entry(n, user, reply), {},
                                                                                     Redactor())]


def test_a_reply_is_its_own_bounded_memory_and_no_turn_of_the_conversation():
    memories = turns(("Ana: We hiked the ridge trail on Saturday.", "Great! " + ADVICE),
                     ("Ben: Did you reach the summit?", "OK."),
                     ("Ana: Yes, and we camped by the lake that night.", KILN))
    assert [(m.metadata["origin"], m.value) for m in memories] == [
        ("user", "Ana: We hiked the ridge trail on Saturday."), ("model", f"assistant: {ADVICE}"),
        ("user", "Ben: Did you reach the summit?"),
        ("user", "Ana: Yes, and we camped by the lake that night."), ("model", f"assistant: {KILN}")]
    hike, advice, summit, lake, kiln = memories
    assert [bounded(m) for m in memories] == [False, True, False, False, True]
    idx = AgentIndex()
    for m in reversed(memories):  # in any order: the links are kept as turns arrive
        idx.put(m)
    assert [n.id for n in idx.neighbours(summit)] == [hike.id, lake.id]  # the reply between is stepped over
    assert [n.id for n in idx.neighbours(hike)] == [summit.id]
    assert idx.neighbours(advice) == [] and idx.neighbours(kiln) == []  # a reply brings no turn
    assert advice.id not in idx.sittings.of and hike.id in idx.sittings.of  # nor lifts their sitting
    idx.drop(summit.id)
    assert [n.id for n in idx.neighbours(hike)] == [lake.id]  # relinked past the reply when a turn goes

    # a question on the reply's words alone finds the reply, and nothing of the person's beside it
    [block] = idx.recall(RecallQuery("What helps people unwind and process difficult emotions?"))
    assert block.text.split("\n")[1:] == [f"assistant: {ADVICE}"] and block.origin == "model" and block.bounded


def test_the_links_past_replies_hold_whatever_order_turns_arrive_and_go_in():
    """`around` (what the context step and packing read) is kept as turns are put and dropped: each
    of the person's turns is linked to the nearest of the person's turns on each side, replies
    between stepped over; a reply is linked to none."""
    import random
    rng = random.Random(53)
    for _ in range(30):
        said = [(f"Ana: turn {n} about the harbour.", KILN if rng.random() < 0.6 else "OK.") for n in range(12)]
        memories = turns(*said)
        idx = AgentIndex()
        for m in rng.sample(memories, len(memories)):
            idx.put(m)
        for m in rng.sample(memories, 4):
            idx.drop(m.id)
        kept = [m for m in memories if m.id in idx.memories]  # in time order
        persons = [m for m in kept if m.metadata["origin"] == "user"]
        for m in kept:
            if m.metadata["origin"] == "model":
                assert idx.around[m.id] == ()
                continue
            i = persons.index(m)
            expected = tuple(p.id for p in (persons[i - 1] if i else None,
                                            persons[i + 1] if i + 1 < len(persons) else None) if p)
            assert idx.around[m.id] == expected


async def test_a_turns_two_memories_keep_their_origins_in_every_view_and_go_together(make_stack, engine, tmp_path):
    """Listing, get, REST search, MCP search, export and import all say the reply part is the
    model's and the person's part is theirs; retaining the same ledger entry again adds nothing;
    forgetting the entry takes both parts."""
    import asyncio

    import aiohttp
    import orjson
    from click.testing import CliRunner

    from memplane_cli.main import main
    from tests.test_mcp_memory import connect
    from tests.test_memory_poisoning import listing

    stack = await make_stack()
    stack.add_agent("rosa", engine, service="mem")
    stack.provider.reply = replying({"What temperature": KILN})
    await ask(stack, "rosa", "What temperature does a community studio kiln reach?")
    await stack.settle()

    def parts(rows: list[dict]) -> dict[str, str]:
        return {("reply" if "1,200 degrees" in m["value"] else "person"): m["origin"] for m in rows
                if "kiln" in m["value"].lower()}

    listed = await listing(engine, "rosa")
    assert parts(listed) == {"person": "user", "reply": "model"}, listed
    async with aiohttp.ClientSession() as s:
        [reply] = [m for m in listed if "1,200" in m["value"]]
        async with s.get(f"{engine}/api/memories/{reply['id']}", params={"agent_id": "rosa"}) as r:
            assert (await r.json())["origin"] == "model"
        async with s.post(engine + "/api/memories/search", json={"agent_id": "rosa", "query": "kiln temperature"}) as r:
            assert parts((await r.json())["results"]) == {"person": "user", "reply": "model"}
    async with connect(stack, stack.tokens["rosa"]) as mcp:
        found = await mcp.call_tool("search_memory", {"query": "How hot does a studio kiln fire, 1,200 degrees?"})
    [via_mcp] = [m for m in found.structured_content["memories"] if "1,200 degrees" in m["text"]]
    assert "user" not in via_mcp["origin"].split(), via_mcp
    out = await asyncio.to_thread(CliRunner().invoke, main, ["memory", "export", "mem", "--agent", "rosa", "--url", engine])
    assert out.exit_code == 0, out.output
    exported = [orjson.loads(x) for x in out.stdout.splitlines() if x.strip()]
    assert parts(exported) == {"person": "user", "reply": "model"}

    # the same ledger entry retained twice (a retry, a backfill): its two memories, once
    [entry_id] = {e for m in listed for e in m.get("source_entry_ids", []) if "kiln" in m["value"].lower()}
    again = entry(7, "Which glaze did we pick for the studio mugs?", "We picked the Celadon 14 glaze.", "s9")
    async with aiohttp.ClientSession() as s:
        for _ in range(2):
            async with s.post(engine + "/retain", json={"agent_id": "rosa", "entry": again}) as r:
                assert r.status == 202, await r.text()
    await stack.settle()
    assert len(await listing(engine, "rosa")) == len(listed) + 2

    # imported into an empty agent, the reply is still the model's
    dump = tmp_path / "rosa.jsonl"
    dump.write_text(out.stdout)
    done = await asyncio.to_thread(CliRunner().invoke, main, ["memory", "import", "mem", str(dump), "--agent", "ana",
                                                               "--url", engine])
    assert done.exit_code == 0, done.output
    assert parts(await listing(engine, "ana")) == {"person": "user", "reply": "model"}

    # forgetting the turn takes both of its memories
    async with aiohttp.ClientSession() as s:
        async with s.post(engine + "/forget", json={"agent_id": "rosa", "entry_ids": [entry_id], "reason": "asked"}) as r:
            assert r.status == 204, await r.text()
    assert parts(await listing(engine, "rosa")) == {}
