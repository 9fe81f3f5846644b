"""Whether an assistant's reply adds a fact to what the person said, judged by its shape.

Every real conversation has replies beside the person's words, and most of them in a chat are
small talk: an acknowledgement ("That's great to hear!"), a question back ("How did it go?"), the
person's own words said back, and often a general sentence in new words ("Creative hobbies often
help people relax"). Kept, such a line matches every question a little (its words are the commonest
words there are) and takes a share of the block. So a reply is remembered only when one of its
sentences states something this conversation holds and a model could not say again: a statement
(a question asks, it does not tell) that names something specific the person did not say (a
number, a name written with a capital mid-sentence, a path, an address, an identifier). General
knowledge in plain words, however long and true, is what any model says again when asked; what
was decided, done or found names its things. Nothing here lists a reply's phrases: the rule is the
general shape of a statement that names something, and a reply that states a fact stays findable.

Patterns are RE2 (linear time on any input).
"""

from __future__ import annotations

from collections.abc import Iterator

import re2

_WORD = re2.compile(r"[A-Za-z0-9][A-Za-z0-9'’]*")
# a word that names something: a digit, a path, an address, an identifier (`a/b`, `x.py`, `@me`, `k=v`)
_SPECIFIC = re2.compile(r"[0-9]|[A-Za-z0-9][/_@#=:.][A-Za-z0-9]")
_NUMBER_WORDS = frozenset("two three four five six seven eight nine ten eleven twelve twenty thirty forty fifty "
                          "hundred thousand million billion twice thrice dozen half quarter".split())
# a list item's mark at the start of a line: a bullet, or a number or letter before '.' or ')'
_LIST_MARK = re2.compile(r"^\s*(?:[-*•+]|[0-9]{1,3}[.)]|[A-Za-z]\))(?:\s+|$)")
_PRONOUN_I = frozenset(("I", "I'm", "I'd", "I've", "I'll", "I’m", "I’d", "I’ve", "I’ll", "OK"))


def _sentences(text: str) -> Iterator[str]:
    """The sentences of `text`, one at a time: a caller that has enough stops reading there. A line
    break ends one (a list's items, a heading), and a list's number does not ('2. Open port 443')."""
    start = 0
    for i, ch in enumerate(text):
        if ch == "\n" or ch in ".!?" and (i + 1 == len(text) or text[i + 1] in " \n\t\"')"):
            if ch == "." and i - start <= 4 and text[start:i].strip().isdigit():
                continue  # an item's number, not a sentence of its own
            if sentence := text[start:i + 1].strip():
                yield sentence
            start = i + 1
    if sentence := text[start:].strip():
        yield sentence


def _states(sentence: str, said: set[str]) -> bool:
    """A sentence that tells something: not a question, and naming something the person did not."""
    if sentence.rstrip(" \"')").endswith("?"):
        return False
    sentence = _LIST_MARK.sub("", sentence, count=1)  # layout ('1.', '2)', '-'), not a number the reply states
    words = _WORD.findall(sentence)
    for n, w in enumerate(words):
        if w.lower() in said:
            continue  # the person's own name, number or word, said back: nothing new
        if _SPECIFIC.search(w) or w.lower() in _NUMBER_WORDS:
            return True
        if n and w[0].isupper() and w not in _PRONOUN_I:
            return True  # a name, mid-sentence
    for token in sentence.split():  # a path or an address is one token with its punctuation inside
        token = token.strip(".,;:!?\"'()[]")
        if token.lower() not in said and _SPECIFIC.search(token):
            return True
    return False


def _said(user: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(user)} | {t.strip(".,;:!?\"'()[]").lower() for t in user.split()}


def stated(reply: str, user: str, enough: int | None = None) -> list[str]:
    """The sentences of `reply` that state something beyond `user` (`_states`), in order: what a
    kept reply is remembered as. Its reactions, questions back and the person's words said back
    (the same rule that drops a reply made only of them) are left out, so the reply's memory
    holds what it told, not an echo of the person's turn that would match their questions.
    `enough`: stop once the sentences found take that many characters joined (a kept reply is
    clipped there; a 2 MB answer is not judged sentence by sentence to its end)."""
    said, out, size = _said(user), [], -1
    for s in _sentences(reply):
        if _states(s, said):
            out.append(s)
            size += 1 + len(s)
            if enough is not None and size >= enough:
                break
    return out


def adds_fact(reply: str, user: str) -> bool:
    """Whether `reply` (the assistant's words) states something beyond `user` (the person's words
    it answers): some sentence of it does (`stated`, stopping at the first)."""
    return bool(stated(reply, user, enough=0))
