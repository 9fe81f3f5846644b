"""An assistant's reply is remembered when it states something, judged by its shape (replies.py):
small talk (acknowledgements, questions back) is not, in any wording, nor general knowledge in
plain words; a reply naming a number, a name, a path or an identifier is, as the reply
(`origin="model"`, its own memory: tests/test_person_first.py)."""

from __future__ import annotations

import time

import pytest

from memory_adapters.engine.episodes import episodes_from_entry
from memory_adapters.engine.replies import adds_fact
from memplane_core.redact import Redactor
from proxy.testing.fake_provider import small_talk

USER = "I finally repotted the fern on the balcony this morning, it looked so sad in the old pot."

SMALL_TALK = [  # written apart from the fake provider's list: the rule is a shape, not those sentences
    "Oh nice!", "Sounds lovely.", "Aw, poor thing. Did it perk up?", "Good call, honestly.",
    "That must be a relief. What's next on the list?", "Haha, I know the feeling!",
    "Well done, you! How does it look now?", "I'm sure it appreciates the new home.",
    "That's a really thoughtful thing to do for it.", "Fingers crossed it settles in quickly!",
    "Right, that makes sense. Anything else on your mind today?", "Wow. How long did that take?",
]
TELLING = [
    "Ferns like indirect light; water it every 3 days for the first week.",
    "The Boston fern is the easiest variety to keep on a balcony.",
    "Your notes are in ~/garden/notes.md, under the repotting section.",
    "Ferns need twice as much humidity as most houseplants do.",
    "A good mix is peat moss with perlite; the Royal Horticultural Society suggests a third of each.",
]
GENERAL = [  # true, long, in new words, and what any model says again when asked: not this conversation's memory
    "A good mix for ferns is peat moss with perlite and some bark chips, which keeps the roots moist but never soggy.",
    "Creative hobbies often help people unwind and process difficult emotions after a stressful week.",
    "Indirect light and consistently moist soil usually keep ferns healthy through the warmer months.",
]


@pytest.mark.parametrize("reply", SMALL_TALK)
def test_small_talk_adds_no_fact(reply):
    assert not adds_fact(reply, USER)


@pytest.mark.parametrize("reply", TELLING)
def test_a_reply_that_tells_something_adds_a_fact(reply):
    assert adds_fact(reply, USER)


@pytest.mark.parametrize("reply", GENERAL)
def test_general_knowledge_in_plain_words_adds_no_fact(reply):
    assert not adds_fact(reply, USER)


def test_the_fake_providers_small_talk_adds_no_fact_and_never_repeats_the_message():
    for n in range(500):
        message = f"[1:{n % 60:02d} pm on 8 May, 2023] Rosa: turn {n} about the pottery class and the kiln."
        reply = small_talk(message)
        assert reply == small_talk(message) and not adds_fact(reply, message)
        assert not {"rosa", "pottery", "kiln", "turn"} & set(reply.lower().replace(".", " ").split())
    assert len({small_talk(str(n)) for n in range(500)}) > 100  # varied


def entry(user: str, reply: str) -> dict:
    return {"id": "hist1_a", "ts": "2026-11-28T21:00:00.000Z",
            "request_original": {"messages": [{"role": "user", "content": user}]},
            "response": {"format": "json", "json": {"choices": [{"message": {"content": reply}}]}}}


def test_an_episode_keeps_the_persons_words_and_only_a_reply_that_tells():
    [quiet] = episodes_from_entry("a", entry(USER, SMALL_TALK[4]), {}, Redactor())
    assert quiet.value == USER and quiet.metadata["origin"] == "user"
    # however short the turn, the reply is a part of its own, the model's: never merged into the person's
    said, told = episodes_from_entry("a", entry(USER, TELLING[0]), {}, Redactor())
    assert said.value == USER and said.metadata["origin"] == "user"
    assert told.value == f"assistant: {TELLING[0]}" and told.metadata["origin"] == "model"
    # a kept reply is remembered as what it states: its reaction and question back are left out
    said, told = episodes_from_entry("a", entry(USER, f"Oh nice! {TELLING[1]} Did it perk up?"), {}, Redactor())
    assert said.value == USER and told.value == f"assistant: {TELLING[1]}"
    long_user = " ".join([USER] * 12)  # several pieces: the reply is a part of its own, the model's
    parts = episodes_from_entry("a", entry(long_user, TELLING[1]), {}, Redactor())
    assert parts[-1].value == f"assistant: {TELLING[1]}" and parts[-1].metadata["origin"] == "model"
    assert not any("assistant" in p.value for p in episodes_from_entry("a", entry(long_user, SMALL_TALK[4]), {},
                                                                           Redactor()))


