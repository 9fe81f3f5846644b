"""A deterministic (seeded) generator of long multi-session conversations with questions.

Each conversation is a user talking to an assistant over 20 dated sessions of 15–30 user turns.
Facts are stated once among chit-chat; some change later (the newer one is the answer); some
are mentioned in passing at the end of long turns; people are called by different names
("my sister Ana" / "Ana"); dated events happen; and distractor turns share words with the
questions without answering them. Every question names its evidence turns, and each evidence
turn carries a needle: a phrase only that turn contains, by which it is recognised in a
`<memories>` block.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import date, timedelta

CATEGORIES = ("single-hop", "multi-hop", "temporal", "knowledge-update")

SISTERS = ["Ana", "Beatriz", "Clara", "Dorota", "Elena", "Fatima", "Greta", "Hana", "Ines", "Julia", "Kirsi", "Lena"]
FRIENDS = ["Marco", "Priya", "Tomasz", "Aisha", "Kenji", "Sofia", "Rafael", "Nadia", "Oskar", "Yara"]
CITIES = ["Porto", "Berlin", "Lyon", "Oslo", "Kyoto", "Denver", "Nairobi", "Lima", "Hanoi", "Tallinn", "Quebec",
          "Seville", "Krakow", "Auckland", "Dublin", "Valparaiso", "Tbilisi", "Ljubljana"]
JOBS = ["pediatric nurse", "landscape architect", "data analyst", "pastry chef", "cargo pilot", "school librarian",
        "civil engineer", "court translator", "orthodontist", "furniture carpenter"]
PETS = ["Biscuit", "Pepper", "Mochi", "Ziggy", "Noodle", "Waffles", "Juniper", "Olive", "Tofu", "Pickles"]
BANDS = ["Radiohead", "Portishead", "Khruangbin", "Fleetwood Mac", "Daft Punk", "Bon Iver", "Massive Attack", "Air"]
ALLERGIES = ["shellfish", "peanuts", "penicillin", "kiwi fruit", "sesame seeds", "bee stings"]
SEATS = ["window seat", "aisle seat", "exit row seat"]
RULES = [("never book me a flight that leaves before 9am", "flight that leaves before 9am"),
         ("never schedule calls for me on Friday afternoons", "calls for me on Friday afternoons"),
         ("always write my reports in British spelling", "reports in British spelling"),
         ("never put my phone number in shared documents", "phone number in shared documents")]
CARS = ["green Volvo estate", "red Mini Cooper", "blue Subaru Outback", "white Tesla", "yellow Fiat Panda"]
SPAS = ["a thermal spa in Budapest", "a tiny spa in Sintra", "a lakeside spa near Bled", "a hot spring in Hakone"]
SHOES = ["running shoes", "garden gloves", "leather belt", "phone charger"]

FILLER = [
    "The weather has been strange this week, sunny in the morning and pouring by lunch.",
    "I finally finished that novel about the lighthouse keeper, the ending surprised me.",
    "Can you suggest a quick dinner with whatever is left in the fridge?",
    "Work was quiet today so I reorganised my desk and answered old emails.",
    "I tried a new coffee shop near the station and the flat white was excellent.",
    "My phone keeps running out of battery by the afternoon, any tips?",
    "We watched a documentary about deep sea creatures last night.",
    "I need to remember to water the plants before the weekend.",
    "The train was late again, I spent forty minutes on the platform.",
    "Give me three ideas for a relaxing Sunday afternoon.",
    "I have been trying to drink more water and less coffee.",
    "The neighbours are renovating and the drilling starts at seven.",
    "Help me write a polite reply declining a meeting invitation.",
    "I started learning a few words of Japanese with an app.",
    "My laptop fan is loud whenever I open more than ten browser tabs.",
    "I baked bread for the first time and it came out a bit dense.",
    "What is a good stretch for a stiff lower back?",
    "I cleaned out the garage and found my old skateboard.",
    "The local library has a new reading room and it is lovely.",
    "Could you summarise the main causes of inflation in two sentences?",
    "I am thinking about repainting the hallway a warm grey.",
    "There was a small street festival in the neighbourhood today.",
    "I keep forgetting my umbrella at the office.",
    "I signed up for a pottery class on Tuesday evenings.",
    "What's a good way to keep basil alive indoors?",
]
DISTRACTORS = {
    "pet": "My neighbour's dog is called Rufus and he barks whenever the postman comes.",
    "city": "My colleague lives in Madrid and keeps telling me how much she loves the city.",
    "job": "My cousin works as a firefighter and just got a new job offer in another city.",
    "marathon": "I watched a documentary about marathon runners and their strange diets.",
    "sister": "My friend's sister lives by the sea and works in a bakery.",
    "allergy": "A colleague is allergic to cats, so we never meet at my place.",
    "wedding": "I looked at photos from an old wedding we attended years ago.",
    "seat": "The seat on the bus today was broken and wobbly.",
    "car": "My brother drives an old van that breaks down every winter.",
    "band": "The band at the bar last night was loud but fun.",
}


@dataclass
class Turn:
    id: str
    session: int
    text: str


@dataclass
class Session:
    index: int
    date: str
    turns: list[Turn] = field(default_factory=list)


@dataclass
class Question:
    id: str
    category: str
    text: str
    evidence: list[str]
    needles: list[str]


@dataclass
class Conversation:
    id: str
    sessions: list[Session]
    questions: list[Question]

    def turns(self) -> list[Turn]:
        return [t for s in self.sessions for t in s.turns]


def _long(rng: random.Random, fact: str) -> str:
    """A long turn with the fact at its very end (mentioned in passing)."""
    lead = " ".join(rng.sample(FILLER, 5))
    return f"{lead} Anyway, long day. {fact}"


def generate_one(rng: random.Random, cid: str, sessions: int = 20, min_turns: int = 15,
                 max_turns: int = 30) -> Conversation:
    start = date(2023, 1, 2) + timedelta(days=rng.randrange(0, 300))
    sess = [Session(i, (start + timedelta(days=7 * i + rng.randrange(0, 3))).isoformat()) for i in range(sessions)]
    sister, friend = rng.choice(SISTERS), rng.choice(FRIENDS)
    city_old, city_new, sister_city, marathon_city = rng.sample(CITIES, 4)
    job_old, job_new = rng.sample(JOBS, 2)
    pet, puppy = rng.sample(PETS, 2)
    band, allergy, seat, car = rng.choice(BANDS), rng.choice(ALLERGIES), rng.choice(SEATS), rng.choice(CARS)
    rule, rule_needle = rng.choice(RULES)
    spa, chewed = rng.choice(SPAS), rng.choice(SHOES)

    facts: list[tuple[str, int, str]] = []  # (slot, session, text)

    def at(lo: int, hi: int) -> int:
        return rng.randint(lo, hi)

    s_marathon = at(4, 9)
    facts += [
        ("pet", at(0, 6), f"Our cat {pet} knocked a glass off the table again this morning."),
        ("band", at(1, 12), _long(rng, f"Oh and by the way, my favourite band is {band}.")),
        ("allergy", at(0, 15), f"Quick note for recipes: I'm allergic to {allergy}."),
        ("seat", at(2, 14), f"When I fly I always prefer a {seat}."),
        ("rule", at(1, 10), f"Please {rule}."),
        ("car", at(3, 16), f"I finally bought a car, a {car}, second hand but in great shape."),
        ("city_old", at(0, 3), f"I live in {city_old} these days, close to the old harbour."),
        ("city_new", at(12, 18), f"Big news: I moved to {city_new} last month and I'm still unpacking boxes."),
        ("job_old", at(1, 5), f"I work as a {job_old}, which keeps me busy most weekdays."),
        ("job_new", at(13, 19), f"I quit my old position and started as a {job_new} this week."),
        ("sister_intro", at(2, 7), f"My sister {sister} is coming to visit me next weekend."),
        ("sister_city", at(9, 15), f"{sister} just found a flat in {sister_city} and she loves the neighbourhood."),
        ("puppy", at(3, 8), f"We adopted a puppy and named him {puppy}."),
        ("marathon", s_marathon, f"I ran the {marathon_city} marathon this morning and my legs are dead."),
        ("after", s_marathon + 1, f"After the marathon I spent three days resting at {spa}."),
        ("wedding", at(8, 16), f"Tomorrow I'm flying out for {friend}'s wedding, I still need a gift."),
    ]
    chew_session = max(s for slot, s, _ in facts if slot == "puppy") + rng.randint(2, 6)
    facts.append(("chew", min(chew_session, sessions - 1), f"{puppy} chewed through my {chewed} again, unbelievable."))

    by_session: dict[int, list[tuple[str, str]]] = {}
    for slot, s, text in facts:
        by_session.setdefault(s, []).append((slot, text))
    for slot, text in DISTRACTORS.items():
        by_session.setdefault(rng.randrange(sessions), []).append((f"distractor:{slot}", text))

    slot_turn: dict[str, str] = {}
    for s in sess:
        n = rng.randint(min_turns, max_turns)
        planned = by_session.get(s.index, [])
        fillers = [("filler", rng.choice(FILLER)) for _ in range(max(0, n - len(planned)))]
        items = fillers + planned
        rng.shuffle(items)
        for k, (slot, text) in enumerate(items):
            tid = f"{cid}-s{s.index:02d}-t{k:02d}"
            s.turns.append(Turn(tid, s.index, text))
            if not slot.startswith(("filler", "distractor")):
                slot_turn[slot] = tid

    def q(qid: str, cat: str, text: str, evidence: list[tuple[str, str]]) -> Question:
        return Question(f"{cid}-{qid}", cat, text, [slot_turn[s] for s, _ in evidence], [n for _, n in evidence])

    questions = [
        q("pet", "single-hop", "What is my cat's name?", [("pet", pet)]),
        q("band", "single-hop", "Which band is my favourite?", [("band", band)]),
        q("allergy", "single-hop", "What am I allergic to?", [("allergy", allergy)]),
        q("seat", "single-hop", "What kind of seat do I like on planes?", [("seat", seat)]),
        q("rule", "single-hop", "What standing rule did I give you for organising things for me?",
          [("rule", rule_needle)]),
        q("car", "single-hop", "What car did I buy?", [("car", car)]),
        q("sister", "multi-hop", "In which city did my sister find a flat?",
          [("sister_intro", f"sister {sister}"), ("sister_city", sister_city)]),
        q("chew", "multi-hop", "What did the puppy we adopted chew through?",
          [("puppy", f"named him {puppy}"), ("chew", chewed)]),
        q("marathon", "temporal", "When did I run the marathon?", [("marathon", f"{marathon_city} marathon")]),
        q("after", "temporal", "What did I do after the marathon?",
          [("marathon", f"{marathon_city} marathon"), ("after", spa)]),
        q("wedding", "temporal", f"When did I fly out for {friend}'s wedding?", [("wedding", f"{friend}'s wedding")]),
        q("city", "knowledge-update", "Which city do I live in now?", [("city_new", city_new)]),
        q("job", "knowledge-update", "What is my current job?", [("job_new", job_new)]),
    ]
    return Conversation(cid, sess, questions)


def generate(seed: int = 0, conversations: int = 10, sessions: int = 20, min_turns: int = 15,
             max_turns: int = 30) -> list[Conversation]:
    rng = random.Random(seed)
    return [generate_one(rng, f"c{i:02d}", sessions, min_turns, max_turns) for i in range(conversations)]
