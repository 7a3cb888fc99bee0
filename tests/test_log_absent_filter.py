"""The one-step append's "absent" answered from the id index's ids, read once (`_steady.Index`).

The compiled lookup reads every id of the index once, between two reads of the wal-index
header, and answers "absent" from them while the header is unchanged; any commit since (by
another process or by another connection of this one) sends the lookup to SQLite again.
These tests check that an id that entered the index in any of those ways is a duplicate for
the next append, that ids in the index when it was read are never answered absent, that the
reading leaves no read transaction behind, and that the Python path (no compiled module)
answers the same.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers_log import PYTHON, REPO, interaction, segment_files

from tiermem import steady_append
from tiermem.eventlog import EventLog
from tiermem.idindex import INDEX_NAME, open_index, record_ids
from tiermem.settings import Settings

TS = "2026-03-01T10:00:00.000Z"
compiled = pytest.mark.skipif(steady_append._steady is None, reason="built without the compiled one step")


def _filter(log: EventLog) -> tuple[bool, int, int, int]:
    """(valid, ids read, lookups SQLite answered since, "absent" answered by the filter)."""
    state: tuple[bool, int, int, int, int] = log._writers["interactions"].fast_index.filter_state()
    return state[:4]


def _readings(log: EventLog) -> int:
    readings: int = log._writers["interactions"].fast_index.filter_state()[4]
    return readings


def _log(settings: Settings, way: str, monkeypatch: pytest.MonkeyPatch) -> EventLog:
    if way == "python":  # as without the compiled module: every lookup is SQLite's
        monkeypatch.setattr(steady_append, "_steady", None)
    return EventLog(replace(settings, fsync="always"))


def _fill(log: EventLog, prefix: str, n: int) -> None:
    for k in range(n):
        assert not log.append(interaction(k, event_id=f"{prefix}-{k}", ts=TS)).duplicate


def _counts(settings: Settings) -> Counter[str]:
    return Counter(
        orjson.loads(x)["event_id"]
        for p in segment_files(settings.data_dir)
        for x in p.read_bytes().splitlines()
    )


# Puts ids in the index the way another process's writer indexing a segment does, and exits.
INDEXER = """
import sys
from pathlib import Path
from tiermem.idindex import open_index, record_ids
conn = open_index(Path(sys.argv[1]))
record_ids(conn, [(sys.argv[2], sys.argv[3:], 0)])
conn.close()
"""


@pytest.mark.parametrize("way", ["compiled", "python"])
@pytest.mark.parametrize("by", ["another process", "this process"])
def test_an_id_indexed_between_two_appends_is_a_duplicate_for_the_second(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, way: str, by: str
) -> None:
    if way == "compiled" and steady_append._steady is None:
        pytest.skip("built without the compiled one step")
    with _log(settings, way, monkeypatch) as log:
        _fill(log, "a", 150)
        if way == "compiled":
            valid, _n, _misses, answered = _filter(log)
            assert valid and answered > 0  # "absent" is being answered from the ids read
        other = "interactions/date=2026-03-01/other"
        if by == "another process":
            script = tmp_path / "indexer.py"
            script.write_text(INDEXER)
            subprocess.run(
                [str(PYTHON), str(script), str(log.root), other, "x-1", "x-2"],
                env={**os.environ, "PYTHONPATH": str(REPO)},
                check=True,
                timeout=60,
            )
        else:  # another connection of this process: a commit the filter did not see either
            _index_ids(log.root, "x-1", "x-2", segment=other)
        assert log.append(interaction(1, event_id="x-1", ts=TS)).duplicate
        _fill(log, "b", 100)  # back to the one step, the index read again
        assert log.append(interaction(2, event_id="x-2", ts=TS)).duplicate
        if way == "compiled":
            valid, n, _misses, _answered = _filter(log)
            assert valid and n == 2  # read again after the commit: the two ids are in it
    counts = _counts(settings)
    assert "x-1" not in counts and "x-2" not in counts
    assert max(counts.values()) == 1 and len(counts) == 250


@compiled
def test_ids_in_the_index_when_it_is_read_are_never_answered_absent(settings: Settings) -> None:
    with EventLog(replace(settings, fsync="always")) as log:
        _fill(log, "a", 2)
        _index_ids(log.root, *(f"old-{k}" for k in range(3000)), segment="interactions/date=2026-03-01/old")
        _fill(log, "b", 150)
        valid, n, _misses, answered = _filter(log)
        assert valid and n == 3000 and answered > 0
        # Each old id goes to SQLite (the filter holds it) and is refused.
        for k in range(0, 3000, 7):
            assert log.append(interaction(k, event_id=f"old-{k}", ts=TS)).duplicate
    assert not any(x.startswith("old-") for x in _counts(settings))


@compiled
def test_reading_the_index_leaves_no_read_transaction_behind(settings: Settings) -> None:
    # A read transaction kept after the reading would stop a checkpoint from resetting the
    # write-ahead log (the reason each lookup is its own read).
    with EventLog(replace(settings, fsync="always")) as log:
        _fill(log, "a", 2)
        _index_ids(log.root, *(f"old-{k}" for k in range(500)), segment="interactions/date=2026-03-01/old")
        _fill(log, "b", 150)
        assert _filter(log)[0]
        other = sqlite3.connect(log.root / INDEX_NAME, isolation_level=None)
        try:
            busy, _frames, _done = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            other.close()
        assert busy == 0
        assert (log.root / f"{INDEX_NAME}-wal").stat().st_size == 0
        _fill(log, "c", 250)  # the truncated log is a new header: read again, and on it goes
        assert _filter(log)[0]


# Appends the ids given and prints, per id, whether it was a duplicate.
APPENDER = """
import sys
from tiermem.eventlog import EventLog
from tiermem.settings import resolve_settings
settings = resolve_settings(data_dir=sys.argv[1], env={}, fsync="always")
with EventLog(settings) as log:
    for eid in sys.argv[2:]:
        r = log.append({"type": "interaction", "agent_id": "o", "event_id": eid,
                        "ts": "2026-03-01T10:00:00.000Z", "user_message": "m", "agent_response": "r"})
        print(eid, int(r.duplicate))
