"""An agent's own copy of its episodes (runtime.own_episodes): what its searches are answered from
where it holds a small share of the archive.

The copy must count and match every term as the index does (its tokens are
the index's), rank by BM25 over the agent's own episodes only (so no other
agent's writing moves an answer), follow every change to the store (added,
updated, deleted, erased, rolled back, written by another process), never
hold more than its bounds, and show each reader only what it may see.
"""

from __future__ import annotations

import multiprocessing
import random
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest
from tiermem.runtime import episode_search, own_episodes, quote_search
from tiermem.runtime.episode_index import agent_phrase
from tiermem.runtime.episode_search import COLUMN_WEIGHTS, PLAIN_WEIGHTS, own_copy
from tiermem.runtime.episode_text import TEXTS
from tiermem.runtime.hotstore import connect, item_clause
from tiermem.runtime.visibility import Principal, owner_key

WORDS = ["red", "pot", "key", "lake", "teal", "dawn", "bread", "kite", "stone", "river", "paint", "painted"]
# Text the tokenizer splits or folds otherwise than on ASCII: accents, curly quotes, digits, a dash.
ODD = ["café crème", "“quoted”", "naïve 2024", "x-ray", "ÉCOLE", "Zoë’s"]
USERS = ("alice", "bob", None)


@pytest.fixture(autouse=True)
def _no_copies() -> Any:
    own_episodes.clear()
    yield
    own_episodes.clear()


def _insert(conn: sqlite3.Connection, agent: str, n: int, rng: random.Random, **fields: Any) -> int:
    user = fields.pop("user", USERS[n % 3])
    words = rng.choices(WORDS, k=6)
    summary = fields.pop("summary", f"{' '.join(words)} {rng.choice(ODD)} CANARY{agent}{user or 'none'}")
    quotes = fields.pop("quotes", [" ".join(rng.choices(WORDS, k=5)), rng.choice(ODD)])
    participants = fields.pop("participants", [user.title() if n % 2 else user] if user else [])
    conn.execute(
        "INSERT INTO episodes (episode_id, agent_id, name, summary, participants, start_ts, end_ts,"
        " importance, owner, key_quotes) VALUES (?, ?, ?, ?, ?, '2026-03-01T10:00:00Z',"
        " '2026-03-01T11:00:00Z', ?, ?, ?)",
        [
            f"{agent}-{n}",
            agent,
            fields.pop("name", f"{words[0]} {n}"),
            summary,
            orjson.dumps(participants).decode(),
            1 + n % 9,
            owner_key([user]),
            orjson.dumps(
                [{"text": q, "event_id": f"q-{agent}-{n}-{k}"} for k, q in enumerate(quotes)]
            ).decode(),
        ],
    )
    return int(conn.execute("SELECT max(rowid) FROM episodes").fetchone()[0])


def _store(path: Path, sizes: dict[str, int], seed: int = 3) -> sqlite3.Connection:
    conn = connect(path)
    rng = random.Random(seed)
    for agent, n in sizes.items():
        for i in range(n):
            _insert(conn, agent, i, rng)
    return conn


def _index_count(conn: sqlite3.Connection, agent: str, term: str) -> int:
    match = f'"{term}"*' if len(term) >= 4 else f'"{term}"'
    sql = "SELECT count(*) FROM episodes_fts WHERE episodes_fts MATCH ?"
    return int(conn.execute(sql, [f"({match}) AND {agent_phrase(agent)}"]).fetchone()[0])


