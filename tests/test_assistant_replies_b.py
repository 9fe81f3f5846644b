"""The held-out replier answers like a chat model: varied, echoing the message, sometimes listing
tips or volunteering a well-known fact, and safe on any input. It was written apart from the
engine's rules; these tests hold its shape, not the engine's behaviour on it."""

from __future__ import annotations

import re
import time
from pathlib import Path

import aiohttp
import pytest

from bench.quality.locomo import DATASET, load
from proxy.testing.fake_provider import FakeProvider
from proxy.testing.fake_provider.assistant_replies_b import assistant_reply_b, read
from proxy.testing.fake_provider.repliers import REPLIERS, body_replier

TURN = ("[1:56 pm on 8 May, 2023] Dana: I finally finished my first pottery class last night and I made "
        "a wobbly blue bowl! [shares a photo of a blue ceramic bowl on a wooden table]")
_WORDS = re.compile(r"[a-z]{4,}")
_COMMON = frozenset("that this with have your what about sounds really great just been from they like there were "
                    "when thanks good time love much more know some make feel yourself going into".split())
# A name or number the message did not hold: a capitalised word inside a sentence, or 2+ digits.
_SPECIFIC = re.compile(r"(?<=[a-z,] )[A-Z][a-zA-Z]+|\b\d{2,}\b")


def _messages() -> list[str]:
    here = Path(__file__).resolve().parents[1]
    for place in (Path(DATASET), here.parent / "shared/datasets/locomo-dev", here.parents[1] / "shared/datasets/locomo-dev"):
        if list(place.glob("conversation_*.json")):
            return [t["message"] for conv in load(place) for t in conv["turns"]]
    pytest.skip(f"LoCoMo dev set absent at {DATASET}")


@pytest.fixture(scope="module")
def pairs() -> list[tuple[str, str]]:
    return [(m, assistant_reply_b(m)) for m in _messages()]


def _share(pairs, test) -> float:
    return sum(bool(test(m, r)) for m, r in pairs) / len(pairs)


def test_same_message_same_reply_and_registered():
    assert assistant_reply_b(TURN) == assistant_reply_b(TURN)
    assert REPLIERS["assistant-b"] is assistant_reply_b
    assert assistant_reply_b(TURN) != assistant_reply_b(TURN.replace("blue", "green"))


def test_reading_finds_speaker_photo_and_topic():
    r = read(TURN)
    assert r.speaker == "Dana"
    assert r.picture == "a blue ceramic bowl"
    assert "your first pottery class" in r.phrases
    assert r.mood == "neutral" and not r.asks
    assert read("[x] Sam: I was so tired and sad today.").mood == "negative"


def test_replies_vary_over_the_dev_set(pairs):
    replies = [r for _, r in pairs]
    assert len(set(replies)) / len(replies) >= 0.8
    assert max(replies.count(r) for r in set(replies)) <= 0.03 * len(replies)


def test_replies_echo_ask_list_and_name_like_chat_models(pairs):
    def echoes(m: str, r: str) -> bool:
        own = set(_WORDS.findall(m.split("]", 1)[-1].lower())) - _COMMON
        return own & set(_WORDS.findall(r.lower()))

    def names_speaker(m: str, r: str) -> bool:
        speaker = read(m).speaker
        return speaker and speaker.split()[0] in r

    assert _share(pairs, echoes) >= 0.6
    assert 0.3 <= _share(pairs, lambda m, r: "?" in r) <= 0.8
    assert 0.03 <= _share(pairs, lambda m, r: re.search(r"\n(?:\d+\.|-) ", r)) <= 0.2
    assert 0.1 <= _share(pairs, names_speaker) <= 0.5
    assert 0.06 <= _share(pairs, lambda m, r: any(t not in m for t in _SPECIFIC.findall(r))) <= 0.3


def test_reply_shape(pairs):
    for m, r in pairs:
        words = len(r.split())
        assert 2 <= words <= 80, (words, r)
        lines = r.split("\n")
        items = [line for line in lines if re.match(r"(?:\d+\.|-) ", line)]
        prose = " ".join(line for line in lines if line not in items)
        assert len([s for s in re.split(r"(?<=[.!?])\s+", prose) if s.strip()]) <= 4, r
        assert len(items) <= 3, r
        assert r == r.strip() and "{" not in r and "  " not in r


def test_no_person_but_the_speaker_is_named(pairs):
    """Capitalised words inside the message's sentences (possibly people), bar the speaker's, stay out."""
    inside = re.compile(r"(?<=[a-z,] )[A-Z][a-z]{2,}")
    for m, r in pairs:
        speaker = read(m).speaker.split()[0] if read(m).speaker else ""
        others = set(inside.findall(m.split(": ", 1)[-1])) - {speaker}
        assert not others & set(inside.findall(r)), (m, r)


@pytest.mark.parametrize("message", [
    "", "   ", "\n\n", "[1:00 pm on 1 May, 2023]", "[1:00 pm] Sam:", "Sam: ", "??!!", "🙂🙂🙂", "日本語のメッセージです",
    "[shares]", "[shares a photo of ]", "hi", "Thanks!", "\x00\udcff odd bytes", "a" * 5000, "[" * 3000 + "]" * 3000,
])
def test_odd_input_still_gets_a_reply(message):
    r = assistant_reply_b(message)
    assert r and 1 <= len(r.split()) <= 80


def test_hostile_100kb_message_is_answered_in_linear_time():
    unit = "Sam: [shares a photo of " + "very " * 20 + "I went to the the a an my " + "x" * 40 + "? "
    big = (unit * (100_000 // len(unit) + 1))[:100_000]
    small = big[:10_000]
    start = time.perf_counter()
    r = assistant_reply_b(big)
    took = time.perf_counter() - start
    start = time.perf_counter()
    assistant_reply_b(small)
    took_small = time.perf_counter() - start
    assert r and len(r.split()) <= 80
    assert took < 0.5 and took <= 20 * took_small + 0.05


async def test_works_as_fake_provider_reply_for_chat_and_anthropic(aiohttp_server):
    provider = FakeProvider(reply=body_replier("assistant-b"))
    server = await aiohttp_server(provider.app())
    base = f"http://{server.host}:{server.port}"
    async with aiohttp.ClientSession() as s:
        async with s.post(base + "/v1/chat/completions", json={
                "model": "m", "messages": [{"role": "system", "content": "be kind"},
                                           {"role": "user", "content": TURN}]},
                headers={"authorization": "Bearer k"}) as resp:
            assert resp.status == 200, await resp.text()
            chat = (await resp.json())["choices"][0]["message"]["content"]
        async with s.post(base + "/v1/messages", json={
                "model": "claude", "max_tokens": 200, "messages": [{"role": "user", "content": [
                    {"type": "text", "text": TURN}]}]},
                headers={"x-api-key": "k", "anthropic-version": "2023-06-01"}) as resp:
            assert resp.status == 200, await resp.text()
            anthropic = "".join(b.get("text", "") for b in (await resp.json())["content"])
    assert chat == anthropic == assistant_reply_b(TURN)
    assert chat != "OK."
