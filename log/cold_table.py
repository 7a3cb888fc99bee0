"""The cold tier on object storage: sealed days committed to one Delta Lake table per stream.

With `cold_url = "s3://bucket/prefix"`, `tiermem seal` commits every sealed
segment of a closed day to the table ``<cold_url>/<stream>`` (partitioned by
``date``, the day of the local partition). Open days stay local: only
segments that are already sealed Parquet are committed, so a day reaches the
object store once it is closed.

Why Delta Lake: its transaction log lives in the bucket next to the data, so a
commit needs nothing but the object store (Iceberg needs a catalog service or
database to commit through); `deltalake` writes, deletes and vacuums from
Python without a JVM; Spark, Trino, DuckDB and Polars read it.

Each segment commit is one Delta transaction carrying an application
transaction id (``txn``) named after the segment. The data file and the id
become visible together or not at all, and a segment whose id the table
already holds is skipped: re-running a seal, or running it after a crash at
any point, never adds a segment twice. A crash after the data file was
uploaded but before the commit leaves an unreferenced file, which the next
vacuum removes.

Erasure deletes through the table's own ``DELETE`` (copy-on-write: the files
holding an erased event are rewritten without it) and then vacuums with no
retention, so the replaced files are removed from the bucket at once. The
delete carries an application transaction recording how many events the log
has erased so far, so an erasure already applied is not scanned for again.
Column statistics are kept for ``event_id`` and ``ts`` only: statistics are
copied into the transaction log, which no delete rewrites, so no content
column may reach it. One process writes a table at a time (the seal, or
`forget --now`, of the machine that owns the log): vacuuming with no
retention would otherwise remove a file another writer is about to commit.

That one writer is enforced, not only documented: each data root has a
writer id (the file `cold_writer`, created once), a table records its
writer's id in its description when it is created (or claimed, for a table
made before), and a data root refuses to commit to, delete from or vacuum a
table another data root writes, with an error naming both. Two machines
configured with the same `cold_url` prefix are a configuration mistake; this
turns it into an error before either removes the other's files.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from tiermem.durable_files import fsync_path
from tiermem.errors import ConfigError, StorageError

try:
    from deltalake import CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake
    from deltalake.exceptions import DeltaError, TableNotFoundError
except ImportError as exc:  # an optional extra: the embedded default never imports this module
    raise ConfigError("cold_url needs the object-store extra: pip install 'tiermem[s3]' (deltalake)") from exc
from tiermem.eventlog import ERASED_MARK
from tiermem.events import STREAMS
from tiermem.settings import Settings

PARTITION = "date"
SEGMENT_TXN = "tiermem-segment:"  # + "<stream>/date=YYYY-MM-DD/<stem>"
ERASURE_TXN = "tiermem-erasures"  # version: how many erased events the table has been cleared of
TABLE_CONFIG = {
    # Statistics are copied into the transaction log, which a delete never rewrites:
    # only the id and the time (no content) may be summarised there.
    "delta.dataSkippingStatsColumns": "event_id,ts",
}
_DELETE_CHUNK = 500  # ids per DELETE predicate
WRITER_FILE = "cold_writer"  # in the data root: the id this root writes its tables as
_WRITER = re.compile(r"\bwriter=([0-9a-f]{32})\b")


class ForeignTableError(ConfigError):
    """The table at this `cold_url` is written by another data root."""


@dataclass
class ColdCommit:
    segments: int = 0
    rows: int = 0
    already: int = 0  # segments the table already held (an earlier or interrupted seal)


@dataclass
class ColdErasure:
    deleted_rows: int = 0
    files_removed: int = 0  # data files the vacuum removed from the bucket


def storage_options(settings: Settings) -> dict[str, str]:
    """The object store's endpoint and credentials as `deltalake` takes them (from the frozen settings)."""
    cold = settings.cold
    options = {
        "AWS_ENDPOINT_URL": cold.endpoint_url,
        "AWS_REGION": cold.region,
        "AWS_ACCESS_KEY_ID": cold.access_key_id,
        "AWS_SECRET_ACCESS_KEY": cold.secret_access_key,
        "AWS_ALLOW_HTTP": "true" if cold.allow_http else "",
        "conditional_put": cold.conditional_put,
        "max_retries": str(cold.max_retries),
        "retry_timeout": f"{cold.retry_timeout_seconds:g}s",
        "connect_timeout": f"{cold.connect_timeout_seconds:g}s",
    }
    return {k: v for k, v in options.items() if v}