def _index_visible(
    conn: sqlite3.Connection, who: Principal, terms: list[str], participant: str | None
) -> set[int]:
    """What the index matches of the OR of `terms` that `who` may see (and that names `participant`)."""
    where, params = item_clause(who, "e")
    if participant:
        where += " AND EXISTS (SELECT 1 FROM json_each(e.participants) p WHERE lower(p.value) = lower(?))"
        params.append(participant)
    match = " OR ".join(f'"{t}"*' if len(t) >= 4 else f'"{t}"' for t in terms)
    sql = (
        "SELECT e.rowid FROM episodes_fts JOIN episodes e ON e.rowid = episodes_fts.rowid"
        f" WHERE episodes_fts MATCH ? AND {where}"
    )
    return {r[0] for r in conn.execute(sql, [f"({match}) AND {agent_phrase(who.agent_id)}", *params])}


TERMS = [
    "red",
    "pot",
    "lake",
    "paint",
    "pain",
    "cafe",
    "creme",
    "quoted",
    "naive",
    "2024",
    "ecole",
    "zoe",
    "ray",
    "canaryb",
]


def test_the_copy_counts_and_matches_every_term_as_the_index(tmp_path: Path) -> None:
    conn = _store(tmp_path / "hot.db", {"a1": 40, "a2": 90, "ꙮ-agent": 30})
    for agent in ("a1", "ꙮ-agent"):
        copy = own_copy(conn, agent)
        assert copy is not None and len(copy.rowids) == {"a1": 40, "ꙮ-agent": 30}[agent]
        with own_episodes.lock():
            assert copy.counts(TERMS) == {t: _index_count(conn, agent, t) for t in TERMS}
        rng = random.Random(agent)
        for user in USERS:
            who = Principal(agent, user=user)
            for k in (1, 1, 2, 3, 5):
                terms = rng.sample(TERMS, k)
                for participant in (None, "alice", "ALICE", "bob"):
                    with own_episodes.lock():
                        found = copy.candidates(who, terms, COLUMN_WEIGHTS, participant, 10_000)
                    assert {r for r, _ in found} == _index_visible(conn, who, terms, participant)
    assert {r for r, _ in own_copy(conn, "a1").candidates(Principal("a1"), ["cafe"], PLAIN_WEIGHTS, None, 99)}
    # The agent holding most of the archive is searched through the index, as before.
    assert own_copy(conn, "a2") is None


def test_the_ranks_are_the_index_bm25_over_the_agents_own_episodes(tmp_path: Path) -> None:
    """The same episodes alone in a store: the index's bm25() there is the copy's rank here, bit
    for bit (its order of operations, a column's weight added once per instance)."""
    mixed = _store(tmp_path / "mixed.db", {"a1": 50, "a2": 120})
    rng = random.Random(6)
    for n, times in enumerate((6, 10, 11, 3), start=50):  # where w * n is not n additions of w (1.2)
        _insert(mixed, "a1", n, rng, quotes=[" ".join(["lake"] * times), "red pot"], user="alice")
    alone = connect(tmp_path / "alone.db")
    columns = (
        "episode_id, agent_id, name, summary, participants, start_ts, end_ts, importance, owner, key_quotes"
    )
    rows = mixed.execute(f"SELECT {columns} FROM episodes WHERE agent_id = 'a1' ORDER BY rowid").fetchall()
    alone.executemany(f"INSERT INTO episodes ({columns}) VALUES ({', '.join('?' * 10)})", rows)
    rowid_of = {r[0]: r[1] for r in mixed.execute("SELECT episode_id, rowid FROM episodes")}
    copy = own_copy(mixed, "a1")
    assert copy is not None
    for weights in (COLUMN_WEIGHTS, PLAIN_WEIGHTS):
        for terms in (["red", "lake"], ["paint"], ["pot", "teal", "cafe", "river"], ["dawn", "zoe"]):
            match = " OR ".join(f'"{t}"*' if len(t) >= 4 else f'"{t}"' for t in terms)
            sql = (
                f"SELECT e.episode_id, bm25(episodes_fts, {', '.join(map(str, weights))}) FROM episodes_fts"
                " JOIN episodes e ON e.rowid = episodes_fts.rowid WHERE episodes_fts MATCH ?"
            )
            expected = {rowid_of[e]: rank for e, rank in alone.execute(sql, [match])}
            with own_episodes.lock():
                found = dict(copy.candidates(Principal("a1", user="alice"), terms, weights, None, 10_000))
            assert found and set(found) <= set(expected)
            assert found == {r: expected[r] for r in found}  # bit for bit


