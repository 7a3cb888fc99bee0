"""DuckDB views over the log: sealed Parquet and open JSONL, read together.

One view per stream (`<stream>_events`, every column of the stream), plus
`events` (the common columns of every stream) and `interactions`. A segment
that exists both as JSONL and as Parquet (the moment between a seal's rename
and its cleanup) is read from Parquet only, so no partition is counted twice.
Other parts add derived views (episodes, knowledge, ...) through
`tiermem.sqlviews`, so this module stays ignorant of them.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from tiermem.eventlog import ERASED_MARK
from tiermem.registry import (
    BOOL,
    FLOAT,
    INT,
    JSON,
    STR,
    STREAMS,
    STRLIST,
    TS,
    USAGE,
    stream_fields,
    type_filter,
)
from tiermem.settings import Settings

DUCK_TYPES = {
    STR: "VARCHAR",
    INT: "BIGINT",
    FLOAT: "DOUBLE",
    BOOL: "BOOLEAN",
    TS: "TIMESTAMPTZ",
    STRLIST: "VARCHAR[]",
    JSON: "JSON",
    USAGE: "STRUCT(input_tokens BIGINT, output_tokens BIGINT, cache_read_tokens BIGINT, tool_calls BIGINT)",
}


def _q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def stream_files(log_dir: Path, stream: str) -> tuple[list[Path], list[Path]]:
    """(parquet files, jsonl files without a parquet twin) of a stream."""
    parquet: list[Path] = []
    jsonl: list[Path] = []
    root = log_dir / stream
    if not root.exists():
        return parquet, jsonl
    for part in sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("date=")):
        for f in sorted(part.iterdir()):
            if f.name.startswith("."):
                continue
            if f.suffix == ".parquet":
                parquet.append(f)
            elif f.suffix == ".jsonl" and not f.with_suffix(".parquet").exists():
                try:
                    if f.stat().st_size > 0:
                        jsonl.append(f)
                except FileNotFoundError:  # sealed while we listed: its Parquet twin is listed
                    if f.with_suffix(".parquet").exists() and f.with_suffix(".parquet") not in parquet:
                        parquet.append(f.with_suffix(".parquet"))
    return parquet, jsonl


def jsonl_reader(files: list[Path], stream: str, *, filename: bool = False) -> str:
    """`read_json(...)` over segment files with the stream's explicit column types (plus the erasure mark)."""
    cols = {**stream_fields(stream), ERASED_MARK: BOOL}
    listed = ", ".join(_q(str(p)) for p in files)
    spec = ", ".join(f"{_q(c)}: {_q(DUCK_TYPES[k])}" for c, k in cols.items())
    return (
        f"read_json([{listed}], format = 'newline_delimited', columns = {{{spec}}}, "
        # Every stored line passed validation; the only bad line a reader can meet is
        # a torn tail that a crashed writer left and the next writer will quarantine.
        "timestampformat = '%Y-%m-%dT%H:%M:%S.%gZ', hive_partitioning = false, ignore_errors = true"
        + (", filename = true)" if filename else ")")
    )


def stream_select(log_dir: Path, stream: str) -> str:
    """A SELECT over every event of one stream with the stream's typed columns.

    Erased events (tombstones left by `tiermem seal` after a `forget`) are not rows.
    """
    cols = stream_fields(stream)
    names = ", ".join(f'"{c}"' for c in cols)
    parquet, jsonl = stream_files(log_dir, stream)
    parts = []
    live = f'"{ERASED_MARK}" IS NOT TRUE'
    if parquet:
        files = ", ".join(_q(str(p)) for p in parquet)
        parts.append(f"SELECT {names} FROM read_parquet([{files}], union_by_name = true) WHERE {live}")
    if jsonl:
        parts.append(f"SELECT {names} FROM {jsonl_reader(jsonl, stream)} WHERE {live}")
    if not parts:
        empty = ", ".join(f'CAST(NULL AS {DUCK_TYPES[k]}) AS "{c}"' for c, k in cols.items())
        return f"SELECT {empty} WHERE false"
    return " UNION ALL BY NAME ".join(parts)


# Events listed by an `erasure` are hidden from every view at once, before the next
# seal turns them into tombstones (DESIGN: after `forget`, no view returns them).
_NOT_ERASED = (
    "event_id NOT IN (SELECT unnest(erased_event_ids) FROM erasures_events "
    "WHERE type = 'erasure' AND erased_event_ids IS NOT NULL)"
)


def _targets(kind: str) -> str:
    return f"(SELECT target FROM erasures_events WHERE type = 'erasure' AND target_kind = '{kind}')"


def _not_erased(stream: str) -> str:
    """Hide listed events, and events written later that still name a forgotten agent or user
    (the projector refuses them and the next seal erases them too)."""
    fields = stream_fields(stream)
    clauses = [_NOT_ERASED, f"coalesce(agent_id, '') NOT IN {_targets('agent')}"]
    for column in ("user", "participant"):
        if column in fields:
            clauses.append(f"coalesce(\"{column}\", '') NOT IN {_targets('user')}")
    if "participants" in fields:
        clauses.append(
            "NOT list_has_any(coalesce(participants, []::VARCHAR[]), (SELECT coalesce(list(target), []) "
            "FROM erasures_events WHERE type = 'erasure' AND target_kind = 'user'))"
        )
    return " AND ".join(clauses)


def create_views(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    ordered = sorted(STREAMS, key=lambda s: s != "erasures")  # the others filter against erasures_events
    for stream in ordered:
        select = stream_select(settings.log_dir, stream)
        if stream != "erasures":
            select = f"SELECT * FROM ({select}) WHERE {_not_erased(stream)}"
        con.execute(f"CREATE OR REPLACE TEMP VIEW {stream}_events AS {select}")
    common = " UNION ALL ".join(
        f"SELECT event_id, type, ts, schema_version, agent_id, '{s}' AS stream FROM {s}_events"
        for s in STREAMS
    )
    con.execute(f"CREATE OR REPLACE TEMP VIEW events AS {common}")
    inter_cols = ", ".join(f'"{c}"' for c in stream_fields("interactions"))
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW interactions AS SELECT {inter_cols} FROM interactions_events "
        f"WHERE {type_filter('interactions')}"
    )


def connect(settings: Settings, *, read_only: bool = True) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the log's views (no database file is written)."""
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    create_views(con, settings)
    return con
