"""The log store: durable appends, idempotency, concurrency, torn tails, replaced segments."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from helpers_log import PYTHON, REPO, all_lines, interaction, segment_files

from tiermem.errors import ValidationError
from tiermem.eventlog import Checkpoints, EventLog
from tiermem.settings import Settings


def test_append_returns_position_and_caller_id_is_idempotent(event_log: EventLog, settings: Settings) -> None:
    first = event_log.append(interaction(1, event_id="turn-1"))
    assert (first.line, first.duplicate) == (0, False)
    assert first.segment.startswith("interactions/date=2026-03-02/seg-")
    again = event_log.append(interaction(1, event_id="turn-1", user_message="changed"))
    assert again.duplicate and again.line == -1
    assert event_log.append(interaction(6)).line == 1  # same day as interaction(1)
    assert len(all_lines(settings.data_dir)) == 2
    # The stored line starts with the id (seal verification and the index rely on it).
    assert all_lines(settings.data_dir)[0].startswith(b'{"event_id":"turn-1"')


def test_duplicates_within_one_batch_are_counted_once(event_log: EventLog) -> None:
    batch = event_log.append_many([interaction(1, event_id="x"), interaction(1, event_id="x")])
    assert (batch.accepted, batch.duplicates) == (1, 1)


def test_enrichment_fills_ts_id_and_response_length(event_log: EventLog) -> None:
    rec = {"type": "interaction", "agent_id": "a", "user_message": "q", "agent_response": "four"}
    res = event_log.append(rec)
    ((_seg, _line, ev),) = list(event_log.read("interactions"))
    assert ev["event_id"] == res.event_id and len(ev["event_id"]) == 26
    assert ev["response_length"] == 4 and ev["tools_used"] == [] and ev["memory_level"] == "global"
    assert ev["ts"].endswith("Z") and len(ev["ts"]) == 24


def test_invalid_record_is_rejected_with_field_and_kept(event_log: EventLog, settings: Settings) -> None:
    with pytest.raises(ValidationError) as err:
        event_log.append(interaction(1, latency_ms="slow"))
    assert err.value.field == "latency_ms"
    (reject,) = [
        orjson.loads(x) for p in settings.rejects_dir.rglob("*.jsonl") for x in p.read_bytes().splitlines()
    ]
    assert reject["field"] == "latency_ms" and "slow" in reject["record"]


def test_torn_last_line_is_quarantined_not_parsed(settings: Settings) -> None:
    with EventLog(settings) as log:
        log.append(interaction(1))
    (seg,) = segment_files(settings.data_dir)
    with open(seg, "ab") as fh:
        fh.write(b'{"event_id":"torn","type":"interac')  # a writer died mid-line
    with EventLog(settings) as log:
        res = log.append(interaction(6))  # same day: same segment
        assert res.line == 1
        events = [ev["event_id"] for _s, _l, ev in log.read("interactions")]
    assert "torn" not in events and len(events) == 2
    assert all(line.endswith(b"}") for line in seg.read_bytes().splitlines())
    (q,) = [orjson.loads(x) for x in (settings.quarantine_dir / "torn.jsonl").read_bytes().splitlines()]
    assert q["bytes"] == '{"event_id":"torn","type":"interac' and q["line"] == 1 and q["byte_offset"] > 0


def test_lines_written_but_never_indexed_still_count_as_duplicates(settings: Settings) -> None:
    """A writer killed between its durable write and the index update: the next open reconciles."""
    with EventLog(settings) as log:
        log.append(interaction(1, event_id="a"))
    (seg,) = segment_files(settings.data_dir)
    from tiermem.events import validate

    with open(seg, "ab") as fh:  # durable, not indexed
        fh.write(orjson.dumps(validate(interaction(1, event_id="crashed"))) + b"\n")
    with EventLog(settings) as log:
        res = log.append(interaction(1, event_id="crashed"))
    assert res.duplicate
    assert len(seg.read_bytes().splitlines()) == 2


def test_writer_reopens_a_segment_replaced_under_its_fd(settings: Settings) -> None:
    with EventLog(settings) as log:
        log.append(interaction(1, event_id="a"))
        log.append(interaction(1, event_id="b"))
        (seg,) = segment_files(settings.data_dir)
        # Another process rewrites the file (as erasure does): new inode, same name.
        kept = seg.read_bytes().splitlines()[0] + b"\n"
        tmp = seg.with_name(".tmp")
        tmp.write_bytes(kept)
        os.replace(tmp, seg)
        res = log.append(interaction(1, event_id="c"))
        assert res.line == 1  # counted in the new file, not the old inode
    lines = seg.read_bytes().splitlines()
    assert [orjson.loads(x)["event_id"] for x in lines] == ["a", "c"]


def test_checkpoint_read_resumes_after_position(event_log: EventLog, settings: Settings) -> None:
    for i in range(5):
        event_log.append(interaction(0, event_id=f"e{i}"))
    cps = Checkpoints(settings)
    pos: dict[str, int] = {}
    for seg, line, _ev in list(event_log.read("interactions"))[:3]:
        cps.advance("job", pos, seg, line)
    cps.save("job", pos)
    rest = [ev["event_id"] for _s, _l, ev in event_log.read("interactions", since=cps.load("job"))]
    assert rest == ["e3", "e4"]


def test_group_commit_from_many_threads_gives_whole_lines_and_unique_positions(settings: Settings) -> None:
    group = replace(settings, fsync="group")
    results = []
    lock = threading.Lock()
    with EventLog(group) as log:

        def worker(t: int) -> None:
            for k in range(200):
                r = log.append(interaction(0, event_id=f"t{t}-{k}"))
                with lock:
                    results.append(r)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    lines = all_lines(settings.data_dir)
    assert len(lines) == 1600 and len({orjson.loads(x)["event_id"] for x in lines}) == 1600
    assert sorted(r.line for r in results) == list(range(1600))
    by_line = {r.line: r.event_id for r in results}
    assert all(orjson.loads(lines[n])["event_id"] == by_line[n] for n in range(1600))


WRITER = """
import sys
from tiermem.eventlog import EventLog
from tiermem.settings import resolve_settings
settings = resolve_settings(data_dir=sys.argv[1], env={{}}, fsync=sys.argv[3])
who = sys.argv[2]
with EventLog(settings) as log:
    for k in range({n}):
        log.append({{"type": "interaction", "agent_id": who, "event_id": f"{{who}}-{{k}}",
                    "ts": "2026-03-01T10:00:00.000Z", "user_message": "m" * (1 + k % 300),
                    "agent_response": "r" * (k % 5000)}})
