"""The held-out replier: how a chat model answers one short personal message, written apart.

A second, independent stand-in for "the provider replies as an assistant would". Nobody tunes the
engine against it, so its aggregate numbers say how the engine does on replies it has never seen.
Like real chat models, a reply echoes the message's own words (its activity, the things it names,
a shared photo's subject), often addresses the speaker by name, asks back, gives tips (sometimes as
a list) or adds a well-known fact from general knowledge. Style is picked per message from a hash
of it, so a run is repeatable. It sees only this message: it never carries another turn's facts and
names no person but the speaker, whose name it reads from the `Speaker:` prefix.

Every pattern runs under RE2 (linear time) and the input is capped, so any message is safe.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

import re2

_CAP = 6000  # characters of a message read; a reply needs no more, and hostile input stays cheap
_STAMP = re2.compile(r"^\s*\[[^\]\n]{0,80}\]\s*")
_SPEAKER = re2.compile(r"^([A-Z][A-Za-z'.-]{0,24}(?: [A-Z][A-Za-z'.-]{0,24}){0,2}):\s")
_SHARED = re2.compile(r"\[shares? ([^\]\n]{1,300})\]")
_BRACKETS = re2.compile(r"\[[^\]\n]{0,300}\]")
_CLAUSE = re2.compile(r"[.!?;:,()\"]+|\s[-\x{2013}\x{2014}]+\s|\n")
_SENTENCE = re2.compile(r"[.!?\n]+")
_TOKEN = re2.compile(r"[A-Za-z][A-Za-z'\x{2019}-]*")
_PICTURE = re2.compile(r"^(?:an? |the )?(?:photo|picture|image|pic|screenshot|snapshot|drawing)s? (?:of |showing )")

_STOP = frozenset("""
a about above after again against all also am an and any are as at be because been before being below
between both but by can could did do does doing done down during each either else even ever every few for
from further had has have having he her here hers herself him himself his how i if in into is it its itself
just let like lot lots me more most much must my myself no nor not now of off on once only or other our ours
ourselves out over own quite rather really same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up upon us very was we were what when
where which while who whom whose why will with would yet you your yours yourself yourselves i'm i've i'd i'll
it's that's there's what's we're we've they're don't didn't doesn't can't won't isn't wasn't aren't weren't
haven't hasn't couldn't wouldn't shouldn't you're you've let's he's she's
""".split())

# Words that carry no topic of their own: fillers, light verbs, feelings (handled apart), time words.
_BLAND = frozenset("""
yeah yes yep nope okay ok oh hey hi hello wow haha lol thanks thank thx please sure glad cool nice great good
awesome amazing fun wonderful fantastic lovely beautiful pretty super totally definitely absolutely actually
basically probably maybe anyway honestly seriously literally kinda sorta gonna wanna gotta thing things stuff
something anything everything nothing someone anyone everyone kind sort way ways bit part time times day days
week weeks weekend month months year years today yesterday tomorrow tonight lately recently ago last next soon
later morning evening night afternoon moment while get gets got getting make makes made making go goes going
went gone come came coming take took taking give gave know knew think thought feel felt feeling say said tell
told see saw seen look looked want wanted need needed try tried trying keep kept put use used find found mean
meant hope hoped guess able new old big small little many one two first still well back around always never
often sometimes usually again already enough almost really happy excited proud love loved hard tough sad
tired stressed busy hmm different same other whole special real true important favorite entire certain main
huge positive negative right wrong better cute late early sorry together else forever anymore instead
hear talk chat listen wait check share happen
""".split())

# Bland words that may open a noun phrase ("my first pottery class"), never end one.
_MODIFIERS = frozenset("first new old big small little favorite own special huge beautiful amazing great good nice "
                       "lovely whole real".split())
_DETERMINERS = {"a": "the", "an": "the", "the": "the", "some": "the", "my": "your", "our": "your",
                "his": "his", "her": "her", "their": "their", "this": "that", "these": "those",
                "those": "those"}
_NOT_ACTIVITY = frozenset("""
thing something anything nothing everything morning evening during bring sing king ring spring wing string
sibling ceiling darling building feeling being going doing getting making having saying seeing trying
wanting thinking looking coming taking giving telling using keeping meaning amazing interesting exciting
boring willing ongoing outstanding working planning hoping waiting starting talking living helping
wondering putting checking asking finishing
""".split())

_POSITIVE = frozenset("""
love loved loving great amazing awesome wonderful fantastic happy happier excited exciting fun proud
beautiful incredible glad enjoyed enjoy enjoying thrilled blessed grateful thankful powerful inspiring
inspired perfect best delighted lovely stoked relaxing peaceful succeeded won passed promoted celebrate
celebrated appreciate appreciated passionate
""".split())
_NEGATIVE = frozenset("""
sad tough hard rough stressed stressful tired exhausted worried anxious scared afraid lonely lost hurt sick
ill injured broke broken struggle struggling struggled difficult overwhelmed overwhelming swamped upset angry
frustrated frustrating disappointed failed fired cancelled canceled died passed-away grief grieving miss
missing missed awful terrible horrible painful pain sucks bummed
""".split())
_THANKS = frozenset("thanks thank thx appreciate appreciated glad".split())
_GREETINGS = frozenset("hi hey hello hiya howdy yo greetings morning evening".split())
_SWAP = {"i": "you", "i'm": "you're", "i've": "you've", "i'd": "you'd", "i'll": "you'll", "me": "you",
         "my": "your", "mine": "yours", "myself": "yourself", "we": "you", "we're": "you're",
         "we've": "you've", "we'd": "you'd", "we'll": "you'll", "us": "you", "our": "your", "ours": "yours",
         "ourselves": "yourselves", "am": "are"}
_SECOND_PERSON = frozenset("you you're you've you'd you'll your yours yourself".split())


@dataclass
class _Reading:
    """What a reply can use from one message, read by shape alone."""

    speaker: str = ""
    body: str = ""
    picture: str = ""  # the shared photo's subject, e.g. "a dog on a couch"
    phrases: list[str] = field(default_factory=list)  # "the pottery class", "your kids"
    words: list[str] = field(default_factory=list)  # content words, most telling first
    activities: list[str] = field(default_factory=list)  # "painting", "running"
    restated: str = ""  # a first-person sentence said back: "you went to the lake yesterday"
    mood: str = "neutral"  # positive / negative / neutral
    greeting: bool = False
    thanks: bool = False  # the message opens by thanking the listener
    asks: bool = False  # the message asks the listener something
    length: int = 0  # words in the body
    personal: bool = False  # the person speaks of themselves (I, my, we), so advice has something to address


def _clean(token: str) -> str:
    return token.replace("\u2019", "'").strip("'-")


def _is_name_like(token: str) -> bool:
    """Title-case words may be people; only the speaker is ever named. Acronyms are kept."""
    return token[:1].isupper() and not token.isupper() and token not in ("I", "I'm", "I've", "I'd", "I'll")


def _topic_word(token: str) -> bool:
    low = token.lower()
    return len(low) >= 3 and low not in _STOP and low not in _BLAND and not low.endswith("ly")


def _phrases(clauses: list[list[str]]) -> list[str]:
    """Noun-phrase heuristic: a determiner or possessive, then up to three topic words."""
    found = []
    for tokens in clauses:
        for i, token in enumerate(tokens):
            det = _DETERMINERS.get(token.lower())
            if det is None:
                continue
            run, head = [], False
            for nxt in tokens[i + 1:i + 5]:
                if _is_name_like(nxt):
                    break
                if _topic_word(nxt):
                    head = True
                elif head or nxt.lower() not in _MODIFIERS:
                    break
                run.append(nxt if nxt.isupper() else nxt.lower())
            while run and run[-1].lower() in _MODIFIERS:
                run.pop()
            if run and head and not (len(run) == 1 and run[0].lower().endswith(("ed", "ing"))):
                found.append(f"{det} {' '.join(run)}")
    return found


def _activities(clauses: list[list[str]]) -> list[str]:
    """Gerunds with what follows them ("volunteering at the shelter" gives "volunteering", "baking bread")."""
    found = []
    for tokens in clauses:
        for i, token in enumerate(tokens):
            low = token.lower()
            if not (low.endswith("ing") and len(low) >= 6) or low in _BLAND or not token[0].islower():
                continue
            run = [low]
            for nxt in tokens[i + 1:i + 3]:
                if _is_name_like(nxt) or not _topic_word(nxt):
                    break
                run.append(nxt if nxt.isupper() else nxt.lower())
            if len(run) > 1 or low not in _NOT_ACTIVITY:
                found.append(" ".join(run))
    return list(dict.fromkeys(found))[:3]


_LINKS = frozenset("on in with at by next near sitting standing lying that which and while under from of".split())


def _subject(caption: str) -> str:
    """A photo caption's subject: its words up to the first link after the head ("a red bike on a path")."""
    words = caption.split()[:12]
    for i, w in enumerate(words):
        if i >= 2 and w.lower() in _LINKS:
            words = words[:i]
            break
    return " ".join(words[:6])