def _answers(conn: sqlite3.Connection, agent: str) -> list[Any]:
    out: list[Any] = []
    for user in ("alice", None):
        who = Principal(agent, user=user)
        for q in ("red pot", "painting by the lake", "kite stone river dawn", "café"):
            out.append(episode_search.search_episodes(conn, who, q, limit=5))
            out.append(quote_search.search_quotes(conn, who, q, limit=10))
    return out


def test_an_agents_answers_do_not_move_when_other_agents_write(tmp_path: Path) -> None:
    conn = _store(tmp_path / "hot.db", {"a1": 30, "a2": 40})
    before = _answers(conn, "a1")
    rng = random.Random(11)
    for n in range(40, 400):  # another agent writes the same words, many times over
        _insert(conn, "a2", n, rng)
    for n in range(300):
        _insert(conn, "a3", n, rng, summary="red red red pot lake painting kite stone river dawn café")
    assert _answers(conn, "a1") == before
    assert own_copy(conn, "a1") is not None


@pytest.mark.parametrize("user", ["alice", "bob", None])
def test_each_reader_gets_only_its_agents_and_users_episodes(tmp_path: Path, user: str | None) -> None:
    conn = _store(tmp_path / "hot.db", {"a1": 30, "a2": 30, "a3": 30})
    for agent in ("a1", "a2", "a3"):
        assert own_copy(conn, agent) is not None
        who = Principal(agent, user=user)
        shown = str(episode_search.search_episodes(conn, who, "red pot key lake canary", limit=50))
        shown += str(quote_search.search_quotes(conn, who, "red pot key lake canary"))
        shown += str(episode_search.search_episodes(conn, who, "canary", participant="bob", limit=50))
        allowed = {f"CANARY{agent}none"} | ({f"CANARY{agent}{user}"} if user else set())
        found = {w.strip("',.\"") for w in shown.split() if "CANARY" in w}
        assert found and found <= allowed


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Each read of an agent's documents: (agent, the rowid read after)."""
    reads: list[tuple[str, int]] = []
    real = own_episodes._documents

    def documents(conn: Any, agent_id: str, after: int, upto: int | None) -> list[Any]:
        reads.append((agent_id, after))
        return real(conn, agent_id, after, upto)

    monkeypatch.setattr(own_episodes, "_documents", documents)
    return reads


def _found(conn: sqlite3.Connection, who: Principal, query: str) -> str:
    return str(episode_search.search_episodes(conn, who, query, limit=50))


def test_the_copy_follows_every_change_to_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = _store(tmp_path / "hot.db", {"a1": 20, "a2": 40})
    reads = _spy(monkeypatch)
    alice = Principal("a1", user="alice")
    assert "ZEBRACANARY" not in _found(conn, alice, "zebra")
    copy = own_copy(conn, "a1")
    rng = random.Random(2)
    # Added: another agent's episode moves the newest rowid, and only a1's index range is read past it.
    newest = _insert(conn, "a2", 99, rng)
    assert own_copy(conn, "a1") is copy and copy.newest == newest and reads[-1] == ("a1", newest - 1)
    mine = _insert(conn, "a1", 98, rng, user="alice", summary="a zebra ZEBRACANARY")
    assert "ZEBRACANARY" in _found(conn, alice, "zebra") and own_copy(conn, "a1") is copy
    assert mine in copy.rowids
    # Updated: the episode changes hands, and the copy is read again.
    conn.execute("UPDATE episodes SET owner = 'bob' WHERE rowid = ?", [mine])
    assert "ZEBRACANARY" not in _found(conn, alice, "zebra")
    assert "ZEBRACANARY" in _found(conn, Principal("a1", user="bob"), "zebra")
    assert own_copy(conn, "a1") is not copy and reads[-1] == ("a1", 0)
    # Deleted.
    conn.execute("DELETE FROM episodes WHERE rowid = ?", [mine])
    assert "ZEBRACANARY" not in _found(conn, Principal("a1", user="bob"), "zebra")
    copy = own_copy(conn, "a1")
    with own_episodes.lock():
        assert copy.counts(["zebra"]) == {"zebra": 0}


