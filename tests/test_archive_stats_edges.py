"""Kept term statistics (runtime.archive_stats) at their edges: the tokenizer shared with
runtime.fts_mirror from two threads, a count taken while another connection adds a word, very long
query terms, a reader on an older snapshot, an error part-way through adding, and a store whose
index is defined otherwise. Interleavings are forced with events inside the code, never timed."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_archive_stats import _fresh
from tiermem.runtime import archive_stats, episode_search, fts_mirror, fts_terms
from tiermem.runtime.hotstore import connect


def _fresh_tokens(text: str) -> list[str]:
    """FTS5's own tokens of `text`, from a table of this test's own."""
    conn = connect_memory()
    conn.execute("INSERT INTO t (rowid, x) VALUES (1, ?)", [text])
    return [t for (t,) in conn.execute("SELECT term FROM v ORDER BY offset")]


def connect_memory() -> Any:
    import sqlite3

    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    return conn


class _PausingConnection:
    """The tokenizer's connection, pausing its first read of the tokens until told to go on."""

    def __init__(self, conn: Any, inside: threading.Event, go_on: threading.Event) -> None:
        self.conn, self.inside, self.go_on = conn, inside, go_on
        self.paused = False

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.startswith("SELECT term") and not self.paused:
            self.paused = True
            self.inside.set()
            assert self.go_on.wait(30), "the other thread never came"
        return self.conn.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        return self.conn.executemany(sql, *args)

    def close(self) -> None:
        self.conn.close()


class _AnnouncingLock:
    """The tokenizer's lock, saying when the other thread tries to take it (then it waits for it)."""

    def __init__(self, lock: Any, other: list[threading.Thread], trying: threading.Event) -> None:
        self.lock, self.other, self.trying = lock, other, trying

    def __enter__(self) -> Any:
        if threading.current_thread() in self.other:
            self.trying.set()
        return self.lock.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self.lock.__exit__(*exc)


@pytest.mark.parametrize("other", ["tokens", "forget"])
def test_the_tokenizer_serves_two_threads_one_at_a_time(monkeypatch: pytest.MonkeyPatch, other: str) -> None:
    """One thread tokenizing (archive_stats adding new episodes, under its own lock) while another
    tokenizes or drops the runs (fts_mirror, under its lock, on an erasure): the second waits."""
    fts_mirror.clear()
    tokenizer = fts_mirror._TOKENIZER
    tokenizer.tokens({"prélude"})  # the private table made
    inside, go_on = threading.Event(), threading.Event()
    monkeypatch.setattr(tokenizer, "conn", _PausingConnection(tokenizer.conn, inside, go_on))
    threads: list[threading.Thread] = []
    monkeypatch.setattr(
        tokenizer, "lock", _AnnouncingLock(getattr(tokenizer, "lock", None), threads, go_on), raising=False
    )
    errors: list[BaseException] = []
    got: dict[str, Any] = {}

    def first() -> None:
        try:
            got["first"] = fts_mirror.tokens("Café naïve wörd")
        except BaseException as e:
            errors.append(e)

    def second() -> None:
        assert inside.wait(30)
        try:
            if other == "tokens":
                got["second"] = fts_mirror.tokens("Ünïque ëlse")
            else:
                tokenizer.forget()
        except BaseException as e:
            errors.append(e)
        finally:
            go_on.set()  # without the lock: done while the first is inside

    a, b = threading.Thread(target=first), threading.Thread(target=second)
    threads.append(b)
    try:
        a.start()
        b.start()
        a.join(60)
        b.join(60)
    finally:
        go_on.set()
        fts_mirror.clear()
    assert not errors, errors
    assert got["first"] == _fresh_tokens("Café naïve wörd")
    if other == "tokens":
        assert got["second"] == _fresh_tokens("Ünïque ëlse")


class _Episodes:
    """A store written by one connection (another process's compression run) and read by another."""

    def __init__(self, path: Path) -> None:
        self.writer = connect(path)
        self.reader = connect(path)
        self.n = 0

    def add(self, agent: str, summary: str) -> None:
        self.n += 1
        self.writer.execute(
            "INSERT INTO episodes (episode_id, agent_id, name, summary, owner) VALUES (?,?,?,?,?)",
            [f"e{self.n}", agent, "x", summary, agent],
        )

    def close(self) -> None:
        self.writer.close()
        self.reader.close()


@pytest.fixture
def episodes(tmp_path: Path) -> Any:
    archive_stats.clear()
    fts_mirror.clear()
    found = _Episodes(tmp_path / "hot.db")
    yield found
    found.close()
    archive_stats.clear()
    fts_mirror.clear()