def _cpu(text: str) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        adds_fact(text, text[:1000])
        best = min(best, time.process_time() - started)
    return best


def test_a_hostile_reply_is_judged_in_linear_time():
    """100 KB built to make a pattern backtrack costs what 100 KB of ordinary text costs, within a
    small factor measured in the same run (a quadratic rule would be off by thousands)."""
    size = 100_000
    ordinary = _cpu((TELLING[4] + " " + SMALL_TALK[4] + " ")[:200] * (size // 200))
    for hostile in ("a/" * (size // 2), "Wow " * (size // 4) + "?", "." * size, "x" * size, "A1_" * (size // 3),
                    "I " * (size // 2), "\n" * size):
        assert _cpu(hostile) < 20 * ordinary + 0.05, hostile[:10]


def test_long_reactions_and_the_persons_own_words_said_back_add_no_fact():
    """Long, warm replies speak to the person or point back at what they said; naming them, or
    repeating their number, tells nothing new."""
    user = "Rosa here: I ran 10 km along the river today and finished the painting I started in March."
    for reply in ("That's wonderful, it sounds like all that patience really paid off in the end!",
                  "It's so inspiring to hear how much effort you put into something you care about so deeply.",
                  "What a beautiful way to spend a day, creating something that brings so much joy and peace.",
                  "I can only imagine how satisfying it must feel to finally see the finished piece after all that.",
                  "Well done, Rosa! 10 km is a lot.", "Congratulations, Rosa. How long did the painting take?"):
        assert not adds_fact(reply, user), reply
    assert not adds_fact("Oil paint usually needs several weeks to dry completely before it can be varnished.", user)
    assert adds_fact("Oil paint usually needs 6 weeks to dry completely before it can be varnished.", user)
    assert adds_fact("Well done, Rosa! The club record is 38 minutes.", user)


def test_a_long_reply_that_names_things_costs_what_its_kept_part_costs():
    """A kept reply is at most ASSISTANT_MAX_CHARS of its stating sentences: a coding agent's 2 MB
    answer naming a path in every sentence is judged only as far as that, not sentence by sentence
    to its end (seconds of a retain thread's CPU, holding the interpreter from recalls)."""
    reply = "The parser lives in src/parser_v2.py and keeps comments. " * 36_000
    assert len(reply) > 2_000_000
    best = float("inf")
    for _ in range(2):
        started = time.process_time()
        said, told = episodes_from_entry("a", entry(USER, reply), {}, Redactor())
        best = min(best, time.process_time() - started)
    assert told.metadata["origin"] == "model" and told.value.startswith("assistant: The parser lives in")
    assert len(told.value) <= len("assistant: ") + 400
    assert best < 0.5, best


LISTED = [  # general advice laid out as a list: its numbers and line breaks are layout, not facts
    "That is a great question! Here are some tips that usually help:\n1. Drink plenty of water during the day\n"
    "2. Go to sleep at the same hour\n3. Take short breaks away from screens",
    "Here are some ideas:\n- Drink water\n- Sleep well\n\n1) Walk more often\n2) Eat well at lunch",
    "A few things to try:\n* Stretch before bed\n* Keep a journal\n* Talk to a friend about it",
]


@pytest.mark.parametrize("reply", LISTED)
def test_a_list_of_general_advice_adds_no_fact(reply):
    assert not adds_fact(reply, "How do I feel less tired?")


def test_a_list_that_names_things_is_kept_as_its_naming_items():
    reply = "Here is the plan:\n1. Install nginx from the usual packages\n2. Open port 443 on the firewall\n3. Restart it"
    [_, told] = episodes_from_entry("a", entry("What is the plan for the web server?", reply), {}, Redactor())
    assert told.value == "assistant: 2. Open port 443 on the firewall"