def table_uri(settings: Settings, stream: str) -> str:
    return f"{settings.cold_url.rstrip('/')}/{stream}"


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _fail(settings: Settings, doing: str, exc: BaseException) -> StorageError:
    reason = " ".join(_ANSI.sub("", str(exc)).replace("\u21b3", " ").split())[:300] or type(exc).__name__
    return StorageError(f"object store {settings.cold_url}: {doing} failed: {reason}")


def open_table(settings: Settings, stream: str) -> DeltaTable | None:
    """The stream's table, or None when nothing was committed to it yet."""
    try:
        return DeltaTable(table_uri(settings, stream), storage_options=storage_options(settings))
    except TableNotFoundError:
        return None
    except (DeltaError, OSError) as exc:
        raise _fail(settings, f"opening the {stream} table", exc) from exc


def writer_id(settings: Settings) -> str:
    """This data root's writer id, created on first use (by link, so two processes agree)."""
    path = settings.data_dir / WRITER_FILE
    try:
        found = path.read_text().strip()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{WRITER_FILE}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
        tmp.write_text(uuid.uuid4().hex + "\n")
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)  # fails if another process made it first: theirs stands
            fsync_path(path.parent)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        found = path.read_text().strip()
    if not re.fullmatch(r"[0-9a-f]{32}", found):
        raise ConfigError(f"{path}: not a writer id (32 hex digits); remove it to make a new one")
    return found


def _description(writer: str) -> str:
    return f"tiermem cold tier; one writer per table: writer={writer}"


def _check_writer(settings: Settings, stream: str, table: DeltaTable) -> None:
    """Refuse a table another data root writes; claim one made before tables named their writer."""
    mine = writer_id(settings)
    found = _WRITER.search(table.metadata().description or "")
    if found is None:
        try:
            table.alter.set_table_description(_description(mine))
            table.update_incremental()
        except (DeltaError, OSError) as exc:
            raise _fail(settings, f"claiming the {stream} table", exc) from exc
        found = _WRITER.search(table.metadata().description or "")
    owner = found.group(1) if found else None
    if owner != mine:
        raise ForeignTableError(
            f"cold_url {settings.cold_url}: the {stream} table is written by another data root"
            f" (writer {owner}, this one is {mine}); give each log-writing machine its own cold_url prefix"
        )


def _own_table(settings: Settings, stream: str) -> DeltaTable | None:
    """The stream's table for writing: None when there is none yet; refused when not ours."""
    table = open_table(settings, stream)
    if table is not None:
        _check_writer(settings, stream, table)
    return table


def segment_txn(segment: str) -> str:
    return SEGMENT_TXN + segment


def _view_type(kind: pa.DataType) -> pa.DataType:
    """The type a table file holds for `kind`: strings as string views, also inside lists and structs.

    The table's own DELETE rewrites files with string views; an Arrow dataset
    over files of both kinds fails to evaluate a filter, so every file is
    written in the delete's types and the dataset is read with them.
    """
    if kind in (pa.string(), pa.large_string()):
        return pa.string_view()
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.list_(pa.field("element", _view_type(kind.value_type)))
    if pa.types.is_struct(kind):
        return pa.struct([pa.field(f.name, _view_type(f.type)) for f in kind])
    return kind


def view_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, _view_type(f.type)) for f in schema])


def _table_rows(path: Path) -> pa.Table:
    """A sealed segment as the table stores it: live events only, the day as the partition column."""
    table = pq.read_table(path)
    if ERASED_MARK in table.column_names:
        table = table.filter(pc.invert(pc.fill_null(table.column(ERASED_MARK), False)))
        table = table.drop_columns([ERASED_MARK])
    day = path.parent.name.removeprefix("date=")
    table = table.append_column(PARTITION, pa.array([day] * len(table), pa.string()))
    return table.cast(view_schema(table.schema))


