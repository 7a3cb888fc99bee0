"""Document frequencies from fts5vocab and the bounded candidate query of episode search."""

from __future__ import annotations

import sqlite3

from tiermem.runtime.fts_terms import (
    agent_candidate_matches,
    candidate_matches,
    candidate_terms,
    document_frequencies,
)


def _index(docs: list[str]) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE docs_fts USING fts5(body)")
    conn.executemany("INSERT INTO docs_fts(rowid, body) VALUES (?, ?)", list(enumerate(docs, 1)))
    return conn


def test_frequencies_count_documents_and_prefixes() -> None:
    conn = _index(["painting a lake", "painted the lake twice lake", "a walk", "paint shop"])
    df = document_frequencies(conn, "docs_fts", ["lake", "paint", "walk", "zebra", "a"])
    # "lake" twice in one document still counts that document once.
    assert df == {"lake": 2, "paint": 3, "walk": 1, "zebra": 0, "a": 2}


def test_candidates_keep_the_rarest_terms_under_the_cap() -> None:
    df = {"common": 900, "rare": 3, "mid": 60, "absent": 0}
    assert candidate_terms(df, cap=100) == ["rare", "mid"]
    assert candidate_terms(df, cap=10_000) == ["rare", "mid", "common"]
    assert candidate_terms({"absent": 0}) == []


def test_matches_fall_back_to_and_when_every_term_is_common() -> None:
    def q(t: str) -> str:
        return f'"{t}"'

    df = {"alpha": 5000, "beta": 4000, "delta": 7000, "gamma": 0}
    assert candidate_matches(df, q, cap=100) == [
        '"beta" AND "alpha" AND "delta"',
        '"beta" AND "alpha"',
        '"beta"',
    ]
    assert candidate_matches({"alpha": 5000}, q, cap=100) == ['"alpha"']
    assert candidate_matches({"rare": 5, "alpha": 5000}, q, cap=100) == ['"rare"']
    assert candidate_matches({"gamma": 0}, q) == []


def test_bounded_candidates_keep_the_document_that_matches_the_rare_word() -> None:
    docs = [f"the usual weather report number {i}" for i in range(500)] + ["the weather when the kite broke"]
    conn = _index(docs)
    terms = ["weather", "kite"]
    (match,) = candidate_matches(document_frequencies(conn, "docs_fts", terms), lambda t: f'"{t}"*', cap=100)
    assert match == '"kite"*'
    rows = conn.execute(
        "SELECT rowid FROM docs_fts WHERE docs_fts MATCH ? ORDER BY rank", (match,)
    ).fetchall()
    assert rows == [(501,)]


def test_an_agents_tries_are_chosen_by_its_own_counts() -> None:
    def q(t: str) -> str:
        return f'"{t}"*'

    def words(t: str) -> str:
        return f'("{t}a" OR "{t}b")'

    # Words it has, rare overall too: one OR, ranked (BM25's walk of them is short).
    own, overall = {"lake": 3, "kite": 1, "zebra": 0}, {"lake": 40, "kite": 9, "zebra": 5}
    assert agent_candidate_matches(own, overall, q, cap=100, expand=words) == (['"kite"* OR "lake"*'], True)
    # The same words common overall: BM25 would walk every agent's documents of them; the tries are
    # those of a window, their words written out, and a word the agent never used is not tried.
    overall = {"lake": 4000, "kite": 900, "zebra": 5}
    assert agent_candidate_matches(own, overall, q, cap=100, expand=words) == (
        [
            '("kitea" OR "kiteb") AND ("lakea" OR "lakeb")',
            '("kitea" OR "kiteb")',
            '("kitea" OR "kiteb") OR ("lakea" OR "lakeb")',
        ],
        False,
    )
    # Common in the agent's own archive: its rarest first, ties by the counts overall.
    own = {"alpha": 500, "beta": 500, "gamma": 200}
    overall = {"alpha": 900, "beta": 600, "gamma": 5000}
    tries, ranked = agent_candidate_matches(own, overall, q, cap=100)
    assert not ranked
    assert tries == ['"gamma"* AND "beta"* AND "alpha"*', '"gamma"* AND "beta"*', '"gamma"*']
    assert agent_candidate_matches({"alpha": 0}, {"alpha": 50}, q) == ([], True)
