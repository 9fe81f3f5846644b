"""A memory's time is when it was said: the time memplane saw the turn, unless the person's own
words date what they say (a transcript imported with its `[1:56 pm on 8 May, 2023]` stamps). A date
in a client's system prompt never overrides the turn's own time, and a dated message keeps its date
whatever the assistant replied.

Real parts on loopback: the proxy, each engine (embedded, tiered on Redis and the Mongo-wire
server), the strict fake provider replying as an assistant does (one or two ordinary sentences,
`small_talk_reply`), and the official openai SDK.
"""

from __future__ import annotations

import html
import re
from datetime import datetime, timezone

import pytest

from memory_adapters.engine.packing import PAST_MARK
from proxy.testing.fake_provider import small_talk_reply

_MEMORY = re.compile(r"<memory\b([^>]*)>(.*?)</memory>", re.S)


def memories(block: str | None) -> list[tuple[str, str]]:
    """Each `<memory>` of the block as (its ts attribute, its text)."""
    out = []
    for attrs, text in _MEMORY.findall(block or ""):
        ts = re.search(r'\bts="([^"]*)"', attrs)
        out.append((ts.group(1) if ts else "", html.unescape(text)))
    return out


def dated_lines(block: str | None) -> list[tuple[str, str]]:
    """Each line of the block's memories with the date line it is filed under (`[1:56 pm on 8 May, 2023]`)."""
    out, day = [], ""
    for _, text in memories(block):
        for line in text.splitlines():
            if re.fullmatch(r"\[[^\]]+\]", line):
                day = line[1:-1]
            elif line.strip():
                out.append((day, line))
    return out


async def say(client, text: str, system: str | None = None) -> str:
    messages = [{"role": "system", "content": system}] if system else []
    reply = await client.chat.completions.create(model="gpt-4o", messages=[*messages, {"role": "user", "content": text}])
    return reply.choices[0].message.content


async def test_a_date_in_the_system_prompt_does_not_become_the_memorys_time(stack, engine):
    stack.add_agent("dev", engine)
    stack.provider.reply = small_talk_reply
    client = stack.openai("dev")
    today = datetime.now(timezone.utc).date().isoformat()
    system = f"You are a careful coding assistant.\nToday's date: {today}"
    await say(client, "I keep the deploy runbooks in the ops wiki under platform notes.", system)
    await stack.settle()
    [entry] = stack.ledger("dev")

    await say(client, "Where do I keep the deploy runbooks?", system)
    shown = [(ts, text) for ts, text in memories(stack.provider.received[-1].memories_block) if "runbooks" in text]
    assert shown, stack.provider.received[-1].memories_block
    # the time memplane saw the turn, to the millisecond; not the prompt's date at midnight
    assert {ts for ts, _ in shown} == {entry["ts"]} and not entry["ts"].endswith("T00:00:00.000Z")


def telling_reply(body: dict) -> str:
    """A reply that states something (a number, a name): kept beside the person's words."""
    return "Kilns in most community studios fire to about 1,200 degrees. Ask Marta at the front desk for a slot."


@pytest.mark.parametrize("reply", [small_talk_reply, telling_reply], ids=["small-talk", "telling"])
async def test_a_dated_transcript_keeps_its_dates_when_the_assistant_replies(stack, engine, reply):
    stack.add_agent("importer", engine)
    stack.provider.reply = reply
    client = stack.openai("importer")
    replies = [await say(client, text) for text in (
        "[1:56 pm on 8 May, 2023] Rosa: I went to the pottery class yesterday and made a lopsided bowl.",
        "[2:01 pm on 8 May, 2023] Tomas: Ha, mine always collapse on the wheel.",
        "[7:55 pm on 25 May, 2023] Rosa: The bowl came out of the kiln today with a green glaze.")]
    assert all(len(r.split()) >= 3 for r in replies)  # real replies, not a bare "OK."
    await stack.settle()

    await say(client, "What did Rosa make at the pottery class?")
    block = stack.provider.received[-1].memories_block
    lines = dated_lines(block)
    def day_of(words: str) -> list[str]:
        return [day for day, line in lines if line.removeprefix("user: ").startswith(words)]
    assert day_of("Rosa: I went to the pottery class yesterday and made a lopsided bowl.") \
        == ["1:56 pm on 8 May, 2023"], block
    assert day_of("Rosa: The bowl came out of the kiln today with a green glaze.") == ["7:55 pm on 25 May, 2023"]
    assert memories(block)[0][0] == "2023-05-08T13:56:00.000Z"  # the best hit's time: its stamp's
    # "yesterday" is the day before the stamp's
    assert "(yesterday: 7 May 2023)" in block
    # small talk is not remembered; a reply that tells something is, as the model's own memory: never
    # beside the person's words (tests/test_person_first.py), found by a question on its own words
    assert "assistant:" not in block and not any(r in block for r in replies)
    if reply is telling_reply:
        await say(client, "How hot do the kilns in community studios fire?")
        assert any(f"assistant: {replies[0]}" in text.splitlines()
                   for _, text in memories(stack.provider.received[-1].memories_block))


