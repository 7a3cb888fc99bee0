"""Human-readable dates and anchoring of relative time expressions.

A memory that forgets *when* things happened cannot answer "when": the words
"yesterday" or "last week" are meaningless once the conversation is old. The
compressor therefore writes absolute dates into episode text and, for each
relative expression in a turn, the date it points to as seen from the day the
turn was said ("yesterday" said on 8 May 2023 is 7 May 2023). Pure functions,
no locale, UTC.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import lru_cache

from tiermem.text import fold, folded_twin

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
NUMBER_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "couple of": 2,
    "few": 3,
    "a few": 3,
    "several": 3,
}


def human_date(ts: datetime) -> str:
    """'8 May 2023' (no leading zero, English month names, independent of locale)."""
    return f"{ts.day} {MONTHS[ts.month - 1]} {ts.year}"


def human_day(ts: datetime) -> str:
    """'Monday, 8 May 2023'."""
    return f"{WEEKDAYS[ts.weekday()]}, {human_date(ts)}"


def month_year(ts: datetime) -> str:
    return f"{MONTHS[ts.month - 1]} {ts.year}"


def human_range(start: datetime, end: datetime) -> str:
    if start.date() == end.date():
        return human_date(start)
    return f"{human_date(start)} to {human_date(end)}"


def _add_months(ts: datetime, months: int) -> datetime:
    index = ts.year * 12 + ts.month - 1 + months
    return ts.replace(year=index // 12, month=index % 12 + 1, day=1)


_COUNT = (
    r"(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a few|few|a couple of|couple of|several)"
)
_UNIT = r"(day|week|weekend|month|year)s?"
_WEEKDAY = r"(monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
# After last/next, a weekday as people write it in chat: whole, or shortened and capitalised
# ("last Fri", "last Tues."); "when I last sat down" is no Saturday.
_WEEKDAY_OR_SHORT = (
    r"(monday|tuesday|wednesday|thursday|friday|saturday|sunday|(?-i:Mon|Tues?|Wed|Thur?s?|Fri|Sat|Sun))"
)
_SHORT_DAYS = {day[:3].lower(): day for day in WEEKDAYS} | {
    "tues": "Tuesday",
    "thur": "Thursday",
    "thurs": "Thursday",
}
_MONTH = "(?-i:(" + "|".join(MONTHS) + "))"  # capitalised only: "may" is also a verb

# Order matters: longer phrases first so "last weekend" is not read as "last week".
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(rx, re.IGNORECASE))
    for name, rx in (
        ("ago", rf"\b{_COUNT}\s+{_UNIT}\s+ago\b"),
        ("duration", rf"\bfor\s+(?:the\s+(?:past|last)\s+)?{_COUNT}\s+{_UNIT}(?:\s+now)?\b"),
        # "Seven years now": a duration that runs up to the day without "for".
        ("duration", rf"\b{_COUNT}\s+{_UNIT}\s+now\b"),
        ("in_month", rf"\b(?:in|since|during)\s+(?:early\s+|late\s+|mid-?)?{_MONTH}\b(?!,?\s*\d)"),
        ("last_weekday", rf"\b(?:last|this past|past)\s+{_WEEKDAY_OR_SHORT}\b"),
        ("next_weekday", rf"\b(?:next|this coming|coming)\s+{_WEEKDAY_OR_SHORT}\b"),
        ("this_weekday", rf"\b(?:this|on)\s+{_WEEKDAY}\b"),
        ("last_unit", r"\b(?:last|this past|past)\s+(weekend|week|month|year|summer|winter|spring|fall)\b"),
        (
            "next_unit",
            r"\b(?:next|this coming|coming)\s+(weekend|week|month|year|summer|winter|spring|fall)\b",
        ),
        ("this_unit", r"\bthis\s+(weekend|week|month|year)\b"),
        ("yesterday", r"\b(?:yesterday|last night)\b"),
        ("tomorrow", r"\btomorrow\b"),
        ("today", r"\b(?:today|tonight|this morning|this afternoon|this evening)\b"),
        ("recently", r"\bthe other day\b"),
    )
)


def _count(word: str) -> int:
    word = word.lower().strip()
    if word.isdigit():
        return int(word)
    return NUMBER_WORDS.get(word.replace("a couple of", "couple of"), 1)


def _resolve_day(kind: str, m: re.Match[str], at: datetime) -> str:
    """yesterday, tomorrow, today, "the other day"."""
    said = human_date(at)
    if kind == "yesterday":
        return human_date(at - timedelta(days=1))
    if kind == "tomorrow":
        return human_date(at + timedelta(days=1))
    if kind == "today":
        return said
    return f"a few days before {said}"


def _resolve_weekday(kind: str, m: re.Match[str], at: datetime) -> str:
    """last/next/this <weekday>: the named day before or after the day it was said."""
    said = human_date(at)
    day = _SHORT_DAYS.get(m.group(1).lower(), m.group(1).capitalize())
    target = WEEKDAYS.index(day)
    if kind == "next_weekday":
        delta = (target - at.weekday()) % 7 or 7
        return f"the {day} after {said} ({human_date(at + timedelta(days=delta))})"
    back = (at.weekday() - target) % 7 or 7
    if kind == "this_weekday" and target > at.weekday():
        ahead = target - at.weekday()
        return f"the {day} after {said} ({human_date(at + timedelta(days=ahead))})"
    return f"the {day} before {said} ({human_date(at - timedelta(days=back))})"


def _resolve_unit(kind: str, m: re.Match[str], at: datetime) -> str:
    """last/next/this week, weekend, month, year or season."""
    said = human_date(at)
    unit = m.group(1).lower()
    if unit in ("summer", "winter", "spring", "fall"):
        year = at.year - 1 if kind == "last_unit" else at.year + (1 if kind == "next_unit" else 0)
        return f"{unit} {year}"
    if kind == "this_unit":
        weekend = f"the weekend {'of' if at.weekday() >= 5 else 'after'} {said}"
        return {
            "week": f"the week of {said}",
            "weekend": weekend,
            "month": month_year(at),
            "year": str(at.year),
        }[unit]
    before = kind == "last_unit"
    if unit in ("week", "weekend"):
        return f"the {unit} {'before' if before else 'after'} {said}"
    if unit == "month":
        return month_year(_add_months(at, -1 if before else 1))
    return str(at.year - 1 if before else at.year + 1)


# A duration counts back from the day it was said only when it runs up to that day
# ("I've been running for 3 years", "married for 5 years now"); "I'm off to Spain
# for a week" is a plan, not a start date.
_RUNS_UNTIL_NOW = re.compile(
    r"\b(?:have|has|had|been|'ve|ve|known|since|now|lived|worked|married|together|dating)\b", re.I
)
_CLAUSE_END = re.compile(r"[.!?;\n]")


def _resolve_duration(kind: str, m: re.Match[str], at: datetime) -> str | None:
    """for <n> days/weeks/months/years (up to now): about when it started."""
    before = m.string[: m.start()]
    clause = _CLAUSE_END.split(before)[-1]
    if not (_RUNS_UNTIL_NOW.search(clause) or m.group(0).lower().endswith(" now")):
        return None
    n = _count(m.group(1))
    unit = m.group(2).lower()
    if unit == "day":
        return f"since {human_date(at - timedelta(days=n))}"
    if unit in ("week", "weekend"):
        return f"since around {human_date(at - timedelta(weeks=n))}"
    if unit == "month":
        return f"since about {month_year(_add_months(at, -n))}"
    return f"since about {at.year - n}"


def _resolve_month(kind: str, m: re.Match[str], at: datetime) -> str:
    """A month named without a year: that month of the year it was said in."""
    return f"{m.group(1)} {at.year}"


def _resolve_ago(kind: str, m: re.Match[str], at: datetime) -> str:
    """<n> days/weeks/months/years ago."""
    n = _count(m.group(1))
    unit = m.group(2).lower()
    if unit == "day":
        return human_date(at - timedelta(days=n))
    if unit in ("week", "weekend"):
        return f"{m.group(0)} before {human_date(at)} (around {human_date(at - timedelta(weeks=n))})"
    if unit == "month":
        return month_year(_add_months(at, -n))
    return str(at.year - n)


_RESOLVERS: dict[str, Callable[[str, re.Match[str], datetime], str | None]] = {
    "yesterday": _resolve_day,
    "tomorrow": _resolve_day,
    "today": _resolve_day,
    "recently": _resolve_day,
    "last_weekday": _resolve_weekday,
    "next_weekday": _resolve_weekday,
    "this_weekday": _resolve_weekday,
    "last_unit": _resolve_unit,
    "next_unit": _resolve_unit,
    "this_unit": _resolve_unit,
    "ago": _resolve_ago,
    "duration": _resolve_duration,
    "in_month": _resolve_month,
}


def _resolve(kind: str, m: re.Match[str], at: datetime) -> str | None:
    """What a relative time phrase of `kind`, said at `at`, points to."""
    resolver = _RESOLVERS.get(kind)
    return resolver(kind, m, at) if resolver else None


_CHEAP_CHECK = re.compile(
    r"\b(ago|last|next|this|past|coming|yesterday|tomorrow|today|tonight|monday|tuesday|wednesday|thursday|friday|saturday|sunday|the other day|for|now|"
    + "|".join(m.lower() for m in MONTHS)
    + r")\b",
    re.IGNORECASE,
)
# The same check, searched in fold(text) without IGNORECASE (same yes/no, cheaper).
_CHEAP_CHECK_FOLDED = folded_twin(_CHEAP_CHECK)


# Each pattern's words it cannot match without (every group needs one of its
# words), tested on `fold(text)` (see tiermem.text): a skipped scan
# could not have matched, so the result never changes.
_LAST, _NEXT = ("last", "past"), ("next", "coming")
_DAY_WORDS = ("day", "mon", "tue", "wed", "thu", "fri", "sat", "sun")
_NEEDS_WORDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "ago": (("ago",),),
    "last_weekday": (_LAST, _DAY_WORDS),
    "next_weekday": (_NEXT, _DAY_WORDS),
    "this_weekday": (("this", "on"), ("day",)),
    "last_unit": (_LAST,),
    "next_unit": (_NEXT,),
    "this_unit": (("this",),),
    "yesterday": (("yesterday", "last night"),),
    "tomorrow": (("tomorrow",),),
    "today": (("today", "tonight", "this"),),
    "recently": (("the other day",),),
    "duration": (("for", "now"),),
    "in_month": (("in", "since", "during"), tuple(m.lower() for m in MONTHS)),
}
_NEEDS = {kind: tuple(frozenset(g) for g in groups) for kind, groups in _NEEDS_WORDS.items()}
_NEEDED_WORDS = frozenset(w for groups in _NEEDS_WORDS.values() for g in groups for w in g)


@lru_cache(
    maxsize=4096
)  # few distinct sets of needed words occur: checking every kind's groups was most of the cost
def _kinds_for(present: frozenset[str]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    """The patterns that can match a text whose folded form holds exactly the needed words `present`."""
    return tuple(
        (kind, rx) for kind, rx in _PATTERNS if all(not group.isdisjoint(present) for group in _NEEDS[kind])
    )


def _matches(text: str, at: datetime, limit: int, folded: str | None) -> list[tuple[str, re.Match[str], str]]:
    """(kind, match, what it points to) for the relative time phrases of `text`, at most `limit`."""
    found: list[tuple[str, re.Match[str], str]] = []
    low = fold(text) if folded is None else folded
    present = frozenset([word for word in _NEEDED_WORDS if word in low])
    if not present:
        return found
    kinds = _kinds_for(present)
    if not kinds or not _CHEAP_CHECK_FOLDED.search(low):
        return found  # most turns mention no time at all
    taken: list[tuple[int, int]] = []
    for kind, rx in kinds:
        for m in rx.finditer(text):
            if any(s < m.end() and m.start() < e for s, e in taken):
                continue
            resolved = _resolve(kind, m, at)
            if resolved:
                taken.append((m.start(), m.end()))
                found.append((kind, m, resolved))
            if len(found) >= limit:
                return found
    return found


def anchor_relative_dates(
    text: str, at: datetime, limit: int = 3, *, folded: str | None = None
) -> list[tuple[str, str]]:
    """[(phrase as written, what it points to)] for relative time phrases in `text` said at `at`.

    `folded` is `fold(text)` when the caller already has it.
    """
    return [(m.group(0), resolved) for _kind, m, resolved in _matches(text, at, limit, folded)]


def _inline(kind: str, m: re.Match[str], at: datetime) -> str:
    """The absolute phrase that can stand where the relative one was, preposition included."""
    said = human_date(at)
    if kind in ("yesterday", "tomorrow", "today"):
        return f"on {_resolve(kind, m, at)}"
    if kind == "recently":
        return f"a few days before {said}"
    if kind == "duration":
        return _resolve(kind, m, at) or m.group(0)
    if kind == "in_month":
        return m.group(0)[: m.end(1) - m.start(0)] + f" {at.year}"
    if kind in ("last_weekday", "next_weekday", "this_weekday"):
        resolved = _resolve(kind, m, at) or ""
        day = resolved[resolved.rfind("(") + 1 : -1] if resolved.endswith(")") else resolved
        return f"on {_SHORT_DAYS.get(m.group(1).lower(), m.group(1).capitalize())}, {day}"
    if kind == "ago":
        unit = m.group(2).lower()
        resolved = _resolve(kind, m, at) or ""
        if unit == "day":
            return f"on {resolved}"
        if unit in ("week", "weekend"):
            return f"around {resolved[resolved.rfind('around ') + 7 : -1]}"
        return f"in {resolved}"
    unit = m.group(1).lower()
    resolved = _resolve(kind, m, at) or ""
    if unit == "weekend":
        return f"on {resolved}"
    return f"in {resolved}"


# A preposition before the phrase already says how it relates ("since last year"):
# the absolute phrase then drops its own ("since 2022", not "since in 2022").
_LEADING_PREPOSITION = re.compile(r"\b(since|from|until|till|by|before|after|in|on|during|around)\s+$", re.I)


def resolve_relative_dates(text: str, at: datetime, *, limit: int = 5) -> str:
    """`text` with each relative time phrase replaced by the absolute one it meant when said at `at`.

    "I moved here last year" said on 8 May 2023 -> "I moved here in 2022".
    """
    return resolved_if_dated(text, at, limit=limit) or text


def resolved_if_dated(text: str, at: datetime, *, limit: int = 5) -> str | None:
    """`resolve_relative_dates(text, at)` when `text` holds a relative time phrase, else None.

    One scan where asking `anchor_relative_dates` first and resolving after would take two.
    """
    found = _matches(text, at, limit, None)
    if not found:
        return None
    out: list[str] = []
    pos = 0
    for kind, m, _resolved in sorted(found, key=lambda f: f[1].start()):
        before = text[pos : m.start()]
        phrase = _inline(kind, m, at)
        if _LEADING_PREPOSITION.search(before):
            phrase = phrase.split(" ", 1)[1]
        out.append(before)
        out.append(phrase)
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)
