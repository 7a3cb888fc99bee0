"""The kept copy of the episode index's counts: BM25 ranks and document counts bit for bit FTS5's.

`runtime.fts_mirror` ranks a phrase met for the first time from its own
copy of what `bm25()` reads. These tests compare, on every row, the ranks
of every word of a store (plain and as prefixes) with the query they
replace, and its document counts with fts5vocab's, on episodes long enough
for the weighted sums to round, with text FTS5 tokenizes its own way
(accents, curly quotes, emoji, underscores, upper case); then after each kind
of change (an insert read incrementally, a delete and an update read again),
and show that a copy that cannot be the index's is never used, that an
erasure drops it, and that readers see only their own matches.
"""

from __future__ import annotations

import random
import sqlite3
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers_runtime import append, episode
from tiermem.runtime import episode_search, fts_mirror, fts_ranks
from tiermem.runtime.episode_index import agent_token
from tiermem.runtime.episode_search import RANKINGS, _rank_sql
from tiermem.runtime.episode_text import TEXTS
from tiermem.runtime.hotstore import database_key, erasure_mark, item_clause, open_hot_store
from tiermem.runtime.memory import AgentMemory, open_memory
from tiermem.runtime.projector import project
from tiermem.runtime.visibility import Principal

from tiermem.settings import Settings

RANKS = [_rank_sql(w) for w in RANKINGS]
WORDS = ["teal", "teapot", "teal_blue", "lake", "lakeside", "dawn", "Bread", "kitten", "kit", "x9"]
ODD = [
    "café",
    "naïve",
    "don’t",
    "🙂",
    "Straße",
    "İstanbul",
    "KELVIN",
    "ｆｕｌｌ",
    "e\u0301clair",
    "teal—lake",
]
CANARIES = {"alice": "zanzibarcanary", "bob": "quokkacanary"}
AGENT_CANARY = "otheragentcanary"


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) if rng.random() < 0.9 else rng.choice(ODD) for _ in range(n))


