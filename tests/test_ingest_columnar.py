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
