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