def test_inside_a_transaction_nothing_is_kept(tmp_path: Path) -> None:
    conn = _store(tmp_path / "hot.db", {"a1": 20, "a2": 40})
    alice = Principal("a1", user="alice")
    rng = random.Random(4)
    conn.execute("BEGIN")
    _insert(conn, "a1", 50, rng, user="alice", summary="a yak YAKCANARY")
    assert "YAKCANARY" in _found(conn, alice, "yak")
    assert not own_episodes._KEPT.copies
    conn.execute("ROLLBACK")
    assert "YAKCANARY" not in _found(conn, alice, "yak")
    assert all("yakcanary" not in c.postings for c in own_episodes._KEPT.copies.values())


def test_an_erasure_drops_the_stores_copies(tmp_path: Path) -> None:
    from tiermem.runtime import hotstore

    conn = _store(tmp_path / "hot.db", {"a1": 20, "a2": 40})
    other = _store(tmp_path / "other.db", {"a1": 20, "a2": 40})
    for c in (conn, other):
        own_copy(c, "a1")
    assert len(own_episodes._KEPT.copies) == 2
    TEXTS.erasure_done(hotstore.database_key(conn))  # this process has just erased something there
    assert [k[0] for k in own_episodes._KEPT.copies] == [hotstore.database_key(other)]
    # An erasure made by another process is met at the next read of the store's mark.
    kept = own_copy(conn, "a1")
    before = own_copy(other, "a1")
    other.execute(
        "INSERT INTO erasures (event_id, target_kind, target, ts) VALUES ('e1', 'user', 'alice', '2026-03-02T00:00:00Z')"
    )
    assert own_copy(other, "a1") is not before and before not in own_episodes._KEPT.copies.values()
    assert own_copy(conn, "a1") is kept


def test_the_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = _store(tmp_path / "hot.db", {"a1": 20, "a2": 20, "a3": 20, "a4": 100})
    copies = [own_copy(conn, a) for a in ("a1", "a2", "a3")]
    sizes = [c.size for c in copies if c is not None]
    tokens = [c.tokens for c in copies if c is not None]
    assert len(sizes) == 3 and own_episodes._KEPT.size == sum(sizes)
    # Together at most MAX_KEPT_TOKENS: the least recently searched goes first.
    own_episodes.clear()
    monkeypatch.setattr(own_episodes, "MAX_KEPT_BYTES", sizes[0] + sizes[1] + sizes[2] - 1)
    for a in ("a1", "a2", "a3"):
        own_copy(conn, a)
    assert [k[1] for k in own_episodes._KEPT.copies] == ["a2", "a3"]
    assert own_episodes._KEPT.size == sizes[1] + sizes[2]
    # An agent with more tokens than a copy may hold, or more episodes, is searched through the index.
    who = Principal("a1", user="alice")
    copied = _ids(conn, who, "red lake")
    monkeypatch.setattr(own_episodes, "MAX_AGENT_TOKENS", tokens[0] - 1)
    own_episodes.clear()
    assert own_copy(conn, "a1") is None and own_episodes._KEPT.left
    assert _ids(conn, who, "red lake") == copied  # every match wanted: the same ones, otherwise ranked
    monkeypatch.setattr(own_episodes, "MAX_AGENT_TOKENS", 10**9)
    _insert(conn, "a1", 20, random.Random(1))
    assert own_copy(conn, "a1") is None  # too large at 20 episodes: not read again at more
    conn.execute(
        "DELETE FROM episodes WHERE agent_id = 'a1' AND rowid IN (SELECT rowid FROM episodes WHERE agent_id = 'a1' LIMIT 2)"
    )
    assert own_copy(conn, "a1") is not None  # ...but at fewer
    monkeypatch.setattr(own_episodes, "MAX_EPISODES", 18)
    assert own_copy(conn, "a1") is None


