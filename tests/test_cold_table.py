"""The cold tier on object storage: sealed days in Delta Lake tables on a real S3 API (moto's server)."""

from __future__ import annotations

import subprocess
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from deltalake import DeltaTable
from helpers_log import PYTHON, interaction, run_cli, write_jsonl
from helpers_s3 import S3Server, bucket_objects, bucket_text, start_s3, write_config
from tiermem.ingest.pipeline import ingest_file
from tiermem.log import cold_table
from tiermem.log.seal import seal
from tiermem.log.sql import run_query

from tiermem import catalog
from tiermem.app.forget import forget
from tiermem.errors import ConfigError, StorageError
from tiermem.eventlog import EventLog
from tiermem.ids import format_ts
from tiermem.settings import Settings, resolve_settings

SECRET = "canary-4417-my-bank-pin"


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    yield from start_s3()


@pytest.fixture
def cold(s3: S3Server, tmp_path: Path) -> tuple[Settings, str]:
    bucket = s3.new_bucket()
    return write_config(tmp_path / "data", s3, bucket), bucket


def _ingest_days(settings: Settings, tmp_path: Path, n: int = 60, **fields: str) -> None:
    """`n` turns over five closed days (2026-03-01..05)."""
    src = write_jsonl(
        tmp_path / "turns.jsonl", [interaction(i, event_id=f"t{i:03d}", **fields) for i in range(n)]
    )
    ingest_file(settings, src, progress=False)


def _sql(capsys: pytest.CaptureFixture[str], settings: Settings, query: str) -> list[dict[str, object]]:
    code, out, err = run_cli(capsys, settings.data_dir, ["sql", "--json", query])
    assert code == 0, err
    rows: list[dict[str, object]] = orjson.loads(out)
    return rows


def _local(settings: Settings, query: str) -> list[tuple[object, ...]]:
    return catalog.connect(settings).execute(query).fetchall()


