"""Replies to one chat message the way an ordinary chat model answers it, seen only that message.

A memory engine fed a conversation stores the assistant's reply beside each of the person's turns.
Real replies are hard for it because they echo the message (the speaker's name, the message's own
topic words, a paraphrase of what the person did), add generic content in new words (encouragement,
truisms, a short list of suggestions, now and then a specific place, book or number) and often ask a
question back about the topic. A stand-in that only picks fixed phrases is easier than that, so this
one reads the message: an optional `[date]` stamp and `Name:` prefix, a trailing `[shares ...]`
caption, first-person activities ("I went to ..."), noun phrases after a determiner, content words
and sentiment words. It knows nothing about any data set: the only name it may say is the speaker's
own, taken from the prefix. Deterministic (seeded from the message's hash), bounded input, re2 only.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

import re2

MAX_INPUT = 4000  # characters read: a reply reacts to the start of a long message, so time is bounded

_WORD = re2.compile(r"[A-Za-z][A-Za-z']*(?:-[A-Za-z']+)*|[0-9]+|[.!?;:,()\"\-–—]")
_NAME = re2.compile(r"^([A-Z][A-Za-z'\-]{0,20}(?: [A-Z][A-Za-z'\-]{0,20}){0,2}):\s")
_STAMP = re2.compile(r"^\s*\[[^\]]{0,80}\]\s*")
_SENTENCE_END = re2.compile(r"[.!?]+[\"')]?\s")
_SHARES = re2.compile(r"\[shares ([^\]]{1,300})\]")

STOP = frozenset(
    "a about above after again against all also am an and any are aren't as at be because been before being "
    "below between both but by can can't could couldn't did didn't do does doesn't doing don't down during each "
    "even ever every few for from further get got gonna had hadn't has hasn't have haven't having he he'd he'll "
    "he's her here here's hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's "
    "its itself just let's like lot lots me more most much must mustn't my myself no nor not now of off on once "
    "one only or other ought our ours ourselves out over own really same she she'd she'll she's should shouldn't "
    "so some such than that that's the their theirs them themselves then there there's these they they'd they'll "
    "they're they've thing things this those through to too under until up very was wasn't we we'd we'll we're "
    "we've were weren't what what's when when's where where's which while who who's whom why why's will with "
    "won't would wouldn't you you'd you'll you're you've your yours yourself yourselves yeah yes hey hi hello "
    "thanks thank oh wow well still always never maybe sure okay ok lol haha actually definitely totally kinda "
    "pretty quite lately recently yesterday today tomorrow tonight week weeks month months year years day days "
    "since though although whether else either neither without within upon "
    "time times last next ago soon already again anyway everything something anything nothing someone everyone "
    "anyone stuff way ways lot bit great good nice awesome amazing cool glad happy sorry love loved know think "
    "thought feel felt make made want wanted going went see saw say said tell told look looking looks hope "
    "keep kept take took come came give gave mean means meant need needed try tried find found also new old "
    "big little many much better best sounds sound hear heard".split())

# Sentiment words of everyday English: which kind of reaction opens the reply.
POSITIVE = frozenset(
    "amazing awesome great fantastic wonderful excited exciting thrilled happy glad love loved loving proud "
    "joy joyful fun beautiful incredible blessed grateful thankful fulfilling fulfillment rewarding success "
    "successful won win enjoyed enjoy enjoying stoked delighted relaxing relaxed peaceful inspired inspiring "
    "awesome cool nice lovely perfect best passionate powerful".split())
NEGATIVE = frozenset(
    "sad tough difficult stressed stress stressful anxious anxiety worried worry upset lost losing loss "
    "sick ill hurt pain painful tired exhausted struggling struggle struggled frustrated frustrating lonely "
    "scared afraid angry disappointed disappointing rough overwhelmed overwhelming setback failed fail broke "
    "broken injured injury accident died passed grief unfortunately bummer terrible awful horrible".split())
GRATITUDE = ("thanks", "thank you", "appreciate", "means a lot", "mean a lot")
FAREWELL = ("bye", "chatting with you", "reach out any time", "talk soon", "talk to you", "take care",
            "catch you", "see you", "later!", "gotta go")

_SWAP = {"i": "you", "me": "you", "my": "your", "mine": "yours", "myself": "yourself", "we": "you",
         "us": "you", "our": "your", "ours": "yours", "ourselves": "yourselves", "i'm": "you're",
         "i've": "you've", "i'll": "you'll", "i'd": "you'd", "we're": "you're", "we've": "you've",
         "am": "are", "was": "were"}
_DETERMINERS = frozenset("a an the my our some this that these those his her their new".split())
_LIGHT_VERBS = frozenset("make made making makes have had having has is was it's such quite what be being "
                         "get got what's".split())
_PHRASE_START = frozenset("a an the my our some".split())  # a noun phrase the person owns or introduces
_CLAUSE_END = frozenset("and but because so which that when while since as if or who where though although".split())
_ADDRESSEE = frozenset("you your yours yourself he she they him her them his their".split())  # someone else's: stop
# Words that end a noun phrase: prepositions, auxiliaries, pronouns, conjunctions, adverbs.
_FUNCTION = frozenset(
    "a an the my our your his her their its this that these those some any all each every of to in on at for "
    "with about from by into onto over under around through after before during without between like as and "
    "or but so because if when while than then is am are was were be been being has have had do does did will "
    "would can could should may might must i me we us you he she it they them him who which what where how why "
    "not no just really very too also even still already again always never ever there here up down out off "
    "away back together anymore it's i'm i've that's there's what's".split())
_PAST = frozenset(
    "went started joined finished visited tried took got painted ran bought adopted signed attended "
    "met learned learnt began built baked cooked wrote read played watched saw found completed organized "
    "organised hosted volunteered traveled travelled moved picked launched opened decided entered drew "
    "spent had gave received celebrated explored hiked climbed signed".split())
_NOT_GERUND = frozenset(
    "thing something nothing anything everything morning evening during bring king ring spring sing string "
    "wing ceiling feeling being going doing having getting saying meaning interesting amazing exciting "
    "thinking looking wondering hoping wanting trying".split())


@dataclass
class Reading:
    """What a reply can say about the message: who, what they did, what it is about, its mood."""

    name: str = ""
    activity: str = ""        # "went to a support group", from "I went to a support group"
    gerund: str = ""          # "rehearsing for an upcoming show", from "I'm rehearsing for ..."
    phrase: str = ""          # a noun phrase, pronouns swapped: "your new dance routines"
    head: str = ""            # the phrase without its determiner: "new dance routines"
    words: list[str] = field(default_factory=list)  # content words, in order
    vocab: frozenset[str] = frozenset()  # every word, lower case
    caption: str = ""         # what a shared image shows
    mood: str = "neutral"     # positive | negative | thanks | farewell | question | neutral


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text)


def _proper(token: str, previous: str) -> bool:
    """A capitalised word that is not the pronoun I, an acronym, or a sentence's first word."""
    return (token[:1].isupper() and token != "I" and not token.isupper()
            and previous not in {"", ".", "!", "?", ":", "\""})


