"""text_similarity: lexical, deterministic, in [0, 1], and on the right side of the evolver's thresholds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tiermem.similarity import embeddings_available, similarity, text_similarity


def test_identical_after_normalisation_is_one() -> None:
    assert text_similarity("User prefers tea over coffee", "user prefers tea over coffee.") == 1.0


def test_near_duplicates_score_above_the_touch_threshold() -> None:
    assert text_similarity("Use pnpm, not npm", "Use pnpm not npm!") > 0.95
    assert (
        text_similarity("User prefers green tea in the morning", "User prefers green tea in the mornings")
        > 0.95
    )


def test_related_texts_land_in_the_merge_band() -> None:
    score = text_similarity("User prefers green tea", "User prefers green tea every day")
    assert 0.8 <= score <= 0.95


def test_unrelated_texts_are_far_below_the_merge_band() -> None:
    assert text_similarity("Lives in Paris", "Works at Google") < 0.2
    assert text_similarity("Caroline is a counselor", "Melanie paints landscapes") < 0.2


def test_negation_keeps_texts_apart() -> None:
    assert text_similarity("User likes tea", "User does not like tea") < 0.8


def test_empty_texts() -> None:
    assert text_similarity("", "") == 1.0
    assert text_similarity("", "something") == 0.0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80), st.text(max_size=80))
def test_range_and_symmetry(a: str, b: str) -> None:
    score = text_similarity(a, b)
    assert 0.0 <= score <= 1.0
    assert score == text_similarity(b, a)


def test_embeddings_method_falls_back_to_lexical_when_unavailable() -> None:
    a, b = "User prefers tea", "The user likes tea"
    if not embeddings_available():
        assert similarity(a, b, method="embeddings") == text_similarity(a, b)
