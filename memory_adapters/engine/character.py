"""A question about someone's character: what they would, might or are likely to do or be.

"Would Ana be considered a patriotic person?" or "What job might Ana pursue?" is answered by what
Ana said about herself somewhere in the conversation ("I retook the aptitude test … serving my
country"), in words the question does not use. The speaker boost (speakers.py) puts her turns
first; among them BM25 is flat (her name is in each) and MiniLM orders them. Two things change
for such a question (`asks`: a modal verb), neither for any other:

* The query vector is the question without its names (`dense_text`: capitalised words after the
  first, quoted titles kept): among turns that all start `Ana: `, her name in the vector pulls
  toward the turns that address or mention her, not toward what she says. BM25 still reads the
  whole question, so a name or a title still matches by its words. Done before the agent's index
  is known (the vector is asked while it loads), hence capitals rather than the index's speakers.
* When it names a speaker (speakers.py), the best `REACH_FOR` hits bring that speaker's own turns
  two away (`own_beside`) instead of the turns beside them: a person's statement often goes on
  after the other's short reply ("Wow!"), and for a question about them the reply is room better
  spent on more of what they said.

Chosen leave-one-conversation-out on LoCoMo's dev set (bench/README.md, "Questions about a person's
character"; `python -m bench.quality.loo --experiment inference`).
"""

from __future__ import annotations

import re2

REACH_FOR = 20  # the best hits that bring their speaker's turns two away (packing.NEIGHBOURS_FOR's place)
_MODAL = re2.compile(r"(?i)\b(?:would|might|likely)\b")  # asks what someone would do or be
_QUOTED = re2.compile(r"\"[^\"]*\"|“[^”]*”")  # a title as written: kept whole
_CAPITAL = re2.compile(r"(\S)\s+[A-Z][\w.\-]*(?:'s|’s)?")  # a capitalised word after the first, possessive too


def asks(question: str) -> bool:
    """A question about what someone would, might or is likely to do or be."""
    return _MODAL.search(question) is not None


def dense_text(question: str) -> str:
    """What the query vector is made of: for a question that `asks`, the question without the
    capitalised words after its first (the names it names), titles in quotes kept; else the question."""
    if not asks(question):
        return question
    out, last = [], 0
    for m in _QUOTED.finditer(question):
        out += [_uncapitalised(question[last:m.start()], last > 0), m.group(0)]
        last = m.end()
    out.append(_uncapitalised(question[last:], last > 0))
    return " ".join("".join(out).split()) or question


def _uncapitalised(text: str, after_quote: bool) -> str:
    """`text` without its capitalised words but a leading one (none is leading after a quote)."""
    text = "." + text if after_quote else text
    # twice: a match takes the character before the next name ("Ana Ben" would keep "Ben")
    text = _CAPITAL.sub(r"\1 ", _CAPITAL.sub(r"\1 ", text))
    return text[1:] if after_quote else text
