"""Time expressions in a question, turned into a date window that ranks turns.

"What did I cook last year?", "What happened in May?", "What did we plan
before the trip?": the words "last year" or "before" match nothing useful in
the text, the date they mean does. `time_window` reads such an expression
against a reference time (the present of the memory: the newest remembered
turn) and returns the window `[start, end)` it means; `episode_search` then
ranks turns said inside the window above those outside (a boost, not a filter:
a question's time words are sometimes loose, "last year" said in January).

Rules (all in UTC):
- "yesterday" / "today": that day; "last week" / "this week": the 7 days
  before the reference / the last 7 days; "last month" / "this month" and
  "last year" / "this year": the calendar month or year; "N days / weeks /
  months / years ago": the unit around that point.
- "in May" (no year): the latest May that is not after the reference; "in May
  2023" and "in 2023": that month or year.
- "before <event>" / "after <event>" / "since <event>": relative to the date
  of the event, which the caller finds (`event_phrase` gives the words, the
  caller searches them and passes the date to `relative_to_event`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tiermem.dates import MONTHS, NUMBER_WORDS

_MONTHS = {m.lower(): i + 1 for i, m in enumerate(MONTHS)}
_AGO = re.compile(
    r"\b(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|couple of|few)\s+(day|week|month|year)s?\s+ago\b"
)
_MONTH = re.compile(
    r"\b(?:in|during|on|of|since)\s+(" + "|".join(_MONTHS) + r")\b(?:\s+(?:of\s+)?((?:19|20)\d\d))?"
)
_YEAR = re.compile(r"\b(?:in|during|of)\s+((?:19|20)\d\d)\b")
_EVENT = re.compile(
    r"\b(before|after|since)\s+(?:the|my|our|his|her|their|your|a|an)\s+([a-z][a-z' -]{2,40}?)(?=[?.,!]|$|\s+(?:and|or|but|when|did|was|were|is)\b)"
)


_ANY = re.compile(
    r"\b(?:yesterday|today|week|month|year|ago|before|after|since|(?:19|20)\d\d|" + "|".join(_MONTHS) + r")\b"
)


def mentions_time(query: str) -> bool:
    """A cheap first look: could the question hold a time expression at all?"""
    return _ANY.search(query.lower()) is not None


@dataclass(frozen=True)
class TimeWindow:
    start: datetime
    end: datetime  # exclusive
    phrase: str

    def contains(self, ts: datetime) -> bool:
        return self.start <= ts < self.end


def _day(ts: datetime) -> datetime:
    return ts.replace(hour=0, minute=0, second=0, microsecond=0)


def _month_start(year: int, month: int) -> datetime:
    while month < 1:
        year, month = year - 1, month + 12
    while month > 12:
        year, month = year + 1, month - 12
    return datetime(year, month, 1, tzinfo=UTC)


def _month(year: int, month: int, phrase: str) -> TimeWindow:
    return TimeWindow(_month_start(year, month), _month_start(year, month + 1), phrase)


def _year(year: int, phrase: str) -> TimeWindow:
    return TimeWindow(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC), phrase)


def _relative(q: str, today: datetime) -> TimeWindow | None:
    """yesterday, today, last/this week, month, year."""
    if re.search(r"\byesterday\b", q):
        return TimeWindow(today - timedelta(days=1), today, "yesterday")
    if re.search(r"\btoday\b", q):
        return TimeWindow(today, today + timedelta(days=1), "today")
    for which, offset in (("last", -1), ("this", 0)):
        if re.search(rf"\b{which} week\b", q):
            end = today + timedelta(days=1) if offset == 0 else today - timedelta(days=6)
            return TimeWindow(end - timedelta(days=7), end, f"{which} week")
        if re.search(rf"\b{which} month\b", q):
            return _month(today.year, today.month + offset, f"{which} month")
        if re.search(rf"\b{which} year\b", q):
            return _year(today.year + offset, f"{which} year")
    return None


def _ago(q: str, today: datetime) -> TimeWindow | None:
    """N days / weeks / months / years ago."""
    m = _AGO.search(q)
    if m is None:
        return None
    n = int(m.group(1)) if m.group(1).isdigit() else NUMBER_WORDS[m.group(1)]
    unit = m.group(2)
    if unit == "day":
        at = today - timedelta(days=n)
        return TimeWindow(at, at + timedelta(days=1), m.group(0))
    if unit == "week":
        at = today - timedelta(weeks=n)
        return TimeWindow(at - timedelta(days=3), at + timedelta(days=4), m.group(0))
    if unit == "month":
        return _month(today.year, today.month - n, m.group(0))
    return _year(today.year - n, m.group(0))


def _named(q: str, today: datetime) -> TimeWindow | None:
    """in May, in May 2023, in 2023."""
    m = _MONTH.search(q)
    if m:
        month = _MONTHS[m.group(1)]
        if m.group(2):
            return _month(int(m.group(2)), month, m.group(0))
        year = today.year if month <= today.month else today.year - 1
        return _month(year, month, m.group(0))
    m = _YEAR.search(q)
    return _year(int(m.group(1)), m.group(0)) if m else None


def time_window(query: str, ref: datetime) -> TimeWindow | None:
    """The date window a question's time expression means, read against `ref` (None: no expression)."""
    q, today = query.lower(), _day(ref)
    return _relative(q, today) or _ago(q, today) or _named(q, today)


def event_phrase(query: str) -> tuple[str, str] | None:
    """("before" | "after" | "since", the event's words) when the question is relative to an event."""
    m = _EVENT.search(query.lower())
    if m is None:
        return None
    return m.group(1), m.group(2).strip()


def relative_to_event(relation: str, at: datetime, phrase: str) -> TimeWindow:
    """The window before (or after / since) an event that happened at `at`."""
    far = timedelta(days=365 * 200)
    if relation == "before":
        return TimeWindow(at - far, _day(at), phrase)
    return TimeWindow(_day(at) + timedelta(days=1), at + far, phrase)
