"""The episode index's agent column: one token per episode naming its agent (runtime.episode_index).

The candidate tries AND the reading agent's token so the index skips every
other agent's documents. That must never change what a search finds or how
it ranks it, nor let a text reach another agent through the token: these
tests hold the token to its agent through every way an episode changes,
compare every candidate list with the phrase and without it (ranks bit for
bit), make an older store's index again at its next open (and leave a
read-only one as it is), and look for two agents' and two users' canaries.
"""

from __future__ import annotations

import multiprocessing
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers_runtime import append, episode
from tiermem.runtime import archive_stats, episode_index, episode_search, hotstore, quote_search
from tiermem.runtime.episode_index import DEFINITION, agent_phrase, agent_token
from tiermem.runtime.episode_search import COLUMN_WEIGHTS, PLAIN_WEIGHTS, _candidate_rows, _frequencies
from tiermem.runtime.hotstore import connect, indexes_agents
from tiermem.runtime.visibility import Principal

from tiermem import Memory
from tiermem.settings import resolve_settings

AGENTS = ("a1", "a2", "ünï-ꙮ agent", "ΑΒΓ")
WORDS = [
    "red",
    "pot",
    "key",
    "lake",
    "teal",
    "dawn",
    "bread",
    "kite",
    "stone",
    "river",
    "lamp",
    "coat",
    "map",
    "song",
]

# The index as stores made before the agent column hold it: four columns, triggers without the token.
OLDER_INDEX = (
    "CREATE VIRTUAL TABLE episodes_fts USING fts5(name, summary, quotes, participants)",
    "INSERT INTO episodes_fts (rowid, name, summary, quotes, participants) SELECT e.rowid, e.name, e.summary,"
    " (SELECT group_concat(json_extract(value, '$.text'), ' ') FROM json_each(coalesce(e.key_quotes, '[]'))),"
    " (SELECT group_concat(value, ' ') FROM json_each(coalesce(e.participants, '[]'))) FROM episodes e",
    "CREATE TRIGGER episodes_ai AFTER INSERT ON episodes BEGIN"
    " INSERT INTO episodes_fts (rowid, name, summary, quotes, participants) VALUES (new.rowid, new.name,"
    " new.summary, (SELECT group_concat(json_extract(value, '$.text'), ' ')"
    " FROM json_each(coalesce(new.key_quotes, '[]'))),"
    " (SELECT group_concat(value, ' ') FROM json_each(coalesce(new.participants, '[]')))); END",
    "CREATE TRIGGER episodes_ad AFTER DELETE ON episodes BEGIN DELETE FROM episodes_fts WHERE rowid = old.rowid; END",
    "CREATE TRIGGER episodes_au AFTER UPDATE OF name, summary, key_quotes, participants ON episodes BEGIN"
    " DELETE FROM episodes_fts WHERE rowid = old.rowid;"
    " INSERT INTO episodes_fts (rowid, name, summary, quotes, participants) VALUES (new.rowid, new.name,"
    " new.summary, (SELECT group_concat(json_extract(value, '$.text'), ' ')"
    " FROM json_each(coalesce(new.key_quotes, '[]'))),"
    " (SELECT group_concat(value, ' ') FROM json_each(coalesce(new.participants, '[]')))); END",
)


def _archive(data: Path, n: int = 60) -> Path:
    """Four agents (two with non-ASCII ids), each with episodes for alice, bob and nobody, each holding
    its agent's and user's canary; projected. Returns the hot store's path."""
    settings = resolve_settings(data_dir=data, env={})
    rng = random.Random(5)
    events = []
    for agent in AGENTS:
        for i in range(n):
            user = ("alice", "bob", None)[i % 3]
            canary = f"CANARY{AGENTS.index(agent)}{user or 'none'}"
            text = " ".join(rng.choices(WORDS, k=6))
            events.append(
                episode(
                    agent,
                    f"{text.split()[0]} {i}",
                    f"{text} {canary}",
                    key_quotes=[{"text": " ".join(rng.choices(WORDS, k=5)), "event_id": f"q-{agent}-{i}"}],
                    participants=[user] if user else [],
                    importance=1 + i % 10,
                    source_event_ids=[f"s-{agent}-{i}"],
                )
            )
    append(settings, *events)
    mem = Memory.open(data, env={})
    try:
        mem.refresh()
        return mem.settings.hot_db
    finally:
        mem.close()