def _clause(tokens: list[str], start: int, most: int) -> list[str]:
    """The words from `start` up to a clause boundary, a punctuation mark or `most` words."""
    out: list[str] = []
    for i in range(start, min(len(tokens), start + most + 1)):
        t = tokens[i]
        if (not t[0].isalnum() or (t.lower() in _CLAUSE_END and len(out) >= 2) or t.lower() in _ADDRESSEE
                or len(out) >= most):
            break
        if _proper(t, tokens[i - 1] if i else "") or t.endswith("'s") and t[:1].isupper():
            return []  # a name: the replier may only say the speaker's own
        out.append(t)
    while out and (out[-1].lower() in _DETERMINERS or out[-1].lower() in {"to", "of", "for", "with", "in", "at",
                                                                           "on", "about", "really", "so", "very"}):
        out.pop()
    return out


def _noun_phrase(tokens: list[str], start: int) -> list[str]:
    """The run of up to three non-function words after a determiner, when it ends in a noun-like word."""
    out: list[str] = []
    for i in range(start, min(len(tokens), start + 4)):
        t = tokens[i]
        if not t[0].isalpha() or t.lower() in _FUNCTION or len(out) >= 3:
            break
        if _proper(t, tokens[i - 1]) or t.endswith("'s") and t[:1].isupper():
            return []
        out.append(t)
    while out and (_nounless(out[-1]) or out[-1].lower() in STOP):
        out.pop()
    return out


