"""Kept term statistics (runtime.archive_stats) at their edges: the tokenizer shared with
runtime.fts_mirror from two threads, a count taken while another connection adds a word, very long
query terms, a reader on an older snapshot, an error part-way through adding, and a store whose
index is defined otherwise. Interleavings are forced with events inside the code, never timed."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from tiermem.runtime import archive_stats, episode_search, fts_mirror
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
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def second() -> None:
        assert inside.wait(30)
        try:
            if other == "tokens":
                got["second"] = fts_mirror.tokens("Ünïque ëlse")
            else:
                tokenizer.forget()
        except BaseException as e:  # noqa: BLE001 - reported below
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