def commit_segment(settings: Settings, stream: str, path: Path, table: DeltaTable | None) -> int | None:
    """Commit one sealed segment in one transaction; None when the table already holds it."""
    segment = f"{stream}/{path.parent.name}/{path.stem}"
    txn = segment_txn(segment)
    if table is not None and table.transaction_version(txn) is not None:
        return None
    rows = _table_rows(path)
    try:
        write_deltalake(
            table if table is not None else table_uri(settings, stream),
            rows,
            mode="append",
            partition_by=[PARTITION],
            schema_mode="merge",  # a later schema version may add columns
            configuration=TABLE_CONFIG,
            description=_description(writer_id(settings)),  # read at creation only
            storage_options=None if table is not None else storage_options(settings),
            writer_properties=WriterProperties(compression="ZSTD"),
            commit_properties=CommitProperties(
                app_transactions=[Transaction(txn, 1)], custom_metadata={"tiermem.segment": segment}
            ),
        )
    except (DeltaError, OSError) as exc:
        raise _fail(settings, f"committing {segment}", exc) from exc
    return len(rows)


def sealed_segments(settings: Settings, stream: str, before: str) -> Iterator[Path]:
    """The sealed Parquet segments of the stream's closed days (before `before`), in order."""
    root = settings.log_dir / stream
    if not root.exists():
        return
    for part in sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("date=")):
        if part.name[5:] < before:
            yield from sorted(f for f in part.glob("*.parquet") if not f.name.startswith("."))


def commit_sealed(settings: Settings, before: str) -> ColdCommit:
    """Commit every sealed segment of a closed day that the tables do not hold yet."""
    done = ColdCommit()
    for stream in STREAMS:
        paths = list(sealed_segments(settings, stream, before))
        if not paths:
            continue
        table = _own_table(settings, stream)
        for path in paths:
            rows = commit_segment(settings, stream, path, table)
            if rows is None:
                done.already += 1
                continue
            done.segments += 1
            done.rows += rows
            if table is None:
                # Two roots creating one table at once: only one creation wins; the
                # other's first segment was appended to it, and it stops here.
                table = _own_table(settings, stream)
            else:
                table.update_incremental()
    return done


def _chunks(ids: list[str]) -> Iterable[list[str]]:
    for start in range(0, len(ids), _DELETE_CHUNK):
        yield ids[start : start + _DELETE_CHUNK]


def _in_list(ids: list[str]) -> str:
    return ", ".join("'" + i.replace("'", "''") + "'" for i in ids)


def delete_events(settings: Settings, erased: set[str]) -> ColdErasure:
    """Delete these events from every stream table, then vacuum the replaced files away.

    `erased` is every event the log has erased so far (it only grows): a table
    that recorded clearing this many already is not scanned again. The vacuum
    runs every time, so files left by an interrupted delete or commit go too.
    """
    report = ColdErasure()
    ids = sorted(erased)
    for stream in STREAMS:
        table = _own_table(settings, stream)
        if table is None:
            continue
        try:
            if ids and (table.transaction_version(ERASURE_TXN) or 0) < len(ids):
                report.deleted_rows += _delete(table, ids)
            removed = table.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
        except (DeltaError, OSError) as exc:
            raise _fail(settings, f"erasing from the {stream} table", exc) from exc
        report.files_removed += len(removed)
    return report


def _delete(table: DeltaTable, ids: list[str]) -> int:
    deleted = 0
    chunks = list(_chunks(ids))
    for n, chunk in enumerate(chunks):
        # The last delete records the whole set as cleared, in the same commit.
        last = n == len(chunks) - 1
        props = CommitProperties(app_transactions=[Transaction(ERASURE_TXN, len(ids))]) if last else None
        metrics: dict[str, Any] = table.delete(f"event_id IN ({_in_list(chunk)})", commit_properties=props)
        deleted += int(metrics.get("num_deleted_rows") or 0)
    return deleted


def vacuum(settings: Settings) -> int:
    """Remove every file no table version references (orphans of an interrupted commit); how many."""
    removed = 0
    for stream in STREAMS:
        table = _own_table(settings, stream)
        if table is None:
            continue
        try:
            removed += len(table.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False))
        except (DeltaError, OSError) as exc:
            raise _fail(settings, f"vacuuming the {stream} table", exc) from exc
    return removed


def datasets(settings: Settings) -> dict[str, pads.Dataset]:
    """Each stream's table as an Arrow dataset (streams with no table yet are left out)."""
    found: dict[str, pads.Dataset] = {}
    for stream in STREAMS:
        table = open_table(settings, stream)
        if table is not None:
            try:
                schema = view_schema(table.to_pyarrow_dataset().schema)
                found[stream] = table.to_pyarrow_dataset(schema=schema)
            except (DeltaError, OSError) as exc:
                raise _fail(settings, f"reading the {stream} table", exc) from exc
    return found