def _ids(conn: sqlite3.Connection, who: Principal, query: str) -> set[str]:
    found = episode_search.search_episodes(conn, who, query, limit=50)
    assert 5 < len(found) < 50
    return {e["episode_id"] for e in found}


def _writer(path: str, start: int, n: int) -> None:
    conn = connect(Path(path))
    rng = random.Random(start)
    for i in range(start, start + n):
        _insert(conn, "a1", i, rng, user="alice", summary=f"written WRITTENCANARY{i}")
        _insert(conn, "a2", i, rng)


def test_a_reader_keeps_up_with_a_writing_process(tmp_path: Path) -> None:
    path = tmp_path / "hot.db"
    conn = _store(path, {"a1": 20, "a2": 60})
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=_writer, args=(str(path), 1000, 150))
    proc.start()
    alice = Principal("a1", user="alice")
    while proc.is_alive():
        found = episode_search.search_episodes(conn, alice, "written", limit=3)  # or the newest, none yet
        assert found and all(
            e["episode_id"].startswith("a1-") and "CANARYa1bob" not in e["summary"] for e in found
        )
    proc.join(120)
    assert proc.exitcode == 0
    copy = own_copy(conn, "a1")
    with own_episodes.lock():
        assert copy.counts(["written", "writtencanary1149"]) == {"written": 150, "writtencanary1149": 1}
        assert copy.rowids == [
            r[0] for r in conn.execute("SELECT rowid FROM episodes WHERE agent_id = 'a1' ORDER BY rowid")
        ]


def _blocked(monkeypatch: pytest.MonkeyPatch, change: Any) -> None:
    """`change()` committed by another connection between the store's version and the agent's
    documents being read (once)."""
    real, done = own_episodes._documents, []

    def documents(c: Any, agent_id: str, after: int, upto: int | None) -> list[Any]:
        if not done:
            done.append(1)
            change()
        return real(c, agent_id, after, upto)

    monkeypatch.setattr(own_episodes, "_documents", documents)


@pytest.mark.parametrize("extending", [False, True])
@pytest.mark.parametrize("change", ["owner", "delete", "insert", "summary"])
def test_a_commit_between_the_version_and_the_read_files_nothing_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extending: bool, change: str
) -> None:
    path = tmp_path / "hot.db"
    conn = _store(path, {"a1": 20, "a2": 40})
    other = connect(path)
    rng = random.Random(9)
    sql = "SELECT rowid FROM episodes WHERE agent_id = 'a1' AND owner = 'alice' ORDER BY rowid LIMIT 1"
    target = conn.execute(sql).fetchone()[0]
    if extending:
        own_copy(conn, "a1")
        _insert(conn, "a1", 77, rng, user="alice", summary="new zebra")
    changes = {
        "owner": lambda: other.execute("UPDATE episodes SET owner = 'bob' WHERE rowid = ?", [target]),
        "delete": lambda: other.execute("DELETE FROM episodes WHERE rowid = ?", [target]),
        "insert": lambda: _insert(other, "a1", 88, rng, user="alice", summary="zebra inserted"),
        "summary": lambda: other.execute(
            "UPDATE episodes SET summary = 'zebra changed' WHERE rowid = ?", [target]
        ),
    }
    with monkeypatch.context() as patch:
        _blocked(patch, changes[change])
        own_copy(conn, "a1")
    copy = own_copy(conn, "a1")
    assert copy is not None
    truth = [r[0] for r in conn.execute("SELECT rowid FROM episodes WHERE agent_id = 'a1' ORDER BY rowid")]
    assert copy.rowids == truth
    alice = Principal("a1", user="alice")
    with own_episodes.lock():
        found = {r for r, _ in copy.candidates(alice, ["zebra", "red"], COLUMN_WEIGHTS, None, 999)}
    assert found == _index_visible(conn, alice, ["zebra", "red"], None)