def _tokens_by_rowid(conn: sqlite3.Connection) -> dict[int, str]:
    return {int(r[0]): str(r[1]) for r in conn.execute("SELECT rowid, agent FROM episodes_fts")}


def _held(conn: sqlite3.Connection) -> dict[int, str]:
    """What the index should hold in its agent column: each episode's agent's token."""
    return {int(r[0]): agent_token(str(r[1])) for r in conn.execute("SELECT rowid, agent_id FROM episodes")}


def test_each_episode_is_indexed_under_its_agents_token_through_every_change(tmp_path: Path) -> None:
    conn = connect(_archive(tmp_path / "data", n=6))
    assert indexes_agents(conn)
    assert _tokens_by_rowid(conn) == _held(conn) and len(_held(conn)) == 24
    # One token per agent, as FTS5's own tokenizer makes it (the SQL and the Python token agree).
    conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, episodes_fts, 'col')")
    tokens = {r[0]: r[1] for r in conn.execute("SELECT term, doc FROM temp.v WHERE col = 'agent'")}
    assert tokens == {agent_token(a): 6 for a in AGENTS}
    conn.execute("UPDATE episodes SET agent_id = 'a2' WHERE rowid = 1")  # moved to another agent
    conn.execute("DELETE FROM episodes WHERE rowid = 2")
    assert _tokens_by_rowid(conn) == _held(conn)
    count = "SELECT count(*) FROM episodes_fts WHERE episodes_fts MATCH ?"
    assert conn.execute(count, [agent_phrase("a2")]).fetchone()[0] == 7
    assert conn.execute(count, [agent_phrase("a1")]).fetchone()[0] == 4


def test_no_query_word_nor_episode_text_matches_an_agents_token(tmp_path: Path) -> None:
    """A text that spells an agent's token is not that agent's episode (the phrase is filtered to
    the agent column), and the searches' words (ASCII) never cover a token."""
    conn = connect(_archive(tmp_path / "data", n=3))
    forged = agent_token("a1")
    conn.execute("UPDATE episodes SET summary = ? WHERE agent_id = 'a2'", [f"{forged} red pot"])
    count = "SELECT count(*) FROM episodes_fts WHERE episodes_fts MATCH ?"
    assert conn.execute(count, [agent_phrase("a1")]).fetchone()[0] == 3
    assert conn.execute(count, [f'"{forged}"']).fetchone()[0] == 6  # unfiltered, the text would match
    hex_part = forged[1:5]  # what an ASCII query word could start with
    assert conn.execute(count, [f'"{hex_part}"*']).fetchone()[0] == 0
    who = Principal("a1", user="alice")
    shown = str(episode_search.search_episodes(conn, who, f"{hex_part} red pot", limit=20))
    assert "CANARY1" not in shown and "CANARY0alice" in shown


def _candidates(conn: sqlite3.Connection, who: Principal, query: str, participant: str | None) -> list[Any]:
    out = []
    for terms in (
        episode_search.query_terms(query),
        [f for g in quote_search.query_term_groups(query) for f in g],
    ):
        single: dict[str, str] = {}
        overall = _frequencies(conn, terms, single)
        for cols, weights, n in (
            ("e.episode_id, e.name, e.importance", COLUMN_WEIGHTS, 60),
            ("e.episode_id, e.summary", PLAIN_WEIGHTS, 200),
            ("e.episode_id", PLAIN_WEIGHTS, 7),
        ):
            rows = _candidate_rows(conn, who, cols, weights, terms, overall, participant, n, 3, single)
            out.append([tuple(r) for r in rows])
    return out


