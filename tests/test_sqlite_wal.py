"""A store file being created by one process while another opens it (two server workers' first turns)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tiermem.runtime import hotstore

from tiermem import sqlite_wal


def test_opening_the_hot_store_while_another_connection_creates_it_waits_instead_of_failing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "hot.db"
    creator = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    creator.execute("BEGIN IMMEDIATE")  # the other worker is writing the new file's schema
    creator.execute("CREATE TABLE first_writer (x)")

    retried = threading.Event()
    real_sleep = time.sleep

    def noted_sleep(seconds: float) -> None:
        retried.set()
        real_sleep(seconds)

    monkeypatch.setattr(sqlite_wal.time, "sleep", noted_sleep)
    outcome: dict[str, Any] = {}

    def open_it() -> None:
        try:
            outcome["conn"] = hotstore.connect(path)
        except Exception as exc:  # the old switch: "database is locked" at once
            outcome["error"] = exc

    opener = threading.Thread(target=open_it)
    opener.start()
    while not retried.is_set() and opener.is_alive():
        retried.wait(0.01)
    creator.execute("COMMIT")
    opener.join(60)
    assert "error" not in outcome, outcome.get("error")
    conn = outcome["conn"]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'first_writer'").fetchone()[0] == 1
    conn.close()
    creator.close()


def test_a_file_already_in_wal_is_not_switched_again(tmp_path: Path) -> None:
    hotstore.connect(tmp_path / "hot.db").close()
    conn = sqlite3.connect(tmp_path / "hot.db", isolation_level=None)
    said: list[str] = []
    conn.set_trace_callback(said.append)
    sqlite_wal.ensure_wal(conn)
    assert not [s for s in said if "journal_mode=" in s.replace(" ", "").lower()], said
    conn.close()
