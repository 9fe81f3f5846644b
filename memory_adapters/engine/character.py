"""A question about someone's character: what they would, might or are likely to do or be.

"Would Ana be considered a generous person?" or "What job might Ana pursue?" is answered by what
Ana said about herself somewhere in the conversation ("I started the nursing course … caring for
people is what I want to do"), in words the question does not use. The speaker boost (speakers.py) puts her turns
first; among them BM25 is flat (her name is in each) and MiniLM orders them. Two things change
for such a question (`asks`: a modal verb), neither for any other:

* When it names a speaker (speakers.py), its query vector is made of the question without those
  names (`dense_text`): among turns that all start `Ana: `, her name in the vector pulls toward the
  turns that address or mention her, not toward what she says. BM25 still reads the whole question.
  Any other name or word ("Would Redis suit us?") stays in the vector. An index already in
  memory is asked at once for this text; a recall that waits for its index asks for the question
  as it is and, for such a question, again once the index says who the speakers are
  (schedule.timely_recall).
* When it names a speaker (speakers.py), the best `REACH_FOR` hits bring that speaker's own turns
  two away (`own_beside`) instead of the turns beside them: a person's statement often goes on
  after the other's short reply ("Wow!"), and for a question about them the reply is room better
  spent on more of what they said.

Chosen leave-one-conversation-out on LoCoMo's dev set (bench/results/HISTORY.md, "Questions about a person's
character"; `python -m bench.quality.loo --experiment inference`).
"""

from __future__ import annotations

from collections.abc import Collection

import re2

REACH_FOR = 20  # the best hits that bring their speaker's turns two away (packing.NEIGHBOURS_FOR's place)
_MODAL = re2.compile(r"(?i)\b(?:would|might|likely)\b")  # asks what someone would do or be


def asks(question: str) -> bool:
    """A question about what someone would, might or is likely to do or be."""
    return _MODAL.search(question) is not None


def dense_text(question: str, speakers: Collection[str]) -> str:
    """What the query vector is made of: for a question that `asks` about some of `speakers` (the
    names it names, speakers.Speakers.named_in), the question without them (a possessive too); else
    the question."""
    if not speakers or not asks(question):
        return question
    names = "|".join(sorted(speakers, key=len, reverse=True))  # speakers.py: letters only
    return " ".join(re2.sub(rf"\b(?:{names})(?:'s|’s)?\b", " ", question).split()) or question