@pytest.mark.parametrize("caps", [(None, None), (40, 30), (5, 12), (5, 100)])  # (5, 100): walked forward
def test_the_agents_phrase_changes_no_match_nor_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caps: tuple[int | None, int | None]
) -> None:
    """Every try both searches walk with the agent's phrase ANDed is walked again without it: the
    same visible rows in the same order, the same window, and the same ranks, bit for bit (ranked
    or not, windowed or not: small caps make windows)."""
    from tiermem.runtime import fts_terms

    conn = connect(_archive(tmp_path / "data"))
    if caps[0] is not None:
        monkeypatch.setattr(fts_terms, "CANDIDATE_DOC_CAP", caps[0])
        monkeypatch.setattr(fts_terms, "WINDOW_DOCS", caps[1])
    rng = random.Random(9)
    queries = [" ".join(rng.choices(WORDS, k=k)) for k in (1, 2, 3, 5) for _ in range(6)]
    walk, ranked_rows = episode_search._walk, episode_search._ranked_rows
    compared = {"walks": 0, "ranks": 0, "windowed": 0}

    def both_walks(
        c: Any, source: str, agent_id: str, where: str, params: list[Any], attempt: Any, windowed: bool
    ) -> Any:
        found = walk(c, source, agent_id, where, params, attempt, windowed)
        if attempt.agent is not None:
            plain = walk(
                c, source, agent_id, where, params, episode_search._Try(attempt.match, None), windowed
            )
            assert (found.visible, found.newest, found.ranked) == (plain.visible, plain.newest, plain.ranked)
            compared["walks"] += 1
            compared["windowed"] += windowed
        return found

    def both_ranks(c: Any, source: str, where: str, params: list[Any], attempt: Any) -> Any:
        ranked = ranked_rows(c, source, where, params, attempt)
        if attempt.agent is not None:
            plain = ranked_rows(c, source, where, params, episode_search._Try(attempt.match, None))
            assert sorted(ranked) == sorted(plain)
            compared["ranks"] += len(ranked)
        return ranked

    monkeypatch.setattr(episode_search, "_walk", both_walks)
    monkeypatch.setattr(episode_search, "_ranked_rows", both_ranks)
    for agent in AGENTS:
        for user in ("alice", "bob", None):
            who = Principal(agent, user=user)
            for query in queries:
                for participant in (None, "alice"):
                    conn.candidate_memo = None
                    _candidates(conn, who, query, participant)
    assert compared["walks"] > 500
    if caps[0] is None:
        assert compared["ranks"] > 1000  # the words are rare enough overall for BM25
    else:
        assert compared["windowed"] > 50


def _insert(conn: sqlite3.Connection, agent: str, n: int, summary: str, importance: int) -> None:
    conn.execute(
        "INSERT INTO episodes (episode_id, agent_id, name, summary, start_ts, end_ts, importance)"
        " VALUES (?, ?, ?, ?, '2026-03-01T10:00:00Z', '2026-03-01T11:00:00Z', ?)",
        [f"{agent}-{n}", agent, f"day {n}", summary, importance],
    )


def test_the_tries_are_chosen_by_the_agents_own_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a store of several agents a word can be rare overall and absent from this agent's
    episodes, and another common overall and in one of them: chosen by the whole index's counts,
    the only try was the rare word, found nothing visible, and the search fell back to the most
    important recent episodes; chosen by the agent's own, it finds the episode that holds a word."""
    from tiermem.runtime import fts_terms

    monkeypatch.setattr(fts_terms, "CANDIDATE_DOC_CAP", 5)
    conn = connect(tmp_path / "hot.sqlite")
    for n in range(12):
        _insert(conn, "a2", n, "the brass lantern by the door", 5)
    _insert(conn, "a2", 12, "a zephyr over the hills", 5)
    _insert(conn, "a1", 0, "LANTERNCANARY the old lantern", 1)
    for n in range(1, 8):
        _insert(conn, "a1", n, "IMPORTANTCANARY market and bread", 9)
    # Another agent's episodes outnumber this one's: its phrase is ANDed and its counts are asked.
    for n in range(13, 40):
        _insert(conn, "a3", n, "quiet fields", 1)
    who = Principal("a1")
    terms = episode_search.query_terms("zephyr lantern")
    single: dict[str, str] = {}
    overall = _frequencies(conn, terms, single)
    assert overall == {"zephyr": 1, "lantern": 14}  # "lantern"* covers "lanterncanary" too
    assert episode_search._own_counts(conn, "a1", terms, overall, single) == {"zephyr": 0, "lantern": 1}
    found = episode_search.search_episodes(conn, who, "zephyr lantern", limit=1)
    assert "LANTERNCANARY" in found[0]["summary"]
    # Chosen by the whole index's counts (as without the agent's phrase), the one try found
    # nothing of a1's.
    monkeypatch.setattr(episode_search, "AGENT_SHARE", 0.0)
    conn.candidate_memo = None
    found = episode_search.search_episodes(conn, who, "zephyr lantern", limit=1)
    assert "IMPORTANTCANARY" in found[0]["summary"]


