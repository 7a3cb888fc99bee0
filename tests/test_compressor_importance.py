"""Offline importance against a person's judgement: the labelled set in tests/data, and its agreement."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from tiermem.compressor import offline_scorer as o
from tiermem.compressor.calibration import agreement, load_labels, offline_scores, ranks, spearman

from tiermem.text import WORD_RE, fold

LABELS = Path(__file__).parent / "data" / "importance_labels.jsonl"
# Measured when the weights were set (see bench/RESULTS.md): 0.894. The margin allows a
# small trade-off elsewhere, not a return to the keyword-count scorer (0.52).
AGREEMENT_FLOOR = 0.87


def test_the_labelled_set_is_large_enough_and_explains_every_label() -> None:
    turns = load_labels(LABELS)
    assert len(turns) >= 60 and len({t.id for t in turns}) == len(turns)
    assert all(t.reason.strip() for t in turns)
    spread = Counter(t.label for t in turns)
    assert min(spread) <= 2 and max(spread) >= 9 and len(spread) >= 8
    seed = {t.id: t for t in turns if t.source.startswith("seed")}
    assert seed["seed004-sleep"].label == 9 and seed["seed004-hello"].label == 2


def test_the_offline_scorer_agrees_with_the_labels() -> None:
    assert agreement(load_labels(LABELS)) >= AGREEMENT_FLOOR


def test_the_seeds_own_examples_are_ranked_as_the_seed_ranks_them() -> None:
    turns = {t.id: t for t in load_labels(LABELS)}
    sleep, hello, remember = offline_scores(
        [turns["seed004-sleep"], turns["seed004-hello"], turns["seed004-remember"]]
    )
    assert sleep >= 8 > remember > hello  # labelled 9, 7 and 2
    assert sleep >= 7  # important at the default threshold: kept with its exact quote


def test_spearman_on_known_cases() -> None:
    assert round(spearman([1, 2, 3, 4], [10, 20, 30, 40]), 9) == 1.0
    assert round(spearman([1, 2, 3, 4], [4, 3, 2, 1]), 9) == -1.0
    assert ranks([5, 1, 5, 3]) == [3.5, 1.0, 3.5, 2.0]
    assert round(spearman([1, 2, 2, 3], [1, 3, 2, 4]), 4) == 0.9487


WORDS = [
    "I", "i", "always", "Always", "never", "please", "must", "we", "use", "passed", "away", "the", "exam",
    "my", "name", "is", "Sam", "promise", "I'll", "be", "here", "scared", "alone", "trust", "new", "job",
    "got", "first", "time", "lost", "who", "are", "you", "trans", "career", ".", "!", "ſleep", "K", "İ",
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=12))
def test_the_weight_pre_check_never_changes_a_score(words: list[str]) -> None:
    text = " ".join(words)
    full = min(o.WEIGHT_CAP, sum(weight for weight, rx, _needs in o._WEIGHTY if rx.search(text)))
    assert o._gravity(fold(text), set(WORD_RE.findall(fold(text)))) == full