def _restate(body: str) -> str:
    """A short first-person sentence turned to the second person, as a listener says it back."""
    for sentence in _SENTENCE.split(body)[:6]:
        tokens = [_clean(t) for t in sentence.split()]
        tokens = [t for t in tokens if t]
        if not 4 <= len(tokens) <= 16 or tokens[0].lower() not in ("i", "i'm", "i've", "we", "we're", "we've", "my"):
            continue
        if any(t.lower() in _SECOND_PERSON or (_is_name_like(t) and j) for j, t in enumerate(tokens)):
            continue
        if any(not _TOKEN.fullmatch(t) for t in tokens):
            continue
        out = []
        for j, t in enumerate(tokens):
            low = t.lower()
            if low == "was" and j and tokens[j - 1].lower() in ("i", "we"):
                out.append("were")
            else:
                out.append(_SWAP.get(low, t if t.isupper() else low))
        return " ".join(out)
    return ""


def read(message: str) -> _Reading:
    """Speaker, shared photo, topic phrases, activities, mood and dialogue act of `message`."""
    text = (message or "")[:_CAP].encode("utf-8", "replace").decode("utf-8")  # lone surrogates: RE2 takes UTF-8
    r = _Reading()
    text = _STAMP.sub("", text, count=1)
    m = _SPEAKER.match(text)
    if m:
        r.speaker = m.group(1)
        text = text[m.end():]
    shared = _SHARED.search(text)
    if shared:
        r.picture = _PICTURE.sub("", shared.group(1).strip()).strip(" .")
        r.picture = _subject(r.picture)
    r.body = " ".join(_BRACKETS.sub(" ", text).split())
    clauses = [[_clean(t) for t in _TOKEN.findall(c)] for c in _CLAUSE.split(r.body)]
    clauses = [[t for t in c if t] for c in clauses]
    tokens = [t for c in clauses for t in c]
    lows = [t.lower() for t in tokens]
    r.length = len(tokens)
    r.personal = any(w in _SWAP for w in lows)
    r.phrases = list(dict.fromkeys(_phrases(clauses)))
    seen: dict[str, int] = {}
    for t in tokens:
        if _topic_word(t) and not _is_name_like(t) and not t.lower().endswith("ed"):
            key = t if t.isupper() else t.lower()
            seen[key] = seen.get(key, 0) + 1
    r.words = sorted(seen, key=lambda w: (-seen[w], -len(w)))[:8]
    r.activities = _activities(clauses)
    pos = sum(w in _POSITIVE for w in lows)
    neg = sum(w in _NEGATIVE for w in lows)
    r.mood = "negative" if neg > pos else "positive" if pos else "neutral"
    r.greeting = bool(lows) and lows[0] in _GREETINGS
    r.thanks = any(w in _THANKS for w in lows[:4])
    r.asks = "?" in r.body
    r.restated = _restate(r.body)
    return r


