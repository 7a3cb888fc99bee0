"""The word pre-checks that skip regex scans (dates, offline signals) never change a result."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from tiermem import dates

AT = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)  # a Monday

WORDS = [
    "last", "LAST", "laſt", "paſt", "past", "this", "THIS", "next", "coming", "on", "the", "other", "day",
    "Monday", "friday", "SATURDAY", "ſunday", "week", "weekend", "month", "year", "summer", "ago", "AGO",
    "3", "two", "a", "few", "couple", "of", "days", "weeks", "yesterday", "Yeſterday", "tomorrow", "today",
    "tonight", "morning", "İ", "ı", "K", "went", "to", "Paris", ",", ".", "!", "for", "have", "been",
    "years", "now", "in", "since", "May", "MAY", "may", "June", "early", "2021",
]  # fmt: skip


def _reference(text: str, at: datetime, limit: int = 3) -> list[tuple[str, str]]:
    """The scan without any pre-check: every pattern over the whole text."""
    found: list[tuple[str, str]] = []
    taken: list[tuple[int, int]] = []
    for kind, rx in dates._PATTERNS:
        for m in rx.finditer(text):
            if any(s < m.end() and m.start() < e for s, e in taken):
                continue
            resolved = dates._resolve(kind, m, at)
            if resolved:
                taken.append((m.start(), m.end()))
                found.append((m.group(0), resolved))
            if len(found) >= limit:
                return found
    return found


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=12))
def test_pre_checks_match_the_full_scan(words: list[str]) -> None:
    text = " ".join(words)
    assert dates.anchor_relative_dates(text, AT) == _reference(text, AT)


def test_case_partners_and_examples() -> None:
    for text in (
        "I went there laſt Saturday",
        "two weeks AGO",
        "Yeſterday was fun",
        "the other day",
        "this past month",
    ):
        assert dates.anchor_relative_dates(text, AT) == _reference(text, AT) != []
    assert dates.anchor_relative_dates("yesterday", AT) == [("yesterday", "7 May 2023")]


SIGNAL_WORDS = [
    "I", "i", "İ", "ı", "love", "LIKE", "lıke", "prefer", "my", "favorite", "fav", "I'm", "fan", "of", "into",
    "can't", "ſtand", "rather", "I'd", "actually", "ACTUALLY", "meant", "no,", "not", "quite", "that's", "wrong",
    "changed", "mind", "scratch", "that", "May", "MAY", "ſunday", "weekend", "birthday", "dog", "Paris", ".",
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(SIGNAL_WORDS), max_size=10))
def test_signal_pre_checks_match_the_regexes(words: list[str]) -> None:
    from tiermem.compressor import facts as f
    from tiermem.compressor import offline_scorer as o

    text = " ".join(words)
    expected = (
        f.PREFERENCE_RE.search(text) is not None,
        f.CORRECTION_RE.search(text) is not None,
        f.DISCLOSURE_RE.search(text) is not None,
    )
    assert f.signals(text) == expected
    low = o.fold(text)
    assert bool(o._MONTH_WORDS.search(low) and o._MONTH_RE.search(text)) == bool(o._MONTH_RE.search(text))