def test_a_failure_while_new_episodes_are_added_leaves_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tiermem.runtime import fts_mirror

    conn = _store(tmp_path / "hot.db", {"a1": 10, "a2": 30})
    copy = own_copy(conn, "a1")
    rng = random.Random(2)
    first = _insert(conn, "a1", 60, rng, user=None, summary="zebra one")
    _insert(conn, "a1", 61, rng, user=None, summary="zebra two")
    real, calls = fts_mirror.document_tokens, []

    def failing(row: Any, sizes: list[int]) -> Any:
        calls.append(row[0])
        if len(calls) == 2:
            raise MemoryError("while the second new episode is tokenized")
        return real(row, sizes)

    with monkeypatch.context() as patch:
        patch.setattr(fts_mirror, "document_tokens", failing)
        with pytest.raises(MemoryError):
            own_copy(conn, "a1")
    assert copy.rowids.count(first) == 0  # nothing of it filed
    # ...and when filing itself fails part way, the copy goes.
    add = own_episodes.OwnEpisodes.add

    def half(self: Any, docs: Any) -> None:
        add(self, docs[:1])
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(own_episodes.OwnEpisodes, "add", half)
        with pytest.raises(KeyboardInterrupt):
            own_copy(conn, "a1")
    assert not own_episodes._KEPT.copies and own_episodes._KEPT.size == 0
    again = own_copy(conn, "a1")
    assert again is not copy and again.rowids.count(first) == 1
    with own_episodes.lock():
        assert again.counts(["zebra"]) == {"zebra": 2}
    assert own_episodes._KEPT.size == again.size
    found = episode_search.search_episodes(conn, Principal("a1"), "zebra", limit=5)
    assert sorted(e["episode_id"] for e in found) == ["a1-60", "a1-61"]


def test_copies_growing_stay_within_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = _store(tmp_path / "hot.db", {"a1": 10, "a2": 10, "a3": 60})
    one, two = own_copy(conn, "a1"), own_copy(conn, "a2")
    assert one is not None and two is not None
    monkeypatch.setattr(own_episodes, "MAX_KEPT_BYTES", one.size + two.size + 5)
    rng = random.Random(3)
    for n in range(10, 20):
        _insert(conn, "a1", n, rng)
        own_copy(conn, "a1")  # grows in place; a2's copy, searched longer ago, goes
        assert own_episodes._KEPT.size <= own_episodes.MAX_KEPT_BYTES
        assert own_episodes._KEPT.size == sum(c.size for c in own_episodes._KEPT.copies.values())
    assert [k[1] for k in own_episodes._KEPT.copies] == ["a1"]
    monkeypatch.setattr(own_episodes, "MAX_KEPT_BYTES", 10)
    _insert(conn, "a1", 20, rng)
    assert own_copy(conn, "a1") is not None  # served, but not kept: larger than every copy may be
    assert not own_episodes._KEPT.copies and own_episodes._KEPT.size == 0