# ---- general knowledge, as a chat model volunteers it: (keywords, facts) by broad subject ----

_FACTS: list[tuple[frozenset[str], tuple[str, ...]]] = [
    (frozenset("art paint painting painted paintings drawing draw sketch sketching canvas artist artwork gallery museum watercolor".split()), (
        "Van Gogh made more than 2,000 artworks in about a decade, yet sold only a handful while he was alive.",
        "Bob Ross filmed 403 episodes of The Joy of Painting, each one finished in under half an hour.",
        "Claude Monet painted his water lilies at Giverny for nearly 30 years.")),
    (frozenset("music song songs guitar piano violin drums sing singing concert band album playlist choir instrument".split()), (
        "Mozart wrote his first symphony when he was only eight years old.",
        "The piano was invented by Bartolomeo Cristofori in Florence around 1700.",
        "The Beatles recorded their first album, Please Please Me, in a single day in 1963.")),
    (frozenset("run running ran marathon race jog jogging 5k 10k sprint".split()), (
        "The marathon's 26.2 miles were fixed at the 1908 London Olympics so the race could start at Windsor Castle.",
        "Eliud Kipchoge ran a marathon in under two hours in Vienna in 2019.")),
    (frozenset("book books read reading novel novels library author poetry poem poems writing write story stories".split()), (
        "The Library of Congress holds more than 170 million items.",
        "Agatha Christie's novels have sold over two billion copies, more than any other novelist's.",
        "J.K. Rowling's first Harry Potter book was turned down by twelve publishers.")),
    (frozenset("travel trip traveling travelling vacation holiday flight beach ocean sea island abroad cruise road".split()), (
        "France is the most visited country in the world, with close to 90 million visitors a year.",
        "The Pacific Ocean covers about a third of the Earth's surface.",
        "The Great Wall of China stretches over 21,000 kilometres including all its branches.")),
    (frozenset("hike hiking hiked camping camp mountain mountains trail forest nature park outdoors lake river".split()), (
        "Yellowstone, founded in 1872, was the world's first national park.",
        "The Appalachian Trail runs about 2,200 miles from Georgia to Maine.",
        "Japan's idea of shinrin-yoku, forest bathing, was promoted there in the 1980s for stress relief.")),
    (frozenset("dog dogs puppy puppies cat cats kitten kittens pet pets vet walk".split()), (
        "Dogs have around 300 million scent receptors, against about 6 million in people.",
        "In ancient Egypt cats were so revered that families shaved their eyebrows to mourn one.",
        "Laika, a stray from Moscow, was the first animal to orbit the Earth, in 1957.")),
    (frozenset("cook cooking cooked bake baking baked recipe recipes food dinner lunch cake bread kitchen meal".split()), (
        "Julia Child didn't learn to cook until her late thirties, in Paris.",
        "The oldest known bread was baked about 14,000 years ago in what is now Jordan.",
        "Chocolate chip cookies were invented at the Toll House Inn in Massachusetts in 1938.")),
    (frozenset("kids kid children child son daughter family parent parents mom dad baby grandma grandpa".split()), (
        "The Harvard Study of Adult Development, running since 1938, found close relationships are the best predictor of a happy life.",
        "Child psychologist Donald Winnicott coined the idea of the good-enough parent in 1953.")),
    (frozenset("work job career boss office business company startup interview promotion project team client".split()), (
        "Apple was started by Steve Jobs and Steve Wozniak in a garage in 1976.",
        "A Stanford study found output per hour falls sharply once people work more than about 50 hours a week.")),
    (frozenset("school study studying class classes exam exams college university degree course teacher learn learning".split()), (
        "Hermann Ebbinghaus showed in 1885 that spaced practice beats cramming.",
        "Harvard, founded in 1636, is the oldest university in the United States.")),
    (frozenset("volunteer volunteering charity community donate donated fundraiser nonprofit shelter mentor mentoring".split()), (
        "About one in four adults in the US volunteers each year, according to AmeriCorps.",
        "The Red Cross was founded in Geneva in 1863 by Henri Dunant.")),
    (frozenset("garden gardening plants plant flowers flower grow growing seeds vegetables".split()), (
        "The tallest sunflower on record grew to over 9 metres, in Germany in 2014.",
        "Gregor Mendel worked out the laws of heredity by growing about 28,000 pea plants.")),
    (frozenset("photo photos photography camera picture pictures".split()), (
        "The oldest surviving photograph was taken by Nicéphore Niépce around 1826 and needed hours of exposure.",
        "Ansel Adams shot many of his famous Yosemite pictures with a heavy large-format camera.")),
    (frozenset("game games gaming chess puzzle puzzles board video".split()), (
        "Claude Shannon estimated in 1950 that chess has more possible games than there are atoms in the observable universe.",
        "Tetris was created by Alexey Pajitnov in Moscow in 1984.")),
    (frozenset("yoga gym workout exercise fitness swim swimming soccer football basketball tennis sport sports team".split()), (
        "The World Health Organization recommends at least 150 minutes of moderate activity a week.",
        "Michael Phelps won 23 Olympic gold medals, the most of any athlete.",
        "Yoga traces back more than 2,000 years to Patanjali's Yoga Sutras in India.")),
]
_GENERAL_FACTS = (
    "Aristotle is often paraphrased as saying we are what we repeatedly do.",
    "The Harvard Study of Adult Development, running since 1938, found that good relationships keep people happier and healthier.",
    "Psychologist Mihaly Csikszentmihalyi called that absorbed, time-flies feeling flow, in a 1990 book of the same name.",
    "Researchers at University College London found it takes about 66 days on average for a new habit to stick.",
)


