"""The reranker's word features read on the spot from each result's prepared episode
(`rerank_features.placed_word_features`) are those of each passage's kept `Around` (`surroundings`
then `word_features`), to the last bit, for long (numbered) and short episodes alike."""

from __future__ import annotations

import random
import sys
from typing import Any

import numpy as np
import orjson
from helpers_runtime import Rows
from tiermem.runtime import rerank_features as rf
from tiermem.runtime.episode_text import TEXTS, Prepared

PIECES = [
    "the kite",
    "and thanks",
    "bye soon",
    "lake teal",
    "Ada",
    "melanie",
    "paint it",
    "café",
    "x2",
    "日本",
    "yesterday",
    "really?",
    "Why?",
    "ok.",
]
ENDINGS = [
    "",
    "?",
    "? ",
    "?\n",
    "?\u3000",
    "?\x1c",
    " ?",
    ".",
    "?!",
    " [image: a kite over the lake]",
    "?\u200b",
]
SPEAKERS = ["Ada", "ada", "Melanie", "MELANIE", "Bob", ""]


def _episode(rng: random.Random, episode_id: str) -> tuple[str, ...]:
    quotes = []
    for j in range(rng.randint(1, 9)):
        words = rng.choice([2, 6, 40, 400])  # a long reply is cut in passages; the episode numbered
        text = " ".join(rng.choice(PIECES) for _ in range(words)) + rng.choice(ENDINGS)
        quotes.append({"text": text, "event_id": f"{episode_id}.{j}", "speaker": rng.choice(SPEAKERS)})
    return (episode_id, orjson.dumps(quotes).decode(), f"name {episode_id}", "", "2023-05-01T10:00:00Z")


def _head(rng: random.Random, entry: Prepared, j: int) -> dict[str, Any]:
    p = entry.passages
    return {
        "score": round(rng.random() * 3, 4),
        "date": rng.choice(["1 May 2023", "2 May 2023", "9 June 2023"]),
        "speaker": p.speaker(j),
        "text": p.text(j),
        "event_id": p.event_id(j),
        "part": int(p.part[j]),
        "anchors": rng.choice([[], [["yesterday", "30 April 2023"]]]),
        "notes": rng.choice([[], ["said on 1 May 2023"]]),
    }


def test_word_features_read_on_the_spot_are_those_of_the_kept_surroundings() -> None:
    rng = random.Random(8)
    rows = [_episode(rng, f"e{i}") for i in range(40)]
    TEXTS.clear()
    try:
        entries = TEXTS.prepared(Rows(rows), "db", [r[0] for r in rows])
        kinds = {e.start >= 0 for e in entries}
        assert kinds == {True, False}  # long (numbered) and short episodes both met
        checked = 0
        for query in ["What did Melanie paint?", "When did Ada fly the kite?", "the lake", "Bob and ADA"]:
            for _ in range(15):
                placed = [
                    (e, rng.randrange(len(e.passages))) for e in rng.choices(entries, k=rng.randint(1, 70))
                ]
                heads = [_head(rng, e, j) for e, j in placed]
                expected = rf.word_features(query, heads, rf.surroundings(None, heads, placed))  # type: ignore[arg-type]
                got = rf.placed_word_features(query, heads, placed)
                assert got.shape == expected.shape and got.dtype == expected.dtype
                assert np.array_equal(got, expected), query
                checked += len(heads)
        assert checked > 1000
    finally:
        TEXTS.clear()


def test_a_passage_ends_asking_as_its_text_stripped_ends_with_a_question_mark() -> None:
    """Every character after the mark (white space of every kind, and not), and around it."""
    for code in range(sys.maxunicode + 1):
        if 0xD800 <= code <= 0xDFFF:
            continue
        c = chr(code)
        for text in (f"so?{c}", f"so{c}", f"{c}?", f"?{c}{c}", c):
            joined = f"ab{text}cd"
            assert rf._ends_asking(joined, 2, 2 + len(text)) == text.rstrip().endswith("?"), hex(code)
    assert not rf._ends_asking("abc", 1, 1)
