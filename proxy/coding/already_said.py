"""Recall leaves out what the request already carries.

A resumed conversation (`claude -c`, `codex exec resume`) resends its earlier turns, and those turns
were retained: recalled again, they would fill the block with the request's own words. A memory
most of whose word sequences (`SHINGLE` words in a row) appear in the request's text is dropped.
"""

from __future__ import annotations

from dataclasses import replace

import re

from memplane_core.memo import TextMemo

from ..recall_policy import InjectedMemory
from .for_memory import SUMMARY_QUESTION

SHINGLE = 4
ALREADY = 0.6  # share of a memory's shingles found in the request for it to count as already there
# Letters and digits (`[\pL\pN]+`), with the standard library: one character class repeated is linear
# in `re` too, and re2's findall builds a Python match per word (~40x slower here, on every recalled line).
_WORD = re.compile(r"[^\W_]+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())  # one lower() for the text, not one per word: same words


def _shingles(words: list[str]) -> set[tuple[str, ...]]:
    if len(words) < SHINGLE:
        return {tuple(words)} if words else set()
    return {tuple(words[i:i + SHINGLE]) for i in range(len(words) - SHINGLE + 1)}


_SEEN: TextMemo[tuple[int, frozenset[tuple[str, ...]]]] = TextMemo(entries=4096, key_chars=8192)


def _read(text: str) -> tuple[int, frozenset[tuple[str, ...]]]:
    """A text's word count and shingles, remembered: agents resend their earlier user messages on
    every call and the same memories come back on many recalls, so nearly every text here was
    read moments ago (reading them again was most of the step's cost)."""
    hit = _SEEN.get(text)
    if hit is None:
        words = _words(text)
        hit = (len(words), frozenset(_shingles(words)))
        _SEEN.put(text, hit)  # a longer text is read afresh each time
    return hit


def request_shingles(texts: list[str]) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for text in texts:
        out |= _read(text)[1]
    return out


def already_there(text: str, carried: set[tuple[str, ...]]) -> bool:
    own = _read(text)[1]
    if not own or not carried:
        return False
    return len(own & carried) / len(own) >= ALREADY


def drop_already_said(memories: list[InjectedMemory], carried: set[tuple[str, ...]]
                      ) -> tuple[list[InjectedMemory], int]:
    """The memories without the turns the request already carries, and how many lines were left out.

    A block packs several turns (`user: …`, then its `tools: …` and `assistant: …` lines); a turn
    whose person's words are in the request's user messages goes with its tool and answer lines.
    A compaction summary (memplane's fixed question, then the summary) is compared by its summary,
    which a continued session resends. A reply is a memory of its own, recalled without its turn
    too: its line is also left out when its own words are in the request's user messages (a
    continued session's summary). Otherwise only the person's words are compared: a model that quoted a memory in an earlier answer still
    gets it (it was recalled, not said in this conversation)."""
    if not carried:
        return list(memories), 0
    kept: list[InjectedMemory] = []
    dropped = 0
    for m in memories:
        rest: list[str] = []
        dropping = False
        lines = m.text.split("\n")
        for i, line in enumerate(lines):
            if line.startswith("assistant: "):  # goes with its turn, or alone when the request carries it
                gone = dropping or already_there(line[11:], carried)  # (a reply is a memory of its own)
            elif line.startswith("tools: "):
                gone = dropping
            elif _read(line)[0] < 3:  # a date heading, a blank
                dropping = gone = False
            elif line.removeprefix("user: ") == SUMMARY_QUESTION:  # a compaction summary is memplane's question
                answer = lines[i + 1] if i + 1 < len(lines) else ""  # and the summary: there when that is
                dropping = gone = answer.startswith("assistant: ") and already_there(answer[11:], carried)
            else:
                dropping = gone = already_there(line.removeprefix("user: "), carried)
            if gone:
                dropped += 1
            else:
                rest.append(line)
        if len(rest) == len(lines):
            kept.append(m)
        elif any(_read(line)[0] >= 3 for line in rest):
            kept.append(replace(m, text="\n".join(rest)))
    return kept, dropped