def test_the_agents_own_counts_are_its_episodes_holding_each_term(tmp_path: Path) -> None:
    conn = connect(_archive(tmp_path / "data", n=30))
    terms = ["red", "pot", "lake", "teal", "brea", "rive", "zzz", "canary0alice", "canary1"]
    single: dict[str, str] = {}
    overall = _frequencies(conn, terms, single)
    for agent in AGENTS:
        own = episode_search._own_counts(conn, agent, terms, overall, single)
        for t in terms:
            match = f'"{t}"*' if len(t) >= 4 else f'"{t}"'
            want = conn.execute(
                "SELECT count(*) FROM episodes e JOIN episodes_fts f ON f.rowid = e.rowid"
                " WHERE e.agent_id = ? AND episodes_fts MATCH ?",
                [agent, match],
            ).fetchone()[0]
            assert own[t] == want, (agent, t)
        assert own["zzz"] == 0 and (own["canary1"] > 0) == (agent == AGENTS[1])


def test_a_prefixs_words_are_counted_and_tried_as_words_for_the_agent(tmp_path: Path) -> None:
    """A prefix covering a few words is counted and tried for the agent as the OR of those words
    (which the index skips through to the agent's documents), the same documents as the prefix's;
    a word first written by a later episode joins them when the statistics catch up."""
    conn = connect(tmp_path / "hot.sqlite")
    texts = ["painted the fence", "the painting class", "a painter friend", "market bread", "paint shop"]
    for n, text in enumerate(texts):
        _insert(conn, "a1", n, text, 5)
    for n in range(40):
        _insert(conn, "a2", 100 + n, f"paintings and painters {n}", 5)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    terms = episode_search.query_terms("painting")
    assert terms == ["paint"]
    single: dict[str, str] = {}
    overall = _frequencies(conn, terms, single)
    assert archive_stats.covered(conn, terms) == {
        "paint": ("paint", "painted", "painter", "painters", "painting", "paintings")
    }
    own = episode_search._own_counts(conn, "a1", terms, overall, single)
    assert own == {"paint": 4}
    assert any('"painted" OR "painter"' in s and agent_token("a1") in s for s in statements)
    conn.set_trace_callback(None)
    _insert(conn, "a1", 5, "PAINTBALLCANARY paintball day", 9)
    assert episode_search._own_counts(conn, "a1", terms, overall, single) == {"paint": 5}
    assert "paintball" in archive_stats.covered(conn, terms)["paint"]
    found = episode_search.search_episodes(conn, Principal("a1"), "paint", limit=10)
    assert len(found) == 5 and "PAINTBALLCANARY" in str(found)
    assert "paintings" not in str(found)  # a2's episodes are not a1's


def _prefix_count(conn: sqlite3.Connection, agent: str, term: str) -> int:
    sql = (
        "SELECT count(*) FROM episodes e JOIN episodes_fts f ON f.rowid = e.rowid"
        " WHERE e.agent_id = ? AND episodes_fts MATCH ?"
    )
    return int(conn.execute(sql, [agent, f'"{term}"*']).fetchone()[0])