@pytest.mark.parametrize(
    ("participants", "column"),
    [
        ('{"who": "alice"}', "participants"),
        ("[42]", "participants"),
        ('["alice", 1e999]', "participants"),
        (b"a blob of text", "summary"),
    ],
)
def test_what_a_copy_cannot_match_as_the_index_is_left_to_the_index(
    tmp_path: Path, participants: Any, column: str
) -> None:
    conn = _store(tmp_path / "hot.db", {"a1": 10, "a2": 30})
    rowid = conn.execute("SELECT rowid FROM episodes WHERE agent_id = 'a1' AND owner = 'alice'").fetchone()[0]
    conn.execute(f"UPDATE episodes SET {column} = ? WHERE rowid = ?", [participants, rowid])
    assert own_copy(conn, "a1") is None
    if participants in ('{"who": "alice"}', "[42]"):  # what the search's results can show
        found = episode_search.search_episodes(conn, Principal("a1", user="alice"), "red", "alice", limit=50)
        assert all(e["episode_id"].startswith("a1-") for e in found)
    # One name alone is what json_each reads as one: that the copy holds.
    conn.execute("UPDATE episodes SET participants = '\"Alice\"', summary = 'x' WHERE rowid = ?", [rowid])
    copy = own_copy(conn, "a1")
    assert copy is not None
    with own_episodes.lock():
        named = {
            r
            for r, _ in copy.candidates(
                Principal("a1", user="alice"), ["red", "x"], PLAIN_WEIGHTS, "alice", 99
            )
        }
    assert rowid in named and named == _index_visible(
        conn, Principal("a1", user="alice"), ["red", "x"], "alice"
    )


def test_a_term_longer_than_a_token_is_cut_as_the_index_cuts_it(tmp_path: Path) -> None:
    conn = _store(tmp_path / "hot.db", {"a1": 10, "a2": 30})
    long = "q" * 40_000
    rowid = _insert(conn, "a1", 50, random.Random(1), user=None, summary=f"{long} end")
    copy = own_copy(conn, "a1")
    with own_episodes.lock():
        assert copy.counts([long, long[:35_000]]) == {long: 1, long[:35_000]: 1}
        found = {r for r, _ in copy.candidates(Principal("a1"), [long], COLUMN_WEIGHTS, None, 99)}
    assert found == {rowid} == _index_visible(conn, Principal("a1"), [long], None)


def test_a_copy_never_holds_more_episodes_than_the_quote_search_counts_its_own_words_for() -> None:
    """The quote search weighs an agent's words by its own quotes up to QUOTE_IDF_MAX_EPISODES, and
    past that by the counts the search goes by scaled as if they were the whole index's: an agent
    with a copy (whose counts are its own) must stay below it."""
    assert own_episodes.MAX_EPISODES < quote_search.QUOTE_IDF_MAX_EPISODES


def test_an_erasure_mark_that_moves_back_does_not_keep_the_agent_off_its_copy(tmp_path: Path) -> None:
    """A store restored in place has a lower erasure mark than the one last seen: copies are read
    and kept again at its own mark, not read anew at every search."""
    conn = _store(tmp_path / "hot.db", {"a1": 10, "a2": 30})
    own_copy(conn, "a1")
    db = next(iter(own_episodes._KEPT.copies))[0]
    own_episodes._KEPT.erasure_seen(db, 5)  # as if the mark had been 5
    assert not own_episodes._KEPT.copies
    copy = own_copy(conn, "a1")
    assert copy is not None and own_copy(conn, "a1") is copy and own_episodes._KEPT.marks[db] == 0