def _idf_now(conn: Any, agent: str, terms: list[str]) -> tuple[Any, ...]:
    single: dict[str, str] = {}
    overall = episode_search._frequencies(conn, terms, single)
    return overall, single, episode_search._idf(conn, agent, terms, overall, single)


def test_an_agent_count_is_not_kept_for_one_word_when_the_prefix_covers_two(episodes: _Episodes) -> None:
    """The overall counts find "sourdough" covering one word; another connection adds
    "sourdoughs" before the agent's count is taken: what is kept counts both."""
    episodes.add("a", "sourdough bread")
    episodes.add("b", "other stuff")
    episodes.add("a", "plain")
    r, terms = episodes.reader, ["sourdough"]
    single: dict[str, str] = {}
    overall = episode_search._frequencies(r, terms, single)
    assert single == {"sourdough": "sourdough"}
    episodes.add("a", "sourdoughs starter")  # committed between the two reads
    episode_search._idf(r, "a", terms, overall, single)
    kept = _idf_now(r, "a", terms)
    assert kept == _fresh(lambda: _idf_now(r, "a", terms))
    store = next(iter(archive_stats._KEPT.stores.values()))
    assert store.agent_terms.get(("a", "sourdough")) in (None, 2)


@pytest.mark.parametrize("length", [32768, 32769, 40000])
def test_a_very_long_term_counts_as_the_index_does(episodes: _Episodes, length: int) -> None:
    """FTS5 cuts a query token past 32,768 bytes: the count after a new episode is the index's."""
    episodes.add("a", "hello world")
    episodes.add("b", "other stuff")
    r, term = episodes.reader, "s" * length
    match = episode_search._fts([term], {})
    archive_stats.agent_frequency(r, "a", term, match)
    episode_search._frequencies(r, [term], {})
    episodes.add("a", "s" * 32769)
    kept = archive_stats.agent_frequency(r, "a", term, match), episode_search._frequencies(r, [term], {})
    fresh = _fresh(
        lambda: (
            archive_stats.agent_frequency(r, "a", term, match),
            episode_search._frequencies(r, [term], {}),
        )
    )
    assert kept == fresh
    assert (
        kept[0]
        == r.execute(
            "SELECT count(*) FROM episodes WHERE agent_id = 'a' AND rowid IN"
            " (SELECT rowid FROM episodes_fts WHERE episodes_fts MATCH ?)",
            [match],
        ).fetchone()[0]
    )


