"""Read-only analyst SQL over the log's views (`tiermem sql`).

The query runs on an in-memory DuckDB connection opened by
`tiermem.sqlviews.open_catalog` (the log's views plus every part's derived
views). Only one SELECT (or EXPLAIN) statement is accepted: DuckDB parses the
text first and anything else — INSERT, CREATE, COPY … TO, ATTACH, SET, INSTALL,
EXPORT, several statements — is refused with one clear line before it runs.
The configuration is then locked, so a SELECT cannot switch settings either.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import duckdb
import orjson

from tiermem.errors import ReadOnlyQueryError, ValidationError
from tiermem.ids import format_ts
from tiermem.settings import Settings

ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


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
        return float(value) if value != value.to_integral_value() else int(value)
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.hex()
    return value


def check_read_only(con: duckdb.DuckDBPyConnection, query: str) -> None:
    """Raise ReadOnlyQueryError unless `query` is exactly one SELECT/EXPLAIN statement."""
    try:
        statements = con.extract_statements(query)
    except duckdb.Error as exc:
        raise ValidationError("query", str(exc).splitlines()[0]) from None
    if not statements:
        raise ValidationError("query", "empty query")
    if len(statements) > 1:
        raise ReadOnlyQueryError("one statement at a time: tiermem sql runs a single read-only SELECT")
    kind = statements[0].type
    if kind not in ALLOWED:
        raise ReadOnlyQueryError(
            f"{kind.name} refused: tiermem sql is read-only (SELECT, WITH … SELECT, DESCRIBE, SHOW, EXPLAIN)"
        )


def run_query(settings: Settings, query: str) -> QueryResult:
    """Run one read-only query over the catalog; return its columns and rows."""
    import time

    from tiermem.sqlviews import open_catalog

    started = time.perf_counter()
    con = open_catalog(settings)
    try:
        check_read_only(con, query)
        con.execute("SET lock_configuration = true")
        try:
            cur = con.execute(query)
        except duckdb.Error as exc:
            raise ValidationError("query", str(exc).splitlines()[0]) from None
        columns = [d[0] for d in cur.description or []]
        rows = cur.fetchall()
    finally:
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
