"""`tiermem sql`: read-only, table / CSV / JSON output; and the stage-1 demo."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import orjson
import pytest
from helpers_log import interaction, run_cli, write_jsonl
from tiermem.ingest.pipeline import ingest_file
from tiermem.log.sql import run_query

from tiermem.errors import ReadOnlyQueryError
from tiermem.settings import Settings


@pytest.fixture
def loaded(settings: Settings, tmp_path: Path) -> Settings:
    src = write_jsonl(tmp_path / "t.jsonl", [interaction(i, event_id=f"e{i:02d}") for i in range(20)])
    ingest_file(settings, src, progress=False)
    return settings


def test_sql_json_is_an_array_of_row_objects(loaded: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys,
        loaded.data_dir,
        [
            "sql",
            "--json",
            "SELECT agent_id, count(*) AS n, min(ts) AS first, list(event_id ORDER BY event_id)[1] AS e "
            "FROM interactions GROUP BY 1 ORDER BY 1",
        ],
    )
    rows = orjson.loads(out)
    assert code == 0 and isinstance(rows, list) and len(rows) == 3
    assert rows[0] == {"agent_id": "agent-0", "n": 7, "first": "2026-03-01T10:00:00.000Z", "e": "e00"}


def test_integers_past_64_bits_come_out_as_their_digits(
    loaded: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # A HUGEINT (a sum of hashes, a 128-bit cast) is beyond what a JSON encoder writes as a number.
    code, out, _ = run_cli(
        capsys,
        loaded.data_dir,
        [
            "sql",
            "--json",
            "SELECT 170141183460469231731687303715884105727::HUGEINT AS big, -(2::HUGEINT ** 64)::HUGEINT AS low, "
            "18446744073709551615::UBIGINT AS top, 7::HUGEINT AS small, sum(hash(event_id)) > 0 AS h "
            "FROM interactions",
        ],
    )
    assert code == 0, out
    row = orjson.loads(out)[0]
    assert row["big"] == "170141183460469231731687303715884105727" and row["low"] == "-18446744073709551616"
    assert row["top"] == 18446744073709551615 and row["small"] == 7 and row["h"] is True


def test_sql_csv_and_table(loaded: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys,
        loaded.data_dir,
        ["sql", "--csv", "SELECT event_id, tools_used FROM interactions ORDER BY 1 LIMIT 2"],
    )
    rows = list(csv.reader(io.StringIO(out)))
    assert code == 0 and rows == [["event_id", "tools_used"], ["e00", '["recall_memory"]'], ["e01", "[]"]]
    code, out, _ = run_cli(capsys, loaded.data_dir, ["sql", "SELECT count(*) AS n FROM events"])
    assert code == 0 and out.splitlines()[0].strip() == "n" and out.splitlines()[2].strip() == "20"


@pytest.mark.parametrize(
    "query",
    [
        "CREATE TABLE x AS SELECT 1",
        "INSERT INTO x VALUES (1)",
        "COPY (SELECT * FROM interactions) TO '/tmp/out.csv'",
        "ATTACH '/tmp/other.duckdb' AS other",
        "SET threads = 1",
        "INSTALL httpfs",
        "SELECT 1; DROP VIEW interactions",
    ],
)
def test_writes_are_refused_with_one_clear_line(
    loaded: Settings, capsys: pytest.CaptureFixture[str], query: str
) -> None:
    with pytest.raises(ReadOnlyQueryError):
        run_query(loaded, query)
    code, out, err = run_cli(capsys, loaded.data_dir, ["sql", query])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "read-only" in err or "one statement" in err


def test_bad_sql_is_a_one_line_error(loaded: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run_cli(capsys, loaded.data_dir, ["sql", "SELECT nope FROM interactions"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "nope" in err
