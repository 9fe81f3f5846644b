"""The tiered adapter while it is fed: reloads that keep up with writes, retains that arrive
together written together, and nothing lost when MongoDB fails halfway (real Redis, real Mongo-wire server)."""

from __future__ import annotations

import asyncio
import io

from memory_adapters.engine.record import StoredMemory
from memory_adapters.tiered.app import build_tiered_app
from memplane_core.contract import RecallRequest, RetainRequest
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry, make_logger
from tests.test_tiered_adapter import entry


async def test_turns_retained_while_an_agent_reloads_are_in_its_new_index_and_cause_no_second_reload(
        tiered, aiohttp_server, tiered_settings):
    """Another replica writes, so this one reloads the agent; turns retained here while that load
    reads MongoDB are in the new index when it is swapped in, and the next recalls use it as is
    (before: the new index missed them, and each recall after reloaded again while the feed went on)."""
    _, service = tiered
    agent = "reloading"
    await service.retain(RetainRequest(agent_id=agent, entry=entry("e0", "We adopted a grey cat last spring.")))
    await service.recall(RecallRequest(agent_id=agent, query="cat"))  # its index and the global one loaded
    other_app = build_tiered_app(tiered_settings, Telemetry(make_logger(io.StringIO())), Redactor())
    await aiohttp_server(other_app)  # a second replica of the service, writing the same agent
    from memory_adapters.tiered.app import TIERED_SERVICE
    await other_app[TIERED_SERVICE].store(StoredMemory(agent_id=agent, scope="agent", key="k",
                                                       value="The boat is moored in the north harbour"))

    real, read, release = service.ltm.all_for, asyncio.Event(), asyncio.Event()

    async def slow_all_for(agent_id):  # a long load: the rows are read, the swap comes later
        rows = await real(agent_id)
        read.set()
        await release.wait()
        return rows

    service.ltm.all_for = slow_all_for
    loads = service.indexes.loads
    remote, = await service.versions.get([agent])
    reload = asyncio.create_task(service.indexes.get(agent, remote))
    await read.wait()
    outcomes = await service.retain_many([RetainRequest(agent_id=agent, entry=entry(f"e{i}", text)) for i, text in
                                          enumerate(["My sister plays the cello in an orchestra.",
                                                     "Our kitchen got a new oak table."], start=1)])
    assert outcomes == ["stored", "stored"]
    release.set()
    fresh = await reload
    service.ltm.all_for = real
    texts = " ".join(m.value for m in fresh.memories.values())
    assert "cello" in texts and "oak table" in texts and "north harbour" in texts
    assert service.indexes.loads == loads + 1
    for query in ("who plays the cello", "what table is in the kitchen", "where is the boat moored"):
        blocks = await service.recall(RecallRequest(agent_id=agent, query=query))
        assert blocks, query
    assert service.indexes.loads == loads + 1  # no reload after it: every write since was its own
    assert service.indexes.current(agent) is fresh


TURNS = ["My sister plays the cello in a youth orchestra.", "Remember that the gate code is 5512.",
         "We painted the garden shed dark green.", "I prefer trains to planes for long trips.",
         "The dentist appointment moved to Thursday.", "Our neighbour keeps three hens and a goat.",
         "I started learning Portuguese on the bus.", "The library fines were waived this month.",
         "My cousin opened a bakery near the harbour.", "We found an old typewriter in the attic."]
QUERIES = ["cello", "gate code", "garden shed", "trains planes", "dentist appointment", "hens goat",
           "learning Portuguese", "library fines", "bakery harbour", "typewriter attic"]