def test_an_agent_left_to_the_index_gets_its_copy_after_a_deletion_or_update(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = _store(tmp_path / "hot.db", {"a1": 10, "a2": 30})
    reads = _spy(monkeypatch)
    rowid = conn.execute("SELECT rowid FROM episodes WHERE agent_id = 'a1' LIMIT 1").fetchone()[0]
    conn.execute("UPDATE episodes SET participants = '[1]' WHERE rowid = ?", [rowid])
    for _ in range(3):
        assert own_copy(conn, "a1") is None
    assert reads == [("a1", 0)]  # found not for a copy once, not read again at every search
    _insert(conn, "a1", 50, random.Random(1))
    assert own_copy(conn, "a1") is None and reads == [("a1", 0)]  # an added episode cannot undo it
    conn.execute("UPDATE episodes SET participants = '[\"alice\"]' WHERE rowid = ?", [rowid])
    assert own_copy(conn, "a1") is not None and not own_episodes._KEPT.left
    # Too large: left at that version; a deletion lifts it.
    own_episodes.clear()
    big = _insert(conn, "a1", 51, random.Random(2), user=None, summary=" ".join(f"w{k}" for k in range(3000)))
    monkeypatch.setattr(own_episodes, "MAX_AGENT_TOKENS", 2000)
    assert own_copy(conn, "a1") is None and own_episodes._KEPT.left
    conn.execute("DELETE FROM episodes WHERE rowid = ?", [big])
    assert own_copy(conn, "a1") is not None


def test_two_searches_adding_the_same_episodes_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One search reads the agent's new episodes while another adds them: the first finds them
    added, counts none twice (its tokens taken before), reads nothing again."""
    import threading

    path = tmp_path / "hot.db"
    conn = _store(path, {"a1": 10, "a2": 30})
    copy = own_copy(conn, "a1")
    for n in range(10, 13):
        _insert(conn, "a1", n, random.Random(n), user="alice", summary="added zebra")
    slow, quick = connect(path), connect(path)
    reads: list[int] = []
    real, waiting, resume = own_episodes._documents, threading.Event(), threading.Event()

    def documents(c: Any, agent_id: str, after: int, upto: int | None) -> list[Any]:
        rows = real(c, agent_id, after, upto)
        reads.append(after)
        if c is slow:
            waiting.set()
            resume.wait(30)
        return rows

    monkeypatch.setattr(own_episodes, "_documents", documents)
    added = own_episodes.documents(real(conn, "a1", copy.newest, None))
    # Counted twice, the new episodes would pass the bound: once they fit.
    monkeypatch.setattr(own_episodes, "MAX_AGENT_TOKENS", copy.tokens + sum(d.tokens for d in added) + 1)
    found: list[Any] = []
    thread = threading.Thread(target=lambda: found.append(own_copy(slow, "a1")))
    thread.start()
    assert waiting.wait(30)
    assert own_copy(quick, "a1") is copy  # added by the quick search
    resume.set()
    thread.join(30)
    assert found == [copy] and not own_episodes._KEPT.left
    assert 0 not in reads  # nobody read everything again
    truth = [r[0] for r in conn.execute("SELECT rowid FROM episodes WHERE agent_id = 'a1' ORDER BY rowid")]
    assert copy.rowids == truth and own_episodes._KEPT.size == copy.size


def _corpus(conn: sqlite3.Connection, words: Any) -> None:
    rng = random.Random(8)
    for n in range(80):
        _insert(conn, "a1", n, rng, summary=" ".join(words(rng) for _ in range(30)), quotes=[words(rng)])
    for n in range(200):
        _insert(conn, "a2", n, rng)


@pytest.mark.parametrize("kind", ["words", "identifiers"])
def test_a_copys_size_is_what_it_holds(tmp_path: Path, kind: str) -> None:
    """The estimate the bound is kept in is within half and one and a half times what the copy
    holds (measured by tracemalloc), on text of common words and text of distinct identifiers."""
    import tracemalloc

    conn = connect(tmp_path / "hot.db")
    _corpus(conn, (lambda r: r.choice(WORDS)) if kind == "words" else (lambda r: f"{r.getrandbits(64):016x}"))
    rows = own_episodes._documents(conn, "a1", 0, None)
    tracemalloc.start()
    try:
        copy = own_episodes.OwnEpisodes("a1", None, 0, 0)
        copy.add(own_episodes.documents(rows))  # what it holds of them, the rest freed
        copy.matching("abcd")  # the sorted tokens, as the first prefix makes them
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert 0.5 * held <= copy.size <= 1.5 * held, (copy.size, held)
