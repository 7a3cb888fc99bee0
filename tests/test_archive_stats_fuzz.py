"""Kept term statistics equal a fresh count after every few new episodes of odd text (accents,
ligatures, emoji, curly quotes, tokens past FTS5's 32,768 bytes, odd JSON quotes and participants)
inserted straight into SQL, on seeded random stores."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from tiermem.runtime import archive_stats, episode_search, fts_mirror, fts_terms, quote_search
from tiermem.runtime.hotstore import connect

WORDS = [
    "paint",
    "painted",
    "painting",
    "paintbrush",
    "2024",
    "2024x",
    "abc123",
    "cafe",
    "Café",
    "CAFÉ",
    "naïve",
    "Straße",
    "ǅemal",
    "日本語テキスト",
    "ﬁne",
    "İstanbul",
    "Ωmega",
    "emoji🎨paint",
    "“quoted”",
    "don’t",
    "don't",
    "x²",
    "½cup",
    "Ⅻ",
    "a\u0301bcd",
    "nbsp\u00a0word",
    "—dash—",
    "3.14",
    "1,000",
    "0x1F",
    "ab",
    "x2",
    "zz",
    "kitten",
    "kittens",
    "kit",
    "ǉubav",
    "ÆSIR",
    "œuvre",
]
LONG = ["q" * 40000, "é" * 20000, "paint" + "z" * 33000, "s" * 32768, "s" * 32769]
TERMS = [
    "paint",
    "painte",
    "paintb",
    "painting",
    "paintz",
    "cafe",
    "caf",
    "naive",
    "naiv",
    "strasse",
    "stra",
    "istanbul",
    "ista",
    "omega",
    "emoji",
    "emojipaint",
    "2024",
    "2024x",
    "abc1",
    "abc123",
    "fine",
    "qqqq",
    "eeee",
    "dont",
    "don",
    "cup",
    "emal",
    "ab",
    "x2",
    "zz",
    "kitt",
    "kitten",
    "kittens",
    "kit",
    "lubav",
    "aesir",
    "sir",
    "uvre",
    "oeuvre",
    "ssss",
    "s" * 32768,
    "q" * 100,
    "dash",
    "quoted",
    "nbsp",
    "word",
    "xii",
    "bcd",
    "abcd",
    "1000",
    "000",
    "314",
    "0x1f",
    "alice",
    "bob",
    "42",
]
AGENTS = ("a", "b", "c")


def _text(rng: random.Random, k: int) -> str | None:
    r = rng.random()
    if r < 0.08:
        return None
    if r < 0.12:
        return ""
    words = rng.choices(WORDS, k=k)
    if rng.random() < 0.05:
        words.append(rng.choice(LONG))
    return " ".join(words)


def _insert(conn: Any, rng: random.Random, n: int) -> None:
    agent = rng.choice(AGENTS)
    quotes: Any = [
        {"text": _text(rng, 5), "speaker": "x"},
        {"text": 42},
        {"speaker": "no text"},
        {"text": _text(rng, 3)},
    ]
    if rng.random() < 0.1:
        quotes = None
    parts: Any = rng.choice([None, ["alice"], ["alice", 42, {"x": "yé"}], ["Bob Smith", "ǅemal"], []])
    conn.execute(
        "INSERT INTO episodes (episode_id, agent_id, name, summary, participants, key_quotes, start_ts, end_ts,"
        " importance, owner) VALUES (?,?,?,?,?,?,?,?,?,?)",
        [
            f"e{n}-{rng.random()}",
            agent,
            _text(rng, 2),
            _text(rng, 6),
            None if parts is None else json.dumps(parts, ensure_ascii=rng.random() < 0.5),
            None if quotes is None else json.dumps(quotes, ensure_ascii=False),
            "2026-03-01T10:00:00Z",
            "2026-03-01T11:00:00Z",
            5,
            agent,
        ],
    )


def _stats(conn: Any) -> list[Any]:
    out: list[Any] = []
    single: dict[str, str] = {}
    overall = episode_search._frequencies(conn, TERMS, single)
    out += [overall, dict(sorted(single.items()))]
    for agent in AGENTS:
        out.append(episode_search._archive_sizes(conn, agent))
        out.append(episode_search._idf(conn, agent, TERMS, overall, dict(single)))
        groups = [(t,) for t in TERMS[:20]] + [("cafe", "naive"), ("kit", "kitten")]
        out.append(quote_search._group_idf(conn, agent, groups, overall))
    return out


def _fresh(conn: Any) -> list[Any]:
    kept = dict(archive_stats._KEPT.stores)
    archive_stats._KEPT.stores.clear()
    try:
        return _stats(conn)
    finally:
        archive_stats._KEPT.stores.clear()
        archive_stats._KEPT.stores.update(kept)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_kept_statistics_equal_a_fresh_count_on_odd_text(tmp_path: Path, seed: int) -> None:
    archive_stats.clear()
    fts_mirror.clear()
    rng = random.Random(seed)
    path = tmp_path / "hot.db"
    writer = connect(path)
    for n in range(30):
        _insert(writer, rng, n)
    reader = connect(path)
    try:
        assert _stats(reader) == _fresh(reader)
        for step in range(25):
            for _ in range(rng.randrange(1, 4)):
                _insert(writer, rng, 1000 * step + rng.randrange(999))
            kept = _stats(reader)
            fresh = _fresh(reader)
            if kept != fresh:
                for k, (x, y) in enumerate(zip(kept, fresh, strict=True)):
                    if x != y:
                        diff = (
                            {t: (x[t], y[t]) for t in x if x[t] != y.get(t)}
                            if isinstance(x, dict)
                            else (x, y)
                        )
                        raise AssertionError((step, k, str(diff)[:2000]))
            store = archive_stats._KEPT.stores[next(iter(archive_stats._KEPT.stores))]
            assert store.terms, "nothing kept: the increments were not exercised"
            for t, tc in store.terms.items():
                prefix = len(t) >= 4
                docs, words, first = fts_terms.vocab_counts(reader, "episodes_fts", t, prefix)
                assert tc.docs == docs, (t[:20], tc.docs, docs)
                if prefix:
                    assert (tc.words, tc.word) == (min(words, 2), first if words == 1 else ""), t[:20]
    finally:
        reader.close()
        writer.close()
        archive_stats.clear()
