"""Putting a SQLite file in write-ahead-log mode when other connections may be at it.

Both SQLite files of tiermem (the log's id index and the hot store) are opened by
several processes at once: writers, the server's workers, the scheduler's jobs. Two
things about the mode switch matter then:

- a fresh connection answers `PRAGMA journal_mode` from its pager's default until it
  has read the file, so a file that is already WAL can answer "delete" and send the
  connection into a switch it does not need;
- SQLite answers "database is locked" to the switch at once, without the busy
  timeout, while another connection holds the file (a writer committing, or the last
  connection checkpointing on close).

`ensure_wal` reads the schema first (that read waits under the busy timeout), so a WAL
file says so, and only then switches, waiting out the other connection.
"""

from __future__ import annotations

import sqlite3
import time


def into_wal(conn: sqlite3.Connection, wait_s: float = 60.0) -> None:
    """Switch `conn`'s file to WAL, retrying while another connection holds it."""
    deadline = time.monotonic() + wait_s
    pause = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def ensure_wal(conn: sqlite3.Connection, wait_s: float = 60.0) -> None:
    """WAL mode for `conn`'s file: asked after the file is read, switched only when it is not."""
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
        into_wal(conn, wait_s)