async def test_an_agents_turns_sent_one_call_each_at_once_are_written_together_and_all_found(tiered):
    """A proxy without the batch endpoint sends each turn as its own retain, many at once: they are
    written in fewer writes than calls, each answered for itself, every turn found by its words,
    every keyed statement stored once; sent again, each is a duplicate."""
    _, service = tiered
    agent = "grouped"
    reqs = [RetainRequest(agent_id=agent, entry=entry(f"g{i}", text)) for i, text in enumerate(TURNS)]
    writes = service.groups.writes
    assert await asyncio.gather(*(service.retain(r) for r in reqs)) == ["stored"] * len(TURNS)
    assert service.groups.writes - writes < len(TURNS)
    stored = await service.ltm.all_for(agent)
    assert sorted(m.source_entry_ids[0] for m in stored if m.key.startswith("episode:")) == sorted(f"g{i}" for i in range(10))
    assert {m.type for m in stored} >= {"fact", "preference"}
    assert len({(m.scope, m.session_id, m.key) for m in stored}) == len(stored)
    for query, text in zip(QUERIES, TURNS):
        blocks = await service.recall(RecallRequest(agent_id=agent, query=query))
        assert any(text.split()[-1].rstrip(".") in b.text for b in blocks), query
    assert await asyncio.gather(*(service.retain(r) for r in reqs)) == ["duplicate"] * len(TURNS)
    assert len(await service.ltm.all_for(agent)) == len(stored)


async def test_when_mongodb_fails_halfway_through_a_group_every_call_fails_and_its_retry_loses_nothing(tiered):
    """MongoDB fails after a group's memories were written but before their retained marks: every
    call of the group is told so (503 at the HTTP layer), nothing is marked retained, and the retry
    stores every turn once — found by its words, no memory twice in the store or in the index."""
    from memory_adapters.tiered.ltm import LTMUnavailable
    _, service = tiered
    agent = "halfway"
    await service.recall(RecallRequest(agent_id=agent, query="anything"))  # its index is loaded, and kept
    real = service.ltm.mark_retained_many

    async def fail(agent_id, entry_ids):
        raise LTMUnavailable("connection reset")

    service.ltm.mark_retained_many = fail
    reqs = [RetainRequest(agent_id=agent, entry=entry(f"h{i}", text)) for i, text in enumerate(TURNS)]
    got = await asyncio.gather(*(service.retain(r) for r in reqs), return_exceptions=True)
    assert all(isinstance(g, LTMUnavailable) for g in got)
    assert await service.ltm.seen_entries(agent, [r.entry["id"] for r in reqs]) == {}
    service.ltm.mark_retained_many = real
    assert await asyncio.gather(*(service.retain(r) for r in reqs)) == ["stored"] * len(TURNS)
    stored = await service.ltm.all_for(agent)
    assert len({(m.scope, m.session_id, m.key) for m in stored}) == len(stored)
    assert sorted(m.source_entry_ids[0] for m in stored if m.key.startswith("episode:")) == sorted(f"h{i}" for i in range(10))
    index = service.indexes.current(agent)
    assert sorted(index.memories) == sorted(m.id for m in stored)
    for query, text in zip(QUERIES, TURNS):
        blocks = await service.recall(RecallRequest(agent_id=agent, query=query))
        assert any(text.split()[-1].rstrip(".") in b.text for b in blocks), query


async def test_recall_counts_of_many_memories_land_in_one_flush_each_with_its_own_count(tiered):
    """Counts are written one update per count value, not one per memory: each memory still gets
    exactly the number of times it was recalled, and when."""
    _, service = tiered
    a, b, c = [(await service.store(StoredMemory(agent_id="counted", scope="agent", key=k, value=v)))[0]
               for k, v in (("a", "The bike has a red bell"), ("b", "Lunch is at noon"), ("c", "The plant needs water"))]
    service.access.recalled([a, b, c])
    service.access.recalled([a, b])
    service.access.recalled([a])
    await service.access.flush()
    stored = [await service.ltm.get(m.id) for m in (a, b, c)]
    assert [m.access_count for m in stored] == [3, 2, 1]
    assert all(m.last_accessed_at is not None for m in stored)