def _nounless(word: str) -> bool:
    """An ending that marks a verb or adverb rather than a thing (a heuristic, no tagger)."""
    w = word.lower()
    return len(w) < 3 or w.endswith(("ly", "ed")) or (w.endswith("ing") and w not in {"painting", "wedding",
                                                                                       "building", "clothing"})


def _swap(words: list[str]) -> str:
    return " ".join(_SWAP.get(w.lower(), w) if w != "I" else "you" for w in words)


def read(message: str) -> Reading:
    """The parts of `message` (any chat message, stamped or not) that an assistant's reply reacts to."""
    text = (message or "")[:MAX_INPUT].encode("utf-8", "replace").decode("utf-8")  # lone surrogates: re2 needs UTF-8
    r = Reading()
    text = _STAMP.sub("", text, count=1)
    m = _NAME.match(text)
    if m:
        r.name = m.group(1).split()[0]
        text = text[m.end():]
    shared = _SHARES.search(text)
    if shared:
        r.caption = shared.group(1).strip()
        text = (text[:shared.start()] + text[shared.end():]).strip()
    tokens = _tokens(text)
    lower = [t.lower() for t in tokens]
    low_text = text.lower()
    r.vocab = frozenset(lower)

    pos = sum(t in POSITIVE for t in lower)
    neg = sum(t in NEGATIVE for t in lower)
    if any(f in low_text for f in FAREWELL) and len(tokens) < 40:
        r.mood = "farewell"
    elif any(g in low_text for g in GRATITUDE) and len(tokens) < 30:
        r.mood = "thanks"
    elif neg > pos:
        r.mood = "negative"
    elif text.rstrip().endswith("?"):
        r.mood = "question"
    elif pos:
        r.mood = "positive"

    best = 0
    for i, t in enumerate(lower):
        prev = lower[i - 1] if i else ""
        nxt = lower[i + 1] if i + 1 < len(lower) else ""
        if not r.activity and t in {"i", "we"} and nxt in _PAST:
            obj = _clause(tokens, i + 2, 7)
            if obj:
                r.activity = f"{nxt} {_swap(obj)}"
        if (not r.gerund and t.endswith("ing") and len(t) > 5 and t not in _NOT_GERUND
                and prev in {"i'm", "am", "been", "started", "love", "enjoy", "enjoying", "keep", "we're", "about"}):
            obj = _clause(tokens, i + 1, 5)
            r.gerund = _swap([t] + obj)
        if t in _PHRASE_START:
            np = _noun_phrase(tokens, i + 1)
            score = 0 if not np else sum(w.lower() not in STOP for w in np) + (t in {"my", "our"})
            if t in {"a", "an"} and prev in _LIGHT_VERBS:
                score = 0  # "make a difference", "had a blast": an idiom, not a topic
            if score > best:
                best, r.head = score, " ".join(np)
                r.phrase = _swap([t] + np) if t in {"my", "our"} else f"{t} {r.head}"
    seen: set[str] = set()
    for i, t in enumerate(tokens):
        w = lower[i]
        if (len(w) > 4 and w.isalpha() and w not in STOP and w not in seen and not _nounless(w)
                and w not in POSITIVE | NEGATIVE and not _proper(t, tokens[i - 1] if i else "")):
            seen.add(w)
            r.words.append(w)
    return r


# ---- what the reply says -------------------------------------------------------------------------

