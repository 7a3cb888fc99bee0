"""The manifest: what the log holds, in one small JSON file replaced atomically.

``<data>/log/_manifest.json`` lists each stream's partitions and segments with
their format, row count, size and (for sealed Parquet) a SHA-256 checksum, plus
whether each partition is fully sealed. `tiermem seal` refreshes it; anyone may
call `refresh`. It is a description, never the source of truth: the segment
files are, so a lost manifest is rebuilt by scanning them. Checksums of sealed
files are carried over from the previous manifest when size and mtime match,
so a refresh does not re-read the whole cold tier.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq

from tiermem.durable_files import write_atomic
from tiermem.events import SCHEMA_VERSION, STREAMS
from tiermem.ids import format_ts, utcnow
from tiermem.settings import Settings

MANIFEST_NAME = "_manifest.json"


def manifest_path(settings: Settings) -> Path:
    return settings.log_dir / MANIFEST_NAME


def load(settings: Settings) -> dict[str, Any]:
    path = manifest_path(settings)
    if not path.exists():
        return {}
    loaded: dict[str, Any] = orjson.loads(path.read_bytes())
    return loaded


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _jsonl_rows(path: Path) -> int:
    count = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(8 << 20):
            count += chunk.count(b"\n")
    return count


def _previous_segments(settings: Settings) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The last manifest's segment entries by (stream, partition, file): their checksums are reused."""
    previous: dict[tuple[str, str, str], dict[str, Any]] = {}
    for stream, sdata in (load(settings).get("streams") or {}).items():
        for partition, pdata in sdata.get("partitions", {}).items():
            for seg in pdata.get("segments", []):
                previous[(stream, partition, seg["file"])] = seg
    return previous


def _segment_files(part: Path) -> list[Path]:
    """The segment files of one partition, a sealed one in place of its JSONL twin mid-seal."""
    files = []
    for f in sorted(part.iterdir()):
        if f.name.startswith(".") or f.suffix not in (".jsonl", ".parquet"):
            continue
        if f.suffix == ".jsonl" and f.with_suffix(".parquet").exists():
            continue  # mid-seal: the Parquet twin is the segment
        files.append(f)
    return files


def _segment_entry(f: Path, old: dict[str, Any] | None) -> dict[str, Any] | None:
    """One segment's manifest entry (None when the file went away meanwhile).

    A Parquet file unchanged since the last scan (same size and mtime) keeps
    its recorded row count and checksum instead of being read again.
    """
    try:
        st = f.stat()
    except FileNotFoundError:
        return None
    entry: dict[str, Any] = {"file": f.name, "format": f.suffix[1:], "bytes": st.st_size}
    if f.suffix != ".parquet":
        entry["rows"] = _jsonl_rows(f)
        return entry
    if old and old.get("bytes") == st.st_size and old.get("mtime_ns") == st.st_mtime_ns:
        entry["rows"], entry["sha256"] = old["rows"], old["sha256"]
    else:
        entry["rows"] = pq.ParquetFile(f).metadata.num_rows
        entry["sha256"] = _sha256(f)
    entry["mtime_ns"] = st.st_mtime_ns
    return entry


def refresh(settings: Settings) -> Path:
    """Rescan the segment files and write the manifest atomically; return its path."""
    previous = _previous_segments(settings)
    streams: dict[str, Any] = {}
    totals = {"rows": 0, "bytes": 0, "segments": 0}
    for stream in STREAMS:
        root = settings.log_dir / stream
        if not root.exists():
            continue
        partitions: dict[str, Any] = {}
        for part in sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("date=")):
            segments = []
            for f in _segment_files(part):
                entry = _segment_entry(f, previous.get((stream, part.name, f.name)))
                if entry is None:
                    continue
                segments.append(entry)
                totals["rows"] += entry["rows"]
                totals["bytes"] += entry["bytes"]
                totals["segments"] += 1
            partitions[part.name] = {
                "sealed": bool(segments) and all(s["format"] == "parquet" for s in segments),
                "rows": sum(s["rows"] for s in segments),
                "segments": segments,
            }
        streams[stream] = {"partitions": partitions, "rows": sum(p["rows"] for p in partitions.values())}
    doc = {
        "manifest_version": 1,
        "schema_version": SCHEMA_VERSION,
        "updated": format_ts(utcnow()),
        "layout": "<stream>/date=YYYY-MM-DD/<segment>.(jsonl|parquet)",
        "totals": totals,
        "streams": streams,
    }
    path = manifest_path(settings)
    write_atomic(path, orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return path


def verify(settings: Settings) -> list[str]:
    """Problems found comparing sealed files with their recorded checksums (empty: all good)."""
    problems = []
    for stream, sdata in (load(settings).get("streams") or {}).items():
        for partition, pdata in sdata.get("partitions", {}).items():
            for seg in pdata.get("segments", []):
                if seg.get("format") != "parquet":
                    continue
                path = settings.log_dir / stream / partition / seg["file"]
                if not path.exists():
                    problems.append(f"{path}: missing")
                elif _sha256(path) != seg["sha256"]:
                    problems.append(f"{path}: checksum differs from the manifest")
    return problems