"""


def _other_process(tmp_path: Path, settings: Settings, *ids: str) -> dict[str, int]:
    script = tmp_path / "appender.py"
    script.write_text(APPENDER)
    out = subprocess.run(
        [str(PYTHON), str(script), str(settings.data_dir), *ids],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    answers: dict[str, Any] = dict(line.split() for line in out.splitlines())
    return {k: int(v) for k, v in answers.items()}


@compiled
def test_an_id_another_process_appended_is_a_duplicate_and_the_reverse(
    settings: Settings, tmp_path: Path
) -> None:
    with EventLog(replace(settings, fsync="always")) as log:
        _fill(log, "a", 150)
        assert _filter(log)[0]
        # The other process takes this writer's tail into the index and refuses its ids.
        assert _other_process(tmp_path, settings, "c-1", "a-5", "c-2") == {"c-1": 0, "a-5": 1, "c-2": 0}
        assert log.append(interaction(1, event_id="c-1", ts=TS)).duplicate
        assert log.append(interaction(2, event_id="c-2", ts=TS)).duplicate
        _fill(log, "d", 100)
        assert _filter(log)[0]
        assert log.append(interaction(3, event_id="c-1", ts=TS)).duplicate
    counts = _counts(settings)
    assert max(counts.values()) == 1 and counts["c-1"] == 1 and counts["a-5"] == 1


@compiled
def test_an_index_committed_to_after_every_append_is_read_ever_more_rarely(settings: Settings) -> None:
    # Each reading costs about a third of the lookups waited for; when its filter goes stale
    # before it pays (another connection commits after every append), the wait doubles.
    with EventLog(replace(settings, fsync="none")) as log:
        _fill(log, "a", 2)
        conn = open_index(log.root)
        try:
            record_ids(conn, [("interactions/date=2026-03-01/old", [f"old-{k}" for k in range(1600)], 0)])
            for k in range(3000):
                assert not log.append(interaction(k, event_id=f"b-{k}", ts=TS)).duplicate
                record_ids(conn, [("interactions/date=2026-03-01/old", [f"new-{k}"], 0)])
            assert log.append(interaction(1, event_id="new-2999", ts=TS)).duplicate
        finally:
            conn.close()
        readings = _readings(log)
    # The waits double (3 readings in these 3,000 appends); a wait that never grew reads the
    # index 13 times here, each reading wasted.
    assert 1 <= readings <= 4


def _index_ids(root: Path, *ids: str, segment: str = "interactions/date=2026-03-01/other") -> None:
    """Commit ids to the index through a connection of its own (as another writer would)."""
    conn = open_index(root)
    try:
        record_ids(conn, [(segment, list(ids), 0)])
    finally:
        conn.close()


def _commit_during_readings(log: EventLog) -> list[str]:
    """From now on each reading of the index commits one id through another connection once its
    snapshot is taken; the ids so committed, in order."""
    committed: list[str] = []

    def commit_now() -> None:
        committed.append(f"mid-{len(committed)}")
        _index_ids(log.root, committed[-1])

    log._writers["interactions"].fast_index.set_reading_hook(commit_now)
    return committed


@compiled
def test_an_id_committed_while_the_index_is_read_is_never_answered_absent(settings: Settings) -> None:
    # The reading's snapshot is taken at its start; an id committed after that is not in the
    # filter, so the filter must be dropped (the header read before the reading no longer
    # matches), not kept under the header as it is after the reading.
    with EventLog(replace(settings, fsync="none")) as log:
        _fill(log, "a", 2)
        _index_ids(log.root, *(f"old-{k}" for k in range(500)))
        committed = _commit_during_readings(log)
        k = 0
        while not committed:
            k += 1
            assert k < 10_000, "the index was never read"
            assert not log.append(interaction(k, event_id=f"b-{k}", ts=TS)).duplicate
        log._writers["interactions"].fast_index.set_reading_hook(None)
        assert not _filter(log)[0]  # dropped at once
        assert log.append(interaction(1, event_id=committed[0], ts=TS)).duplicate
        # Later readings (no commit during them) keep their filter, which holds the id too.
        for j in range(k + 1, k + 2_000):
            assert not log.append(interaction(j, event_id=f"b-{j}", ts=TS)).duplicate
        assert _filter(log)[0]
        assert log.append(interaction(2, event_id=committed[0], ts=TS)).duplicate
    assert committed[0] not in _counts(settings)


@compiled
def test_readings_that_never_answer_are_begun_ever_more_rarely(settings: Settings) -> None:
    # Another writer committing during every reading: none gives a filter, and each one that
    # failed waits twice as long as the last before the next (else one every ~100 lookups).
    with EventLog(replace(settings, fsync="none")) as log:
        _fill(log, "a", 2)
        _index_ids(log.root, *(f"old-{k}" for k in range(600)))
        hits = _commit_during_readings(log)
        for k in range(3_000):
            assert not log.append(interaction(k, event_id=f"b-{k}", ts=TS)).duplicate
        log._writers["interactions"].fast_index.set_reading_hook(None)
        valid, _n, _misses, answered = _filter(log)
        assert not valid and answered == 0
    # Waits of 101, 202, 404, 808, 1616 lookups: 5 readings in 3,000 appends (29 without doubling).
    assert 3 <= len(hits) <= 6
