"""Analyst SQL that can only read the memory (`tiermem sql`, `Memory.sql`).

A query runs on its own in-memory DuckDB connection holding the log's views
and every part's derived views (`tiermem.sqlviews.open_catalog`). Three
fences keep it to reading the memory:

1. **Statements.** DuckDB's own parser splits the text; exactly one statement
   must remain and it must be a SELECT (`WITH … SELECT`, `FROM …`, `VALUES`,
   `DESCRIBE`, `SHOW`, `SUMMARIZE` parse as SELECT) or an EXPLAIN [ANALYZE] of
   one. EXPLAIN is checked by parsing what it explains, because `EXPLAIN
   ANALYZE` runs it (`EXPLAIN ANALYZE COPY … TO` would write a file).
2. **Files.** Once the views are made, the connection may open files only
   under the data root's log (`allowed_directories`,
   `enable_external_access = false`): `read_text('/etc/…')`, `glob('/**')`
   or a `read_parquet` elsewhere is refused by DuckDB itself. Extensions are
   neither installed nor loaded on demand, nothing spills to a temporary
   directory, and the configuration is then locked, so no statement can undo
   any of this.
3. **Resources.** A memory limit (`[sql] memory_limit`) and a timeout
   (`[sql] timeout_seconds`, `tiermem sql --timeout`): a timer thread
   interrupts the query when it is up.

With an object-store cold tier (`cold_url`), the catalog also has
`cold_<stream>` views (and `cold_events`) over the stream tables. DuckDB does
not read them itself: `deltalake` resolves the table's current files and hands
DuckDB an Arrow dataset, registered before the lock, so the second fence stays
whole (no S3 credentials or network access inside the connection, no extension
to load; DuckDB's own `delta`/`httpfs` extensions would need both).

Every refusal is one line saying why (`ReadOnlyQueryError`, exit 2); a bad
query is a `ValidationError` (exit 2), a timeout or memory failure a
`QueryError` (exit 1).
"""

from __future__ import annotations

import csv
import io
import re
import threading
import time
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import orjson

from tiermem.errors import QueryError, ReadOnlyQueryError, ValidationError
from tiermem.ids import format_ts
from tiermem.settings import Settings

ALLOWED = {duckdb.StatementType.SELECT}
_EXPLAIN = re.compile(r"\s*EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?:\([^()]*\)\s*)?", re.IGNORECASE)
READ_ONLY_HINT = "tiermem sql runs one read-only SELECT (or EXPLAIN of one)"
# DuckDB's statement types, as the statements a person wrote.
_NAMES = {
    "LOAD": "INSTALL/LOAD",
    "VARIABLE_SET": "SET VARIABLE",
    "MULTI": "a statement made of several (a PIVOT without an IN list of its columns)",
}


# The integers a JSON number carries here (orjson writes signed and unsigned 64-bit ones).
INT_MIN, UINT_MAX = -(2**63), 2**64 - 1


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    elapsed_s: float

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, (plain(v) for v in row), strict=True)) for row in self.rows]


def plain(value: Any) -> Any:
    """A value as JSON would carry it (timestamps in the log's ISO format)."""
    if isinstance(value, datetime):
        return format_ts(value) if value.tzinfo else value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value) if value != value.to_integral_value() else plain(int(value))
    if isinstance(value, int) and not isinstance(value, bool) and not INT_MIN <= value <= UINT_MAX:
        # HUGEINT sums and hashes: JSON encoders stop at 64 bits, and a reader's own integers may
        # stop earlier; the digits, as a string, lose nothing.
        return str(value)
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.hex()
    return value


def _statements(query: str) -> list[Any]:
    try:
        return list(duckdb.extract_statements(query))
    except duckdb.Error as exc:
        raise ValidationError("query", _first_line(exc)) from None


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def check_read_only(query: str) -> None:
    """Raise unless `query` is exactly one SELECT, or one EXPLAIN [ANALYZE] of a SELECT."""
    statements = _statements(query)
    if not statements:
        raise ValidationError("query", "empty query")
    if len(statements) > 1:
        raise ReadOnlyQueryError(f"{len(statements)} statements refused: {READ_ONLY_HINT}")
    kind = statements[0].type
    if kind == duckdb.StatementType.EXPLAIN:
        text = statements[0].query
        prefix = _EXPLAIN.match(text)
        inner = _statements(text[prefix.end() :]) if prefix else []
        if len(inner) != 1 or inner[0].type not in ALLOWED:
            what = inner[0].type.name if len(inner) == 1 else "that statement"
            raise ReadOnlyQueryError(f"EXPLAIN of {what} refused: {READ_ONLY_HINT}")
        return
    if kind not in ALLOWED:
        raise ReadOnlyQueryError(f"{_NAMES.get(kind.name, kind.name)} refused: {READ_ONLY_HINT}")