def _fact(r: _Reading, rng: random.Random) -> str:
    lows = set(w.lower() for w in r.words) | set(r.activities) | set(r.picture.lower().split())
    lows |= {w for p in r.phrases for w in p.lower().split()}
    pools = [facts for keys, facts in _FACTS if keys & lows] or [_GENERAL_FACTS]
    pool = rng.choice(pools)
    body = r.body.lower()
    fresh = [f for f in pool if not any(w.lower() in body for w in f.split() if w[:1].isupper() and len(w) > 3)]
    return rng.choice(fresh or list(_GENERAL_FACTS))


# ---- the personalities ----

def _topic(r: _Reading, rng: random.Random) -> str:
    """One thing the message is about, in the listener's words: a phrase, an activity or a word."""
    options = []
    if r.phrases:
        options += [p for p in r.phrases if len(p.split()) >= 3][:2] or r.phrases[:2]
    if r.activities:
        options.append(r.activities[0])
    if r.picture and not options:
        options.append("that photo")
    if not options and r.words:
        options.append(r.words[0] if r.words[0].isupper() else f"the {r.words[0]}")
    return rng.choice(options) if options else ""


def _name(r: _Reading, rng: random.Random, share: float) -> str:
    return f", {r.speaker.split()[0]}" if r.speaker and rng.random() < share else ""


