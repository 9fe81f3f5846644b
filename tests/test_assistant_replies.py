"""The assistant stand-in replies like an ordinary chat model: it echoes the message, adds generic
content in new words, often asks back, and stays repeatable and cheap on any input."""

from __future__ import annotations

import re
import time

import aiohttp
import pytest

from bench.quality.locomo import DATASET, content_words, load
from proxy.testing.fake_provider import FakeProvider
from proxy.testing.fake_provider.assistant_replies import assistant_reply
from proxy.testing.fake_provider.repliers import REPLIERS, body_replier

SENTENCE = re.compile(r"(?<=[.!?])\s+")


def sentences(reply: str) -> list[str]:
    return [s for s in SENTENCE.split(reply.strip()) if s]


@pytest.fixture(scope="module")
def dev_turns() -> list[dict]:
    if not DATASET.is_dir():
        pytest.skip(f"no LoCoMo dev set at {DATASET}")
    turns = []
    for conv in load(DATASET):
        speakers = {t["message"].split("] ", 1)[1].split(":", 1)[0] for t in conv["turns"]}
        for t in conv["turns"]:
            speaker = t["message"].split("] ", 1)[1].split(":", 1)[0]
            turns.append({**t, "speaker": speaker, "others": speakers - {speaker}})
    return turns


@pytest.fixture(scope="module")
def dev_replies(dev_turns) -> list[str]:
    return [assistant_reply(t["message"]) for t in dev_turns]


def test_registered_and_deterministic():
    assert REPLIERS["assistant"] is assistant_reply
    message = "[1:56 pm on 8 May, 2023] Ana: I went to a pottery class yesterday and loved it!"
    assert assistant_reply(message) == assistant_reply(message) == assistant_reply(message[:] + "")
    assert assistant_reply(message) != assistant_reply(message.replace("pottery", "cooking"))


def test_replies_vary_across_the_dev_set(dev_replies):
    """Hundreds of distinct replies, not a few dozen fixed lines (small talk gives under 200)."""
    assert len(set(dev_replies)) >= 0.8 * len(dev_replies)
    openers = {s[0] for s in map(sentences, dev_replies)}
    assert len(openers) >= 80  # even the first sentences vary, by name and wording


def test_replies_echo_the_message(dev_turns, dev_replies):
    echoed = sum(bool(content_words(t["text"]) & content_words(r)) for t, r in zip(dev_turns, dev_replies))
    assert echoed >= 0.6 * len(dev_replies)  # small talk, which never reads the message: under 20 %


def test_replies_name_the_speaker_and_no_one_else(dev_turns, dev_replies):
    named = sum(t["speaker"] in r for t, r in zip(dev_turns, dev_replies))
    assert 0.2 * len(dev_replies) <= named <= 0.7 * len(dev_replies)
    for t, r in zip(dev_turns, dev_replies):
        words = set(re.findall(r"[A-Za-z]+", r))
        assert not (words & t["others"]), (t["message"], r)  # the replier sees one message: no one else


def test_replies_often_ask_back_and_add_new_words(dev_turns, dev_replies):
    asked = sum("?" in r for r in dev_replies)
    assert 0.25 * len(dev_replies) <= asked <= 0.8 * len(dev_replies)
    new = 0
    for t, r in zip(dev_turns, dev_replies):
        said = content_words(t["message"])
        new += any(len(content_words(s)) >= 4 and not (content_words(s) & said) for s in sentences(r))
    assert new >= 0.3 * len(dev_replies)  # a truism, advice or a general remark: words the person never used


def test_reply_shape(dev_replies):
    lengths = [len(r.split()) for r in dev_replies]
    assert all(1 <= len(sentences(r)) <= 3 for r in dev_replies)
    assert max(lengths) <= 60
    assert sum(n >= 12 for n in lengths) >= 0.9 * len(lengths)
    assert len(set(lengths)) >= 20  # varied lengths, not one template's
    assert {len(sentences(r)) for r in dev_replies} == {1, 2, 3}


def test_messages_without_stamp_or_name_are_answered_about_their_topic():
    reply = assistant_reply("I adopted a puppy last week and she's already chewing my shoes!")
    assert "puppy" in reply or "adopt" in reply or "shoes" in reply
    assert "[" not in reply and 1 <= len(sentences(reply)) <= 3
    sad = assistant_reply("My grandmother passed away and I've been feeling really lonely.")
    assert not sad.startswith(("That's wonderful", "How exciting", "That's awesome"))


@pytest.mark.parametrize("message", [
    "", " ", "[]", "[", "Ana:", ":", "???", "[shares ]", "\x00\x01", "🙂🙂🙂", "\ud800 broken surrogate",
    "[1:56 pm on 8 May, 2023] Ana: [shares a photo of a cat]", "I I I I my my my the the the a a",
    "Dr. Who: what?", "A" * 5000,
])
def test_odd_messages_get_an_ordinary_reply(message):
    reply = assistant_reply(message)
    assert 1 <= len(sentences(reply)) <= 3 and len(reply.split()) <= 60
    assert "{" not in reply and "}" not in reply


@pytest.mark.parametrize("unit", ["[shares " * 3, "my a the ", "I went to ", "Aa: ", "x" * 50 + " ", "(((", "- "])
def test_a_hostile_100kb_message_is_answered_quickly(unit):
    message = unit * (100_000 // len(unit))
    started = time.perf_counter()
    reply = assistant_reply(message)
    assert time.perf_counter() - started < 0.25
    assert 1 <= len(sentences(reply)) <= 3 and len(reply.split()) <= 60


async def test_through_the_fake_provider(aiohttp_server):
    provider = FakeProvider(reply=body_replier("assistant"))
    server = await aiohttp_server(provider.app())
    message = "[3:00 pm on 2 June, 2023] Sam: We finally finished building the treehouse with the kids!"
    body = {"model": "m", "messages": [{"role": "system", "content": "be brief"},
                                       {"role": "user", "content": message}]}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"http://{server.host}:{server.port}/v1/chat/completions", json=body) as r:
            assert r.status == 200
            answer = (await r.json())["choices"][0]["message"]["content"]
    assert answer == assistant_reply(message)
    assert answer != REPLIERS["small-talk"](message)