def _episodes(rng: random.Random, start: int, n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(start, start + n):
        owner = ["alice", "bob", None][i % 3]
        quotes = [{"text": _text(rng, rng.randint(20, 400)), "event_id": f"q{i}-{k}"} for k in range(3)]
        if owner:
            quotes.append({"text": f"my secret {CANARIES[owner]} teal", "event_id": f"c{i}"})
        agent = "other" if i % 7 == 6 else "npc"  # another agent's episodes: no reader here sees them
        if agent == "other":
            quotes.append({"text": f"{AGENT_CANARY} teal", "event_id": f"a{i}"})
        out.append(
            episode(
                agent,
                f"{rng.choice(WORDS)} {rng.choice(ODD)} {i}",
                _text(rng, 12),
                key_quotes=quotes,
                participants=[owner] if owner else [],
                source_event_ids=[f"src-{i}"],
            )
        )
    return out


@pytest.fixture
def memory(settings: Settings) -> Iterator[AgentMemory]:
    append(settings, *_episodes(random.Random(5), 0, 30))
    project(settings)
    fts_mirror.clear()
    with open_memory(settings, "npc") as m:
        TEXTS.long_dbs.add(database_key(m.conn))  # as its first search would find (its episodes are long)
        yield m
    fts_mirror.clear()


def _index_ranks(conn: sqlite3.Connection, phrase: str) -> tuple[list[int], list[tuple[float, ...]]]:
    rows = conn.execute(
        f"SELECT rowid, {', '.join(RANKS)} FROM episodes_fts WHERE episodes_fts MATCH ? ORDER BY rowid",
        [phrase],
    ).fetchall()
    return [r[0] for r in rows], [tuple(r[1:]) for r in rows]


def _vocab(conn: sqlite3.Connection, term: str, prefix: bool) -> tuple[int, str]:
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.v USING fts5vocab(main, episodes_fts, 'row')")
    if not prefix:
        return int(
            conn.execute("SELECT coalesce(sum(doc), 0) FROM temp.v WHERE term = ?", [term]).fetchone()[0]
        ), ""
    row = conn.execute(
        "SELECT coalesce(sum(doc), 0), count(*), min(term) FROM temp.v WHERE term >= ? AND term < ?",
        [term, term + "\U0010ffff"],
    ).fetchone()
    return int(row[0]), str(row[2]) if row[1] == 1 else ""


def _copy(conn: sqlite3.Connection) -> fts_mirror.Mirror:
    version = fts_ranks.kept_version(conn)
    assert version is not None
    copy = fts_mirror.mirror(conn, version)
    assert copy is not None
    return copy


def _all_equal(conn: sqlite3.Connection) -> int:
    """Every token of the store as a phrase and its prefixes as prefix phrases: ranks and counts."""
    copy = _copy(conn)
    tokens = sorted(
        {w for (w,) in conn.execute("SELECT term FROM temp.v")} if _vocab(conn, "a", False) else []
    )
    assert set(tokens) == set(copy.postings)  # the same tokens as the index, non-ASCII ones too
    compared = 0
    for token in tokens:
        asks = [(token, False)] + [
            (token[:k], True) for k in (4, 5, 7) if token[:k].isalnum() and len(token) >= k
        ]
        # Together, with a word found nowhere and a prefix too short to look up (left to the index).
        together = copy.ranks_of([*asks, ("zzzqqq", False), ("te", True)], RANKINGS)
        assert together[-2] is not None and not len(together[-2][0]) and together[-1] is None
        for (word, prefix), alone_or_not in zip(asks, together, strict=False):
            want_ids, want = _index_ranks(conn, f'"{word}"*' if prefix else f'"{word}"')
            for got in (copy.ranks(word, prefix, RANKINGS), alone_or_not):
                assert got is not None
                assert got[0].tolist() == want_ids, word
                assert [tuple(v) for v in got[1].tolist()] == want, word  # both rankings, bit for bit
            assert copy.documents(word, prefix) == _vocab(conn, word, prefix), word
            compared += len(want_ids)
    return compared


def test_every_phrase_is_ranked_as_the_index_ranks_it(memory: AgentMemory) -> None:
    conn = memory.conn
    assert _all_equal(conn) > 1000
    copy = _copy(conn)
    # The weighted sums do round here: added one at a time, some differ from the products.
    per = np.zeros((len(copy.rowids), fts_mirror.COLUMNS))
    for posting in copy.postings["teal"]:
        code, n = posting >> fts_mirror.COUNT_BITS, posting & ((1 << fts_mirror.COUNT_BITS) - 1)
        per[code // fts_mirror.COLUMNS, code % fts_mirror.COLUMNS] = n
    summed = fts_mirror._frequency(per, RANKINGS[0])
    assert summed is not None and (summed != per @ np.array(RANKINGS[0])).any()
    assert {"cafe", "don", "t", "straße", "istanbul", "kelvin", "eclair"} <= set(copy.postings)


def test_served_ranks_through_every_change(memory: AgentMemory, settings: Settings) -> None:
    conn = memory.conn
    readers = [Principal("npc"), Principal("npc", user="alice"), Principal("npc", user="bob")]
    matches = ['"teal"*', '"teal"* OR "lake"* OR "kit"', '"dawn" OR "bread"* OR "cafe"']

    def served_equal() -> None:
        for match in matches:
            for who in readers:
                where, params = item_clause(who, "e")
                got = fts_ranks.ranked_rows(conn, where, params, match, RANKINGS)
                sql = (
                    f"SELECT episodes_fts.rowid, {', '.join(RANKS)} FROM episodes_fts CROSS JOIN episodes e"
                    f" ON e.rowid = episodes_fts.rowid WHERE episodes_fts MATCH ? AND {where} ORDER BY episodes_fts.rowid"
                )
                assert got == [tuple(r) for r in conn.execute(sql, [match, *params])], (match, who)

    served_equal()
    first = fts_mirror._KEPT.mirror
    assert first is not None
    # Inserted episodes: the new ones read and added to the same copy.
    append(settings, *_episodes(random.Random(6), 30, 4))
    project(settings)
    served_equal()
    assert fts_mirror._KEPT.mirror is first and len(first.rowids) == 34
    assert _all_equal(conn) > 1000
    # A delete, then an update of the indexed text, through another connection: read again.
    other = open_hot_store(settings)
    with other:
        other.execute("DELETE FROM episodes WHERE rowid = 3")
    served_equal()
    second = fts_mirror._KEPT.mirror
    assert second is not first and second is not None and 3 not in second.rowids
    with other:
        other.execute("UPDATE episodes SET summary = 'kitten kitten lakeside' WHERE rowid = 7")
    other.close()
    served_equal()
    assert fts_mirror._KEPT.mirror is not second
    assert _all_equal(conn) > 1000


def test_readers_see_only_their_own_canaries(memory: AgentMemory) -> None:
    conn = memory.conn
    for user, canary in CANARIES.items():
        for reader in ("alice", "bob", None):
            who = Principal("npc", user=reader)
            where, params = item_clause(who, "e")
            rows = fts_ranks.ranked_rows(conn, where, params, f'"{canary}"', RANKINGS)
            assert rows is not None
            assert bool(rows) == (reader == user), (canary, reader)
            found = episode_search.search_episodes(conn, who, f"{canary} teal", limit=30)
            shown = str(found)
            for other, word in CANARIES.items():
                assert (word in shown) <= (other == reader), (word, reader)
            assert AGENT_CANARY not in shown
            where, params = item_clause(who, "e")
            assert fts_ranks.ranked_rows(conn, where, params, f'"{AGENT_CANARY}"', RANKINGS) == []
    assert fts_mirror._KEPT.mirror is not None  # the counts were the copy's


def test_hidden_rows_are_those_a_reader_may_not_see(memory: AgentMemory) -> None:
    conn = memory.conn
    rowids = [r for (r,) in conn.execute("SELECT rowid FROM episodes")] + [9999]  # and one not there
    for who in [Principal("npc"), Principal("npc", user="alice"), Principal("other", user="bob")]:
        where, params = item_clause(who, "e")
        visible = {r for (r,) in conn.execute(f"SELECT e.rowid FROM episodes e WHERE {where}", params)}
        hidden = fts_ranks._hidden(conn, where, params, rowids)
        assert set(rowids) - hidden == visible and 9999 in hidden
        assert 0 < len(visible) < len(rowids) - 1


def test_a_copy_that_is_not_the_index_is_never_used(
    memory: AgentMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = memory.conn
    version = fts_ranks.kept_version(conn)
    assert version is not None
    # A tokenizer that differs from the table's: the counts disagree with the index's, nothing is kept.
    monkeypatch.setattr(fts_mirror, "_words", lambda text: (text or "").split())
    assert fts_mirror.mirror(conn, version) is None
    where, params = item_clause(Principal("npc"), "e")
    got = fts_ranks.ranked_rows(conn, where, params, '"teal"* OR "cafe"', RANKINGS)
    assert got == fts_ranks.ranked_rows(conn, where, params, '"teal"* OR "cafe"', RANKINGS, from_copy=False)
    assert got and fts_mirror._KEPT.mirror is None
    monkeypatch.undo()
    fts_mirror.clear()
    # Too many tokens to keep, or a table defined otherwise: nothing kept either.
    monkeypatch.setattr(fts_mirror, "MAX_TOKENS", 100)
    assert fts_mirror.mirror(conn, version) is None
    monkeypatch.undo()
    fts_mirror.clear()
    monkeypatch.setattr(
        fts_mirror, "DEFINITION", fts_mirror.DEFINITION.replace("fts5(", "fts5(tokenize=porter, ")
    )
    assert fts_mirror.mirror(conn, version) is None


def test_an_erasure_drops_the_copy(memory: AgentMemory) -> None:
    conn = memory.conn
    copy = _copy(conn)
    assert copy.mark == erasure_mark(conn)
    fts_mirror._KEPT.erasure_seen("another store", copy.mark + 1)
    assert fts_mirror._KEPT.mirror is copy
    fts_mirror._KEPT.erasure_seen(database_key(conn), copy.mark)
    assert fts_mirror._KEPT.mirror is copy
    fts_mirror._KEPT.erasure_seen(database_key(conn), copy.mark + 1)  # as the prepared texts tell it
    assert fts_mirror._KEPT.mirror is None


def test_tokens_are_the_tokenizers() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    texts = [
        "Hello, World! it's 2024_05 a-b c.d",
        "\ttabs\nand\x00nul\x7fdel ~tilde^ `back` {brace}",
        "x" * 40_000 + " y",  # longer than FTS5 keeps of a token
        " ".join(ODD),
        "",
    ]
    for k, text in enumerate(texts, 1):
        conn.execute("INSERT INTO t (rowid, x) VALUES (?, ?)", [k, text])
        want = [t for (t,) in conn.execute("SELECT term FROM v WHERE doc = ? ORDER BY offset", [k])]
        assert fts_mirror.tokens(text) == want, text[:40]
        assert fts_mirror.counted(text) == (Counter(want), len(want))


def test_weighted_frequencies_are_summed_one_instance_at_a_time() -> None:
    rng = np.random.default_rng(3)
    columns = fts_mirror.COLUMNS
    per = rng.integers(0, 60, size=(300, columns)).astype(np.float64)
    per[rng.random(300) < 0.5, :2] = 0  # most documents start their sum at zero
    for weights in [(2.0, 1.0, 1.2, 0.5, 0.0), (0.3, 1.7, 1.2, 0.1, 0.7), None, (1.1,)]:
        got = fts_mirror._frequency(per, weights)
        assert got is not None
        ws = [weights[c] if weights and c < len(weights) else 1.0 for c in range(columns)]
        for row, value in zip(per.tolist(), got.tolist(), strict=True):
            want = 0.0
            for c, w in enumerate(ws):
                for _ in range(int(row[c])):
                    want += w
            assert value == want
    assert (
        fts_mirror._frequency(
            np.array([[0.0, 0.0, 5.0e6, 0.0, 0.0], [1.0, 0.0, 5.0e6, 0.0, 0.0]]), (1.0, 1.0, 1.2)
        )
        is None
    )


def test_the_tokenizers_runs_are_bounded_by_their_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    fts_mirror.clear()
    monkeypatch.setattr(fts_mirror._Tokenizer, "MAX_CHARS", 60)
    kept = fts_mirror._TOKENIZER
    text = " ".join(ODD)
    want = fts_mirror.tokens(text)
    assert kept.kept and kept.chars == sum(map(len, kept.kept)) <= 60
    # Runs met before and new ones, past the bound: everything is tokenized again, none lost.
    for extra, tokens in [("Ünïcode", ["unicode"]), ("é" * 70, ["e" * 70]), ("façade", ["facade"])]:
        assert fts_mirror.tokens(f"{text} {extra}") == [*want, *tokens]
        assert kept.chars == sum(map(len, kept.kept)) <= 60
    assert "é" * 70 not in kept.kept  # longer than the bound alone: not kept at all
    fts_mirror.clear()
    assert not kept.kept and kept.conn is None


def _table() -> sqlite3.Connection:
    """A bare store's index, with the erasures table the copy's mark is read from."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute(fts_mirror.DEFINITION)
    conn.execute("CREATE TABLE erasures (x)")
    return conn


def _insert(conn: sqlite3.Connection, rowid: int, *columns: str) -> None:
    """An index document of the text columns given (the others empty) and the agent "npc"'s token."""
    conn.execute(
        "INSERT INTO episodes_fts (rowid, name, summary, quotes, participants, agent) VALUES (?, ?, ?, ?, ?, ?)",
        [rowid, *columns, *[""] * (4 - len(columns)), agent_token("npc")],
    )


def test_document_counts_asked_before_episodes_are_added_are_counted_again() -> None:
    conn = _table()
    _insert(conn, 1, "teal lake")
    _insert(conn, 2, "teal")
    fts_mirror.clear()
    try:
        assert fts_mirror.documents(conn, ("db", 0, 2, "0"), "teal", False) == (2, "")
        assert fts_mirror.documents(conn, ("db", 0, 2, "0"), "lake", True) == (1, "lake")
        copy = fts_mirror._KEPT.mirror
        _insert(conn, 3, "teal again", "lakeside")
        assert fts_mirror.documents(conn, ("db", 0, 3, "0"), "teal", False) == (3, "")
        assert fts_mirror.documents(conn, ("db", 0, 3, "0"), "lake", True) == (2, "")
        assert fts_mirror._KEPT.mirror is copy  # the same copy, appended to
    finally:
        fts_mirror.clear()


def test_hidden_rows_under_a_condition_with_an_or_or_a_null(memory: AgentMemory) -> None:
    """The condition is one bracketed term of the join (an OR in it reaches no further), and a row
    for which it is NULL (no owner compared with one) is hidden, as a query's WHERE would hide it."""
    conn = memory.conn
    rowids = [r for (r,) in conn.execute("SELECT rowid FROM episodes")]
    for where, params in [
        ("e.agent_id = ? AND e.owner = ? OR e.owner IS NULL", ["npc", "alice"]),
        ("e.owner = ?", ["alice"]),
    ]:
        visible = {r for (r,) in conn.execute(f"SELECT e.rowid FROM episodes e WHERE {where}", params)}
        assert 0 < len(visible) < len(rowids)
        assert set(rowids) - fts_ranks._hidden(conn, where, params, rowids) == visible, where
    assert conn.execute("SELECT count(*) FROM episodes WHERE owner IS NULL").fetchone()[0]


def test_words_longer_than_a_token_are_cut_as_the_index_cuts_them() -> None:
    conn = _table()
    long = "a" * (fts_mirror.MAX_TOKEN + 5)
    _insert(conn, 1, f"{long} b")
    _insert(conn, 2, "other words here", "a" * 40)
    copy = fts_mirror.Mirror(("db", 0, "0"), 0)
    copy.add(conn, 0, 2)
    for word, prefix in [(long, False), (long, True), (long[:-5], False), ("aaaa", True)]:
        phrase = f'"{word}"' + ("*" if prefix else "")
        want = conn.execute(
            "SELECT rowid, bm25(episodes_fts) FROM episodes_fts WHERE episodes_fts MATCH ? ORDER BY rowid",
            [phrase],
        ).fetchall()
        got = copy.ranks(word, prefix, [None])
        assert got is not None and list(zip(got[0].tolist(), got[1][:, 0].tolist(), strict=True)) == want
        assert want
    assert copy.matching("é" * fts_mirror.MAX_TOKEN, False) is None  # cut in bytes: the index is asked


def test_a_table_never_written_to_is_left_to_the_index() -> None:
    conn = _table()
    assert conn.execute("SELECT block FROM episodes_fts_data WHERE id = 1").fetchone()[0] == b""
    with pytest.raises(fts_mirror.Unsure):
        fts_mirror.Mirror(("db", 0, "0"), 0).add(conn, 0, 0)
    fts_mirror.clear()
    try:
        assert fts_mirror.documents(conn, ("db", 0, None, "0"), "teal", False) is None
        _insert(conn, 1, "teal")
        assert fts_mirror.documents(conn, ("db", 0, 1, "0"), "teal", False) == (1, "")
    finally:
        fts_mirror.clear()


def test_a_reader_on_an_older_version_leaves_the_newer_copy() -> None:
    """Readers on snapshots before the copy's are answered by the index; the copy is not dropped
    and read again for them (two readers would otherwise take turns reading everything)."""
    conn = _table()
    for rowid in (1, 2, 3):
        _insert(conn, rowid, "teal lake")
    fts_mirror.clear()
    try:
        newer = ("db", 0, 3, "2")
        assert fts_mirror.documents(conn, newer, "teal", False) == (3, "")
        copy = fts_mirror._KEPT.mirror
        assert copy is not None
        for older in [("db", 0, 2, "2"), ("db", 0, 5, "1")]:  # fewer episodes; fewer changes counted
            assert fts_mirror.documents(conn, older, "teal", False) is None
            assert fts_mirror.ranks(conn, older, ['"teal"'], [None]) == [None]
            assert fts_mirror._KEPT.mirror is copy and fts_mirror._KEPT.version == newer
        assert fts_mirror.documents(conn, newer, "lake", False) == (3, "")
        assert fts_mirror._KEPT.mirror is copy
        # Another store, or a later change count: the copy is for that version now.
        assert fts_mirror.documents(conn, ("db", 0, 3, "3"), "teal", False) == (3, "")
        assert fts_mirror._KEPT.mirror is not copy
    finally:
        fts_mirror.clear()


def test_the_erasure_mark_read_with_the_copy_is_the_stores() -> None:
    conn = _table()
    conn.execute("INSERT INTO erasures VALUES ('an earlier erasure')")
    _insert(conn, 1, "teal café")
    fts_mirror.clear()
    try:
        assert fts_mirror.documents(conn, ("db", 0, 1, "0"), "teal", False) == (1, "")
        copy = fts_mirror._KEPT.mirror
        assert copy is not None and copy.mark == 1 and fts_mirror._TOKENIZER.kept
        fts_mirror._KEPT.erasure_seen("db", 1)  # no erasure since: both stay
        assert fts_mirror._KEPT.mirror is copy and fts_mirror._TOKENIZER.kept
        fts_mirror._KEPT.erasure_seen("db", 2)
        assert fts_mirror._KEPT.mirror is None and not fts_mirror._TOKENIZER.kept
        # The first the process hears of the store is the copy's read: its mark is noted there.
        fts_mirror.clear()
        assert fts_mirror.documents(conn, ("db", 0, 1, "0"), "teal", False) == (1, "")
        assert fts_mirror._TOKENIZER.kept
        fts_mirror._KEPT.erasure_seen("db", 2)
        assert not fts_mirror._TOKENIZER.kept
    finally:
        fts_mirror.clear()


def test_counts_that_are_not_the_indexs_are_never_kept() -> None:
    """Each document's tokens per column, and the table's rows and tokens per column, are checked
    against the index's own records: a difference in any of them and nothing is kept."""
    conn = _table()
    _insert(conn, 1, "teal lake", "dawn")
    _insert(conn, 2, "teal", "dawn bread")
    block = conn.execute("SELECT block FROM episodes_fts_data WHERE id = 1").fetchone()[0]
    assert fts_mirror.varints(block) == [2, 3, 3, 0, 0, 2] and len(block) == 6  # one byte each
    fts_mirror.Mirror(("db", 0, "0"), 0).add(conn, 0, 2)  # as it is: kept
    changes = [
        # The documents' texts swapped: the same tokens in all, not in each document.
        "UPDATE episodes_fts_content SET c0 = CASE id WHEN 1 THEN 'teal' ELSE 'teal lake' END",
        "UPDATE episodes_fts_data SET block = x'020403000002' WHERE id = 1",  # a column's tokens
        "UPDATE episodes_fts_data SET block = x'030303000002' WHERE id = 1",  # the rows
    ]
    for change in changes:
        conn.execute("SAVEPOINT s")
        conn.execute(change)
        with pytest.raises(fts_mirror.Unsure):
            fts_mirror.Mirror(("db", 0, "0"), 0).add(conn, 0, 2)
        conn.execute("ROLLBACK TO s")
        conn.execute("RELEASE s")


def test_ranks_from_the_copy_count_toward_the_kept_rows_bound(
    memory: AgentMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = memory.conn
    where, params = item_clause(Principal("npc"), "e")
    match = '"teal"* OR "lake" OR "kit"'
    assert fts_ranks.ranked_rows(conn, where, params, match, RANKINGS)
    kept = fts_ranks._KEPT
    assert len(kept.phrases) == 3 and fts_mirror._KEPT.mirror is not None  # all three from the copy
    assert kept.rows == sum(len(ids) for ids, _ in kept.phrases.values()) > 30
    # Past the bound, what is kept goes at the next question.
    monkeypatch.setattr(fts_ranks, "MAX_ROWS", kept.rows - 1)
    assert fts_ranks.ranked_rows(conn, where, params, '"dawn"', RANKINGS)
    assert list(kept.phrases) == [('"dawn"', "|".join(RANKS))]


def test_a_copy_that_would_cost_too_much_is_not_kept_nor_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Text whose words are each met once (the costliest to hold per token): the copy is bounded by
    what it holds, not by its tokens alone; once past the bound the store is not read again while it
    has as many tokens (only grown since)."""
    rng = random.Random(7)
    conn = _table()
    for rowid in range(1, 41):
        _insert(conn, rowid, " ".join(f"{rng.getrandbits(48):x}" for _ in range(50)), "teal")
    copy = fts_mirror.Mirror(("db", 0, "0"), 0)
    copy.add(conn, 0, 40)
    held = sum(sys.getsizeof(w) + sys.getsizeof(a) for w, a in copy.postings.items()) + sum(
        sys.getsizeof(h) + sys.getsizeof(ws) for h, ws in copy.by_head.items()
    )
    assert held < copy.size  # what is counted is at least what the tokens, heads and postings hold
    assert len(copy.postings) > 1900 and len(copy.by_head) > 1900
    reads = []
    real_add = fts_mirror.Mirror.add
    monkeypatch.setattr(fts_mirror.Mirror, "add", lambda self, *a: reads.append(a) or real_add(self, *a))
    fts_mirror.clear()
    try:
        monkeypatch.setattr(fts_mirror, "MAX_BYTES", copy.size // 2)
        assert fts_mirror.documents(conn, ("db", 0, 40, "0"), "teal", False) is None
        assert fts_mirror._KEPT.mirror is None and len(reads) == 1
        assert 0 < fts_mirror._KEPT.too_costly["db"] < copy.n_token
        _insert(conn, 41, "teal lake")
        assert fts_mirror.ranks(conn, ("db", 0, 41, "0"), ['"teal"'], [None]) == [None]
        assert len(reads) == 1  # not read again
        # Within the bound (another store), it is kept.
        monkeypatch.setattr(fts_mirror, "MAX_BYTES", copy.size + 1000)
        assert fts_mirror.documents(conn, ("db2", 0, 41, "0"), "teal", False) == (41, "")
    finally:
        fts_mirror.clear()


def test_running_sums_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fts_mirror, "MAX_RUNNING", 3000)
    monkeypatch.setattr(fts_mirror, "MAX_RUNNING_ALL", 5000)
    fts_mirror._RUNNING.clear()
    per = np.array([[0.0, 0.0, 2500.0, 0.0, 0.0], [0.0, 0.0, 3.0, 0.0, 0.0]])
    for w in (1.1, 1.3, 1.7):
        got = fts_mirror._frequency(per, (1.0, 1.0, w))
        assert got is not None and got[1] == w + w + w
        assert sum(map(len, fts_mirror._RUNNING.values())) <= 5000
    assert fts_mirror._frequency(np.array([[0.0, 0.0, 3001.0, 0.0, 0.0]]), (1.0, 1.0, 1.1)) is None
    assert all(len(r) <= 3001 for r in fts_mirror._RUNNING.values())


def test_ranks_are_kept_under_the_sql_of_their_weightings(memory: AgentMemory) -> None:
    """The rankings asked are their weightings alone: the SQL the index is asked with and the key
    the copy's ranks are kept under are both made of them, whatever the order or weights."""
    conn = memory.conn
    where, params = item_clause(Principal("npc"), "e")
    match = '"teal"* OR "lake" OR "cafe"'
    for weightings in [RANKINGS, RANKINGS[::-1], ((1.5, 1.0, 0.5),), RANKINGS]:
        got = fts_ranks.ranked_rows(conn, where, params, match, weightings)
        ranks = ", ".join(fts_ranks.rank_sql(w) for w in weightings)
        sql = (
            f"SELECT episodes_fts.rowid, {ranks} FROM episodes_fts CROSS JOIN episodes e"
            f" ON e.rowid = episodes_fts.rowid WHERE episodes_fts MATCH ? AND {where} ORDER BY episodes_fts.rowid"
        )
        assert got == [tuple(r) for r in conn.execute(sql, [match, *params])], weightings
    assert {key for _, key in fts_ranks._KEPT.phrases} == {
        "|".join(fts_ranks.rank_sql(w) for w in ws) for ws in [RANKINGS, RANKINGS[::-1], ((1.5, 1.0, 0.5),)]
    }