def _plural(topic: str) -> bool:
    last = topic.split()[-1].lower() if topic else ""
    return last.endswith("s") and not last.endswith(("ss", "us", "is", "ics"))


def _verb(topic: str, singular: str, plural: str) -> str:
    """Agreement with the echoed topic: "the class means", "the memories mean"."""
    return plural if _plural(topic) else singular


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _warm(r: _Reading, rng: random.Random) -> list[str]:
    name, topic = _name(r, rng, 0.6), _topic(r, rng)
    if r.mood == "negative":
        out = [rng.choice([f"I'm so sorry you're going through that{name}.", f"Oh no{name}, that sounds really hard.",
                           f"That sounds like a lot to carry{name}.", f"I'm sorry{name}, that must be tough."])]
        if topic:
            out.append(rng.choice([f"Dealing with {topic} can take so much out of a person, so please be gentle with yourself.",
                                   f"It makes sense that {topic} is weighing on you.",
                                   f"It's completely understandable to feel this way about {topic}."]))
        out.append(rng.choice(["How are you holding up?", "Is there anything that's helping right now?",
                               "Do you have someone you can lean on?", "I'm here if you want to talk it through."]))
        return out
    out = [rng.choice([f"That's wonderful{name}!", f"Oh, I love that{name}!", f"That's so great to hear{name}!",
                       f"That sounds really meaningful{name}.", f"How exciting{name}!", f"Thanks for sharing that{name}."])]
    if r.picture and rng.random() < 0.5:
        out.append(f"What a lovely photo of {r.picture}!")
    elif topic:
        out.append(rng.choice([f"It sounds like {topic} really {_verb(topic, 'means', 'mean')} a lot to you.",
                               f"{_cap(topic)} {_verb(topic, 'sounds', 'sound')} really special.",
                               f"It's clear how much you care about {topic}.",
                               f"I can tell {topic} {_verb(topic, 'brings', 'bring')} you a lot of joy."]))
    if rng.random() < 0.75:
        q = [f"How are you feeling about it now?", "What was the best part for you?",
             "What made you decide to do it?", "Are you planning to do it again?"]
        if topic:
            q.append(f"What do you enjoy most about {topic}?")
        out.append(rng.choice(q))
    return out


