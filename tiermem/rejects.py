"""Refused records, kept with their reasons under `<log>/_rejects/` (never lost).

One JSON line per refused record: `ts`, `source` (`append`, `ingest:<file>`,
...), `file` and `line` (1-based) when it came from a file, `field`, `reason`,
and `record` (the record as text; only the head of a line too long to store).
Everything written here is valid UTF-8 JSON even when the record was not: lone
surrogates and undecodable bytes are escaped or replaced.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tiermem.errors import ValidationError
from tiermem.ids import format_ts, utcnow
from tiermem.settings import Settings


@dataclass
class Rejected:
    """One refused record and where it came from."""

    record: Any  # the record as given, or the raw bytes of its line (only the head of a huge one)
    error: ValidationError
    file: str | None = None
    line: int | None = None  # 1-based line number in `file`


def reject_line(stamp: str, source: str, rej: Rejected) -> dict[str, Any]:
    record = rej.record
    if isinstance(record, bytes | bytearray):
        raw = bytes(record).decode("utf-8", errors="replace")
    else:
        try:
            raw = orjson.dumps(record, default=str).decode()
        except TypeError:  # not JSON-representable (a lone surrogate, a huge integer, ...)
            raw = repr(record)
    out: dict[str, Any] = {"ts": stamp, "source": source}
    if rej.file is not None:
        out["file"] = rej.file
    if rej.line is not None:
        out["line"] = rej.line
    out.update(field=_clean(rej.error.field), reason=_clean(rej.error.reason), record=_clean(raw))
    return out


def _clean(text: str) -> str:
    """Text that can be written as JSON: lone surrogates (from a hostile record) escaped."""
    return text if text.isascii() else text.encode("utf-8", errors="backslashreplace").decode("utf-8")


def write_rejects(
    settings: Settings, items: Iterable[Rejected | tuple[Any, ValidationError]], *, source: str
) -> Path | None:
    """Append refused records to this process's rejects file of the day, one write and one fsync."""
    stamp = format_ts(utcnow())
    lines = []
    for item in items:
        rej = item if isinstance(item, Rejected) else Rejected(item[0], item[1])
        lines.append(orjson.dumps(reject_line(stamp, source, rej)) + b"\n")
    if not lines:
        return None
    rdir = settings.rejects_dir / ("date=" + stamp[:10])
    rdir.mkdir(parents=True, exist_ok=True)
    path = rdir / f"rejects-{os.getpid()}.jsonl"
    with open(path, "ab") as fh:
        fh.write(b"".join(lines))
        if settings.fsync != "none":
            fh.flush()
            os.fsync(fh.fileno())
    return path