def test_a_prefix_of_more_words_than_are_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past `MAX_COVERED` words (from the start, or grown past it by a new episode) a prefix is not
    listed: counted as a prefix while rare overall, and its overall count scaled to the agent's
    share once common (the prefix's merge would walk the whole index's lists); found all the same."""
    from tiermem.runtime import fts_terms

    monkeypatch.setattr(fts_terms, "MAX_COVERED", 3)
    conn = connect(tmp_path / "hot.sqlite")
    for n, word in enumerate(["painted", "painter", "painting"]):
        _insert(conn, "a1", n, f"the {word}", 5)
    for n in range(30):
        _insert(conn, "a2", 100 + n, "painted painter walls", 5)  # two words each: counted twice overall
    terms = ["paint"]
    overall = _frequencies(conn, terms, {})
    assert archive_stats.covered(conn, terms) == {"paint": ("painted", "painter", "painting")}
    assert episode_search._own_counts(conn, "a1", terms, overall, {}) == {"paint": 3}
    _insert(conn, "a1", 3, "PAINTBALLCANARY paintball", 9)  # a fourth word: no longer listed
    overall = _frequencies(conn, terms, {})
    assert archive_stats.covered(conn, terms) == {}
    assert (
        episode_search._own_counts(conn, "a1", terms, overall, {})
        == {"paint": 4}
        == {"paint": _prefix_count(conn, "a1", "paint")}
    )
    found = str(episode_search.search_episodes(conn, Principal("a1"), "paint", limit=10))
    assert "PAINTBALLCANARY" in found and "walls" not in found
    # Common overall (past the exact count's limit): the overall count scaled to a1's share.
    monkeypatch.setattr(episode_search, "EXACT_DF_LIMIT", 10)
    _, total, all_docs = episode_search._archive_sizes(conn, "a1")
    scaled = round(overall["paint"] * total / all_docs)
    assert scaled == 8  # 64 documents of words overall, a1 4 of 34 episodes
    assert episode_search._own_counts(conn, "a1", terms, overall, {}) == {"paint": scaled}
    conn.candidate_memo = None
    assert "PAINTBALLCANARY" in str(episode_search.search_episodes(conn, Principal("a1"), "paint", limit=10))
    # Counted afresh with more words than are listed: not listed (none of them known), counted.
    archive_stats.clear()
    monkeypatch.setattr(episode_search, "EXACT_DF_LIMIT", 10_000)
    overall = _frequencies(conn, terms, {})
    assert archive_stats.covered(conn, terms) == {}
    assert episode_search._own_counts(conn, "a1", terms, overall, {}) == {"paint": 4}
    # A listed prefix of one word, its statistics not kept here: counted by that word.
    archive_stats.clear()
    assert episode_search._own_counts(conn, "a1", ["paintb"], {"paintb": 1}, {"paintb": "paintball"}) == {
        "paintb": 1
    }


@pytest.mark.parametrize("user", ["alice", "bob", None])
def test_each_reader_gets_only_its_agents_and_users_episodes(tmp_path: Path, user: str | None) -> None:
    hot = _archive(tmp_path / "data")
    conn = connect(hot)
    for k, agent in enumerate(AGENTS):
        who = Principal(agent, user=user)
        shown = str(episode_search.search_episodes(conn, who, "red pot key lake", limit=50))
        shown += str(quote_search.search_quotes(conn, who, "red pot key lake"))
        allowed = {f"CANARY{k}none"} | ({f"CANARY{k}{user}"} if user else set())
        found = {w.strip("',.\"") for w in shown.split() if "CANARY" in w}
        assert found and found <= allowed


def _older_store(data: Path) -> Path:
    """A projected store whose index is the one made before the agent column."""
    path = _archive(data, n=9)
    raw = sqlite3.connect(path)
    for name in ("episodes_ai", "episodes_ad", "episodes_au"):
        raw.execute(f"DROP TRIGGER {name}")
    raw.execute("DROP TABLE episodes_fts")
    for statement in OLDER_INDEX:
        raw.execute(statement)
    raw.commit()
    raw.close()
    return path


def _answers(conn: sqlite3.Connection) -> list[Any]:
    out = []
    for agent in AGENTS:
        who = Principal(agent, user="alice")
        for query in ("red pot", "teal lake dawn", "kite stone river lamp"):
            found = episode_search.search_episodes(conn, who, query, limit=5)
            out.append([(r["episode_id"], r["key_quotes"]) for r in found])
    return out


def test_an_older_stores_index_is_made_again_at_its_next_open(tmp_path: Path) -> None:
    path = _older_store(tmp_path / "data")
    unopened = connect(path, create=False)  # a connection that does not set the schema up
    assert not indexes_agents(unopened)
    before = _answers(unopened)  # searched without the token
    unopened.close()
    conn = connect(path)
    assert indexes_agents(conn)
    definition = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'episodes_fts'").fetchone()[0]
    assert definition == DEFINITION
    assert _tokens_by_rowid(conn) == _held(conn) and len(_held(conn)) == 36
    # The words found are the same; ranks move a little (every document is a token longer).
    assert [[e for e, _ in found] for found in _answers(conn)] == [[e for e, _ in f] for f in before]
    # Its triggers are the new ones: a changed text, a change of agent and an insert are indexed
    # with the token (the older update trigger would have indexed a changed text without it).
    conn.execute("UPDATE episodes SET summary = 'red pot again' WHERE rowid = 2")
    conn.execute("UPDATE episodes SET agent_id = 'a2' WHERE rowid = 1")
    conn.execute(
        "INSERT INTO episodes (episode_id, agent_id, name, summary) VALUES ('new', 'a1', 'n', 'red pot')"
    )
    assert _tokens_by_rowid(conn) == _held(conn) and len(_held(conn)) == 37


def _open_store(path: str, made: Any) -> None:
    conn = connect(path, create=False)
    made.put(hotstore.ensure_episode_index(conn))
    conn.close()


def test_two_processes_opening_an_older_store_make_its_index_once(tmp_path: Path) -> None:
    path = _older_store(tmp_path / "data")
    ctx = multiprocessing.get_context("spawn")
    made = ctx.Queue()
    procs = [ctx.Process(target=_open_store, args=(str(path), made)) for _ in range(2)]
    for p in procs:
        p.start()
    answers = sorted(made.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert answers == [False, True]  # one made it; the other found it made, or the lock taken
    conn = connect(path)
    assert _tokens_by_rowid(conn) == _held(conn) and len(_held(conn)) == 36
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name LIKE 'episodes_a_'").fetchone()[0] == 3


def test_a_writer_cannot_slip_an_episode_between_the_fill_and_the_triggers(tmp_path: Path) -> None:
    path = _older_store(tmp_path / "data")
    conn = connect(path, create=False)
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    tried: list[str] = []
    copy = "INSERT INTO episodes (episode_id, agent_id, name, summary) VALUES ('late', 'a1', 'late', 'late red pot')"

    def between(sql: str) -> None:
        if not tried and "CREATE TRIGGER" in sql and "episodes_ai" in sql:
            try:
                other.execute(copy)
                tried.append("written")
            except sqlite3.OperationalError as exc:  # locked out, as it must be
                tried.append(str(exc))

    conn.set_trace_callback(between)
    assert hotstore.ensure_episode_index(conn)
    conn.set_trace_callback(None)
    assert tried and tried != ["written"]
    other.execute(copy)
    assert _tokens_by_rowid(conn) == _held(conn) and len(_held(conn)) == 37


def test_a_read_only_older_store_keeps_its_index_and_searches_without_the_token(tmp_path: Path) -> None:
    path = _older_store(tmp_path / "data")
    ro = sqlite3.connect(f"file:{path}?mode=ro", uri=True, factory=hotstore.HotConnection)
    assert not hotstore.ensure_episode_index(ro)  # cannot write: leaves the store as it is
    assert not indexes_agents(ro)
    assert episode_search._agent_phrase(ro, "a1") is None
    shown = str(episode_search.search_episodes(ro, Principal("a1", user="alice"), "red pot key", limit=50))
    found = {w.strip("',.\"") for w in shown.split() if "CANARY" in w}
    assert found == {"CANARY0alice", "CANARY0none"}


def test_an_opener_that_finds_the_write_lock_taken_leaves_the_index_for_later(tmp_path: Path) -> None:
    """Another connection holds the write lock (a long write, or this very rebuild): the opener does
    not queue behind it (its busy timeout is 30 s), it searches without the token until it asks again."""
    path = _older_store(tmp_path / "data")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    conn = connect(path)  # opens at once, the index as it was
    assert not indexes_agents(conn) and not episode_index.defined(conn)
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == hotstore.BUSY_TIMEOUT_MS
    assert "CANARY0alice" in str(
        episode_search.search_episodes(conn, Principal("a1", user="alice"), "red pot", limit=50)
    )
    holder.execute("ROLLBACK")
    assert hotstore.ensure_episode_index(conn) and indexes_agents(conn)
    assert _tokens_by_rowid(conn) == _held(conn)