_TIPS = (
    "Try to set aside a regular time each week for {t}, so it becomes a habit rather than a chore.",
    "Keeping a short journal about {t} can help you notice what's working and what isn't.",
    "It helps to connect with other people who are into {t}, whether online or in a local group.",
    "Start small and build up gradually; steady progress beats big bursts.",
    "Celebrate the progress you've made, even when it feels minor.",
    "If it ever feels overwhelming, break it into smaller, concrete steps.",
    "Don't forget to rest; consistency matters more than intensity.",
    "Set one clear goal for {t} over the next month so you can see how far you've come.",
)
_HARD_TIPS = (
    "Reach out to someone you trust and talk it through; you don't have to handle it alone.",
    "Try to protect your sleep and meals, since everything feels heavier when you're run down.",
    "Write down what's bothering you; it often makes the problem feel more manageable.",
    "Be kind to yourself and take things one day at a time.",
    "If it keeps weighing on you, a counselor or therapist can really help.",
)
_LABELS = ("Start small", "Stay consistent", "Find your people", "Track it", "Rest", "Set a goal", "Be kind to yourself")


def _advisor(r: _Reading, rng: random.Random) -> list[str]:
    topic = _topic(r, rng) or "this"
    pool = _HARD_TIPS if r.mood == "negative" else _TIPS
    tips = [t.format(t=topic) for t in rng.sample(pool, 3)]
    opener = (rng.choice(["That sounds stressful.", "I'm sorry it's been rough.", "That's a lot to deal with."])
              if r.mood == "negative" else
              rng.choice([f"Good for you for making time for {topic}!", "That's a great thing to be working on.",
                          f"Sounds like {topic} {_verb(topic, 'is', 'are')} going well.", "That's a great step."]))
    style = rng.random()
    if style < 0.45:
        n = rng.choice([2, 3])
        if rng.random() < 0.5:
            items = "\n".join(f"{i}. {tip}" for i, tip in enumerate(tips[:n], 1))
        else:
            items = "\n".join(f"- **{label}:** {tip}" for label, tip in zip(rng.sample(_LABELS, n), tips[:n]))
        return [f"{opener} A few ideas that might help:\n{items}"]
    out = [opener] + tips[:rng.choice([1, 2])]
    if rng.random() < 0.5:
        out.append(rng.choice(["Hope that helps!", "Let me know if you'd like more ideas.", "You've got this!"]))
    return out


def _curious(r: _Reading, rng: random.Random) -> list[str]:
    topic = _topic(r, rng)
    if r.restated and rng.random() < 0.7:
        out = [rng.choice([f"So {r.restated}, that's great!", f"Oh wow, so {r.restated}?", f"It sounds like {r.restated}."])
               if r.mood != "negative" else f"So {r.restated}. I'm sorry, that can't be easy."]
    elif topic:
        out = [rng.choice([f"Sounds like {topic} {_verb(topic, 'has', 'have')} been on your mind.", f"Ooh, {topic}!", f"Tell me more about {topic}!"])]
    else:
        out = [rng.choice(["Interesting!", "Tell me more!", "I'd love to hear more."])]
    q = ["Who did you go with?", "How long have you been into it?", "What got you started?", "What's next for you?",
         "How did it turn out?", "Was it your first time?"]
    if topic:
        q += [f"What got you interested in {topic}?", f"What's your favorite part of {topic}?",
              f"How did {topic} come about?"]
    if r.activities:
        q.append(f"How long have you been {r.activities[0]}?")
    if r.picture:
        q += ["Where was that photo taken?", f"Is that {r.picture} yours?"]
    out += rng.sample(q, rng.choice([1, 2]))
    return out


def _terse(r: _Reading, rng: random.Random) -> list[str]:
    topic, name = _topic(r, rng), _name(r, rng, 0.3)
    if r.mood == "negative":
        return [rng.choice([f"Oh no, sorry to hear that{name}.", "That's rough, hang in there.", f"Sorry{name}, that sounds hard."])]
    options = ["Nice! Sounds like a great time.", f"That's awesome{name}!", "Good for you!", "Love that for you!",
               "Sounds great, enjoy it!", "Thanks for sharing!"]
    if topic:
        options += [f"Love that, {topic} sounds fun!", f"Nice, enjoy {topic}!"]
    if r.picture:
        options.append("Great photo!")
    return [rng.choice(options)]