def test_a_long_term_is_not_kept_and_cuts_no_prefix_per_character(
    episodes: _Episodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A question with a word of 16,000 characters: a new episode holding a token as long is cut
    into the prefixes of the terms kept under its head, not into one per character."""
    episodes.add("a", "hello world ssss")
    episodes.add("b", "other stuff")
    r, long_term, term = episodes.reader, "s" * 16_000, "s" * 20
    episode_search._frequencies(r, [long_term, term], {})
    archive_stats.agent_frequency(r, "a", long_term, episode_search._fts([long_term], {}))
    store = next(iter(archive_stats._KEPT.stores.values()))
    assert term in store.terms
    assert all(len(t) <= archive_stats.MAX_TERM for t in store.terms)
    assert all(len(t) <= archive_stats.MAX_TERM for _, t in store.agent_terms)
    real, made = archive_stats._covered, []

    def covered(*args: Any) -> Any:
        found = real(*args)
        made.append(len(found))
        return found

    monkeypatch.setattr(archive_stats, "_covered", covered)
    episodes.add("a", "s" * 16_000)
    kept = episode_search._frequencies(r, [long_term, term], {})
    assert made and max(made) <= 3  # "x", "s" * 20 (and nothing else)
    assert kept == _fresh(lambda: episode_search._frequencies(r, [long_term, term], {}))


def _add_quoted(episodes: _Episodes, agent: str, text: str) -> None:
    episodes.n += 1
    quotes = orjson.dumps([{"speaker": "x", "text": f"{text} {k}"} for k in range(10)]).decode()
    episodes.writer.execute(
        "INSERT INTO episodes (episode_id, agent_id, name, summary, owner, key_quotes) VALUES (?,?,?,?,?,?)",
        [f"e{episodes.n}", agent, "x", text, agent, quotes],
    )


def test_an_agents_quote_words_go_once_it_has_more_episodes_than_they_serve(episodes: _Episodes) -> None:
    """Past `max_episodes` (quote_search.QUOTE_IDF_MAX_EPISODES) its searches no longer read them:
    they are not kept growing with every new episode."""
    for k in range(3):
        _add_quoted(episodes, "a", f"the red pot {k}")
    _add_quoted(episodes, "b", "other words")
    r = episodes.reader
    split = episode_search._WORD.findall
    archive_stats.quote_words(r, "a", split, 4)
    archive_stats.quote_words(r, "b", split, 4)
    store = next(iter(archive_stats._KEPT.stores.values()))
    assert set(store.quotes) == {"a", "b"}
    _add_quoted(episodes, "a", "a fourth pot")
    archive_stats.current(r)
    assert set(store.quotes) == {"a", "b"} and store.quotes["a"].episodes == 4
    _add_quoted(episodes, "a", "a fifth pot")
    archive_stats.current(r)
    assert set(store.quotes) == {"b"}
    archive_stats.quote_words(r, "a", split, 4)  # read, answered, not kept
    assert set(store.quotes) == {"b"}


def test_the_quote_words_kept_stay_within_their_bytes(
    episodes: _Episodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    for agent in ("a", "b", "c"):
        for k in range(5):
            _add_quoted(episodes, agent, " ".join(f"{agent}word{j}" for j in range(20 * k, 20 * k + 20)))
    r, split = episodes.reader, episode_search._WORD.findall
    one = archive_stats.quote_words(r, "a", split, 100)
    monkeypatch.setattr(archive_stats, "MAX_QUOTE_BYTES", int(one.size * 2.5), raising=False)
    store = next(iter(archive_stats._KEPT.stores.values()))
    for agent in ("a", "b", "c"):
        found = archive_stats.quote_words(r, agent, split, 100)
        assert found.size <= one.size * 1.1
        assert sum(q.size for q in store.quotes.values()) <= int(one.size * 2.5)
    assert "c" in store.quotes  # the newest read is kept, the others dropped to make room
    for k in range(5):
        _add_quoted(episodes, "c", " ".join(f"cmore{j}" for j in range(40 * k, 40 * k + 40)))
    archive_stats.current(r)
    assert sum(q.size for q in store.quotes.values()) <= int(one.size * 2.5)


def _four_kept(episodes: _Episodes, terms: list[str]) -> Any:
    """Four episodes of agents a and b, with `terms` counted (and kept) for agent a: the kept statistics."""
    for k in range(4):
        episodes.add("ab"[k % 2], f"zebra paint {k}")
    _idf_now(episodes.reader, "a", terms)
    return archive_stats._KEPT.stores[next(iter(archive_stats._KEPT.stores))]


def test_a_reader_on_an_older_snapshot_leaves_what_is_kept(
    episodes: _Episodes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that read the store's version before another brought what is kept past it (a new
    episode, counted by the other reader in between) is answered by the index; what is kept at the
    newer version stays for the others."""
    terms = ["zebra", "paint"]
    store = _four_kept(episodes, terms)
    slow = connect(tmp_path / "hot.db")
    real, seen = archive_stats.state, []

    def state(conn: Any) -> Any:
        found = real(conn)
        if conn is slow and not seen:
            seen.append(found)
            episodes.add("a", "zebra painting again")  # and the other reader counts it first
            seen.append(_idf_now(episodes.reader, "a", terms))
        return found

    monkeypatch.setattr(archive_stats, "state", state)
    try:
        kept_terms = dict(store.terms)
        at_slow = _idf_now(slow, "a", terms)
        assert seen and seen[0][1] == 4 and store.newest == 5
        assert archive_stats._KEPT.stores[store.base[0]] is store and store.terms == kept_terms
        assert kept_terms == {t: store.terms[t] for t in terms}
        assert at_slow[0] == {"zebra": 5, "paint": 5}  # the index's counts, now
        assert _idf_now(episodes.reader, "a", terms) == seen[1]
    finally:
        slow.close()


def test_new_episodes_are_tokenized_without_the_lock_and_added_once(
    episodes: _Episodes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every store's searches wait on the lock: the new documents are tokenized without it. Another
    reader that brings what is kept up to date meanwhile does it once; the first then finds it done."""
    for k in range(4):
        episodes.add("ab"[k % 2], f"zebra paint {k}")
    terms = ["zebra", "paint", "painting"]
    first = connect(tmp_path / "hot.db")
    try:
        _idf_now(first, "a", terms)
        episodes.add("a", "zebra painting again")
        episodes.add("b", "paint it")
        real, calls, other = fts_mirror.counted, [], []

        def counted(text: Any) -> Any:
            assert not archive_stats._KEPT.lock.locked(), "tokenized under the lock"
            calls.append(text)
            if len(calls) == 1:
                other.append(_idf_now(episodes.reader, "a", terms))  # the other reader, meanwhile
            return real(text)

        monkeypatch.setattr(fts_mirror, "counted", counted)
        kept = _idf_now(first, "a", terms)
        monkeypatch.setattr(fts_mirror, "counted", real)
        assert kept == other[0] == _fresh(lambda: _idf_now(first, "a", terms))
        assert kept[0] == {"zebra": 5, "paint": 6, "painting": 1}
    finally:
        first.close()


def test_new_episodes_with_more_text_than_is_worth_adding_are_counted_anew(
    episodes: _Episodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    terms = ["zebra", "paint"]
    r = episodes.reader
    store = _four_kept(episodes, terms)
    assert store.terms
    monkeypatch.setattr(archive_stats, "MAX_NEW_CHARS", 1000, raising=False)
    episodes.add("a", "zebra " + "words " * 300)  # one row, 1,800 characters
    found = archive_stats.current(r)
    assert found is not None and found[0] is not store and not found[0].terms  # nothing read
    assert _idf_now(r, "a", terms) == _fresh(lambda: _idf_now(r, "a", terms))


def test_an_episode_added_while_the_new_ones_are_tokenized_does_not_stop_the_adding(
    episodes: _Episodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    terms = ["zebra", "paint"]
    r = episodes.reader
    store = _four_kept(episodes, terms)
    episodes.add("a", "zebra again")
    real, calls = fts_mirror.counted, []

    def counted(text: Any) -> Any:
        calls.append(text)
        if len(calls) == 1:
            episodes.add("b", "zebra once more")  # committed while the fifth is tokenized
        return real(text)

    monkeypatch.setattr(fts_mirror, "counted", counted)
    found = archive_stats.current(r)
    monkeypatch.setattr(fts_mirror, "counted", real)
    assert found is not None and found[0] is store and store.newest == found[1] == 5
    assert store.terms["zebra"].docs == 5
    assert _idf_now(r, "a", terms) == _fresh(lambda: _idf_now(r, "a", terms))


def test_an_error_while_reading_new_episodes_leaves_nothing_half_added(
    episodes: _Episodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k in range(6):
        episodes.add("ab"[k % 2], "zebra paint" if k % 3 else "plain")
    r, terms = episodes.reader, ["zebra", "paint"]
    _idf_now(r, "a", terms)
    episodes.add("a", "zebra painting")
    episodes.add("a", "zebra painting")
    episodes.add("a", "zebra painting")
    real, calls = fts_mirror.counted, [0]

    def failing(text: Any) -> Any:
        calls[0] += 1
        if calls[0] == 6:  # the second new document
            raise RuntimeError("boom")
        return real(text)

    monkeypatch.setattr(fts_mirror, "counted", failing)
    with pytest.raises(RuntimeError):
        _idf_now(r, "a", terms)
    monkeypatch.setattr(fts_mirror, "counted", real)
    kept = _idf_now(r, "a", terms)
    assert kept == _fresh(lambda: _idf_now(r, "a", terms))
    assert kept[0] == {"zebra": 7, "paint": 7}


def test_an_index_defined_otherwise_is_counted_by_the_index(episodes: _Episodes) -> None:
    """A porter tokenizer makes other tokens than the copied one: its new documents are not
    tokenized here, the terms are counted again."""
    episodes.writer.execute("DROP TABLE episodes_fts")
    episodes.writer.execute(
        "CREATE VIRTUAL TABLE episodes_fts USING fts5(name, summary, quotes, participants, agent, tokenize='porter')"
    )
    terms = ["painting", "painti", "paint", "zebra", "zebras"]
    for k in range(6):
        episodes.add("ab"[k % 2], "zebras paintings" if k % 3 else "plain")
    r = episodes.reader
    _idf_now(r, "a", terms)
    for _ in range(3):
        episodes.add("a", "zebras painting")
    kept = _idf_now(r, "a", terms)
    assert kept == _fresh(lambda: _idf_now(r, "a", terms))


def _add_plain(conn: Any, n: int, agent: str, summary: str) -> None:
    conn.execute(
        "INSERT INTO episodes (episode_id, agent_id, name, summary, owner) VALUES (?,?,?,?,?)",
        [f"e{n}", agent, "x", summary, agent],
    )


def _terms_filed_during_the_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, term: str, new_summary: str
) -> tuple[Any, Any]:
    """Four episodes kept (sizes only, no terms); a fifth committed; while one reader reads it
    without the lock, another files `term` counted at the fourth: what the first then applies."""
    archive_stats.clear()
    fts_mirror.clear()
    writer, reader = connect(tmp_path / "hot.db"), connect(tmp_path / "hot.db")
    for k in range(4):
        _add_plain(writer, k + 1, "ab"[k % 2], f"zebra paint {k}")
    archive_stats.sizes(reader, "a")
    kept = next(iter(archive_stats._KEPT.stores.values()))
    assert kept.total == 4 and not kept.terms
    docs, words, first = fts_terms.vocab_counts(reader, "episodes_fts", term, True)
    counted_before = {term: archive_stats.TermCount(docs, words, first)}
    _add_plain(writer, 5, "a", new_summary)
    read = archive_stats._New.read.__func__  # type: ignore[attr-defined]

    def read_while_another_files(cls: Any, conn: Any, after: int, upto: int, tokens: bool) -> Any:
        with archive_stats._KEPT.lock:
            archive_stats.keep_terms(kept, counted_before)
        return read(cls, conn, after, upto, tokens)

    monkeypatch.setattr(archive_stats._New, "read", classmethod(read_while_another_files))
    archive_stats.current(reader)
    monkeypatch.undo()
    writer.close()
    return reader, kept


def test_terms_filed_while_new_episodes_are_read_still_count_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fails if the catch-up applies documents read without their tokens over terms filed meanwhile."""
    reader, _ = _terms_filed_during_the_read(tmp_path, monkeypatch, "zebra", "zebra again")
    try:
        fresh = fts_terms.vocab_counts(reader, "episodes_fts", "zebra", True)[0]
        single: dict[str, str] = {}
        assert archive_stats.frequencies(reader, ["zebra"], single, None) == {"zebra": fresh} == {"zebra": 5}
    finally:
        reader.close()
        archive_stats.clear()


def test_a_prefix_filed_while_new_episodes_are_read_learns_the_second_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Else `zebr` stays "the one word zebra" and episodes with `zebras` are never found."""
    reader, _ = _terms_filed_during_the_read(tmp_path, monkeypatch, "zebr", "zebras galore")
    try:
        single: dict[str, str] = {}
        assert (archive_stats.frequencies(reader, ["zebr"], single, None), single) == ({"zebr": 5}, {})
    finally:
        reader.close()
        archive_stats.clear()


def test_the_prefix_heads_follow_the_terms_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Terms dropped at the cap take their heads with them (else new tokens are cut for heads no kept
    term needs, for the store's whole life)."""
    monkeypatch.setattr(archive_stats, "MAX_TERMS", 3)
    kept = archive_stats._Statistics((str(tmp_path), 0, "0"), 0)
    archive_stats.keep_terms(kept, {f"word{k}x": archive_stats.TermCount(1, 1, "") for k in range(3)})
    assert set(kept.heads) == {"word"}
    archive_stats.keep_terms(kept, {"other": archive_stats.TermCount(1, 0, "")})
    assert set(kept.terms) == {"other"} and set(kept.heads) == {"othe"}


def test_agents_counts_past_the_cap_keep_the_newer_half(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With many agents every recall files a few per-agent counts: past the cap the older half goes,
    not all of them (every agent would count its words again at once), and their heads with them."""
    monkeypatch.setattr(archive_stats, "MAX_TERMS", 4)
    kept = archive_stats._Statistics((str(tmp_path), 0, "0"), 0)
    for k in range(4):
        archive_stats.keep_agent_terms(kept, {(f"agent{k}", f"word{k}x"): k})
    archive_stats.keep_agent_terms(kept, {("agent9", "zebra"): 9})
    assert kept.agent_terms == {("agent2", "word2x"): 2, ("agent3", "word3x"): 3, ("agent9", "zebra"): 9}
    assert set(kept.heads) == {"word", "zebr"}


def test_the_idfs_worked_out_count_in_the_quote_words_size(episodes: _Episodes) -> None:
    _add_quoted(episodes, "a", "the red pot and the blue kettle")
    words = archive_stats.quote_words(episodes.reader, "a", episode_search._WORD.findall, 100)
    before = words.size
    with archive_stats._KEPT.lock:
        words.df([(f"form{k}",) for k in range(1_000)])
    assert words.size >= before + 1_000 * archive_stats.WORD_BYTES
    _add_quoted(episodes, "a", "a new quote")
    archive_stats.current(episodes.reader)  # quotes added: the IDFs go, and their bytes with them
    assert words.size < before + 1_000
