"""Erasure at seal time: no file under the data root keeps the erased content."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers_log import interaction, write_jsonl
from tiermem.ingest.pipeline import ingest_file
from tiermem.log.seal import seal

from tiermem import catalog
from tiermem.erased import erased_filter
from tiermem.errors import ValidationError
from tiermem.eventlog import Checkpoints, EventLog
from tiermem.ids import format_ts
from tiermem.settings import Settings

SECRET = "my-bank-pin-is-4417"


def _all_text(data_dir: Path) -> bytes:
    """Every byte under the data root, with Parquet decoded (its pages are compressed)."""
    chunks = []
    for path in data_dir.rglob("*"):
        if path.is_file():
            chunks.append(path.read_bytes())
            if path.suffix == ".parquet":
                chunks.append(str(pq.read_table(path).to_pylist()).encode())
    return b"".join(chunks)


def test_forgetting_a_user_reaches_every_file_at_the_next_seal(settings: Settings, tmp_path: Path) -> None:
    old = format_ts(datetime.now(UTC) - timedelta(days=2))
    today = format_ts(datetime.now(UTC))
    with EventLog(settings) as log:
        log.append(interaction(1, user="mallory", ts=old, user_message=f"{SECRET} old", event_id="m-old"))
        log.append(interaction(2, user="alice", ts=old, event_id="a-old"))
        seal(settings)  # mallory's turn is now sealed Parquet
        log.append(
            interaction(3, user="mallory", ts=today, agent_response=f"today {SECRET}", event_id="m-new")
        )
        log.append(interaction(4, user="alice", ts=today, event_id="a-new"))
        # An episode derived from her turn quotes it: it must go too.
        log.append(
            {
                "type": "episode",
                "agent_id": "agent-1",
                "name": "pin",
                "summary": f"she said {SECRET}",
                "start_ts": old,
                "end_ts": old,
                "importance": 8,
                "source_event_ids": ["m-old"],
                "ts": today,
            }
        )
        # A rejected record of hers, kept in _rejects/.
        with pytest.raises(ValidationError):
            log.append(interaction(5, user="mallory", ts=today, user_message=f"{SECRET} rej", latency_ms=-3))
        cps = Checkpoints(settings)
        pos: dict[str, int] = {}
        for seg, line, _ev in log.read("interactions"):
            if _ev["event_id"] == "m-new":
                break
            cps.advance("job", pos, seg, line)
        cps.save("job", pos)
        log.append({"type": "erasure", "target_kind": "user", "target": "mallory"})
        hide = erased_filter(settings)
        visible = [ev["event_id"] for _s, _l, ev in log.read("interactions") if not hide(ev)]
        assert visible == ["a-old", "a-new"]
        assert SECRET.encode() in _all_text(settings.data_dir)
        info = seal(settings)
        # The writer still holds today's segment open: it notices the rewrite and reopens.
        res = log.append(interaction(6, user="alice", ts=today, event_id="a-after"))
        assert res.line == 2  # after the tombstone of m-new and a-new: positions kept
    assert info.erased_events == 3 and info.scrubbed_records == 1
    assert SECRET.encode() not in _all_text(settings.data_dir)
    con = catalog.connect(settings)
    assert con.execute("SELECT list(event_id ORDER BY event_id) FROM interactions").fetchone() == (
        ["a-after", "a-new", "a-old"],
    )
    assert con.execute("SELECT count(*) FROM episodes_events").fetchone() == (0,)
    with EventLog(settings) as log:
        rest = [ev["event_id"] for _s, _l, ev in log.read("interactions", since=cps.load("job"))]
        # Re-ingesting her erased turn does not bring it back.
        assert log.append(interaction(3, user="mallory", ts=today, event_id="m-new")).duplicate
    assert rest == ["a-new", "a-after"]


def test_forgetting_an_agent_and_a_single_event(settings: Settings, tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "t.jsonl", [interaction(i, event_id=f"e{i}") for i in range(30)])
    ingest_file(settings, src, progress=False)
    with EventLog(settings) as log:
        log.append({"type": "erasure", "target_kind": "agent", "target": "agent-0"})
        log.append({"type": "erasure", "target_kind": "event", "target": "e1"})
    info = seal(settings)
    assert info.erased_events == 10 + 1
    con = catalog.connect(settings)
    assert con.execute("SELECT count(*) FROM interactions").fetchone() == (19,)
    assert con.execute(
        "SELECT count(*) FROM interactions WHERE agent_id = 'agent-0' OR event_id = 'e1'"
    ).fetchone() == (0,)
    assert seal(settings).erased_events == 0  # idempotent