def test_seal_commits_closed_days_and_sql_counts_match(
    cold: tuple[Settings, str], s3: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings, bucket = cold
    _ingest_days(settings, tmp_path)
    today = format_ts(datetime.now(UTC))
    with EventLog(settings) as log:
        for i in range(3):  # today's turns: an open day, stays local
            log.append(interaction(100 + i, ts=today, event_id=f"today{i}"))
    info = seal(settings)
    assert info.cold_url == settings.cold_url
    assert info.cold_rows == 60 and info.cold_segments == 5  # one segment per closed day
    cold_counts = _sql(
        capsys,
        settings,
        "SELECT date, count(*) AS n, count(DISTINCT event_id) AS ids "
        "FROM cold_interactions GROUP BY date ORDER BY date",
    )
    local_counts = _local(
        settings,
        f"SELECT strftime(ts, '%Y-%m-%d') AS d, count(*) FROM interactions_events "
        f"WHERE ts < '{today[:10]}' GROUP BY d ORDER BY d",
    )
    assert [(r["date"], r["n"]) for r in cold_counts] == local_counts
    assert all(r["n"] == r["ids"] for r in cold_counts) and sum(n for _d, n in local_counts) == 60
    # The open day is read locally and was never sent.
    assert _local(settings, "SELECT count(*) FROM interactions_events")[0] == (63,)
    keys = bucket_objects(s3, bucket)
    assert not [k for k in keys if f"date={today[:10]}" in k]
    assert any(k.startswith("cold/interactions/_delta_log/") for k in keys)
    # Same columns and values as the local sealed files.
    row = _sql(
        capsys, settings, "SELECT user_message, usage, ts FROM cold_interactions WHERE event_id = 't007'"
    )
    assert row == _sql(
        capsys, settings, "SELECT user_message, usage, ts FROM interactions WHERE event_id = 't007'"
    )
    # Running the seal again commits nothing twice.
    again = seal(settings)
    assert (again.cold_segments, again.cold_already) == (0, 5)
    assert _sql(capsys, settings, "SELECT count(*) AS n FROM cold_events") == [{"n": 60}]
    # The sandbox is whole with the table views in it.
    code, _out, err = run_cli(capsys, settings.data_dir, ["sql", "SELECT * FROM read_text('/etc/passwd')"])
    assert code == 2 and "refused" in err


def test_a_seal_killed_between_commits_is_finished_by_the_next(
    cold: tuple[Settings, str], s3: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings, bucket = cold
    _ingest_days(settings, tmp_path)
    script = textwrap.dedent(
        """
        import os, signal, sys
        from tiermem.log import cold_table
        from tiermem.log.seal import seal
        from tiermem.settings import resolve_settings

        real = cold_table.commit_segment

        def commit_then_die(*args, **kwargs):
            rows = real(*args, **kwargs)
            if rows is not None:  # the first segment is in the table: die before the next
                os.kill(os.getpid(), signal.SIGKILL)
            return rows

        cold_table.commit_segment = commit_then_die
        seal(resolve_settings(data_dir=sys.argv[1], env={}))
        """
    )
    proc = subprocess.run(
        [str(PYTHON), "-c", script, str(settings.data_dir)], capture_output=True, timeout=300
    )
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    # Every day is sealed locally, one of them reached the table.
    assert len(list((settings.log_dir / "interactions").glob("date=*/*.parquet"))) == 5
    first = _sql(capsys, settings, "SELECT count(*) AS n FROM cold_interactions")[0]["n"]
    assert first == 12
    # What a crash between a data file's upload and its commit leaves: a file no version reads.
    local = sorted((settings.log_dir / "interactions").glob("date=2026-03-02/*.parquet"))[0]
    s3.client().put_object(
        Bucket=bucket,
        Key="cold/interactions/date=2026-03-02/part-00000-orphan-c000.zstd.parquet",
        Body=local.read_bytes(),
    )
    info = seal(settings)
    assert (info.sealed_segments, info.cold_segments, info.cold_already) == (0, 4, 1)
    assert _sql(
        capsys, settings, "SELECT count(*) AS n, count(DISTINCT event_id) AS ids FROM cold_interactions"
    ) == [{"n": 60, "ids": 60}]


def test_erasure_deletes_through_the_table_and_leaves_no_old_file(
    cold: tuple[Settings, str], s3: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings, bucket = cold
    _ingest_days(settings, tmp_path, n=40)
    src = write_jsonl(
        tmp_path / "mallory.jsonl",
        [interaction(i, user="mallory", user_message=f"{SECRET} {i}", event_id=f"m{i}") for i in range(4)],
    )
    ingest_file(settings, src, progress=False)
    seal(settings)
    assert SECRET.encode() in bucket_text(s3, bucket)  # the check below can fail
    count = "SELECT count(*) AS n FROM cold_interactions"
    assert _sql(capsys, settings, count) == [{"n": 44}]

    info = forget(settings, user="mallory", now=True)
    assert info.removed["object_store"] == {"deleted_rows": 4, "files_removed": 4}
    assert SECRET.encode() not in bucket_text(s3, bucket)
    assert _sql(capsys, settings, count) == [{"n": 40}]
    table = DeltaTable(
        cold_table.table_uri(settings, "interactions"), storage_options=cold_table.storage_options(settings)
    )
    assert "DELETE" in [h["operation"] for h in table.history()]

    # Without --now: hidden from the table views at once, deleted from the bucket at the next seal.
    forget(settings, agent="agent-1")
    agent_rows = _local(settings, "SELECT count(*) FROM interactions_events WHERE agent_id = 'agent-1'")
    assert agent_rows == [(0,)]
    assert _sql(
        capsys, settings, "SELECT count(*) AS n FROM cold_interactions WHERE agent_id = 'agent-1'"
    ) == [{"n": 0}]
    in_table = table.to_pyarrow_dataset().to_table(columns=["agent_id"]).column("agent_id").to_pylist()
    assert in_table.count("agent-1") == 13
    sealed = seal(settings)
    assert sealed.cold_deleted_rows == 13 and sealed.cold_files_removed >= 5
    table.update_incremental()
    # No data file is left in the bucket but the ones the table's current version reads.
    data_files = {k for k in bucket_objects(s3, bucket) if k.endswith(".parquet") and "_delta_log" not in k}
    assert data_files == {u.split(f"s3://{bucket}/", 1)[1] for u in table.file_uris()}
    assert len(data_files) == 5
    assert (
        "agent-1"
        not in table.to_pyarrow_dataset().to_table(columns=["agent_id"]).column("agent_id").to_pylist()
    )
    assert seal(settings).cold_deleted_rows == 0  # applied once


def test_cold_settings_resolve_once_from_the_file_and_the_environment(tmp_path: Path) -> None:
    env = {
        "TIERMEM_COLD_URL": "s3://my-bucket/tiermem",
        "TIERMEM_COLD__ALLOW_HTTP": "true",
        "AWS_ENDPOINT_URL": "http://minio:9000",
        "AWS_ACCESS_KEY_ID": "AKIA",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t",
        "AWS_REGION": "eu-west-1",
    }
    settings = resolve_settings(data_dir=tmp_path, env=env)
    assert settings.cold_url == "s3://my-bucket/tiermem"
    assert (settings.cold.endpoint_url, settings.cold.region, settings.cold.allow_http) == (
        "http://minio:9000",
        "eu-west-1",
        True,
    )
    assert "s3cr3t" not in repr(settings)
    assert cold_table.storage_options(settings)["AWS_SECRET_ACCESS_KEY"] == "s3cr3t"
    assert cold_table.table_uri(settings, "interactions") == "s3://my-bucket/tiermem/interactions"
    (tmp_path / "tiermem.toml").write_text('[cold]\nendpoint_url = "http://other:9000"\n', encoding="utf-8")
    assert resolve_settings(data_dir=tmp_path, env=env).cold.endpoint_url == "http://other:9000"
    with pytest.raises(ConfigError, match="cold_url"):
        resolve_settings(data_dir=tmp_path, env={"TIERMEM_COLD_URL": "/local/folder"})
    assert resolve_settings(data_dir=tmp_path / "x", env={}).cold_url == ""


def test_a_query_naming_no_table_view_does_not_touch_the_object_store(tmp_path: Path) -> None:
    # Nothing listens on port 9: were the tables opened, the query would fail (after retries).
    env = {"TIERMEM_COLD_URL": "s3://nowhere-bucket/x", "TIERMEM_COLD__ENDPOINT_URL": "http://127.0.0.1:9"}
    settings = resolve_settings(data_dir=tmp_path / "data", env=env)
    with EventLog(settings) as log:
        log.append(interaction(1, event_id="only"))
    assert run_query(settings, "SELECT count(*) FROM interactions").rows == [(1,)]


def test_an_unreachable_object_store_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "tiermem.toml").write_text(
        'cold_url = "s3://nowhere-bucket/x"\n[cold]\nendpoint_url = "http://127.0.0.1:9"\n'
        'access_key_id = "k"\nsecret_access_key = "s"\nregion = "us-east-1"\nallow_http = true\nmax_retries = 0\n',
        encoding="utf-8",
    )
    code, out, err = run_cli(capsys, data, ["sql", "SELECT count(*) FROM cold_events"])
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "object store s3://nowhere-bucket/x: opening the" in err
    assert "\x1b" not in err


def test_an_erasure_interrupted_before_its_vacuum_is_finished_by_the_next_seal(
    cold: tuple[Settings, str], s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, bucket = cold
    src = write_jsonl(
        tmp_path / "turns.jsonl",
        [
            interaction(i, event_id=f"t{i}", user_message=f"{SECRET} {i}" if i == 3 else f"hello {i}")
            for i in range(10)
        ],
    )
    ingest_file(settings, src, progress=False)
    seal(settings)

    def no_vacuum(*_args: object, **_kwargs: object) -> list[str]:
        raise OSError("connection reset while vacuuming")

    monkeypatch.setattr(DeltaTable, "vacuum", no_vacuum)
    with pytest.raises(StorageError, match="erasing from the interactions table"):
        forget(settings, event="t3", now=True)
    monkeypatch.undo()
    # The delete committed: the table no longer reads the row, but the old file is still in the bucket.
    assert SECRET.encode() in bucket_text(s3, bucket)
    info = seal(settings)
    assert info.cold_deleted_rows == 0 and info.cold_files_removed >= 1  # already deleted; vacuumed now
    assert SECRET.encode() not in bucket_text(s3, bucket)


def test_a_second_data_root_on_the_same_prefix_is_refused_before_it_touches_the_tables(
    cold: tuple[Settings, str], s3: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings, bucket = cold
    _ingest_days(settings, tmp_path, n=20)
    seal(settings)
    before = bucket_objects(s3, bucket)
    # Another machine's data root, misconfigured with the same cold_url prefix.
    other = write_config(tmp_path / "other", s3, bucket)
    src = write_jsonl(tmp_path / "other.jsonl", [interaction(i, event_id=f"o{i:03d}") for i in range(20)])
    ingest_file(other, src, progress=False)
    assert cold_table.writer_id(other) != cold_table.writer_id(settings)
    code, _out, err = run_cli(capsys, other.data_dir, ["seal"])
    assert code == 2 and err.count("\n") == 1
    assert "written by another data root" in err and cold_table.writer_id(settings) in err
    with pytest.raises(cold_table.ForeignTableError):
        forget(other, event="o003", now=True)
    assert bucket_objects(s3, bucket) == before  # nothing written, deleted or vacuumed
    # The owner goes on as before; its id lives in its data root and in the table's description.
    again = seal(settings)
    assert (again.cold_segments, again.cold_already) == (0, 5)
    description = (
        DeltaTable(
            cold_table.table_uri(settings, "interactions"),
            storage_options=cold_table.storage_options(settings),
        )
        .metadata()
        .description
    )
    assert cold_table.writer_id(settings) in (description or "")


def test_a_table_made_before_writers_were_recorded_is_claimed_by_its_first_sealer(
    cold: tuple[Settings, str], s3: S3Server, tmp_path: Path
) -> None:
    settings, _bucket = cold
    _ingest_days(settings, tmp_path, n=10)
    seal(settings)
    uri = cold_table.table_uri(settings, "interactions")
    options = cold_table.storage_options(settings)
    DeltaTable(uri, storage_options=options).alter.set_table_description("made by an older tiermem")
    assert seal(settings).cold_already == 5  # claimed, then nothing to commit
    assert cold_table.writer_id(settings) in (
        DeltaTable(uri, storage_options=options).metadata().description or ""
    )
