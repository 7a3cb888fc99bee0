"""The reranker's content counts read from numbered word sets stay those of the passages' own text.

A long episode's passages reach the reranker as numbers in the vocabulary the episode was
prepared in. The numbers of the words that do not count (stop words, small talk, the speakers'
names) are kept per vocabulary for one reranking: these tests check that a reranking whose
passages come from two vocabularies counts each in its own, and that one reranking's speakers'
names never change the next one's counts (names are a reader's data).
"""

from __future__ import annotations

import math
import random
import re
from typing import Any

import orjson
from helpers_runtime import Rows
from tiermem.runtime import rerank_features as rf
from tiermem.runtime.episode_text import TEXTS, Prepared

WORDS = [
    "the",
    "and",
    "of",
    "a",
    "thanks",
    "bye",
    "soon",
    "kite",
    "lake",
    "teal",
    "ada",
    "bob",
    "melanie",
    "paint",
    "café",
    "naïve",
    "x2",
    "日本",
    "zzq",
]
WORD = re.compile(r"[a-z0-9]+")


def _row(episode_id: str, passages: list[tuple[str, str]]) -> tuple[str, ...]:
    quotes = [{"text": t, "event_id": f"{episode_id}.{j}", "speaker": s} for j, (t, s) in enumerate(passages)]
    return (episode_id, orjson.dumps(quotes).decode(), f"name {episode_id}", "", "2023-05-01T10:00:00Z")


def _head(entry: Prepared, j: int) -> dict[str, Any]:
    p = entry.passages
    return {"score": 1.0, "date": "d", "speaker": p.speaker(j), "text": p.text(j), "event_id": "", "part": 0}


def _content_by_text(text: str, speakers: set[str]) -> float:
    names = frozenset(s[:k] for s in speakers for k in range(3, len(s) + 1))
    split = frozenset(WORD.findall(text.lower()))
    return math.log1p(len(split - rf.STOP_WORDS - rf.SMALL_TALK - names))


def test_a_reranking_over_two_vocabularies_counts_each_passage_in_its_own() -> None:
    rng = random.Random(1)

    def text(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    rows = [
        _row(f"e{i}", [(text(rng.choice([2, 50, 600])), rng.choice(["Ada", "Melanie"])) for _ in range(5)])
        for i in range(12)
    ]
    conn = Rows(rows)
    TEXTS.clear()
    try:
        heads: list[dict[str, Any]] = []
        around: list[rf.Around] = []

        def pick(entry: Prepared, j: int) -> None:  # as a search takes it, in the vocabulary of the moment
            heads.append(_head(entry, j))
            around.extend(rf.surroundings(None, heads[-1:], [(entry, j)]))

        old = TEXTS.prepared(conn, "db", [r[0] for r in rows[:6]])
        for e in old:
            pick(e, 0)
        first = TEXTS.numbers
        TEXTS.clear()  # a new vocabulary; the old entries are still in flight
        new = TEXTS.prepared(conn, "db", [r[0] for r in rows[6:]])
        for e in old:
            TEXTS.dedup(e, TEXTS.numbers)  # a search of the new vocabulary renumbers an old entry
            pick(e, 1)
        for e in new:
            pick(e, 0)
        vocabularies = {id(a.numbered) for a in around if a.numbered is not None}
        assert vocabularies == {id(first), id(TEXTS.numbers)}  # the case under test is reached
        features = rf.word_features("What did Melanie paint?", heads, around)
        speakers = {h["speaker"].lower() for h in heads}
        for h, row in zip(heads, features, strict=True):
            assert row[-2] == _content_by_text(h["text"], speakers), h["text"][:60]
    finally:
        TEXTS.clear()


def test_one_reranking_s_speakers_do_not_change_the_next_one_s_counts() -> None:
    long = " ".join(["kite lake teal"] * 300)  # long enough to be numbered
    named = "Ada and Melanie painted the kite"
    rows = [
        _row("u1", [(long, "Ada"), (named, "Melanie")]),
        _row("u2", [(long, "Bob"), (named, "Bob"), ("ok", "Zed")]),
    ]
    TEXTS.clear()
    try:
        first, second = TEXTS.prepared(Rows(rows), "db", ["u1", "u2"])
        assert first.start >= 0 and second.start >= 0

        def content(entry: Prepared) -> float:
            js = list(range(len(entry.passages)))
            heads = [_head(entry, j) for j in js]
            around = rf.surroundings(None, heads, [(entry, j) for j in js])
            at = next(j for j in js if entry.passages.text(j) == named)
            return float(rf.word_features("what about the kite", heads, around)[at][-2])

        assert content(first) == _content_by_text(named, {"ada", "melanie"})  # the names do not count here
        # Another reader's reranking: Ada and Melanie are not its speakers, so they are content words.
        assert content(second) == _content_by_text(named, {"bob", "zed"}) == math.log1p(4)
    finally:
        TEXTS.clear()
