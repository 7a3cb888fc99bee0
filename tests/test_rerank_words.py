"""The reranker's word features (runtime.rerank_features) and its value-per-character order."""

from __future__ import annotations

import gc
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from tiermem.runtime import rerank_features
from tiermem.runtime.rerank import MODELS, WORDS_COLUMNS, LinearModel, Reranker
from tiermem.runtime.rerank_features import SMALL_TALK, WORD_FEATURES, Around, word_features


def _item(text: str, speaker: str, score: float, date: str = "8 May 2023", **extra: Any) -> dict[str, Any]:
    return {
        "text": text,
        "speaker": speaker,
        "score": score,
        "date": date,
        "anchors": [],
        "notes": [],
        **extra,
    }


HEAD = [
    _item("Thanks, Mel! Your kind words mean a lot.", "Caroline", 10.0),
    _item("I adopted a pup named Oscar in Boston last week.", "Melanie", 8.0, anchors=[("last week", "May")]),
    _item("What kind of pup did you adopt?", "Caroline", 6.0, date="9 June 2023"),
    _item("A beagle, 3 years old. [image: a dog on a couch]", "Melanie", 4.0, date="9 June 2023"),
]


def _around(text: str, speaker: str, before: tuple[str, str] | None, after: tuple[str, str] | None) -> Around:
    def words(t: str) -> frozenset[str]:
        return frozenset(re.findall(r"[a-z0-9]+", t.lower()))

    return Around(
        words(text),
        before,
        prev_asks=before is not None and before[1].endswith("?"),
        prev_other=before is not None and before[0] != speaker,
        next_asks=after is not None and after[1].endswith("?"),
        image="[image:" in text,
        content={},
    )


AROUND = [
    _around(HEAD[0]["text"], HEAD[0]["speaker"], None, ("Melanie", "Great!")),
    _around(HEAD[1]["text"], HEAD[1]["speaker"], ("Caroline", "Did you adopt anything lately?"), None),
    _around(HEAD[2]["text"], HEAD[2]["speaker"], ("Melanie", "I adopted a pup."), ("Melanie", "A beagle.")),
    _around(HEAD[3]["text"], HEAD[3]["speaker"], ("Caroline", "What kind of pup did you adopt?"), None),
]


def _column(x: np.ndarray, name: str) -> list[float]:
    return [round(float(v), 4) for v in x[:, WORD_FEATURES.index(name)]]


def test_word_features_read_the_question_the_passage_and_its_neighbours() -> None:
    x = word_features("When did Melanie adopt her pup?", HEAD, AROUND)
    assert x.shape == (4, len(WORD_FEATURES))
    assert _column(x, "named_self") == [0.0, 1.0, 0.0, 1.0]
    assert _column(x, "named_other") == [1.0, 0.0, 1.0, 0.0]
    assert _column(x, "when_dated") == [0.0, 1.0, 0.0, 0.0]  # only the second states a resolved date
    assert _column(x, "prev_asks") == [0.0, 1.0, 0.0, 1.0]
    assert _column(x, "prev_other") == [0.0, 1.0, 1.0, 1.0]
    assert _column(x, "next_asks") == [0.0, 0.0, 0.0, 0.0]
    assert _column(x, "image") == [0.0, 0.0, 0.0, 1.0]
    # Small talk and the speakers' names (also shortened: "Mel") are no content: of "Thanks, Mel!
    # Your kind words mean a lot." only "kind" and "words" are left, of its 8 distinct words.
    assert _column(x, "content")[0] == round(float(np.log1p(2)), 4)
    assert _column(x, "content_share")[0] == 0.25
    assert {"thanks", "mean", "lot"} <= SMALL_TALK
    # "I adopted a pup named Oscar in Boston last week.": every word but the stop words.
    assert _column(x, "content")[1] == round(float(np.log1p(7)), 4)
    # The same day's other passages among the best, over the best score.
    assert _column(x, "day_mass") == [0.8, 1.0, 0.4, 0.6]


