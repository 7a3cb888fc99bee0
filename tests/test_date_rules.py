"""What relative time phrases and durations mean on the day they were said: the rules, table-driven."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tiermem import dates

MON = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)  # Monday, 8 May 2023
JAN31 = datetime(2023, 1, 31, 9, 0, tzinfo=UTC)  # a month end (Tuesday)
MAR31 = datetime(2023, 3, 31, 9, 0, tzinfo=UTC)  # a month end after a short month (Friday)
LEAP = datetime(2024, 2, 29, 9, 0, tzinfo=UTC)  # a leap day (Thursday)
NEW_YEAR = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)  # a Monday, first day of a year

# (said, when, [(phrase, what it points to)])
ANCHORS = [
    ("I went to a support group yesterday.", MON, [("yesterday", "7 May 2023")]),
    ("Yesterday was the last day of the year", NEW_YEAR, [("Yesterday", "31 December 2023")]),
    ("tomorrow is the first of the month", JAN31, [("tomorrow", "1 February 2023")]),
    ("tomorrow", LEAP, [("tomorrow", "1 March 2024")]),
    ("I ran a race last Friday", MON, [("last Friday", "the Friday before 8 May 2023 (5 May 2023)")]),
    ("I ran a race last Friday", MAR31, [("last Friday", "the Friday before 31 March 2023 (24 March 2023)")]),
    ("see you next Monday", MON, [("next Monday", "the Monday after 8 May 2023 (15 May 2023)")]),
    # Weekdays shortened as in chat, after last/next; never a lower-case word that is no day.
    (
        "Last Fri I took my kids to a workshop",
        MON,
        [("Last Fri", "the Friday before 8 May 2023 (5 May 2023)")],
    ),
    (
        "I joined a group last Tues. It was great",
        MON,
        [("last Tues", "the Tuesday before 8 May 2023 (2 May 2023)")],
    ),
    ("see you next Thurs", MON, [("next Thurs", "the Thursday after 8 May 2023 (11 May 2023)")]),
    ("when I last sat down", MON, []),
    ("Last night was amazing", MON, [("Last night", "7 May 2023")]),
    ("We moved two years ago", MON, [("two years ago", "2021")]),
    ("We moved two years ago", LEAP, [("two years ago", "2022")]),
    ("three days ago", NEW_YEAR, [("three days ago", "29 December 2023")]),
    ("a month ago", MAR31, [("a month ago", "February 2023")]),
    ("last month", JAN31, [("last month", "December 2022")]),
    ("last month", NEW_YEAR, [("last month", "December 2023")]),
    ("next month", JAN31, [("next month", "February 2023")]),
    ("last year", NEW_YEAR, [("last year", "2023")]),
    ("last week", MON, [("last week", "the week before 8 May 2023")]),
    ("last summer", MON, [("last summer", "summer 2022")]),
    # A month without a year: that month of the year it was said in.
    ("We went camping in May", MON, [("in May", "May 2023")]),
    ("We went camping in early June", JAN31, [("in early June", "June 2023")]),
    ("since March things changed", MON, [("since March", "March 2023")]),
    ("in May 2021 we married", MON, []),  # the year is written: nothing to resolve
    ("in may be", MON, []),  # "may" the verb is not a month
    # Durations that run up to the day: when they started.
    ("I've been running for 3 years now", MON, [("for 3 years now", "since about 2020")]),
    ("We have been married for five years", MON, [("for five years", "since about 2018")]),
    ("I have known them for 4 months", JAN31, [("for 4 months", "since about September 2022")]),
    ("I have been painting for two weeks", MON, [("for two weeks", "since around 24 April 2023")]),
    ("She has been sick for 3 days", NEW_YEAR, [("for 3 days", "since 29 December 2023")]),
    ("I've had this dog for the past two years", MON, [("for the past two years", "since about 2021")]),
    ("Seven years now, and I've found my muses", MON, [("Seven years now", "since about 2016")]),
    # A duration that is a plan (no perfect tense, no "now") says nothing about a start.
    ("I'm going to Spain for a week", MON, []),
    ("I have a trip. I'll stay for a week", MON, []),  # "have" is in another sentence
    ("Nothing about time here", MON, []),
]


@pytest.mark.parametrize(("text", "at", "expected"), ANCHORS)
def test_anchors(text: str, at: datetime, expected: list[tuple[str, str]]) -> None:
    assert dates.anchor_relative_dates(text, at, limit=5) == expected


# (said, when, the sentence with its phrases made absolute)
INLINE = [
    ("I moved here last year", MON, "I moved here in 2022"),
    ("I've been running for 3 years now.", MON, "I've been running since about 2020."),
    ("We went camping in May.", MON, "We went camping in May 2023."),
    ("We went camping in early June.", MON, "We went camping in early June 2023."),
    ("I went there yesterday and last Friday", MON, "I went there on 7 May 2023 and on Friday, 5 May 2023"),
    ("since last year", MON, "since 2022"),
    ("I went last Fri.", MON, "I went on Friday, 5 May 2023."),
    ("I'm going to Spain for a week", MON, "I'm going to Spain for a week"),
]


@pytest.mark.parametrize(("text", "at", "expected"), INLINE)
def test_resolved_inline(text: str, at: datetime, expected: str) -> None:
    assert dates.resolve_relative_dates(text, at) == expected
