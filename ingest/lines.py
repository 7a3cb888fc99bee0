"""Reading a JSONL source from outside: whole lines in bounded memory, each decoded strictly.

`read_blocks` cuts a byte stream into blocks of whole lines. A line longer
than `max_record_bytes` is never held whole: once its first bytes exceed the
limit, the reader keeps only its head (for the quarantine record) and skips
to the next newline, so a multi-megabyte line costs the memory of one read
chunk and does not stop the lines after it. A UTF-8 byte order mark at the
very start of the stream is an encoding mark, not content, and is dropped.

`decode_line` turns one line into a record or a `ValidationError` naming what
is wrong: over the size limit, not JSON (invalid UTF-8, lone surrogates, NaN
and Infinity are all refused by the parser), not an object, nested deeper than
`max_depth`, a key repeated in one object (JSON parsers silently keep the last
value, so the record would not be what its author wrote), or an integer beyond
64 bits (the parser would turn it into an approximate float).

Duplicate keys and approximated integers are proven absent without a second
parse. Usually the line is exactly what the serialiser writes back for the
parsed record, which settles both. Otherwise (spaces after separators, other
escapes), when no quote is followed by whitespace, every key's closing quote
is immediately followed by `:`, so the number of `":` in the raw bytes is at
least the number of keys written; if it equals the number of keys parsed, no
key was repeated. Failing both (a string value starting with `:`, spaces
before a colon, a huge number), an exact check with the standard library's
parser decides.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import orjson

from tiermem.errors import ValidationError
from tiermem.settings import LimitSettings

BLOCK_BYTES = 1 << 20  # unit of work sent to an encoding worker (~1,500 turns)
HEAD_BYTES = 4096  # what the quarantine keeps of a line too long to store
BOM = b"\xef\xbb\xbf"
_INT64 = 2**63
_SPACE_AFTER_QUOTE = re.compile(rb'"[ \t\r]')


@dataclass
class Oversize:
    """A line skipped because it is longer than the record limit (only its head kept)."""

    head: bytes
    length: int


def read_blocks(
    stream: IO[bytes], max_line: int, block_bytes: int = BLOCK_BYTES
) -> Iterator[bytes | Oversize]:
    """Blocks of whole lines (without their final newline), and an `Oversize` for each line over `max_line`.

    Memory stays under `max_line + block_bytes` whatever the input: a partial
    line is carried to the next read only while it is within the limit.
    """
    carry = b""
    skipping: Oversize | None = None
    first = True
    while True:
        chunk = stream.read(block_bytes)
        if not chunk:
            break
        if first:
            first = False
            if chunk.startswith(BOM):
                chunk = chunk[len(BOM) :]
        if skipping is not None:
            nl = chunk.find(b"\n")
            if nl < 0:
                skipping.length += len(chunk)
                continue
            skipping.length += nl
            yield skipping
            skipping = None
            chunk = chunk[nl + 1 :]
            if not chunk:
                continue
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n")
        tail = data[cut + 1 :] if cut >= 0 else data
        if len(tail) > max_line:
            skipping = Oversize(tail[:HEAD_BYTES], len(tail))
            carry = b""
        else:
            carry = tail
        if cut >= 0:
            yield data[:cut]
    if skipping is not None:
        yield skipping
    elif carry:
        yield carry


class _Walk:
    """Key count, depth and number suspicion of a parsed line, in one pass."""

    __slots__ = ("big_float", "keys", "max_depth")

    def __init__(self, max_depth: int) -> None:
        self.keys = 0
        self.max_depth = max_depth
        self.big_float = False

    def visit(self, value: dict[str, Any] | list[Any], depth: int) -> None:
        if depth > self.max_depth:
            raise ValidationError("<record>", f"nested deeper than max_depth = {self.max_depth}")
        items: Iterable[Any] = value.values() if type(value) is dict else value
        if type(value) is dict:
            self.keys += len(value)
        for item in items:
            kind = type(item)
            if kind is dict or kind is list:
                self.visit(item, depth + 1)
            elif kind is float and abs(item) >= _INT64:
                self.big_float = True  # maybe an integer literal the parser approximated


class _Duplicate(Exception):
    pass


class _BigInteger(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    return out


def _int64(text: str) -> int:
    value = int(text)
    if not -_INT64 <= value < _INT64:
        raise _BigInteger(text)
    return value


def _exact_check(line: bytes) -> None:
    """Parse again with hooks that see every key and every integer literal as written."""
    try:
        json.loads(line, object_pairs_hook=_no_duplicates, parse_int=_int64)
    except _Duplicate as dup:
        key = str(dup.args[0])
        # The field names the key; an empty key is named as written, so the field is never blank.
        shown = (key if len(key) <= 60 else key[:57] + "...") or '""'
        raise ValidationError(
            shown, "duplicate key in one object (which value was meant is ambiguous)"
        ) from None
    except _BigInteger as big:
        digits = str(big.args[0])
        raise ValidationError(
            "<record>", f"integer {digits[:30]}{'...' if len(digits) > 30 else ''} out of 64-bit range"
        ) from None
    except ValueError as exc:  # orjson accepted it; the standard parser should too
        raise ValidationError("<line>", f"not valid JSON: {exc}") from None


def decode_line(line: bytes, limits: LimitSettings) -> dict[str, Any]:
    """One line from outside to a record (a dict); raises ValidationError naming what is wrong.

    Nesting within `max_depth` is checked here only for lines that need the
    slow proof; for the others the validator's walk of every nested value
    (`tiermem.events.check_json_value`) enforces it.
    """
    if len(line) > limits.max_record_bytes:
        raise ValidationError(
            "<record>", f"{len(line):,} bytes, over max_record_bytes = {limits.max_record_bytes:,}"
        )
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ValidationError("<line>", f"not valid JSON: {exc}") from None
    if type(record) is not dict:
        raise ValidationError("<record>", f"expected a JSON object, got {type(record).__name__}")
    if _canonical(record, line):
        return record
    walk = _Walk(limits.max_depth)
    walk.visit(record, 1)
    proven = walk.keys == line.count(b'":') and _SPACE_AFTER_QUOTE.search(line) is None
    if not proven or walk.big_float:
        _exact_check(line)
    return record


def _canonical(record: dict[str, Any], line: bytes) -> bool:
    """Whether the line is exactly what the serialiser writes for the record it parsed to.

    Then it holds each key once (a serialised dict cannot repeat one) and every
    number as parsed (an integer the parser approximated would be written back
    as a float). Most files are written this way, so this is the usual proof.
    """
    try:
        return orjson.dumps(record) == line
    except orjson.JSONEncodeError:  # nested past the serialiser's own limit
        return False