async def test_of_two_updates_on_one_day_the_later_is_current(stack, engine):
    """An export lists the day's messages newest first: the time in the person's words decides
    which value is current, not the order they arrived in."""
    stack.add_agent("mover", engine)
    stack.provider.reply = small_talk_reply
    client = stack.openai("mover")
    await say(client, "[6:00 pm on 14 March, 2024] Change of plan: I now live in Braga, the flat by the station.")
    await say(client, "[3:00 pm on 14 March, 2024] I now live in Porto, in a flat by the river.")
    await stack.settle()

    await say(client, "Which city do I live in now?")
    block = stack.provider.received[-1].memories_block
    lines = dated_lines(block)
    braga = [day for day, line in lines if "Braga, the flat" in line]
    porto = [day for day, line in lines if "Porto, in a flat" in line]
    assert braga == ["6:00 pm on 14 March, 2024"] and porto == ["3:00 pm on 14 March, 2024"], block
    # the block tells the story in the order it was said: the later value is the last word
    assert block.index("Porto, in a flat") < block.index("Braga, the flat")
    assert "Current home city: Porto" not in block
    # each engine keeps the current value of a fact (one per topic): the later one, and the turn
    # that said the earlier value says it has since changed
    assert "Current home city: Braga." in block
    assert f"{PAST_MARK}I now live in Porto, in a flat by the river." in block
    assert PAST_MARK + "user: Change of plan" not in block and PAST_MARK + "Change of plan" not in block


def test_the_turns_of_a_changed_fact_read_incrementally_are_those_a_full_read_finds():
    """engine/updates.earlier_turns reads only what was put since the last recall; whatever the
    puts, drops and changes of a fact in between, it finds what reading every memory finds."""
    import random

    from memory_adapters.engine.index import AgentIndex
    from memory_adapters.engine.record import StoredMemory
    from memory_adapters.engine.updates import earlier_turns

    def episode(i: int, stated: dict | None) -> StoredMemory:
        return StoredMemory(agent_id="a", scope="agent", key=f"episode:{i}", value=f"turn {i}", type="episode",
                            importance=0.5, id=f"m{i}", said_at=1e9 + i, created_at=1e9 + i,
                            metadata={"profile": stated} if stated else {})

    def fact(topic: str, value: str, at: float) -> StoredMemory:
        return StoredMemory(agent_id="a", scope="agent", key=f"profile:{topic}", value=value, type="fact",
                            importance=0.8, id=f"f-{topic}", said_at=at, created_at=1e9)

    def full_read(idx: AgentIndex) -> frozenset[str]:
        now = {m.key.removeprefix("profile:"): (m.value, m.said_at) for m in idx.memories.values() if m.type == "fact"}
        return frozenset(m.id for m in idx.memories.values() if m.type == "episode" and any(
            t in now and v != now[t][0] and m.said_at < now[t][1] for t, v in m.metadata.get("profile", {}).items()))

    rnd, idx = random.Random(7), AgentIndex()
    for _ in range(3000):
        roll = rnd.random()
        if roll < 0.6:
            idx.put(episode(rnd.randrange(400), {rnd.choice(["home", "job"]): rnd.choice("xyz")}
                            if rnd.random() < 0.3 else None))
        elif roll < 0.7:
            idx.drop(f"m{rnd.randrange(400)}")
        elif roll < 0.73:
            idx.drop(f"f-{rnd.choice(['home', 'job'])}")
        else:
            idx.put(fact(rnd.choice(["home", "job"]), rnd.choice("xyz"), 1e9 + rnd.randrange(500)))
        if rnd.random() < 0.3:
            assert earlier_turns(idx) == full_read(idx)
    assert earlier_turns(idx) == full_read(idx) and earlier_turns(idx)  # some turns were marked


async def test_a_job_that_changed_shows_the_current_one_and_the_old_turn_as_past(stack, engine):
    """Told in order, weeks apart: the block leads with the current job, and the turn that named
    the old one is still findable but says it has since changed; a turn of another topic is not
    marked."""
    stack.add_agent("nurse", engine)
    stack.provider.reply = small_talk_reply
    client = stack.openai("nurse")
    await say(client, "[9:00 am on 2 February, 2024] I work as a barista at the harbour cafe, early shifts.")
    await say(client, "[9:10 am on 2 February, 2024] I live in Leeds, in a shared house.")
    await say(client, "[6:30 pm on 20 April, 2024] Great news, I started as a night nurse at the county hospital.")
    await stack.settle()

    await say(client, "What do I work as these days, and at the harbour cafe or the hospital?")
    block = stack.provider.received[-1].memories_block
    assert "Current job: night nurse." in block, block
    assert "Current job: barista" not in block
    assert f"{PAST_MARK}I work as a barista at the harbour cafe, early shifts." in block
    assert "started as a night nurse at the county hospital" in block
    assert PAST_MARK + "Great news" not in block and PAST_MARK + "I live in Leeds" not in block
