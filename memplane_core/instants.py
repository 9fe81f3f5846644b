"""Instants every part can convert and do arithmetic on: the one range rule for dates.

A date such as `0001-01-01T00:00:00+14:00` parses, but its UTC conversion leaves `datetime`'s
range; `9999-12-31T23:59:59-14:00` gives an epoch that `datetime.fromtimestamp` cannot turn
back into a date. Stored, either makes every later read of the row fail. So dates are checked
once, where they enter (the contract's typed models), against a range with a day of margin on
both sides; dates read out of free text (a stamp in a message) outside it are ignored.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, WithJsonSchema

MIN_INSTANT = datetime(1, 1, 2, tzinfo=timezone.utc)
MAX_INSTANT = datetime(9999, 12, 30, 23, 59, 59, tzinfo=timezone.utc)
MIN_EPOCH = MIN_INSTANT.timestamp()
MAX_EPOCH = MAX_INSTANT.timestamp()
RANGE_TEXT = "between 0001-01-02 and 9999-12-30 (UTC)"


class OutOfRange(ValueError):
    """A time that reads as a date but lies outside the range."""


def in_range(when: datetime) -> datetime:
    """`when` in UTC (a naive time is taken as UTC); ValueError when it is out of range."""
    try:
        utc = when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)
    except (OverflowError, ValueError):
        raise OutOfRange(f"time out of range: must be {RANGE_TEXT}") from None
    if not MIN_INSTANT <= utc <= MAX_INSTANT:
        raise OutOfRange(f"time out of range: must be {RANGE_TEXT}")
    return utc


def parse_instant(text: str) -> datetime:
    """An RFC 3339 / ISO 8601 time in range, in UTC; OutOfRange when it is out of range, ValueError
    when it does not read as a time."""
    return in_range(datetime.fromisoformat(text.strip().replace("Z", "+00:00")))


def epoch_or_none(when: datetime | None) -> float | None:
    """Seconds since the epoch, or None for a time out of range (dates read out of free text)."""
    if when is None:
        return None
    try:
        return in_range(when).timestamp()
    except ValueError:
        return None


def epoch_ok(value: object) -> bool:
    """Whether a stored epoch is a finite number inside the range (a row written before the rule)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and MIN_EPOCH <= value <= MAX_EPOCH)


def written_time(value: object) -> object:
    """A time on the wire is written as one (RFC 3339): a number — or a query string of digits — is
    refused, not read as seconds since 1970 (`true` would have been 1970-01-01T00:00:01, `0` the epoch)."""
    if isinstance(value, datetime) or (isinstance(value, str) and not _a_number(value)):
        return value
    raise ValueError("must be an RFC 3339 time string")


def _a_number(text: str) -> bool:
    """Digits alone ("1700000000", "-123575"): pydantic would read them as seconds since 1970."""
    try:
        float(text)
    except ValueError:
        return False
    return True


# A pydantic field type: an RFC 3339 time, refused with the field's name when out of range.
Instant = Annotated[datetime, BeforeValidator(written_time), AfterValidator(in_range),
                    WithJsonSchema({"type": "string", "format": "date-time"})]
