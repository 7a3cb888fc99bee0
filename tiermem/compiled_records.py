"""The compiled check of an ordinary interaction (`_records.c`), in front of `validate`'s Python paths.

A record the compiled check settles comes out exactly as the Python fast path
(`tiermem.events._fast_interaction`) leaves it: the same keys in the same order,
the same values (`tests/test_log_compiled_records.py` compares them over generated
records). Whatever it does not settle (None) goes on to the Python paths, which
decide, and name the field of a refusal. Optional: a build without a C
compiler leaves it out, and `validate` runs the Python paths alone.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tiermem.registry import EVENT_TYPES
from tiermem.settings import LimitSettings

_records: ModuleType | None
try:
    _records = importlib.import_module("tiermem._records")
except ImportError:  # built without a C compiler
    _records = None

_VERSION = EVENT_TYPES["interaction"].version
# (the limits last asked with, the compiled call's arguments for them; None when it cannot honour them)
_last: tuple[LimitSettings | None, tuple[int, int, int, int] | None] = (None, None)


def available() -> bool:
    return _records is not None


def _arguments(limits: LimitSettings) -> tuple[int, int, int, int] | None:
    # The Python path compares years as 4-digit strings; outside 0..9999 that is not a number's order.
    if not 0 <= limits.min_year <= limits.max_year <= 9999:
        return None
    return (limits.max_field_chars, limits.min_year, limits.max_year, _VERSION)


def check_interaction(record: dict[str, Any], limits: LimitSettings) -> dict[str, Any] | None:
    """The event `_fast_interaction` makes of `record` (a dict whose `type` is "interaction"),
    or None when the compiled check leaves it to the Python paths."""
    global _last
    if _records is None:
        return None
    seen, args = _last
    if seen is not limits:
        args = _arguments(limits)
        _last = (limits, args)
    if args is None:
        return None
    event: dict[str, Any] | None = _records.check_interaction(*args, record)
    return event


def bound(limits: LimitSettings) -> Callable[[dict[str, Any]], dict[str, Any] | None] | None:
    """`check_interaction` with these limits bound, called with no Python frame in between (for
    the append path, which checks one record per call); None when it cannot be used."""
    args = _arguments(limits)
    if _records is None or args is None:
        return None
    checker: Callable[[dict[str, Any]], dict[str, Any] | None] = functools.partial(
        _records.check_interaction, *args
    )
    return checker
