"""Term statistics kept across new episodes (runtime.archive_stats): always what a fresh count gives.

After inserts of one agent or of several, deletions, updates, an erasure and a
store rebuilt at the same path, every statistic the searches weigh terms by
(document counts and the words a prefix covers, the agent's and the archive's
sizes, per-agent counts of rare terms, the quote-level IDF, the IDF floats
themselves and the answers) equals what a process that kept nothing counts;
and a question after an insert never asks the index to walk a word's whole
list of documents (fts5vocab) or to count every episode.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from helpers_runtime import append, episode
from tiermem.runtime import archive_stats, episode_search, quote_search
from tiermem.runtime.episode_search import query_terms, search_episodes
from tiermem.runtime.hotstore import connect, database_key
from tiermem.runtime.projector import project
from tiermem.runtime.quote_search import query_term_groups, recall_lines
from tiermem.runtime.visibility import Principal

from tiermem.app.forget import forget
from tiermem.settings import Settings, resolve_settings

WORDS = [
    "paint",
    "painted",
    "painting",
    "lake",
    "dawn",
    "teal",
    "kitchen",
    "hike",
    "hiked",
    "trail",
    "dog",
    "bread",
    "baking",
    "sourdough",
    "quilt",
    "mustard",
    "guitar",
    "lesson",
    "concert",
    "january",
    "kitten",
    "miso",
    "weather",
    "rain",
    "report",
    "garden",
    "pot",
    "red",
    "key",
]
QUERIES = [
    "What did she paint?",
    "kitten name",
    "hike dog trail lake",
    "guitar lessons",
    "paintbrush kittens",  # words the first episodes do not hold: later ones bring them
    "red pot key garden",
    "cafe naive unicode",
    "zebra",
]
AGENTS = ("npc", "other")
_T = TypeVar("_T")


def _episode(rng: random.Random, agent: str, n: int, extra: str = "") -> dict[str, Any]:
    said = " ".join(rng.choices(WORDS, k=8))
    return episode(
        agent,
        f"{rng.choice(WORDS)} {n}",
        f"{' '.join(rng.choices(WORDS, k=6))} {extra}".strip(),
        key_quotes=[
            {"text": f"I said {said} {extra}", "event_id": f"{agent}-q{n}", "speaker": "Alice"},
            {"text": " ".join(rng.choices(WORDS, k=5)), "event_id": f"{agent}-r{n}", "speaker": "Bob"},
        ],
        participants=[rng.choice(["alice", "bob", "carol"])],
        source_event_ids=[f"src-{agent}-{n}"],
    )


@pytest.fixture(autouse=True)
def _nothing_kept() -> Iterator[None]:
    archive_stats.clear()
    yield
    archive_stats.clear()


def _fresh(compute: Callable[[], _T]) -> _T:
    """`compute()` in a process that has kept nothing (what is kept is put back after)."""
    kept = dict(archive_stats._KEPT.stores)
    archive_stats._KEPT.stores.clear()
    try:
        return compute()
    finally:
        archive_stats._KEPT.stores.clear()
        archive_stats._KEPT.stores.update(kept)


def _statistics(conn: Any) -> list[Any]:
    """Every statistic the searches weigh by, and their answers, for each agent and question."""
    out: list[Any] = []
    for agent in (*AGENTS, "third"):
        out.append(episode_search._archive_sizes(conn, agent))
        for q in QUERIES:
            terms, single = query_terms(q), dict[str, str]()
            overall = episode_search._frequencies(conn, terms, single)
            out += [overall, single, episode_search._idf(conn, agent, terms, overall, single)]
            groups = query_term_groups(q)
            freq = episode_search._frequencies(conn, [f for g in groups for f in g])
            out.append(quote_search._group_idf(conn, agent, groups, freq))
            who = Principal(agent_id=agent, user="alice")
            out.append(search_episodes(conn, who, q, None, 5))
            out.append(recall_lines(conn, who, q, None, 300))
    return out


def _same_as_fresh(conn: Any) -> None:
    kept = _statistics(conn)
    assert kept == _fresh(lambda: _statistics(conn))
    assert kept == _statistics(conn)  # and again, from what is kept


def _kept_store(conn: Any) -> Any:
    return archive_stats._KEPT.stores.get(database_key(conn))


def test_kept_statistics_equal_a_fresh_count_through_every_kind_of_change(settings: Settings) -> None:
    rng = random.Random(5)
    ids = append(settings, *(_episode(rng, agent, n) for agent in AGENTS for n in range(40)))
    project(settings)
    conn = connect(settings.hot_db)
    try:
        _same_as_fresh(conn)
        store = _kept_store(conn)
        assert store is not None and store.terms and store.agent_terms and store.quotes
        # Inserts: of one agent, of the other, of several at once (new words among them).
        for agents, extra in (
            (("npc",), "paintbrush"),
            (("other",), "kittens"),
            (("npc", "other", "third"), ""),
            (("npc",), "Café naïve “paintbrush” Ünïcode 🎨 caféteria"),  # the tokenizer's own rules
        ):
            append(settings, *(_episode(rng, a, 100 + rng.randrange(10**6), extra) for a in agents))
            project(settings)
            _same_as_fresh(conn)
            assert _kept_store(conn) is store  # brought up to date, not counted again
        assert store.terms["paint"].words == 2 and store.terms["kitten"].words == 2
        # A deletion, an update: counted again.
        with conn:
            conn.execute("DELETE FROM episodes WHERE rowid = 3")
        _same_as_fresh(conn)
        assert _kept_store(conn) is not store
        store = _kept_store(conn)
        with conn:
            conn.execute("UPDATE episodes SET summary = 'paintbrush kittens zebra' WHERE rowid = 5")
        _same_as_fresh(conn)
        assert _kept_store(conn) is not store
        # Inserts after them are added again, then an erasure counts everything again.
        append(settings, _episode(rng, "npc", 500, "zebra"))
        project(settings)
        _same_as_fresh(conn)
        forget(settings, event=ids[7], reason="test")
        _same_as_fresh(conn)
    finally:
        conn.close()


def test_a_store_rebuilt_at_the_same_path_is_counted_anew(tmp_path: Path) -> None:
    """Another store with as many episodes, the same schema and no change counted, copied over the
    first one's file: only its store id tells them apart."""
    first, second = (resolve_settings(data_dir=tmp_path / name, env={}) for name in ("a", "b"))
    rng = random.Random(9)
    append(first, *(_episode(rng, agent, n) for agent in AGENTS for n in range(30)))
    append(second, *(_episode(rng, agent, n, "paintbrush kittens") for agent in AGENTS for n in range(30)))
    project(first)
    project(second)
    conn = connect(first.hot_db)
    before = _statistics(conn)
    conn.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{first.hot_db}{suffix}").unlink(missing_ok=True)
    shutil.copy(second.hot_db, first.hot_db)
    conn = connect(first.hot_db)
    try:
        _same_as_fresh(conn)
        assert _statistics(conn) != before
    finally:
        conn.close()


