"""The review's checkpoint: which (day, agent) reports of the current run are written, and from what.

A run records each report once its files are on disk, with a fingerprint of
what it was computed from (the ids of the reviewed interactions, in order,
the prices and the report format). A run killed anywhere leaves these rows;
the next run skips every pair whose fingerprint is unchanged and whose report
is there, and computes the rest. A run that finishes clears its rows, so the
run after it computes everything again (reports are derived data: re-running
rewrites the same files).

One SQLite file under the checkpoints folder; each partition's pairs are
recorded in one transaction after its files are written, so a recorded pair
always has its files.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable

from tiermem.settings import Settings

STATE_NAME = "review.sqlite"
# Bumped when a report's content changes for the same input, so an old run's rows are not trusted.
REPORT_VERSION = "2"

Pair = tuple[str, str]  # (day YYYY-MM-DD, agent)


def settings_print(settings: Settings, judged: bool) -> str:
    """What a report depends on beyond its interactions: prices, the judge, the format."""
    prices = sorted((m, p.input, p.output, p.cache_read) for m, p in settings.prices.items())
    return hashlib.blake2b(repr((REPORT_VERSION, prices, judged)).encode(), digest_size=8).hexdigest()


class ReviewProgress:
    """The done set of the current review run (see the module docstring)."""

    def __init__(self, settings: Settings) -> None:
        settings.checkpoints_dir.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(settings.checkpoints_dir / STATE_NAME, timeout=60, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={'OFF' if settings.fsync == 'none' else 'NORMAL'}")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS done (day TEXT NOT NULL, agent_id TEXT NOT NULL, "
            "fingerprint TEXT NOT NULL, PRIMARY KEY (day, agent_id))"
        )

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> ReviewProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def recorded(self) -> dict[Pair, str]:
        return {(str(d), str(a)): str(f) for d, a, f in self.conn.execute("SELECT * FROM done")}

    def mark(self, pairs: dict[Pair, str]) -> None:
        """Record written reports (one transaction)."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.executemany(
                "INSERT OR REPLACE INTO done VALUES (?, ?, ?)", [(d, a, f) for (d, a), f in pairs.items()]
            )
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def clear(self, pairs: Iterable[Pair]) -> None:
        """The run finished: its pairs are no longer a run to resume."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.executemany("DELETE FROM done WHERE day = ? AND agent_id = ?", list(pairs))
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
