"""Reading lines from outside: bounded memory on huge lines, strict decoding (tiermem.ingest.lines)."""

from __future__ import annotations

import io
import json
import tracemalloc
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from tiermem.ingest.lines import Oversize, decode_line, read_blocks

from tiermem.errors import ValidationError
from tiermem.settings import LimitSettings

LIMITS = LimitSettings()


class _Generated(io.RawIOBase):
    """A stream that makes its bytes as they are read: the test itself holds no big buffer."""

    def __init__(self, parts: list[tuple[bytes, int]]) -> None:
        self.parts = list(parts)  # (pattern, repeat count)

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        while self.parts and self.parts[0][1] == 0:
            self.parts.pop(0)
        if not self.parts:
            return 0
        pattern, count = self.parts[0]
        n = min(count, len(buf) // len(pattern))
        data = pattern * max(n, 1)
        buf[: len(data)] = data
        self.parts[0] = (pattern, count - max(n, 1))
        return len(data)


def test_a_line_far_over_the_limit_is_skipped_in_bounded_memory() -> None:
    good = b'{"a":1}\n'
    huge = 64 << 20  # 64 MB in one line
    stream = io.BufferedReader(_Generated([(good, 3), (b"x" * 1024, huge // 1024), (b"\n", 1), (good, 2)]))
    tracemalloc.start()
    try:
        items = list(read_blocks(stream, max_line=1 << 20, block_bytes=1 << 20))
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    sizes = [len(i) if isinstance(i, bytes) else ("over", i.length) for i in items]
    assert ("over", huge) in sizes, sizes
    whole = [i for i in items if isinstance(i, bytes)]
    assert b"\n".join(whole).count(b'{"a":1}') == 5  # every good line around it survives
    assert all(len(b) <= (1 << 20) * 2 for b in whole)
    assert peak < 8 << 20, f"peak {peak:,} bytes while reading a {huge:,}-byte line"


def test_bom_only_at_the_start_and_line_counts_preserved() -> None:
    data = b"\xef\xbb\xbf" + b"1\n2\n\n" + b"y" * 50 + b"\n3"
    items = list(read_blocks(io.BytesIO(data), max_line=10, block_bytes=4))
    lines: list[bytes | str] = []
    for item in items:
        if isinstance(item, Oversize):
            lines.append(f"over:{item.length}")
        else:
            lines.extend(item.split(b"\n"))
    assert lines == [b"1", b"2", b"", "over:50", b"3"]


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (b'{"a":1,"a":1}', "a"),
        (b'{"x":{"a":1,"a":2}}', "a"),
        (b'{"a" :1, "a" :2}', "a"),
        (b'{"a":":","a":":"}', "a"),
        (b'{"\\u0061":1,"a":2}', "a"),
        (b'{"n":18446744073709551616}', "<record>"),
        (b'{"n":-9223372036854775809}', "<record>"),
        (b'{"a":NaN}', "<line>"),
        (b'{"a":"\\ud800"}', "<line>"),
        (b"[1]", "<record>"),
        (b'{"k": ' * 40 + b"1" + b"}" * 40, "<record>"),  # (compact, the validator's walk finds it)
    ],
)
def test_decode_line_refusals(line: bytes, field: str) -> None:
    with pytest.raises(ValidationError) as err:
        decode_line(line, LIMITS)
    assert err.value.field == field


def test_decode_line_keeps_what_is_fine() -> None:
    assert decode_line(b'{"a":":x","b":"\\":"}', LIMITS) == {"a": ":x", "b": '":'}
    assert decode_line(b'{"f":1e300,"i":9223372036854775807}', LIMITS) == {"f": 1e300, "i": 2**63 - 1}
    assert decode_line(b'{ "a" : { "b" : [ 1 , 2 ] } }', LIMITS) == {"a": {"b": [1, 2]}}


_keys = st.sampled_from(["a", "b", ":", '"', " ", "\\", "é", "a b"])
_values = st.recursive(
    st.none() | st.integers(-(2**63), 2**63 - 1) | st.sampled_from(["", ":", '":', " :", "\\"]),
    lambda kids: st.lists(kids, max_size=3) | st.lists(st.tuples(_keys, kids), max_size=4),
    max_leaves=10,
)


def _render(value: Any, spaced: bool) -> str:
    """JSON text of `value`, where a list of pairs becomes an object that may repeat keys."""
    colon = " : " if spaced else ":"
    if isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):
        return "{" + ",".join(json.dumps(k) + colon + _render(v, spaced) for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_render(v, spaced) for v in value) + "]"
    return json.dumps(value)


def _has_duplicate(value: Any) -> bool:
    if isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):
        keys = [k for k, _v in value]
        return len(set(keys)) != len(keys) or any(_has_duplicate(v) for _k, v in value)
    if isinstance(value, list):
        return any(_has_duplicate(v) for v in value)
    return False


@hsettings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_keys, _values), min_size=1, max_size=5), st.booleans())
def test_duplicate_keys_found_exactly(pairs: list[tuple[str, Any]], spaced: bool) -> None:
    line = _render(pairs, spaced).encode()
    if _has_duplicate(pairs):
        with pytest.raises(ValidationError, match="duplicate key"):
            decode_line(line, LIMITS)
    else:
        assert isinstance(decode_line(line, LIMITS), dict)