OPENERS = {
    "positive": ["That's wonderful{, name}!", "That sounds amazing{, name}!", "How exciting!",
                 "That's fantastic news{, name}!", "I love hearing that{, name}!", "That's so great{, name}!",
                 "What a great thing to share!", "That sounds really rewarding{, name}.",
                 "Oh, that's lovely{, name}!", "That's awesome{, name}!", "It sounds like things are going well!",
                 "That's really inspiring{, name}."],
    "negative": ["I'm sorry to hear that{, name}.", "That sounds really tough{, name}.",
                 "I'm sorry you're going through this.", "That must be hard{, name}.",
                 "Oh no, that sounds difficult.", "That sounds like a lot to deal with{, name}.",
                 "It's completely understandable to feel that way.", "I'm really sorry{, name}."],
    "thanks": ["You're very welcome{, name}!", "Happy to help{, name}!", "Anytime{, name}!",
               "I'm glad that was helpful!", "Of course{, name}! I'm always happy to chat.",
               "You're welcome! It's my pleasure."],
    "farewell": ["Take care{, name}!", "Talk soon{, name}!", "It was great chatting with you{, name}!",
                 "Have a wonderful rest of your day{, name}!", "Sounds good{, name}! Take care."],
    "question": ["Great question{, name}!", "That's a good question.", "Good question{, name}.",
                 "That's an interesting question{, name}.", "Hmm, let me think about that."],
    "neutral": ["Thanks for sharing that{, name}.", "That's interesting{, name}!", "I see!",
                "That sounds really meaningful{, name}.", "Got it{, name}.", "Oh, that's really cool{, name}!",
                "That's really nice to hear.", "Interesting!", "It sounds like you've been busy{, name}!"],
}

ACTIVITY_GERUND_ECHO = ["{G} sounds like a really meaningful step.", "{G} sounds like such a great experience.",
                        "{G} takes some courage, so good for you.", "{G} must have been a lot of fun."]
ACTIVITY_ECHO = ["It's great that you {a}.", "It sounds like you really enjoyed it when you {a}.",
                 "I'm so glad you {a}.", "It's really nice that you {a}.",
                 "It sounds like it meant a lot that you {a}."]
GERUND_ECHO = ["{G} sounds like a wonderful way to spend your time.", "{G} can be so fulfilling.",
               "It's great that you've been {g}.", "{G} sounds like a lot of fun.",
               "{G} takes real dedication, and it shows.", "I love that you're {g}."]
PHRASE_ECHO = ["{P} sound{s} really special.", "It sounds like {p} mean{s} a lot to you.",
               "{P} sound{s} like a great thing to have in your life.", "I can tell {p} {be} important to you.",
               "It's nice to hear about {p}.", "{P} sound{s} wonderful.", "It's clear you care a lot about {p}."]
NEGATIVE_ECHO = ["Dealing with {p} can't be easy.", "{P} sound{s} like a lot to handle.",
                 "I hope things with {p} get better soon.", "It makes sense that {p} would weigh on you."]
WORD_ECHO = ["The part about {w} really stood out to me.", "It's lovely that you mentioned {w}.",
             "I'd love to hear more about the {w} side of things."]
CAPTION_ECHO = ["Thanks for sharing the picture; {c} looks lovely!", "What a nice photo — {c} looks great!",
                "The picture of {c} is really nice."]

# Generic content in new words, as assistants add: truisms, encouragement, advice.
TRUISMS = ["Staying connected with supportive people can make a big difference.",
           "Small, consistent steps tend to add up over time.",
           "It's important to take time for yourself and recharge now and then.",
           "Celebrating the little wins along the way really helps keep motivation up.",
           "Having something to look forward to can brighten even a busy week.",
           "Sharing experiences like this often brings people closer together.",
           "Trying new things is a great way to grow and learn more about yourself.",
           "Being part of a community can give you a real sense of belonging.",
           "Creative hobbies often help people relax and express themselves.",
           "Spending time outdoors is one of the simplest ways to lift your mood.",
           "It's always good to be kind to yourself when things get busy.",
           "Finding balance between work and rest is something many people struggle with.",
           "Hard work and persistence usually pay off in the long run.",
           "Reflecting on moments like these can be really grounding.",
           "Surrounding yourself with positive people makes such a difference.",
           "Making memories with the people you care about is what it's all about."]