def test_a_question_after_new_episodes_walks_no_word_and_counts_no_archive(settings: Settings) -> None:
    rng = random.Random(7)
    append(settings, *(_episode(rng, agent, n) for agent in AGENTS for n in range(40)))
    project(settings)
    conn = connect(settings.hot_db)
    try:
        _statistics(conn)  # every question's statistics kept
        for agent in ("other", "npc"):
            append(settings, _episode(rng, agent, 1000 + len(agent), "kittens"))
            project(settings)
            statements: list[str] = []
            conn.set_trace_callback(statements.append)
            _statistics(conn)
            conn.set_trace_callback(None)
            assert statements
            walks = [s for s in statements if "_vocab" in s]
            counts = [s for s in statements if "count(*)" in s and "rowid <=" not in s]
            assert not walks and not counts, (walks, counts)
    finally:
        conn.close()


def test_more_new_episodes_than_are_worth_adding_are_counted_anew(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(archive_stats, "MAX_NEW_ROWS", 2)
    rng = random.Random(11)
    append(settings, *(_episode(rng, agent, n) for agent in AGENTS for n in range(20)))
    project(settings)
    conn = connect(settings.hot_db)
    try:
        _same_as_fresh(conn)
        store = _kept_store(conn)
        append(settings, _episode(rng, "npc", 100, "paintbrush"), _episode(rng, "other", 101, "kittens"))
        project(settings)
        _same_as_fresh(conn)
        assert _kept_store(conn) is store  # two: added
        append(settings, *(_episode(rng, "npc", 200 + n, "paintbrush kittens") for n in range(3)))
        project(settings)
        _same_as_fresh(conn)
        assert _kept_store(conn) is not store  # three: counted anew
    finally:
        conn.close()


def test_a_count_taken_while_an_episode_is_added_is_not_kept(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index counts a term at its newest state, which may already hold an episode added after
    the version was read: kept under the older version, that episode would be added twice."""
    rng = random.Random(13)
    append(settings, *(_episode(rng, agent, n) for agent in AGENTS for n in range(20)))
    project(settings)
    conn = connect(settings.hot_db)
    counted = archive_stats.fts_terms.vocab_counts
    added: list[int] = []

    def meanwhile(*args: Any, **kwargs: Any) -> tuple[int, int, str]:
        if not added:  # another process's compression run commits during the first count
            append(settings, _episode(rng, "other", 99, "sourdough"))
            project(settings)
            added.append(1)
        return counted(*args, **kwargs)

    try:
        _statistics(conn)  # sizes and the quote words kept: the store is brought up to date after
        monkeypatch.setattr(archive_stats.fts_terms, "vocab_counts", meanwhile)
        terms, single = ["sourdough"], dict[str, str]()
        first = episode_search._frequencies(conn, terms, single)
        assert added and "sourdough" not in _kept_store(conn).terms  # taken past its version: not kept
        again = episode_search._frequencies(conn, terms, single)
        fresh = _fresh(lambda: episode_search._frequencies(conn, terms, {}))
        assert again == fresh and first == fresh
        assert _statistics(conn) == _fresh(lambda: _statistics(conn))
    finally:
        conn.close()