def test_a_question_without_names_or_when_sets_none_of_those() -> None:
    x = word_features("what kind of pup", HEAD, AROUND)
    assert not x[:, WORD_FEATURES.index("named_self")].any()
    assert not x[:, WORD_FEATURES.index("named_other")].any()
    assert not x[:, WORD_FEATURES.index("when_dated")].any()
    assert word_features("anything", [], []).shape == (0, len(WORD_FEATURES))


def test_value_per_character_puts_a_short_passage_before_a_long_one_of_equal_probability() -> None:
    x = np.zeros((3, 1))
    x[2, 0] = 1.0  # the third is likelier
    chars = np.array([400.0, 40.0, 400.0])
    flat = LinearModel((0.0,), (1.0,), (2.0,), -1.0, ("lexical",), per_char=0.0)
    priced = LinearModel((0.0,), (1.0,), (2.0,), -1.0, ("lexical",), per_char=1.0)
    assert np.argsort(-flat.value(x, chars), kind="stable").tolist() == [2, 0, 1]
    # Probability 0.73 over 412 characters is less per character than 0.27 over 52.
    assert np.argsort(-priced.value(x, chars), kind="stable").tolist() == [1, 2, 0]


def test_the_words_reranker_needs_no_embedder_and_a_cosine_model_does() -> None:
    assert not MODELS["words"].embeds and MODELS["words"].columns == WORDS_COLUMNS
    with pytest.raises(ValueError, match="embedder"):
        Reranker(None, MODELS["static"], 10)
    one = [_item("x", "A", 1.0)]
    assert Reranker(None, MODELS["words"], 10).reorder(None, "q", one) == one  # type: ignore[arg-type]


@dataclass
class _Passage:
    event_id: str
    part: int
    speaker: str
    text: str


class _Episode:
    """A prepared episode as the reranker's features read it: its passages."""

    def __init__(self, passages: list[_Passage]) -> None:
        self.passages = passages


def test_an_episode_that_cites_one_turn_twice_is_kept_whole() -> None:
    # The same turn quoted twice in an episode: two passages, one (event id, part).
    entry = _Episode([_Passage("t1", 0, "Ava", "Is it raining?"), _Passage("t1", 0, "Ava", "Is it raining?")])
    kept = rerank_features._episode(entry)  # type: ignore[arg-type]
    assert len(kept.facts) == 2 and kept.positions[("t1", 0)] == 1
    facts = rerank_features._facts(entry, 1)  # type: ignore[arg-type]
    assert facts.prev_asks and not facts.prev_other and facts.words == frozenset({"is", "it", "raining"})
    # What is kept of an episode goes when the prepared episode goes (a new version, an erasure).
    before = len(rerank_features._EPISODES)
    del entry, kept
    gc.collect()
    assert len(rerank_features._EPISODES) == before - 1


def test_a_passage_gone_from_its_episode_since_the_search_gets_no_word_features(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Between the search and the reranker the episode was read again (its cache was full) and no
    # longer holds the passage (erased meanwhile): the reranker must not fail the call.
    class Empty:
        passages: tuple[Any, ...] = ()

    class Texts:
        def prepared(self, conn: Any, key: Any, ids: list[str]) -> list[Any]:
            return [Empty() for _ in ids]

    monkeypatch.setattr(rerank_features, "TEXTS", Texts())
    monkeypatch.setattr(rerank_features, "database_key", lambda conn: "k")
    head = [_item("gone", "Ava", 1.0, episode_id="e1", event_id="t1", part=0)]
    (around,) = rerank_features.surroundings(None, head)  # type: ignore[arg-type]
    assert around.words == frozenset() and around.before is None and not around.prev_asks
    assert word_features("What did Ava say?", head, [around]).shape == (1, len(WORD_FEATURES))


def test_what_is_kept_of_many_episodes_goes_with_them_at_once() -> None:
    before = len(rerank_features._EPISODES)
    entries = [_Episode([_Passage(f"t{i}", 0, "Ava", "hello")]) for i in range(50)]
    for entry in entries:
        rerank_features._episode(entry)  # type: ignore[arg-type]
    assert len(rerank_features._EPISODES) == before + 50
    del entries, entry
    gc.collect()
    assert len(rerank_features._EPISODES) == before