NEGATIVE_TRUISMS = ["It's okay to take things one day at a time.",
                    "Talking to someone you trust can really help lighten the load.",
                    "Be gentle with yourself; setbacks are a normal part of life.",
                    "Remember that tough times don't last forever.",
                    "Reaching out for support is a sign of strength, not weakness."]
TOPIC_TRUISMS = ["Things like {p} can make a real difference day to day.",
                 "It's often things like {p} that end up meaning the most.",
                 "Many people find that {p} give{s} them a real sense of purpose.",
                 "Making time for {p}, even in busy weeks, really pays off."]
SUGGESTIONS = ["A few ideas: keep a journal, set a small goal for the week, and celebrate your progress.",
               "You might try setting aside a regular time for it, inviting a friend along, or tracking how it goes.",
               "Some things that often help are getting enough sleep, staying active, and talking things through.",
               "If you want to build on it, you could join a local group, take a class, or share it online."]
DOMAIN_SPECIFICS = [
    ("paint painting drawing draw sketch sketching canvas art artist artwork pottery craft crafts",
     ["Bob Ross liked to say there are no mistakes, just happy accidents.",
      "Museums like the MoMA or the Louvre can be great places to find inspiration."]),
    ("run running marathon hike hiking walk walking gym yoga workout exercise fitness swim swimming cycling bike",
     ["Many people find that even 20 minutes of walking a day helps clear the mind.",
      "Health guidelines suggest about 150 minutes of moderate exercise a week."]),
    ("book books read reading novel novels author library",
     ["If you're looking for something new, \"The Midnight Library\" by Matt Haig is a popular pick.",
      "Reading even 10 pages a day adds up to more than a dozen books a year."]),
    ("music song songs guitar piano violin band concert sing singing instrument",
     ["Learning an instrument has been linked to better memory and focus.",
      "Practicing for 15 to 20 minutes a day is often more effective than one long session a week."]),
    ("dog dogs puppy cat cats kitten pet pets",
     ["Studies have found that spending time with pets can lower stress hormones.",
      "Most dogs do best with at least 30 minutes of exercise a day."]),
    ("cook cooking bake baking recipe recipes food dinner meal meals kitchen",
     ["Sites like Allrecipes or BBC Good Food are great for new recipe ideas.",
      "Batch cooking on a Sunday can save a surprising amount of time during the week."]),
    ("travel trip trips vacation beach camping camp road mountains",
     ["Places like Yosemite or the Lake District are wonderful if you ever want a nature getaway.",
      "Booking flights about six to eight weeks ahead often gets the best prices."]),
    ("job work business career startup company boss office team clients investors",
     ["Books like \"The Lean Startup\" by Eric Ries have useful ideas for new ventures.",
      "Many career coaches recommend setting aside an hour a week just for planning."]),
    ("school class classes study studying exam exams course degree college university",
     ["The Pomodoro technique, 25 minutes of focus and then a short break, works well for many students.",
      "Teaching what you've learned to someone else is one of the best ways to remember it."]),
    ("volunteer volunteering charity donate donation community shelter fundraiser",
     ["Sites like VolunteerMatch make it easy to find local opportunities.",
      "Research shows volunteering can boost well-being as much as it helps others."]),
    ("stress stressed anxiety anxious therapy therapist mental overwhelmed",
     ["Apps like Headspace or Calm can be handy for taking a mindful break.",
      "The 4-7-8 breathing technique is a simple way to calm down in a stressful moment."]),
]
_DOMAINS = [(frozenset(words.split()), lines) for words, lines in DOMAIN_SPECIFICS]
SPECIFICS = ["Many people find that even 20 minutes of walking a day helps clear the mind.",
             "Books like \"Atomic Habits\" by James Clear have great tips on building routines.",
             "Studies suggest it takes about two months for a new habit to stick.",
             "Places like Yosemite or the Lake District are wonderful if you ever want a nature getaway.",
             "Apps like Headspace or Calm can be handy for taking a mindful break.",
             "Local libraries and community centers often run free workshops on all sorts of topics.",
             "Some people swear by the Pomodoro technique: 25 minutes of focus, then a short break.",
             "Even a 10-minute break outside can boost your energy for the rest of the afternoon."]
