"""A service holding many memories does not stop for Python's full garbage collections.

Python's full collection walks every tracked object in the process; an index of tens of thousands
of memories made one take ~220 ms in a busy tiered service, long enough to push every recall in
flight past its deadline. Indexed memories are frozen out of the collector's sight as they grow."""

from __future__ import annotations

import gc

from memory_adapters.engine.heap import FREEZE_EVERY, HEAP
from memory_adapters.engine.index import AgentIndex, RecallQuery
from memory_adapters.engine.record import StoredMemory


def episode(i: int) -> StoredMemory:
    return StoredMemory(agent_id="a", scope="agent", key=f"episode:{i}", value=f"On day {i} we planted tomato {i}.",
                        type="episode", session_id="s", created_at=1_700_000_000 + i)


def test_indexed_memories_are_out_of_the_way_of_full_collections_and_still_recalled():
    idx = AgentIndex()
    freezes = HEAP.freezes
    memories = [episode(i) for i in range(FREEZE_EVERY + 10)]
    for m in memories:
        idx.put(m)
    assert HEAP.freezes > freezes and gc.get_freeze_count() >= FREEZE_EVERY
    walked = {id(o) for o in gc.get_objects()}  # what a full collection would walk now
    assert sum(id(m) in walked for m in memories[:FREEZE_EVERY]) == 0
    early = FREEZE_EVERY // 2  # indexed before the freeze
    blocks = idx.recall(RecallQuery(f"when did we plant tomato {early}"))
    assert any(f"tomato {early}." in b.text for b in blocks)  # frozen is not forgotten
    assert idx.drop(memories[0].id) is memories[0]


def test_a_serving_process_does_not_walk_its_turns_in_flight_every_700_allocations():
    """After start-up a server collects its young generation every YOUNG_COLLECTION_EVERY
    allocations: 32 turns in flight, each holding a couple of hundred objects, cause no collection at all
    (CPython's default threshold made ~10 of them here, each walking the turns still alive)."""
    from memplane_cli.runner import YOUNG_COLLECTION_EVERY, freeze_startup_heap

    before = gc.get_threshold()
    young: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 0:
            young.append(1)

    try:
        freeze_startup_heap()
        assert gc.get_threshold()[0] == YOUNG_COLLECTION_EVERY
        gc.callbacks.append(count)
        in_flight = [[{"role": "user", "content": [f"turn {t}"]} for _ in range(100)] for t in range(32)]
        assert not young and len(in_flight) == 32
    finally:
        if count in gc.callbacks:
            gc.callbacks.remove(count)
        gc.unfreeze()
        gc.set_threshold(*before)
