"""Bulk ingest's compiled pass: the whole block scanned once in C, before any other path.

The Arrow pass (`tiermem.ingest.native`) still costs ~100k instructions a
line: a regular expression to prove the serialiser's form, Arrow's JSON reader
to find repeated keys, kernels per check, BLAKE2b from the standard library,
and Python to cut and join. The compiled scanner (`_scan.c`, built with the
package) does all of that in one pass over each line's bytes: the same shape,
the same checks and limits, the same replay-safe id (BLAKE2b over the line,
milliseconds through the same float steps) and the same stored line, without a
Python object per field. It settles every line the Arrow pass settles (and a
few that pass refuses for reasons of its own: a `metadata` value whose type
differs between lines of a block, a fraction of more than 17 digits, lines of
the original form with `agentId` and `timestamp`); every other line is returned
by index and goes on to the Python columnar path and the per-record validator,
which names the field and the reason of a refusal.

The scanner is optional: a build without a C compiler leaves it out
(`available()` is False) and ingest runs its other passes alone, with the same
results.
"""

from __future__ import annotations

import importlib
from functools import cache
from types import ModuleType
from typing import cast

from tiermem.registry import FLOAT, INT, JSON, MEMORY_LEVELS, STR, STRLIST, TS, USAGE, USAGE_FIELDS
from tiermem.settings import LimitSettings

from .columnar import FAST_FIELDS

_scan: ModuleType | None
try:
    _scan = importlib.import_module("tiermem.ingest._scan")
except ImportError:  # built without a C compiler
    _scan = None

__all__ = ["ScanResult", "available", "scan_block"]

# The scanner's value kinds (enum Kind in _scan.c), by the registry's field kinds.
_KINDS = {STR: 0, TS: 0, INT: 1, FLOAT: 2, USAGE: 3, STRLIST: 4, JSON: 5}

# The original line form's names (`tiermem.events.upcast`): the scanner takes a line written that
# way in its plain form and stores it as the per-record path does.
_OLD_FIELDS = (("agentId", 0), ("timestamp", 0))

# (lines in the block, ids, partitions, stored lines, indexes of the lines left to the other paths,
# those lines without their line end); the settled lines' results are in line order.
ScanResult = tuple[int, list[str], list[str], list[bytes], list[int], list[bytes]]


@cache
def _fields() -> tuple[tuple[str, int], ...] | None:
    """The known fields with their scanner kind; None when one has a kind the scanner lacks."""
    if any(kind not in _KINDS for kind in FAST_FIELDS.values()):
        return None
    return tuple((name, _KINDS[kind]) for name, kind in FAST_FIELDS.items()) + _OLD_FIELDS


def available() -> bool:
    """Whether the compiled scanner is built and knows every field kind."""
    return _scan is not None and _fields() is not None


def scan_block(block: bytes, default_ts: str, limits: LimitSettings) -> ScanResult:
    """Scan a block of lines (newline-separated; a trailing `\\r` is not part of a line).

    Only for `available()`. A limit the scanner cannot honour (nesting under 2,
    which even a flat `metadata` exceeds) leaves every line to the other paths.
    """
    fields = _fields()
    if _scan is None or fields is None:
        raise RuntimeError("the compiled ingest scanner is not built")
    max_line = min(limits.max_field_chars, limits.max_record_bytes) if limits.max_depth >= 2 else -1
    result = _scan.scan_block(
        block,
        default_ts,
        fields,
        USAGE_FIELDS,
        MEMORY_LEVELS,
        max_line,
        limits.min_year,
        limits.max_year,
    )
    return cast(ScanResult, result)