ANSWERS = ["I don't have personal experiences, but many people would say it depends on what matters most to you.",
           "Honestly, it often comes down to what feels right for you in the moment.",
           "As an AI, I don't have preferences, but I think that's a really thoughtful thing to ask.",
           "Could you tell me a bit more about what you mean? I'd be happy to help."]

TOPIC_QUESTIONS = ["What was the most memorable part of {p}?", "What do you enjoy most about {p}?",
                   "What inspired {p}?", "How are you feeling about {p} now?", "What's the story behind {p}?",
                   "What's been the best part of {p} for you?"]
QUESTION_ECHO = ["When it comes to {p}, a lot depends on what matters most to you.",
                 "{P} {be} a great thing to ask about.", "There's a lot to think about with {p}."]
ACTIVITY_QUESTIONS = ["How did it go?", "What was the highlight for you?", "Would you do it again?",
                      "What made you decide to do that?", "How did you feel afterwards?"]
GERUND_QUESTIONS = ["How long have you been {g}?", "What got you started {g}?",
                    "What's been the best part of {g} so far?"]
GENERIC_QUESTIONS = ["How are you feeling about it now?", "What's next for you?",
                     "Is there anything I can help with?",
                     "What's been on your mind lately?", "How has the rest of your week been?",
                     "Is there anything you're looking forward to?"]


_IRREGULAR_ING = {"went": "going", "took": "taking", "got": "getting", "ran": "running", "began": "beginning",
                  "saw": "seeing", "met": "meeting", "read": "reading", "wrote": "writing", "built": "building",
                  "drew": "drawing", "found": "finding", "spent": "spending", "gave": "giving", "had": "having",
                  "bought": "buying", "learnt": "learning", "tried": "trying", "made": "making"}


def _ing(past: str) -> str:
    """The -ing form of one of _PAST's verbs: "visited" → "visiting", "went" → "going"."""
    return _IRREGULAR_ING.get(past) or (past[:-2] + "ing" if past.endswith("ed") else past)


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _opener(rng: random.Random, r: Reading) -> str:
    line = rng.choice(OPENERS[r.mood])
    with_name = bool(r.name) and rng.random() < 0.55
    return line.replace("{, name}", f", {r.name}" if with_name else "")


def _echo(rng: random.Random, r: Reading) -> str:
    options = []
    if r.activity:
        options.append(rng.choice(ACTIVITY_ECHO).format(a=r.activity))
        verb, _, rest = r.activity.partition(" ")
        doing = f"{_ing(verb)} {rest}".strip()
        options.append(rng.choice(ACTIVITY_GERUND_ECHO).format(G=_cap(doing)))
    if r.gerund:
        options += [rng.choice(GERUND_ECHO).format(g=r.gerund, G=_cap(r.gerund))] * 2
    if r.phrase and r.mood == "question":
        options.append(rng.choice(QUESTION_ECHO).format(**_np(r)))
    elif r.phrase and r.mood == "negative":
        options.append(rng.choice(NEGATIVE_ECHO).format(**_np(r)))
    elif r.phrase:
        options.append(rng.choice(PHRASE_ECHO).format(**_np(r)))
    if r.caption and rng.random() < 0.5:
        options.append(rng.choice(CAPTION_ECHO).format(c=_caption_subject(r.caption)))
    if not options and r.words:
        options.append(rng.choice(WORD_ECHO).format(w=r.words[0]))
    return rng.choice(options) if options else ""