"""


@pytest.mark.slow
def test_four_processes_appending_at_once_give_exactly_all_whole_lines(
    settings: Settings, tmp_path: Path
) -> None:
    n = 5000
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(n=n))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            # fsync=none: this checks interleaving, not durability (and keeps the test fast).
            [str(PYTHON), str(script), str(settings.data_dir), f"p{i}", "none"],
            env=env,
        )
        for i in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    raw = b"".join(p.read_bytes() for p in segment_files(settings.data_dir))
    assert raw.endswith(b"\n")
    lines = raw.split(b"\n")[:-1]
    assert len(lines) == 4 * n
    ids = [orjson.loads(line)["event_id"] for line in lines]  # every line parses: none torn or interleaved
    assert len(set(ids)) == 4 * n
    for i in range(4):  # each writer's own records stay in its order
        mine = [x for x in ids if x.startswith(f"p{i}-")]
        assert mine == [f"p{i}-{k}" for k in range(n)]
    assert sys.platform.startswith("linux") or True


def test_segments_roll_over_at_the_size_limit_and_read_in_order(settings: Settings) -> None:
    small = replace(settings, segment_max_bytes=2_000)
    with EventLog(small) as log:
        results = [log.append(interaction(0, event_id=f"r{i:03d}")) for i in range(40)]
        events = [ev["event_id"] for _s, _l, ev in log.read("interactions")]
    segments = segment_files(settings.data_dir)
    assert len(segments) > 3
    assert all(p.stat().st_size < 2_000 + 1_000 for p in segments)
    assert events == [f"r{i:03d}" for i in range(40)]  # segment names sort in time order
    assert {r.segment for r in results} == {f"interactions/{p.parent.name}/{p.stem}" for p in segments}
    assert all(r.line == 0 for r in results if r.event_id == "r000")
    from tiermem.log.seal import seal

    seal(small, before="2030-01-01")
    with EventLog(small) as log:
        assert [ev["event_id"] for _s, _l, ev in log.read("interactions")] == events