def _chatty(r: _Reading, rng: random.Random) -> list[str]:
    topic, name = _topic(r, rng), _name(r, rng, 0.3)
    if r.mood == "negative":
        lead = rng.choice([f"Sorry to hear about {topic}{name}, that sounds stressful." if topic else
                           f"Sorry to hear that{name}.", f"That sounds rough{name}."])
    elif topic:
        lead = rng.choice([f"Oh, {topic}!", f"I love hearing about {topic}{name}.", f"{_cap(topic)}, how fun!"])
    else:
        lead = rng.choice([f"That's great{name}!", "How nice!"])
    out = [lead, rng.choice(["Fun fact: ", "Did you know? ", "", "Interestingly, "]) + _fact(r, rng)]
    if rng.random() < 0.6:
        out.append(rng.choice(["Anyway, how did it go?", "What's next for you?", "Have you heard that before?",
                               "Anything else new with you?"]))
    return out


def _greet(r: _Reading, rng: random.Random) -> list[str]:
    name = f" {r.speaker.split()[0]}" if r.speaker and rng.random() < 0.7 else ""
    out = [rng.choice([f"Hi{name}!", f"Hey{name}!", f"Hello{name}!"]) + " " +
           rng.choice(["Great to hear from you.", "Good to see you too!", "Nice to hear from you!"])]
    if r.asks:
        out.append(rng.choice(["I'm doing well, thanks for asking.", "All good on my end, thanks!",
                               "I don't have days quite like you do, but I'm always happy to chat."]))
    out.append(rng.choice(["How about you, anything new?", "What's been going on with you lately?",
                           "What's on your mind today?", "How have things been?"]))
    return out


def _thanked(r: _Reading, rng: random.Random) -> list[str]:
    name = _name(r, rng, 0.4)
    out = [rng.choice([f"You're welcome{name}!", f"Happy to help{name}!", f"Anytime{name}!", f"Of course{name}!"])]
    out.append(rng.choice(["Let me know if there's anything else I can do.", "I'm glad it was useful.",
                           "Feel free to come back anytime.", "Hope the rest of your day goes well!"]))
    return out


_PERSONALITIES = ((_warm, 30), (_advisor, 18), (_curious, 22), (_terse, 14), (_chatty, 16))


_ENDS = re2.compile(r"[.!?]+(?:\s|$)")


def _sentences(piece: str) -> int:
    """Sentences in a piece of reply; a list under an opener counts as its opener's."""
    return max(1, len(_ENDS.findall(piece.split("\n", 1)[0])))


def _limit(pieces: list[str], max_words: int = 80, max_sentences: int = 4) -> str:
    """The reply's opening pieces within 1-4 sentences and 80 words, as chat replies to small talk run."""
    out: list[str] = []
    for p in pieces:
        if out and (sum(len(x.split()) for x in out + [p]) > max_words
                    or sum(_sentences(x) for x in out + [p]) > max_sentences):
            break
        out.append(p)
    return " ".join(out)


def assistant_reply_b(message: str) -> str:
    """The held-out stand-in's reply to one fed chat turn (deterministic per message)."""
    message = message if isinstance(message, str) else ""
    digest = hashlib.sha256(message.encode("utf-8", "surrogatepass")).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    r = read(message)
    if r.greeting and r.length <= 18 and rng.random() < 0.85:
        return _limit(_greet(r, rng))
    if r.thanks and r.length <= 14 and not r.picture and rng.random() < 0.8:
        return _limit(_thanked(r, rng))
    if r.length == 0 and not r.picture:
        return rng.choice(["Hi! What's on your mind?", "I'm here, what would you like to talk about?",
                           "Sorry, I didn't quite catch that. Could you say more?"])
    personalities, weights = zip(*_PERSONALITIES)
    style = rng.choices(personalities, weights=weights)[0]
    if style is _advisor and not r.personal:
        style = _warm
    sentences = style(r, rng)
    if r.asks and not r.greeting and rng.random() < 0.2:
        sentences.insert(0, rng.choice(["Good question!", "As an AI I don't have experiences of my own, but I love hearing yours.",
                                        "I don't have a life quite like yours, but thanks for asking!"]))
    return _limit(sentences)
