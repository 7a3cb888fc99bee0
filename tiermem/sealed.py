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
    table = pq.read_table(path)
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
