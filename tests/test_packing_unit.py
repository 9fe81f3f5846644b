"""`pack` in-process: the best hits come with the turns around them, in time order under their
date, and the answer keeps to the token budget, the block count and the byte limit the proxy
enforces (engine/packing.py)."""

from __future__ import annotations

from memory_adapters.engine.packing import MAX_ANSWER_BYTES, pack, snippet_of
from memory_adapters.engine.record import StoredMemory
from memplane_core.tokens import estimate_tokens

DAY = 86_400.0
START = 1_700_000_000.0  # 2023-11-14


def conversation(texts: list[str], *, days_apart: float = 0.0) -> list[StoredMemory]:
    return [StoredMemory(agent_id="a", scope="agent", key=f"episode:{i}", value=t, type="episode",
                         said_at=START + i * days_apart * DAY + i) for i, t in enumerate(texts)]


def packer(turns: list[StoredMemory]):
    at = {m.id: i for i, m in enumerate(turns)}

    def neighbours(m: StoredMemory) -> list[StoredMemory]:
        i = at[m.id]
        return [turns[j] for j in (i - 1, i + 1) if 0 <= j < len(turns)]

    return neighbours, (lambda m: at[m.id]), snippet_of


def test_a_hit_brings_the_question_before_it_and_the_answer_after_it_in_time_order():
    turns = conversation(["Where should we eat tonight?", "I booked the Thai place on Elm Street.",
                          "Great, see you at eight.", "Unrelated: the printer is jammed."])
    blocks = pack([(turns[1], 3.0)], *packer(turns), budget_tokens=3000, max_blocks=3)
    assert len(blocks) == 1
    assert blocks[0].text == ("[2023-11-14]\nWhere should we eat tonight?\nI booked the Thai place on Elm Street.\n"
                              "Great, see you at eight.")
    assert blocks[0].memory_ids == [t.id for t in turns[:3]]
    assert blocks[0].score == 3.0 and blocks[0].kind == "episode" and blocks[0].ts == "2023-11-14T22:13:20.000Z"
    assert "printer" not in blocks[0].text


def test_runs_on_different_days_are_filed_under_their_dates():
    turns = conversation(["We adopted a cat named Miso.", "filler one", "filler two", "Miso knocked over a vase."],
                         days_apart=3)
    blocks = pack([(turns[0], 2.0), (turns[3], 1.0)], *packer(turns), budget_tokens=3000, max_blocks=1)
    text = blocks[0].text
    assert "[2023-11-14]\nWe adopted a cat named Miso." in text and "[2023-11-23]\nMiso knocked over a vase." in text
    assert text.index("adopted") < text.index("knocked")  # time order, not score order


def test_the_budget_binds_and_the_best_hits_are_the_ones_kept():
    turns = conversation([f"Fact number {i}: " + "detail " * 30 for i in range(60)])
    ranked = [(turns[i], 100.0 - i) for i in range(0, 60, 3)]
    blocks = pack(ranked, *packer(turns), budget_tokens=200, max_blocks=4)
    assert blocks and sum(estimate_tokens(b.text) for b in blocks) <= 200
    kept = {mid for b in blocks for mid in b.memory_ids}
    assert turns[0].id in kept and turns[57].id not in kept
    assert len(blocks) <= 4


def test_wide_characters_never_push_an_answer_over_the_proxys_byte_limit():
    turns = conversation(["記憶" * 400 + f" {i}" for i in range(40)])
    ranked = [(m, 1.0) for m in turns]
    blocks = pack(ranked, *packer(turns), budget_tokens=100_000, max_blocks=8)
    assert blocks
    assert sum(len(b.text.encode()) for b in blocks) <= MAX_ANSWER_BYTES


def test_no_room_no_blocks_rather_than_a_cut_memory():
    turns = conversation(["a sentence long enough to need more than one token of room"])
    assert pack([(turns[0], 1.0)], *packer(turns), budget_tokens=0, max_blocks=3) == []


def test_a_typed_memory_shows_its_type_and_the_best_hit_names_the_block():
    fact = StoredMemory(agent_id="a", scope="agent", key="diet", value="Ana is vegetarian.", type="fact",
                        said_at=START)
    blocks = pack([(fact, 0.9)], lambda m: [], lambda m: 0, snippet_of, budget_tokens=500, max_blocks=2)
    assert [(b.kind, b.id) for b in blocks] == [("fact", fact.id)]
    assert blocks[0].text.endswith("fact (diet): Ana is vegetarian.")
