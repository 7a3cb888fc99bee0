"""A case-sensitive twin searched in fold(text) answers as its IGNORECASE pattern does in the text.

The compressor asks several IGNORECASE patterns only whether they match
(signals, weighty moments, dates); it asks their twins (`text.folded_twin`)
on the folded text instead. These properties hold the twins to the originals
on text mixing the patterns' own words with the characters that make case
folding tricky (dotted and dotless i, long s, the Kelvin sign, sharp s, final
sigma, combining marks, non-ASCII letters next to words, curly apostrophes).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiermem.compressor import facts as f
from tiermem.compressor import offline_scorer as o

from tiermem import dates
from tiermem.text import fold, folded_twin

PAIRS: list[tuple[str, re.Pattern[str], re.Pattern[str]]] = [
    ("preference", f.PREFERENCE_RE, f._PREFERENCE_FOLDED),
    ("correction", f.CORRECTION_RE, f._CORRECTION_FOLDED),
    ("disclosure", f.DISCLOSURE_RE, f._DISCLOSURE_FOLDED),
    ("month", o._MONTH_RE, o._MONTH_FOLDED),
    ("dates", dates._CHEAP_CHECK, dates._CHEAP_CHECK_FOLDED),
] + [
    (f"weighty-{i}", rx, twin)
    for i, ((_w, rx, _n), (_w2, twin, _n2)) in enumerate(zip(o._WEIGHTY, o._WEIGHTY_FOLDED, strict=True))
]

PIECES = [
    "I",
    "i",
    "İ",
    "ı",
    "I'm",
    "I’m",
    "İ'm",
    "ı am",
    "my",
    "MY",
    "mY",
    "love",
    "LOVE",
    "prefer",
    "fav",
    "actually",
    "no,",
    "meant",
    "wife",
    "ſister",
    "Sister",
    "\u212aids",
    "kids",
    "last",
    "week",
    "for",
    "May",
    "MAY",
    "march",
    "Monday",
    "ago",
    "3",
    "days",
    "passed away",
    "Passed Away",
    "first time",
    "must",
    "always",
    "never",
    "please",
    "promise",
    "ß",
    "Σ",
    "ΑΣ",
    "e\u0301",
    "é",
    "_",
    "x",
    "'",
    "’",
    ",",
    ".",
    "!",
    "?",
    "-",
    "\u00a0",
]
TEXTS = st.lists(
    st.tuples(st.sampled_from(PIECES), st.sampled_from([" ", "", "\n", "  ", ". "])), max_size=14
).map(lambda parts: "".join(p + sep for p, sep in parts))


@settings(max_examples=600, deadline=None)
@given(TEXTS)
def test_twins_answer_as_the_originals(text: str) -> None:
    low = fold(text)
    for name, rx, twin in PAIRS:
        assert (rx.search(text) is not None) == (twin.search(low) is not None), name


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_twins_answer_as_the_originals_on_any_text(text: str) -> None:
    low = fold(text)
    for name, rx, twin in PAIRS:
        assert (rx.search(text) is not None) == (twin.search(low) is not None), name


def test_a_pattern_with_capitals_has_no_twin() -> None:
    with pytest.raises(ValueError):
        folded_twin(re.compile(r"\bMay\b", re.IGNORECASE))
    with pytest.raises(ValueError):
        folded_twin(re.compile(r"\bmay\b"))  # not IGNORECASE: nothing to twin
    assert folded_twin(re.compile(r"\bmay\S", re.IGNORECASE)).search("may!") is not None
