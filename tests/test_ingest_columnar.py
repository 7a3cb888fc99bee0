"""The columnar fast path of bulk ingest gives exactly the per-record path's outcomes.

Both paths encode the same blocks: the stored bytes, ids, partitions and
every quarantine (line, field, reason) must be identical, on the hostile
corpus and on large generated mixes of valid and invalid records.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Any

import orjson
from hostile_corpus import corpus, file_bytes
from hypothesis import given, settings
from hypothesis import strategies as st
from tiermem.ingest.columnar import derived_ids, fast_rows
from tiermem.ingest.native import native_rows
from tiermem.ingest.pipeline import EncodedBlock, encode_block, ingest_file, line_event_id

from tiermem.app import samples
from tiermem.ids import parse_ts
from tiermem.settings import LimitSettings, Settings

DEFAULT_TS = "2026-03-04T05:06:07.089Z"
LIMITS = LimitSettings()


def outcome(block: EncodedBlock) -> tuple[Any, ...]:
    return (
        block.lines,
        block.blank_lines,
        block.streams,
        block.ids,
        block.partitions,
        block.stored,
        block.rejects,
    )


def assert_same(block: bytes, limits: LimitSettings = LIMITS) -> EncodedBlock:
    old = encode_block(block, DEFAULT_TS, limits, columnar=False)
    new = encode_block(block, DEFAULT_TS, limits, columnar=True)
    assert outcome(new) == outcome(old)
    return new


def test_hostile_corpus_same_outcome_both_paths() -> None:
    cases = corpus()
    data = file_bytes(cases)[3:]  # without the BOM, which the reader drops before blocks are cut
    new = assert_same(data)
    assert new.rejects and new.stored  # both kinds of line are there
    lines = [line.rstrip(b"\r") for line in data.split(b"\n")]
    assert fast_rows(lines, DEFAULT_TS, LIMITS)  # and the fast path took part


def _mutations() -> list[Callable[[dict[str, Any], random.Random], Any]]:
    """Ways to change one sample record, most of them into something the validator refuses."""

    def setf(name: str, value: Any) -> Callable[[dict[str, Any], random.Random], Any]:
        def apply(rec: dict[str, Any], rnd: random.Random) -> Any:
            rec[name] = value
            return rec

        return apply

    def drop(*names: str) -> Callable[[dict[str, Any], random.Random], Any]:
        def apply(rec: dict[str, Any], rnd: random.Random) -> Any:
            for name in names:
                rec.pop(name, None)
            return rec

        return apply

    def reorder(rec: dict[str, Any], rnd: random.Random) -> Any:
        items = list(rec.items())
        rnd.shuffle(items)
        return dict(items)

    def raw(text: bytes) -> Callable[[dict[str, Any], random.Random], Any]:
        return lambda rec, rnd: orjson.dumps(rec)[:-1] + text + b"}"

    return [
        drop("ts"),
        drop("event_id"),
        drop("ts", "event_id"),
        drop("user_message"),
        drop("agent_id"),
        setf("event_id", "given-id-1"),
        setf("event_id", "has space"),
        setf("event_id", "x" * 129),
        setf("latency_ms", 12),
        setf("latency_ms", -1.5),
        setf("latency_ms", 2**63),
        setf("latency_ms", True),
        setf("task_id", None),
        setf("extra", {"a": 1}),
        setf("attachments", [{"name": "a.txt"}]),
        setf("unknown_field", 1),
        setf("agent_response", "nul\x00inside"),
        setf("user", "x" * 70),
        setf("ts", "2026-02-30T00:00:00.000Z"),
        setf("ts", "2026-01-01T24:00:00.000Z"),
        setf("ts", "1969-12-31T23:59:59.999Z"),
        setf("ts", "2200-01-01T00:00:00.000Z"),
        setf("ts", "2026-01-01T00:00:00Z"),
        setf("ts", "2026-01-01T00:00:00.000+00:00"),
        setf("ts", "2026-01-01 00:00:00.000Z"),
        setf("ts", 12345),
        setf("memory_level", "planet"),
        setf("memory_level", "task"),
        setf("response_length", 3),
        setf("response_length", 3.0),
        setf("agent_id", "   "),
        setf("user_message", ""),
        setf("schema_version", 1),
        setf("schema_version", 2),
        setf("schema_version", True),
        setf("type", "session_ended"),
        setf("type", "episode"),
        setf("usage", {"input_tokens": -1}),
        setf("usage", {"input_tokens": 2**63}),
        setf("usage", {"tokens": 1}),
        setf("usage", {"input_tokens": 1.0}),
        setf("tools_used", ["a", 1]),
        setf("tools_used", ["search", "x\x00"]),
        setf("metadata", {"deep": {"er": [1, 2, {"x": 2**64 - 1}]}}),
        setf("metadata", {"n": 2**63}),
        setf("metadata", {"s": "\x00"}),
        setf("metadata", [1, "two"]),
        setf("metadata", "not an object"),
        setf("metadata", {"f": 1.5, "b": True, "z": None}),
        reorder,
        raw(b',"user":"again"'),
        raw(b',"big":123456789012345678901234567890'),
        lambda rec, rnd: orjson.dumps(rec).replace(b'","', b'", "', 1),
        lambda rec, rnd: b"   ",
        lambda rec, rnd: b"[1, 2]",
        lambda rec, rnd: b'{"type": "interaction", broken',
    ]


MUTATIONS = _mutations()


def mixed_block(seed: int, n: int, bad_share: float) -> bytes:
    """n sample turns as JSONL, some changed by a random mutation (some mutations keep them valid)."""
    rnd = random.Random(seed)
    lines = []
    for rec in islice(samples.generate(days=3, per_day=max(1, n // 3), seed=seed), n):
        out: Any = rec
        if rnd.random() < bad_share:
            out = rnd.choice(MUTATIONS)(dict(rec), rnd)
        lines.append(out if isinstance(out, bytes) else orjson.dumps(out))
    return b"\n".join(lines)


def test_large_generated_mix_same_outcome_both_paths() -> None:
    block = mixed_block(seed=7, n=6000, bad_share=0.2)
    new = assert_same(block)
    assert len(new.rejects) > 200 and len(new.stored) > 4000
    assert len(fast_rows(block.split(b"\n"), DEFAULT_TS, LIMITS)) > 3000  # most lines took the fast path


def test_every_mutation_alone_same_outcome_both_paths() -> None:
    base = list(islice(samples.generate(days=1, per_day=40, seed=3), 40))
    for k, mutate in enumerate(MUTATIONS):
        rnd = random.Random(k)
        lines = [orjson.dumps(r) for r in base]
        changed = mutate(dict(base[k % 40]), rnd)
        lines[k % 40] = changed if isinstance(changed, bytes) else orjson.dumps(changed)
        assert_same(b"\n".join(lines))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), share=st.floats(0.0, 1.0))
def test_generated_mixes_same_outcome_both_paths(seed: int, share: float) -> None:
    assert_same(mixed_block(seed, 300, share))


def test_tight_limits_same_outcome_both_paths() -> None:
    tight = LimitSettings(max_field_chars=60, max_depth=3, min_year=2026, max_year=2026)
    assert_same(mixed_block(seed=11, n=1500, bad_share=0.1), tight)


def test_derived_ids_match_the_per_record_derivation() -> None:
    rnd = random.Random(5)
    stamps = [
        f"{rnd.randint(1970, 2199)}-0{rnd.randint(1, 9)}-1{rnd.randint(0, 9)}T12:34:56.{k:03d}Z"
        for k in range(999)
    ]
    lines = [rnd.randbytes(rnd.randint(0, 300)) for _ in stamps]
    parsed = [parse_ts(ts) for ts in stamps]
    assert derived_ids(parsed, lines) == [
        line_event_id(p, line) for p, line in zip(parsed, lines, strict=True)
    ]


def test_ingest_file_stores_the_same_bytes_either_way(tmp_path: Path, settings: Settings) -> None:
    from dataclasses import replace

    src = tmp_path / "mix.jsonl"
    src.write_bytes(mixed_block(seed=2, n=3000, bad_share=0.1) + b"\n")
    infos = []
    stored = []
    for columnar in (False, True):
        data = tmp_path / f"data-{columnar}"
        info = ingest_file(
            replace(settings, data_dir=data), src, progress=False, workers=0, columnar=columnar
        )
        infos.append((info.accepted, info.rejected, info.duplicates, info.reject_fields, info.streams))
        by_partition: dict[Path, bytes] = {}
        for path in sorted(data.rglob("*.jsonl")):  # segment names differ between runs: compare partitions
            if "_rejects" not in path.parts:
                key = path.parent.relative_to(data)
                by_partition[key] = by_partition.get(key, b"") + path.read_bytes()
        stored.append(by_partition)
    assert infos[0] == infos[1]
    assert stored[0] == stored[1] and stored[0]


# ------------------------------------------------------------ the native (Arrow) path


def assert_same_three_ways(block: bytes, limits: LimitSettings = LIMITS) -> EncodedBlock:
    """Per-record, Python columnar alone, and native in front of it: one outcome."""
    old = encode_block(block, DEFAULT_TS, limits, columnar=False)
    python = encode_block(block, DEFAULT_TS, limits, columnar=True, native=False)
    new = encode_block(block, DEFAULT_TS, limits, columnar=True, native=True)
    assert outcome(python) == outcome(old)
    assert outcome(new) == outcome(old)
    return new


def _good(n: int = 0) -> dict[str, Any]:
    return {
        "type": "interaction",
        "ts": f"2026-05-0{1 + n % 9}T10:11:12.{n % 1000:03d}Z",
        "agent_id": "agent-a",
        "user": "u1",
        "user_message": f"question {n}",
        "agent_response": f"answer {n}",
        "usage": {"input_tokens": 10 + n, "output_tokens": 3},
        "tools_used": ["search"],
        "latency_ms": 812.5,
        "metadata": {"client": "web", "turn": n},
    }


def _raw(rec: dict[str, Any], extra: bytes) -> bytes:
    return orjson.dumps(rec)[:-1] + extra + b"}"


# Lines the native path must either settle exactly as the per-record path does, or leave to it:
# each probes something the regular expression, the reader or a column check decides.
NATIVE_EDGES: list[bytes] = [
    _raw(_good(1), b',"user":"twice"'),  # key repeated at the top
    orjson.dumps(_good(2)).replace(b'"output_tokens":3', b'"output_tokens":3,"output_tokens":4'),
    orjson.dumps(_good(3)).replace(b'"turn":3', b'"turn":3,"turn":4'),  # repeated inside metadata
    orjson.dumps(_good(4)).replace(b'"turn":4', b'"turn":-0'),
    orjson.dumps(_good(5)).replace(b'"turn":5', b'"turn":1.50'),
    orjson.dumps(_good(6)).replace(b'"turn":6', b'"turn":{"deep":1}'),
    orjson.dumps(_good(7)).replace(b'"turn":7', b'"turn":-7'),
    orjson.dumps(_good(8)).replace(b'"client":"web"', b'"latency_ms":5'),
    orjson.dumps(_good(9)).replace(b'"client":"web"', b'"latency_ms":"812.5"'),
    orjson.dumps({**_good(10), "metadata": {"latency_ms": 812}}),
    orjson.dumps(_good(11)).replace(b"812.5", b"812.50"),
    orjson.dumps(_good(12)).replace(b"812.5", b"8.125e2"),
    orjson.dumps(_good(13)).replace(b"812.5", b"812"),
    orjson.dumps({**_good(14), "latency_ms": 0.0000061}),
    orjson.dumps(_good(15)).replace(b"812.5", b"0.0000061"),
    orjson.dumps({**_good(16), "latency_ms": 0.001}),
    orjson.dumps({**_good(17), "latency_ms": 0.30000000000000004}),
    orjson.dumps(_good(18)).replace(b"812.5", b"0.30000000000000005"),
    orjson.dumps({**_good(19), "latency_ms": 0.0}),
    orjson.dumps(_good(20)).replace(b"812.5", b"0.00"),
    orjson.dumps({"event_id": "own-1", **_good(21)}),
    orjson.dumps({"type": "interaction", "event_id": "own-2", **_good(22)}),
    orjson.dumps({"schema_version": 1, **_good(23)}),
    orjson.dumps({**_good(24), "schema_version": 1}),
    orjson.dumps({**_good(25), "event_id": "own-3"}),
    orjson.dumps({"event_id": "has space", **_good(27)}),
    orjson.dumps({"event_id": "x" * 129, **_good(28)}),
    orjson.dumps({**_good(29), "user_message": "a/b"}).replace(b"a/b", b"a\\/b"),
    orjson.dumps({**_good(30), "user_message": "caf\u00e9"}).replace("é".encode(), b"\\u00e9"),
    orjson.dumps({**_good(31), "user_message": "nul\x00"}),
    orjson.dumps({**_good(32), "user_message": 'del\x7f, bell\x07, tab\t, ff\x0c, bs\x08, q" b\\'}),
    orjson.dumps({**_good(33), "user_message": "line\u2028sep \u00e9\u4e2d\U0001f600"}),
    orjson.dumps({**_good(34), "user_message": "x"}).replace(b'"x"', b'"a\tb"'),  # raw tab: not JSON
    orjson.dumps(_good(35)).replace(b'"type":"interaction",', b'"type": "interaction", '),
    orjson.dumps(_good(36)) + b"  ",
    orjson.dumps(_good(37)) + b"\r",
    orjson.dumps({**_good(38), "user_message": "ok"}).replace(b'"ok"', b'"o\xffk"'),  # not UTF-8
    orjson.dumps(_good(39)).replace(b'"user":"u1"', b'"user":null'),
    orjson.dumps({**_good(40), "ts": "2024-02-29T23:59:59.999Z"}),
    orjson.dumps({**_good(41), "ts": "2026-02-29T00:00:00.000Z"}),
    orjson.dumps({**_good(42), "ts": "2026-01-01T24:00:00.000Z"}),
    orjson.dumps({**_good(43), "ts": "2026-01-01T23:59:60.000Z"}),
    orjson.dumps({**_good(44), "ts": "1969-12-31T23:59:59.999Z"}),
    orjson.dumps({**_good(45), "ts": "2200-01-01T00:00:00.000Z"}),
    orjson.dumps({**_good(46), "ts": "2026-13-01T00:00:00.000Z"}),
    orjson.dumps({**_good(47), "ts": "2026-04-31T00:00:00.000Z"}),
    orjson.dumps({**_good(48), "ts": "1970-01-01T00:00:00.000Z"}),
    orjson.dumps({k: v for k, v in _good(49).items() if k != "ts"}),
    orjson.dumps({**_good(50), "agent_id": "\u0430\u0433\u0435\u043d\u0442"}),
    orjson.dumps({**_good(51), "agent_id": "\u3000"}),
    orjson.dumps({**_good(52), "agent_id": " \t"}),
    orjson.dumps({**_good(53), "agent_response": "\u00e9t\u00e9 \U0001f600", "response_length": 4}),
    orjson.dumps({**_good(54), "agent_response": "\u00e9t\u00e9 \U0001f600", "response_length": 9}),
    orjson.dumps({**_good(55), "user_message": "", "agent_response": ""}),
    orjson.dumps({**_good(56), "user_message": ""}),
    orjson.dumps({**_good(57), "memory_level": "project"}),
    orjson.dumps({**_good(58), "memory_level": "planet"}),
    orjson.dumps({**_good(59), "type": "session_ended"}),
    orjson.dumps({**_good(60), "usage": {"input_tokens": 10**18}}),
    orjson.dumps({**_good(61), "usage": {"input_tokens": 10**18 - 1}}),
    orjson.dumps({**_good(62), "usage": {}}),
    orjson.dumps({**_good(63), "tools_used": []}),
    orjson.dumps({**_good(64), "metadata": {}}),
    orjson.dumps({**_good(65), "metadata": {"a": None, "b": True, "c": False, "d": "x"}}),
    orjson.dumps({**_good(66), "task_id": "t-1", "model": "m", "approval_status": "approved"}),
    orjson.dumps({**_good(67), "attachments": [{"kind": "image", "caption": "c"}]}),
    orjson.dumps({**_good(68), "unknown": 1}),
    orjson.dumps({k: v for k, v in _good(69).items() if k not in ("usage", "metadata", "latency_ms")}),
    orjson.dumps({**_good(70), "agent_response": "x" * 70}),  # over a tight field limit
    orjson.dumps({**_good(71), "user_message": 'say "x": y'}),  # an escaped quote before a colon
    orjson.dumps({**_good(72), "metadata": {"a\\": 1, "b": 2}}),  # a key ending in a backslash
    orjson.dumps({**_good(73), "metadata": {"a\\": 1}}).replace(b'{"a', b'{"a\\":0,"a'),
]


def test_native_edges_same_outcome_in_a_block_and_alone() -> None:
    base = [orjson.dumps(_good(100 + k)) for k in range(30)]
    assert_same_three_ways(b"\n".join(base[:10] + NATIVE_EDGES + base[10:]))
    tight = LimitSettings(max_field_chars=60, max_depth=3, min_year=2026, max_year=2026)
    assert_same_three_ways(b"\n".join(base[:10] + NATIVE_EDGES + base[10:]), tight)
    for line in NATIVE_EDGES:
        assert_same_three_ways(b"\n".join([base[0], line, base[1]]))


def test_native_path_settles_the_usual_lines_and_leaves_the_rest() -> None:
    lines = [orjson.dumps(rec) for rec in islice(samples.generate(days=2, per_day=500, seed=4), 1000)]
    settled = native_rows(lines, DEFAULT_TS, LIMITS)
    legacy = sum(b'"agentId"' in line for line in lines)
    assert len(settled) == len(lines) - legacy  # every current-schema sample line, natively
    edges = native_rows(NATIVE_EDGES, DEFAULT_TS, LIMITS)
    assert 10 < len(edges) < len(NATIVE_EDGES)  # some edges settled natively, the others left
    assert_same_three_ways(b"\n".join(lines))
    # An own id without a time is stamped when validated (not from the file): never settled here.
    no_time = {"event_id": "own-4", **{k: v for k, v in _good(26).items() if k != "ts"}}
    assert native_rows([orjson.dumps(no_time)], DEFAULT_TS, LIMITS) == {}


def test_native_hostile_corpus_same_outcome() -> None:
    data = file_bytes(corpus())[3:]
    assert_same_three_ways(data)
    lines = [line.rstrip(b"\r") for line in data.split(b"\n")]
    assert native_rows(lines, DEFAULT_TS, LIMITS)  # the native path took part


_TEXT = st.text(
    alphabet=st.sampled_from(list("ab /\\\"'é中\U0001f600\u2028\x00\x01\x07\x08\t\n\x0c\r\x1f\x7f ")),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(_TEXT, min_size=3, max_size=3),
    latency=st.one_of(st.floats(0, 1e8, allow_nan=False), st.integers(0, 10**6)),
    spelling=st.sampled_from(["orjson", "json-ascii", "json-utf8", "json-spaced"]),
)
def test_native_spellings_same_outcome(texts: list[str], latency: float, spelling: str) -> None:
    import json

    rec = {**_good(1), "user_message": texts[0], "agent_response": texts[1], "latency_ms": latency}
    rec["metadata"] = {texts[2]: texts[0]}
    if spelling == "orjson":
        line = orjson.dumps(rec)
    elif spelling == "json-spaced":
        line = json.dumps(rec, ensure_ascii=False).encode()
    else:
        separators = (",", ":")
        line = json.dumps(rec, ensure_ascii=spelling == "json-ascii", separators=separators).encode()
    assert_same_three_ways(b"\n".join([orjson.dumps(_good(2)), line]))
