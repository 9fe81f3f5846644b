"""Relative dates in a turn, resolved against when it was said: "yesterday" means a day.

"I went to the support group yesterday", said on 8 May 2023, is about 7 May 2023; read back
weeks later (or by a model that only sees today's date) it is about nothing in particular. At
retain time the turn's own date is known, so each relative expression is resolved then and kept
with the memory (`metadata["dates"]`): the block shows it beside the words ("yesterday: 7 May
2023") and the lexical index holds it, so a question that names the date finds the turn by it as
well as by its words.

Patterns are RE2 (linear time whatever the text). No date library fits this: dateparser and
parsedatetime parse a whole string as one date with backtracking regexes, while this finds a
few fixed phrases inside free text and does calendar arithmetic with `datetime`.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import re2

MAX_DATES = 4  # per memory: a turn that lists more is a schedule, not a story
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "couple of": 2}
_COUNT = r"(a couple of|couple of|an|a|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|\d{1,2})"
_PHRASE = re2.compile(
    r"(?i)\b(?:"
    r"(the day before yesterday|yesterday|last night|tomorrow)"  # 1: a day next to the day said
    r"|(last|this past|next|this coming) (monday|tuesday|wednesday|thursday|friday|saturday|sunday"
    r"|weekend|week|month|year)"  # 2, 3: the one before or after today
    r"|" + _COUNT + r" (day|week|weekend|month|year)s? ago"  # 4, 5: counted back
    r"|in " + _COUNT + r" (day|week|month|year)s"  # 6, 7: counted forward
    r")\b")


def _day(d: date) -> str:
    return f"{d.day} {d.strftime('%B')} {d.year}"


def _month(d: date, months: int) -> date:
    """The first day of the month `months` after (before, when negative) `d`'s."""
    n = d.year * 12 + d.month - 1 + months
    return date(n // 12, n % 12 + 1, 1)


def _weekday(today: date, name: str, forward: bool) -> date:
    """The named day before today ("last Saturday"), or after it ("next Saturday")."""
    target = _WEEKDAYS.index(name)
    if forward:
        return today + timedelta(days=(target - today.weekday() - 1) % 7 + 1)
    return today - timedelta(days=(today.weekday() - target - 1) % 7 + 1)


def _relative(today: date, direction: str, unit: str) -> str:
    forward = direction in ("next", "this coming")
    step = 1 if forward else -1
    if unit in _WEEKDAYS:
        return _day(_weekday(today, unit, forward))
    if unit == "weekend":
        saturday = _weekday(today, "saturday", forward)
        if not forward and today.weekday() == 6:  # on a Sunday, "last weekend" is not yesterday's
            saturday -= timedelta(days=7)
        return f"the weekend of {_day(saturday)}"
    if unit == "week":
        monday = today - timedelta(days=today.weekday()) + timedelta(weeks=step)
        return f"the week of {_day(monday)}"
    if unit == "month":
        return _month(today, step).strftime("%B %Y")
    return str(today.year + step)


def _counted(today: date, count: int, unit: str, back: bool) -> str:
    sign = -1 if back else 1
    if unit == "day":
        return _day(today + timedelta(days=sign * count))
    if unit in ("week", "weekend"):
        return f"the week of {_day(today + timedelta(weeks=sign * count) - timedelta(days=today.weekday()))}"
    if unit == "month":
        return _month(today, sign * count).strftime("%B %Y")
    return str(today.year + sign * count)


def _count(word: str) -> int:
    word = " ".join(word.lower().split())
    return int(word) if word.isdigit() else _NUMBERS[word]


def resolve(text: str, said_at: float | None) -> list[tuple[str, str]]:
    """Each relative date in `text` as written, with the day, week, month or year it means when
    said at `said_at` (epoch seconds, UTC); at most MAX_DATES, each phrase once."""
    if said_at is None or not text:
        return []
    try:
        today = datetime.fromtimestamp(said_at, timezone.utc).date()
    except (OverflowError, OSError, ValueError):
        return []
    out: dict[str, str] = {}
    for m in _PHRASE.finditer(text):
        phrase = " ".join(m.group(0).split())
        key = phrase.lower()
        if key in out:
            continue
        try:
            if m.group(1):
                offset = {"the day before yesterday": -2, "yesterday": -1, "last night": -1, "tomorrow": 1}
                out[key] = _day(today + timedelta(days=offset.get(key, 0)))
            elif m.group(2):
                out[key] = _relative(today, " ".join(m.group(2).lower().split()), m.group(3).lower())
            elif m.group(4):
                out[key] = _counted(today, _count(m.group(4)), m.group(5).lower(), back=True)
            else:
                out[key] = _counted(today, _count(m.group(6)), m.group(7).lower(), back=False)
        except (OverflowError, ValueError):  # past the calendar's ends: not a date worth keeping
            continue
        if len(out) >= MAX_DATES:
            break
    return list(out.items())


def dated(text: str, said_at: float | None) -> dict[str, list[list[str]]]:
    """Metadata for an episode: `{"dates": [[phrase, resolved], …]}`, or nothing when it has none."""
    found = resolve(text, said_at)
    return {"dates": [list(pair) for pair in found]} if found else {}


def dates_of(metadata: object) -> list[tuple[str, str]]:
    """The resolved dates a memory carries (a well-formed `metadata["dates"]`), else none."""
    got = metadata.get("dates") if isinstance(metadata, dict) else None
    if not isinstance(got, list):
        return []
    return [(p, r) for p, r in (x for x in got if isinstance(x, list) and len(x) == 2)
            if isinstance(p, str) and isinstance(r, str)][:MAX_DATES]


def note(metadata: object) -> str:
    """What a block shows after the memory: ` (yesterday: 7 May 2023; last week: …)`, or ``."""
    found = dates_of(metadata)
    return " (" + "; ".join(f"{p}: {r}" for p, r in found) + ")" if found else ""


def indexed(metadata: object) -> str:
    """The days, months and years a memory's relative dates meant, as words its index adds: a question
    naming "7 May 2023" finds the turn that said "yesterday" on the 8th."""
    return " ".join(r.removeprefix("the week of ").removeprefix("the weekend of ") for _, r in dates_of(metadata))
