"""Sealed segments read back as events: a Parquet file's rows as the dicts its JSONL lines gave.

Every reader of the log (the event log's positioned reads, the projector, the
compressor's selection) goes through `parquet_events`, so a sealed day reads
exactly like the open day it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq

from tiermem.eventlog import ERASED_MARK
from tiermem.events import BOOL, FLOAT, INT, JSON, STR, STREAMS, STRLIST, TS, USAGE, stream_fields
from tiermem.ids import format_ts


def _decode(kind: str, value: Any) -> Any:
    if kind == TS:
        return format_ts(value)
    if kind == JSON:
        return orjson.loads(value)
    if kind == USAGE:
        return {k: v for k, v in value.items() if v is not None}
    return value


def parquet_events(path: Path, *, keep_erased: bool = False) -> Iterator[dict[str, Any]]:
    """Rows of a sealed segment back as event dicts, identical to what the JSONL line gave."""
    yield from _table_events(pq.read_table(path), path, keep_erased=keep_erased)


def parquet_event(path: Path, event_id: str) -> dict[str, Any] | None:
    """The one row of `event_id` in a sealed segment (erased or not), or None.

    Only the id column is read whole; the row itself is decoded from its row
    group alone, so finding one event in a sealed day of a million costs a
    column scan, not a million dicts.
    """
    import pyarrow.compute as pc

    segment = pq.ParquetFile(path)
    hits = pc.indices_nonzero(pc.equal(segment.read(columns=["event_id"]).column("event_id"), event_id))
    if not len(hits):
        return None
    row = int(hits[0].as_py())
    for group in range(segment.num_row_groups):
        rows = segment.metadata.row_group(group).num_rows
        if row < rows:
            table = segment.read_row_group(group).slice(row, 1)
            return next(_table_events(table, path, keep_erased=True), None)
        row -= rows
    return None


def _table_events(table: Any, path: Path, *, keep_erased: bool) -> Iterator[dict[str, Any]]:
    stream = path.parent.parent.name
    kinds = {**stream_fields(stream), ERASED_MARK: BOOL} if stream in STREAMS else {}
    names = table.column_names
    for batch in table.to_batches(max_chunksize=8192):
        columns = [(n, kinds.get(n, STR), batch.column(n).to_pylist()) for n in names]
        for i in range(batch.num_rows):
            event: dict[str, Any] = {}
            for name, kind, values in columns:
                value = values[i]
                if value is not None:
                    event[name] = value if kind in (STR, INT, FLOAT, BOOL, STRLIST) else _decode(kind, value)
            if keep_erased or not event.get(ERASED_MARK):
                yield event