def lock_down(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    """Confine a catalog connection to reading the log, within the SQL limits; then lock it."""
    log_dir = str(Path(settings.log_dir).resolve()).rstrip("/") + "/"
    sql = settings.sql
    for statement in (
        "SET temp_directory = ''",  # nothing spills to disk: over the limit is an error, not a file
        f"SET memory_limit = '{_memory_limit(sql.memory_limit)}'",
        "SET autoinstall_known_extensions = false",
        "SET autoload_known_extensions = false",
        f"SET allowed_directories = ['{log_dir.replace(chr(39), chr(39) * 2)}']",
        "SET enable_external_access = false",
        "SET lock_configuration = true",
    ):
        con.execute(statement)


def _memory_limit(text: str) -> str:
    if not re.fullmatch(r"\s*\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*", text, re.IGNORECASE):
        raise ValidationError("sql.memory_limit", f"{text!r} is not a size like 512MB or 2GB")
    return text.strip()


def open_sandbox(settings: Settings, *, cold: bool = True) -> duckdb.DuckDBPyConnection:
    """The catalog (every view) on a connection that can only read the data root's log.

    `cold=False` leaves out the object-store views (a query that names none
    of them does not wait on the network).
    """
    from tiermem.sqlviews import open_catalog

    con = open_catalog(settings)
    try:
        if settings.cold_url and cold:
            add_cold_views(con, settings)
        lock_down(con, settings)
    except BaseException:
        con.close()
        raise
    return con


def add_cold_views(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    """`cold_<stream>` over each stream's object-store table, `cold_events` over all of them.

    Erased events are hidden at once, as in every other view, even before the
    next seal deletes them from the tables.
    """
    from tiermem.log import cold_table

    from tiermem.catalog import _not_erased

    common = []
    for stream, dataset in cold_table.datasets(settings).items():
        con.register(f"_cold_{stream}_arrow", dataset)
        where = "" if stream == "erasures" else f" WHERE {_not_erased(stream)}"
        con.execute(f"CREATE OR REPLACE TEMP VIEW cold_{stream} AS SELECT * FROM _cold_{stream}_arrow{where}")
        common.append(
            f"SELECT event_id, type, ts, schema_version, agent_id, '{stream}' AS stream, "
            f"{cold_table.PARTITION} FROM cold_{stream}"
        )
    if common:
        con.execute(f"CREATE OR REPLACE TEMP VIEW cold_events AS {' UNION ALL '.join(common)}")


def run_query(settings: Settings, query: str, *, timeout: float | None = None) -> QueryResult:
    """Run one read-only query over the catalog; return its columns and rows.

    `timeout` in seconds (default `settings.sql.timeout_seconds`).
    """
    limit = settings.sql.timeout_seconds if timeout is None else timeout
    if not limit > 0:
        raise ValidationError("timeout", f"must be a positive number of seconds, got {limit}")
    check_read_only(query)
    started = time.perf_counter()
    con = open_sandbox(settings, cold="cold_" in query.lower())
    timer = threading.Timer(limit, con.interrupt)
    timer.daemon = True
    try:
        timer.start()
        try:
            cur = con.execute(query)
            columns = [d[0] for d in cur.description or []]
            rows = cur.fetchall()
        except duckdb.InterruptException:
            raise QueryError(
                f"query stopped after its timeout of {limit:g} s (--timeout to allow more)"
            ) from None
        except duckdb.OutOfMemoryException as exc:
            raise QueryError(
                f"query needs more memory than [sql] memory_limit = {settings.sql.memory_limit}: {_first_line(exc)}"
            ) from None
        except duckdb.PermissionException as exc:
            raise ReadOnlyQueryError(
                f"refused: {_first_line(exc)} (only the data root's log can be read)"
            ) from None
        except duckdb.Error as exc:
            raise ValidationError("query", _first_line(exc)) from None
    finally:
        timer.cancel()
        con.close()
    return QueryResult(columns, rows, time.perf_counter() - started)


def _csv_cell(value: Any) -> Any:
    value = plain(value)
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return orjson.dumps(value).decode()  # nested values as JSON, not Python reprs
    return value


def to_csv(result: QueryResult) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(result.columns)
    for row in result.rows:
        writer.writerow([_csv_cell(v) for v in row])
    return buf.getvalue()
