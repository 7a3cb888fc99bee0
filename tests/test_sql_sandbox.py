"""SQL that can only read the memory: every probe ends in a one-line error and touches no file."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import orjson
import pytest
from helpers_log import interaction, run_cli, write_jsonl
from tiermem.ingest.pipeline import ingest_file
from tiermem.log.sql import check_read_only, run_query

from tiermem.errors import QueryError, ReadOnlyQueryError, ValidationError
from tiermem.settings import Settings, resolve_settings


@pytest.fixture
def loaded(settings: Settings, tmp_path: Path) -> Settings:
    src = write_jsonl(tmp_path / "in" / "t.jsonl", [interaction(i, event_id=f"e{i:02d}") for i in range(30)])
    ingest_file(settings, src, progress=False)
    (settings.hot_dir).mkdir(parents=True, exist_ok=True)
    (settings.hot_dir / "hot.sqlite").write_bytes(b"not for analysts")
    return settings


def snapshot(*roots: Path) -> dict[str, str]:
    """Every file under the roots with a hash of its bytes (what a probe must not create or change)."""
    out: dict[str, str] = {}
    for root in roots:
        if not root.exists():
            continue
        for path in sorted(root.rglob("*")):
            if path.is_file():
                out[str(path)] = hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()
            elif path.is_dir():
                out[str(path)] = "dir"
    return out


def _segment(settings: Settings) -> Path:
    return sorted((settings.log_dir / "interactions").glob("date=*/*.jsonl"))[0]


def probes(settings: Settings, tmp_path: Path) -> list[tuple[str, str]]:
    """(name, query) of every probe; each must be refused."""
    seg = _segment(settings)
    outside = tmp_path / "outside"
    log = settings.log_dir.resolve()
    return [
        ("COPY TO a file", f"COPY (SELECT * FROM interactions) TO '{outside}/out.csv'"),
        ("COPY TO the log's own segment", f"COPY (SELECT 1 AS x) TO '{seg}' (FORMAT csv)"),
        (
            "EXPLAIN ANALYZE COPY TO a file",
            f"EXPLAIN ANALYZE COPY (SELECT * FROM interactions) TO '{outside}/x.csv'",
        ),
        (
            "EXPLAIN ANALYZE COPY over the log",
            f"EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{seg}' (FORMAT csv)",
        ),
        (
            "EXPLAIN (FORMAT json) ANALYZE-style COPY",
            f"EXPLAIN (FORMAT json) COPY (SELECT 1) TO '{outside}/j.csv'",
        ),
        ("EXPORT DATABASE", f"EXPORT DATABASE '{outside}/export'"),
        ("ATTACH", f"ATTACH '{outside}/other.duckdb' AS other"),
        ("INSTALL", "INSTALL httpfs"),
        ("LOAD", "LOAD httpfs"),
        ("SET", "SET enable_external_access = true"),
        ("SET memory", "SET memory_limit = '100GB'"),
        ("RESET", "RESET lock_configuration"),
        ("PRAGMA", "PRAGMA enable_profiling"),
        ("CALL", "CALL pragma_version()"),
        ("CREATE", "CREATE TABLE x AS SELECT 1"),
        ("CREATE VIEW", "CREATE OR REPLACE TEMP VIEW interactions AS SELECT 1"),
        ("DROP VIEW interactions", "DROP VIEW interactions"),
        ("INSERT", "INSERT INTO interactions VALUES (1)"),
        ("two statements", "SELECT 1; DROP VIEW interactions"),
        ("two statements, the second a COPY", f"SELECT 1; COPY (SELECT 1) TO '{outside}/two.csv'"),
        ("read_text outside", "SELECT * FROM read_text('/etc/passwd')"),
        (
            "read_text of the hot store (data root, not the log)",
            f"SELECT * FROM read_text('{settings.hot_db.resolve()}')",
        ),
        ("read_text with .. out of the log", f"SELECT * FROM read_text('{log}/../hot/hot.sqlite')"),
        ("read_csv outside", "SELECT * FROM read_csv('/etc/hosts')"),
        ("read_parquet outside", f"SELECT * FROM read_parquet('{outside}/p.parquet')"),
        ("read_json outside", f"SELECT * FROM read_json('{outside}/x.json')"),
        ("glob of everything", "SELECT * FROM glob('/**')"),
        ("glob of the data root", f"SELECT * FROM glob('{settings.data_dir.resolve()}/**')"),
        ("read_blob outside", "SELECT * FROM read_blob('/etc/hostname')"),
        ("unknown function (would auto-install an extension)", "SELECT st_point(1, 2)"),
        ("table function of an extension", f"SELECT * FROM read_xlsx('{outside}/x.xlsx')"),
        ("query() of a write", "SELECT * FROM query('CREATE TABLE t AS SELECT 1')"),
        (
            "PIVOT with columns found at run time (creates a type first)",
            "PIVOT interactions ON agent_id USING count(*)",
        ),
    ]


def test_every_probe_is_one_line_and_touches_no_file(
    loaded: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"secret": ["outside"]}), outside / "p.parquet")
    (outside / "x.json").write_text('{"secret": "outside"}\n')
    home_ext = Path(os.path.expanduser("~")) / ".duckdb"
    before = snapshot(loaded.data_dir, outside, home_ext, Path.cwd() / ".tmp")
    for name, query in probes(loaded, tmp_path):
        code, out, err = run_cli(capsys, loaded.data_dir, ["sql", query])
        assert code in (1, 2), name
        assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (name, err)
        assert err.startswith("tiermem sql: error: "), (name, err)
        assert "outside" not in err.split("error: ", 1)[1].replace(str(outside), ""), (name, err)
    assert snapshot(loaded.data_dir, outside, home_ext, Path.cwd() / ".tmp") == before


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("COPY (SELECT 1) TO 'x.csv'", "COPY refused"),
        ("EXPLAIN ANALYZE COPY (SELECT 1) TO 'x.csv'", "EXPLAIN of COPY refused"),
        ("EXPORT DATABASE 'x'", "EXPORT refused"),
        ("ATTACH 'x.db'", "ATTACH refused"),
        ("SELECT 1; SELECT 2", "2 statements refused"),
        ("DROP VIEW interactions", "DROP refused"),
        ("/* a comment */ EXPLAIN ANALYZE COPY (SELECT 1) TO 'x.csv'", "refused"),
    ],
)
def test_refusals_say_why(query: str, why: str) -> None:
    with pytest.raises(ReadOnlyQueryError) as err:
        check_read_only(query)
    assert why in str(err.value) and "read-only" in str(err.value)


def test_reading_the_memory_still_works(loaded: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    for query in (
        "SELECT count(*) FROM interactions",
        "WITH a AS (SELECT agent_id FROM interactions) SELECT count(DISTINCT agent_id) FROM a",
        "FROM events LIMIT 1",
        "DESCRIBE interactions",
        "SHOW TABLES",
        "SUMMARIZE SELECT latency_ms FROM interactions",
        "EXPLAIN SELECT * FROM interactions",
        "EXPLAIN ANALYZE SELECT count(*) FROM interactions",
        "PIVOT interactions ON agent_id IN ('agent-0', 'agent-1') USING count(*)",
    ):
        code, out, err = run_cli(capsys, loaded.data_dir, ["sql", "--json", query])
        assert code == 0, (query, err)
        assert isinstance(orjson.loads(out), list)
    # The log's own files may be read directly (they are the memory).
    files = f"{loaded.log_dir.resolve()}/interactions/*/*.jsonl"
    rows = run_query(loaded, f"SELECT count(*) FROM read_json('{files}', format = 'newline_delimited')").rows
    assert rows == [(30,)]


def test_a_query_past_its_timeout_is_stopped(loaded: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    endless = "SELECT count(*) FROM range(1000000000000000) a WHERE a.range % 7 = 3"
    with pytest.raises(QueryError, match=r"timeout of 0\.3 s"):
        run_query(loaded, endless, timeout=0.3)
    code, out, err = run_cli(capsys, loaded.data_dir, ["sql", "--timeout", "0.3", endless])
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1 and "timeout" in err
    code, _out, err = run_cli(capsys, loaded.data_dir, ["sql", "--timeout", "0", "SELECT 1"])
    assert code == 2 and "timeout" in err


def test_the_memory_limit_holds(loaded: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    (loaded.data_dir / "tiermem.toml").write_text('[sql]\nmemory_limit = "30MB"\n')
    small = resolve_settings(data_dir=loaded.data_dir, env={})
    assert small.sql.memory_limit == "30MB"
    hog = (
        "SELECT count(*) FROM (SELECT range % 5000000 AS k, list(range) AS l FROM range(20000000) GROUP BY 1)"
    )
    with pytest.raises(QueryError, match="memory_limit = 30MB"):
        run_query(small, hog)
    code, _out, err = run_cli(capsys, loaded.data_dir, ["sql", hog])
    assert code == 1 and len(err.strip().splitlines()) == 1 and "memory" in err
    (loaded.data_dir / "tiermem.toml").write_text('[sql]\nmemory_limit = "lots"\n')
    with pytest.raises(ValidationError):
        run_query(resolve_settings(data_dir=loaded.data_dir, env={}), "SELECT 1")
