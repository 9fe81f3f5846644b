"""A turn that says "yesterday" is remembered with the day it meant (engine/dates.py): the block shows
the date beside the words, and a question that names the date finds the turn by it."""

from __future__ import annotations

from datetime import datetime, timezone

from memory_adapters.engine import dates
from memory_adapters.engine.episodes import episodes_from_entry
from memory_adapters.engine.index import AgentIndex, RecallQuery
from memplane_core.redact import Redactor


def entry(n: int, message: str, ts: str = "2026-01-01T00:00:00.000Z") -> dict:
    return {"id": f"e{n}", "ts": ts, "request_original": {"messages": [{"role": "user", "content": message}]},
            "response": {"format": "json", "json": {"choices": [{"message": {"content": "OK."}}]}}}


def retained(*messages: str) -> AgentIndex:
    idx, redactor = AgentIndex(), Redactor()
    for n, message in enumerate(messages):
        for m in episodes_from_entry("agent", entry(n, message), {}, redactor):
            idx.put(m)
    return idx


def at(day: str) -> float:
    return datetime.strptime(day, "%Y-%m-%d").replace(hour=13, tzinfo=timezone.utc).timestamp()


def test_a_turn_saying_yesterday_is_recalled_with_the_day_it_meant():
    idx = retained("[1:56 pm on 8 May, 2023] Ana: I went to the climbing gym yesterday, my arms are dead.")
    block = idx.recall(RecallQuery("When did Ana go climbing?"))[0].text
    assert "I went to the climbing gym yesterday, my arms are dead. (yesterday: 7 May 2023)" in block


def test_a_question_naming_the_date_finds_the_turn_that_said_yesterday():
    idx = retained("[1:56 pm on 8 May, 2023] Ana: I went to the climbing gym yesterday.",
                   "[2:10 pm on 12 May, 2023] Ana: The climbing gym was packed today.",
                   "[9:00 am on 7 June, 2023] Ana: Climbing again on Sunday, who is in?")
    best = idx.rank("What did Ana do on 7 May 2023?")[0][0]
    assert best.value == "Ana: I went to the climbing gym yesterday."


def test_relative_days_weeks_months_and_years_resolve_against_the_day_said():
    thursday = at("2023-05-25")
    found = dict(dates.resolve("Last Saturday we hiked, two weeks ago I moved, last month I quit, "
                               "next Friday I fly.", thursday))
    found.update(dates.resolve("In three days I pack, ten years ago I met her, last week was long "
                               "and next year I retire.", thursday))
    assert found == {"last saturday": "20 May 2023", "two weeks ago": "the week of 8 May 2023",
                     "last month": "April 2023", "next friday": "26 May 2023", "in three days": "28 May 2023",
                     "ten years ago": "2013", "last week": "the week of 15 May 2023", "next year": "2024"}
    assert len(dates.resolve("yesterday, last week, last month, last year and next week", thursday)) == dates.MAX_DATES


def test_last_weekend_said_on_a_weekend_is_the_one_before():
    assert dates.resolve("last weekend", at("2023-07-15")) == [("last weekend", "the weekend of 8 July 2023")]
    assert dates.resolve("last weekend", at("2023-07-16")) == [("last weekend", "the weekend of 8 July 2023")]
    assert dates.resolve("last weekend", at("2023-07-17")) == [("last weekend", "the weekend of 15 July 2023")]
    assert dates.resolve("last Friday", at("2023-07-14")) == [("last friday", "7 July 2023")]  # not today


def test_a_turn_without_a_stamp_resolves_against_the_time_it_was_logged():
    m = episodes_from_entry("agent", entry(0, "The boiler broke yesterday.", ts="2024-03-01T09:00:00.000Z"),
                            {}, Redactor())[0]
    assert m.metadata["dates"] == [["yesterday", "29 February 2024"]]


def test_words_that_only_look_like_dates_are_left_alone():
    assert dates.resolve("Yesterdays and last-minute plans: I lasted a week.", at("2023-05-25")) == []
    assert dates.resolve("yesterday", None) == []
    assert dates.note({"dates": "not a list"}) == "" and dates.note({"dates": [["x"], [1, 2]]}) == ""