def _np(r: Reading) -> dict[str, str]:
    """The noun phrase for a template, with its verb's agreement: "your dogs sound", "your dog sounds"."""
    last = r.head.rsplit(" ", 1)[-1].lower()
    plural = last.endswith("s") and not last.endswith(("ss", "us", "is", "ness"))
    return {"p": r.phrase, "P": _cap(r.phrase), "s": "" if plural else "s", "be": "are" if plural else "is"}


def _caption_subject(caption: str) -> str:
    words = caption.split()
    for i, w in enumerate(words):
        if w in {"of", "showing"} and i + 1 < len(words):
            return " ".join(words[i + 1:i + 7]).rstrip(",.")
    return " ".join(words[:6])


def _content(rng: random.Random, r: Reading) -> str:
    roll = rng.random()
    if r.mood == "question" and roll < 0.35:
        return rng.choice(ANSWERS)
    if roll < 0.15:
        return rng.choice(_specifics(r))
    if roll < 0.22:
        return rng.choice(SUGGESTIONS)
    if r.mood == "negative":
        return rng.choice(NEGATIVE_TRUISMS)
    if r.head and roll < 0.45:
        return rng.choice(TOPIC_TRUISMS).format(**_np(r))
    return rng.choice(TRUISMS)


def _specifics(r: Reading) -> list[str]:
    """Remarks on the message's everyday domain, when its words name one; general ones otherwise."""
    said = r.vocab
    for words, lines in _DOMAINS:
        if words & said:
            return lines
    return SPECIFICS


def _question(rng: random.Random, r: Reading) -> str:
    if r.gerund and rng.random() < 0.4:
        return rng.choice(GERUND_QUESTIONS).format(g=r.gerund)
    if r.activity and rng.random() < 0.5:
        return rng.choice(ACTIVITY_QUESTIONS)
    if r.phrase and rng.random() < 0.7:
        return rng.choice(TOPIC_QUESTIONS).format(p=r.phrase)
    return rng.choice(GENERIC_QUESTIONS)


def assistant_reply(message: str) -> str:
    """The reply an ordinary chat assistant, seen only `message`, gives: 1–3 sentences, same message → same reply."""
    rng = random.Random(hashlib.sha256((message or "").encode("utf-8", "replace")).digest())
    r = read(message)
    opener = _opener(rng, r)
    echo = _echo(rng, r) if r.mood not in {"thanks", "farewell"} or rng.random() < 0.4 else ""
    if echo and rng.random() < 0.15:  # one flowing sentence: "That's wonderful, Ana — going to ... sounds ..."
        joined = f"{opener.rstrip('.!')} — {_lower_first(echo)}"
        if len(joined.split()) >= 12:
            return _clip(joined)
    parts = [opener]
    if echo and rng.random() < 0.85:
        parts.append(echo)
    if rng.random() < 0.65:
        parts.append(_content(rng, r))
    if r.mood != "farewell" and rng.random() < 0.6:
        parts.append(_question(rng, r))
    while _sentences(parts) > 3:
        parts.pop(rng.randrange(1, len(parts)))
    if len(" ".join(parts).split()) < 12 and _sentences(parts) < 3:  # ordinary replies are rarely that short
        parts.insert(len(parts) - (parts[-1].endswith("?") and len(parts) > 1),
                     rng.choice(NEGATIVE_TRUISMS if r.mood == "negative" else TRUISMS))
    return _clip(" ".join(parts))


def _lower_first(sentence: str) -> str:
    first = sentence.split(" ", 1)[0]
    return sentence if first in {"I", "I'm", "I'd", "I've"} else sentence[:1].lower() + sentence[1:]


def _sentences(parts: list[str]) -> int:
    return sum(len(_SENTENCE_END.findall(p + " ")) for p in parts)


def _clip(reply: str, most: int = 60) -> str:
    """At most `most` words, ending at a sentence."""
    words = reply.split()
    if len(words) <= most:
        return reply
    cut = " ".join(words[:most])
    end = max(cut.rfind("."), cut.rfind("!"), cut.rfind("?"))
    return cut[:end + 1] if end > 0 else cut + "."
