"""Sealing: closed days to Parquet, verified, idempotent, invisible to queries and checkpoints."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers_log import interaction, run_cli, segment_files
from tiermem.ingest.pipeline import ingest_file
from tiermem.log import manifest
from tiermem.log.seal import arrow_schema, seal

from tiermem import catalog
from tiermem.app import samples
from tiermem.eventlog import Checkpoints, EventLog
from tiermem.ids import format_ts
from tiermem.settings import Settings

QUERIES = [
    "SELECT count(*), count(DISTINCT event_id) FROM interactions",
    "SELECT agent_id, model, count(*), sum(usage.input_tokens), sum(usage.output_tokens), sum(response_length)"
    " FROM interactions GROUP BY ALL ORDER BY ALL",
    "SELECT CAST(ts AS DATE), channel, count(*), avg(latency_ms) FROM interactions GROUP BY ALL ORDER BY ALL",
    'SELECT event_id, ts, tools_used, metadata::VARCHAR, usage, memory_level, "user" FROM interactions ORDER BY event_id',
    "SELECT stream, type, count(*) FROM events GROUP BY ALL ORDER BY ALL",
    "SELECT count(*) FROM interactions WHERE list_contains(tools_used, 'recall_memory')",
]


def _results(settings: Settings) -> list[list[tuple[object, ...]]]:
    con = catalog.connect(settings)
    try:
        return [con.execute(q).fetchall() for q in QUERIES]
    finally:
        con.close()


def _sample(settings: Settings, tmp_path: Path, days: int = 4, per_day: int = 300) -> None:
    src = samples.write_jsonl(tmp_path / "s.jsonl", samples.generate(days=days, per_day=per_day, seed=3))
    ingest_file(settings, tmp_path / "s.jsonl", progress=False)
    assert src == days * per_day


def test_sealing_leaves_every_query_result_unchanged(settings: Settings, tmp_path: Path) -> None:
    _sample(settings, tmp_path)
    with EventLog(settings) as log:
        log.append(
            {
                "type": "memory_transition",
                "agent_id": "a",
                "from_level": "task",
                "to_level": "project",
                "summary": "done",
                "ts": "2026-01-02T00:00:00.000Z",
            }
        )
    before = _results(settings)
    info = seal(settings)
    assert info.sealed_segments == 4 and info.sealed_rows == 3 * 300 + 1 and info.skipped_open == 1
    assert _results(settings) == before
    parts = segment_files(settings.data_dir, suffix=".parquet")
    assert len(parts) == 3 and len(segment_files(settings.data_dir)) == 1  # today stays JSONL
    assert _results(settings) == before


def test_seal_is_idempotent_and_reads_back_identical_events(settings: Settings, tmp_path: Path) -> None:
    _sample(settings, tmp_path, days=3, per_day=200)
    with EventLog(settings) as log:
        before = list(log.read("interactions"))
    seal(settings)
    again = seal(settings)
    assert again.sealed_segments == 0 and again.already_sealed == 2
    with EventLog(settings) as log:
        after = list(log.read("interactions"))
    assert after == before  # same segments, same line numbers, same event dicts


def test_parquet_has_the_explicit_schema_and_zstd(settings: Settings, tmp_path: Path) -> None:
    _sample(settings, tmp_path, days=2, per_day=50)
    seal(settings)
    (path,) = segment_files(settings.data_dir, suffix=".parquet")
    schema = pq.read_schema(path)
    assert schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert schema.field("usage").type == arrow_schema("interactions").field("usage").type
    assert schema.field("tools_used").type == pa.list_(pa.string())
    assert schema.field("metadata").type == pa.string()
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"


def test_checkpoints_stay_valid_across_a_seal(settings: Settings, tmp_path: Path) -> None:
    _sample(settings, tmp_path, days=3, per_day=100)
    cps = Checkpoints(settings)
    pos: dict[str, int] = {}
    with EventLog(settings) as log:
        everything = [ev["event_id"] for _s, _l, ev in log.read("interactions")]
        for seg, line, _ev in list(log.read("interactions"))[:150]:
            cps.advance("job", pos, seg, line)
    cps.save("job", pos)
    seal(settings)
    with EventLog(settings) as log:
        rest = [ev["event_id"] for _s, _l, ev in log.read("interactions", since=cps.load("job"))]
    assert rest == everything[150:]


def test_late_event_for_a_sealed_day_lands_in_a_new_segment(settings: Settings, tmp_path: Path) -> None:
    yesterday = format_ts(datetime.now(UTC) - timedelta(days=1))
    with EventLog(settings) as log:
        log.append(interaction(1, ts=yesterday, event_id="early"))
        seal(settings)  # sealed while this writer still has the segment open
        res = log.append(interaction(1, ts=yesterday, event_id="late"))
        assert res.line == 0
        assert log.append(interaction(1, ts=yesterday, event_id="early")).duplicate
    assert len(segment_files(settings.data_dir)) == 1
    assert seal(settings).sealed_segments == 1
    con = catalog.connect(settings)
    assert con.execute("SELECT count(*) FROM interactions").fetchone() == (2,)


def test_crash_between_rename_and_unlink_is_finished_by_the_next_seal(
    settings: Settings, tmp_path: Path
) -> None:
    _sample(settings, tmp_path, days=2, per_day=30)
    (jsonl,) = [
        p
        for p in segment_files(settings.data_dir)
        if not p.parent.name.endswith(format_ts(datetime.now(UTC))[:10])
    ]
    data = jsonl.read_bytes()
    seal(settings)
    jsonl.write_bytes(data)  # both forms present, as after a crash mid-seal
    con = catalog.connect(settings)
    assert con.execute("SELECT count(*) FROM interactions").fetchone() == (60,)  # never double counted
    seal(settings)
    assert not jsonl.exists()


def test_manifest_lists_segments_rows_and_checksums(settings: Settings, tmp_path: Path) -> None:
    _sample(settings, tmp_path, days=2, per_day=40)
    info = seal(settings)
    doc = orjson.loads(Path(info.manifest).read_bytes())
    parts = doc["streams"]["interactions"]["partitions"]
    assert sum(p["rows"] for p in parts.values()) == 80
    sealed = [p for p in parts.values() if p["sealed"]]
    assert len(sealed) == 1 and len(sealed[0]["segments"][0]["sha256"]) == 64
    assert manifest.verify(settings) == []


def test_seal_cli_json_contract(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _sample(settings, tmp_path, days=2, per_day=20)
    code, out, _ = run_cli(capsys, settings.data_dir, ["seal", "--json"])
    doc = orjson.loads(out)
    assert code == 0
    assert doc["sealed_segments"] == 1 and doc["sealed_rows"] == 20 and doc["erased_events"] == 0
    assert {"before", "elapsed_s", "parquet_bytes", "manifest", "segments"} <= set(doc)
    code, out, _ = run_cli(capsys, settings.data_dir, ["seal"])
    assert code == 0 and "sealed 0 segment(s)" in out


def test_replaying_sealed_days_creates_no_empty_segments(settings: Settings, tmp_path: Path) -> None:
    _sample(settings, tmp_path, days=3, per_day=50)
    seal(settings)
    info = ingest_file(settings, tmp_path / "s.jsonl", progress=False)
    assert (info.accepted, info.duplicates) == (0, 150)
    jsonl = segment_files(settings.data_dir)
    assert len(jsonl) == 1 and jsonl[0].parent.name.endswith(format_ts(datetime.now(UTC))[:10])


def test_a_parquet_file_that_does_not_match_the_jsonl_is_never_renamed(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tiermem.log import seal as seal_module

    from tiermem.errors import LogCorruptionError

    _sample(settings, tmp_path, days=2, per_day=30)
    real = seal_module.write_parquet_from_jsonl

    def lossy(con: object, stream: str, src: Path, dst: Path) -> None:
        real(con, stream, src, dst)  # type: ignore[arg-type]
        table = pq.read_table(dst)
        pq.write_table(table.slice(1), dst)  # one row lost on the way

    monkeypatch.setattr(seal_module, "write_parquet_from_jsonl", lossy)
    with pytest.raises(LogCorruptionError):
        seal(settings)
    assert segment_files(settings.data_dir, suffix=".parquet") == []
    assert list(settings.log_dir.rglob("*.tmp")) == []
    assert len(segment_files(settings.data_dir)) == 2


def test_fast_id_verification_accepts_the_real_file_and_refuses_any_change(
    settings: Settings, tmp_path: Path
) -> None:
    from tiermem.log.seal import duck, verify_against_jsonl, verify_ids_by_bytes, write_parquet_from_jsonl

    from tiermem.errors import LogCorruptionError

    _sample(settings, tmp_path, days=1, per_day=300)
    (jsonl,) = segment_files(settings.data_dir)
    parquet = tmp_path / "seg.parquet"
    con = duck()
    write_parquet_from_jsonl(con, "interactions", jsonl, parquet)
    data = jsonl.read_bytes()
    assert verify_ids_by_bytes(parquet, jsonl, len(data)) == 300
    lines = data.splitlines(keepends=True)
    swapped = lines[:]
    swapped[10], swapped[11] = swapped[11], swapped[10]
    one_id_byte = bytearray(data)
    one_id_byte[len(lines[0]) + 20] ^= 1  # inside the second line's id
    changes = {
        "swapped": b"".join(swapped),
        "id byte": bytes(one_id_byte),
        "line lost": b"".join(lines[:-1]),
        "line doubled": b"".join([*lines, lines[-1]]),
    }
    for kind, content in changes.items():
        bad = tmp_path / f"{kind}.jsonl"
        bad.write_bytes(content)
        assert verify_ids_by_bytes(parquet, bad, len(content)) is None, kind
        with pytest.raises(LogCorruptionError):
            verify_against_jsonl(con, parquet, bad, len(content))
    con.close()
