"""The compiled scanner of bulk ingest gives exactly the per-record path's outcomes.

Four ways encode the same blocks: per-record, the Python columnar path, the
Arrow pass in front of it, and the compiled scanner in front of those. The
stored bytes, ids, partitions and every quarantine (line, field, reason) must
be identical; the scanner must settle at least what the Arrow pass settles on
each line alone, and its own pieces (BLAKE2b, the float spelling rule) must
agree with the library functions they stand for.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import replace
from itertools import islice
from pathlib import Path

import orjson
import pytest
from hostile_corpus import corpus, file_bytes
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ingest_columnar import DEFAULT_TS, LIMITS, NATIVE_EDGES, _good, mixed_block, outcome
from tiermem.ingest import compiled
from tiermem.ingest.native import native_rows
from tiermem.ingest.pipeline import EncodedBlock, encode_block, ingest_file

from tiermem.app import samples
from tiermem.settings import LimitSettings, Settings

pytestmark = pytest.mark.skipif(not compiled.available(), reason="the compiled scanner is not built")

TIGHT = LimitSettings(max_field_chars=60, max_depth=3, min_year=2026, max_year=2026)


def assert_same_four_ways(block: bytes, limits: LimitSettings = LIMITS) -> EncodedBlock:
    old = encode_block(block, DEFAULT_TS, limits, columnar=False)
    python = encode_block(block, DEFAULT_TS, limits, columnar=True, native=False)
    arrow = encode_block(block, DEFAULT_TS, limits, columnar=True, native=True, compiled=False)
    new = encode_block(block, DEFAULT_TS, limits, columnar=True, native=True, compiled=True)
    assert outcome(python) == outcome(old)
    assert outcome(arrow) == outcome(old)
    assert outcome(new) == outcome(old)
    return new


def _settled(lines: list[bytes], limits: LimitSettings = LIMITS) -> set[int]:
    count, _ids, _partitions, _stored, rest, _left = compiled.scan_block(
        b"\n".join(lines), DEFAULT_TS, limits
    )
    assert count == len(lines)
    return set(range(count)) - set(rest)


def test_blake2b_matches_the_standard_library_at_every_block_boundary() -> None:
    _scan = compiled._scan
    assert _scan is not None

    rnd = random.Random(1)
    for n in [*range(0, 300), 383, 384, 385, 1023, 1024, 1025, 70_000]:
        data = rnd.randbytes(n)
        assert _scan.blake2b_10(data) == hashlib.blake2b(data, digest_size=10).digest(), n


def test_hostile_corpus_same_outcome_four_ways() -> None:
    data = file_bytes(corpus())[3:]
    new = assert_same_four_ways(data)
    assert new.rejects and new.stored
    assert _settled([line.rstrip(b"\r") for line in data.split(b"\n")])  # the scanner took part


def test_edges_same_outcome_in_a_block_alone_and_under_tight_limits() -> None:
    base = [orjson.dumps(_good(100 + k)) for k in range(30)]
    block = b"\n".join(base[:10] + NATIVE_EDGES + base[10:])
    assert_same_four_ways(block)
    assert_same_four_ways(block, TIGHT)
    for line in NATIVE_EDGES:
        assert_same_four_ways(b"\n".join([base[0], line, base[1]]))


def test_scanner_settles_each_line_the_arrow_pass_settles() -> None:
    lines = [line.rstrip(b"\r") for line in NATIVE_EDGES]
    for limits in (LIMITS, TIGHT):
        scanned = _settled(lines, limits)
        for k, line in enumerate(lines):
            if native_rows([line], DEFAULT_TS, limits):
                assert k in scanned, line
    assert 10 < len(_settled(lines)) < len(lines)  # some edges settled, the others left


def test_scanner_settles_every_sample_line_of_either_form() -> None:
    lines = [orjson.dumps(rec) for rec in islice(samples.generate(days=2, per_day=500, seed=4), 1000)]
    assert sum(b'"agentId"' in line for line in lines) > 10  # the original form is among them
    assert _settled(lines) == set(range(len(lines)))
    assert_same_four_ways(b"\n".join(lines))
    # An own id without a time is stamped when validated (not from the file): never settled here.
    no_time = {"event_id": "own-4", **{k: v for k, v in _good(26).items() if k != "ts"}}
    assert _settled([orjson.dumps(no_time)]) == set()


def test_mixes_same_outcome_four_ways() -> None:
    block = mixed_block(seed=7, n=3000, bad_share=0.2)  # blank lines, other streams, rejects between
    new = assert_same_four_ways(block)
    assert len(new.rejects) > 100 and len(new.stored) > 2000
    assert set(new.streams) == {"interactions", "sessions"}  # the merge placed another stream
    assert_same_four_ways(mixed_block(seed=11, n=1500, bad_share=0.1), TIGHT)
    # Line endings: CRLF, a trailing newline, blank and whitespace-only lines.
    lines = mixed_block(seed=3, n=200, bad_share=0.3).split(b"\n")
    assert_same_four_ways(b"\r\n".join(lines) + b"\r\n")
    assert_same_four_ways(b"\n\n".join(lines[:50]) + b"\n \t\n")


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), share=st.floats(0.0, 1.0))
def test_generated_mixes_same_outcome_four_ways(seed: int, share: float) -> None:
    assert_same_four_ways(mixed_block(seed, 200, share))


def _old(n: int = 0, **changes: object) -> dict[str, object]:
    """A record in the original form (camelCase names, no type)."""
    rec: dict[str, object] = {
        "agentId": "agent-a",
        "timestamp": f"2026-05-0{1 + n % 9}T10:11:12.{n % 1000:03d}Z",
        "channel": "web",
        "user_message": f"question {n}",
        "agent_response": f"answer {n}",
    }
    rec.update(changes)
    return {k: v for k, v in rec.items() if v is not None}


# The original form: settled by the scanner in its plain shape, the rest left to the per-record path.
OLD_EDGES: list[bytes] = [
    orjson.dumps(_old(1)),
    orjson.dumps({"timestamp": "2026-05-01T00:00:00.000Z", **_old(2)}),  # timestamp first
    orjson.dumps({"channel": "x", **_old(3)}),  # another field before them
    orjson.dumps(_old(4, memory_level="project", tools_used=["a"], response_length=8)),
    orjson.dumps(_old(5, response_length=3)),
    orjson.dumps(_old(6, usage={"input_tokens": 3})),
    orjson.dumps(_old(7, usage={"inputTokens": 3})),
    orjson.dumps(_old(8, agent_id="b")),
    orjson.dumps(_old(9, ts="2026-05-01T00:00:00.000Z")),
    orjson.dumps(_old(10, type="interaction")),
    orjson.dumps(_old(11, schema_version=0)),
    orjson.dumps(_old(12, schema_version=1)),
    orjson.dumps(_old(13, event_id="own-13")),
    orjson.dumps(_old(14, timestamp=None)),
    orjson.dumps(_old(15, agentId=None)),
    orjson.dumps(_old(16, agentId="  ")),
    orjson.dumps(_old(17, agentId="")),
    orjson.dumps(_old(18, timestamp="2026-05-01T00:00:00Z")),
    orjson.dumps(_old(19, timestamp="2026-02-30T00:00:00.000Z")),
    orjson.dumps(_old(20, timestamp="1969-12-31T23:59:59.999Z")),
    orjson.dumps(_old(21, user_message="", agent_response="")),
    orjson.dumps(_old(22, agent_response='\u00e9t\u00e9 "q"\n')),
    orjson.dumps(_old(23, metadata={"a": 1, "b": None})),
    orjson.dumps(_old(24, agentId='a"b')),
    orjson.dumps(_old(25, unknown=1)),
    orjson.dumps(_old(26)).replace(b'"channel":"web"', b'"channel":"web","agentId":"again"'),
    orjson.dumps(_old(27, latency_ms=12.5)),
    orjson.dumps(_old(28, memory_level="planet")),
]


def test_original_form_same_outcome_four_ways() -> None:
    base = [orjson.dumps(_good(200 + k)) for k in range(10)]
    assert_same_four_ways(b"\n".join(base[:5] + OLD_EDGES + base[5:]))
    assert_same_four_ways(b"\n".join(base[:5] + OLD_EDGES + base[5:]), TIGHT)
    for line in OLD_EDGES:
        assert_same_four_ways(b"\n".join([base[0], line, base[1]]))
    settled = _settled(OLD_EDGES)
    assert {0, 1, 2, 3, 5, 21, 22, 23, 26} <= settled  # the plain shapes, fields around them
    assert not settled & {6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 24, 25}


def test_float_rule_accepts_the_serialisers_spelling_and_nothing_else() -> None:
    """Every latency orjson writes in the plain range is settled; any other spelling is not."""
    rnd = random.Random(9)
    values = [rnd.uniform(0.001, 10.0 ** rnd.randint(-2, 16)) for _ in range(3000)]
    values += [round(rnd.uniform(0, 1e6), rnd.randint(0, 6)) for _ in range(3000)]
    values += [0.0, 0.001, 1e15, 9999999999999998.0, 0.1 + 0.2, 1 / 3, 123456789012345.6]
    plain = [v for v in values if v == 0.0 or (0.001 <= v < 1e16)]
    lines = [orjson.dumps({**_good(k), "latency_ms": v}) for k, v in enumerate(plain)]
    assert _settled(lines) == set(range(len(lines)))
    wrong = []
    for k, v in enumerate(plain[:500]):
        text = orjson.dumps(v).decode()
        for other in (text + "0", f"{v:.17f}", f"{v:.17g}"):
            # a spelling that is not the serialiser's for the number it reads as
            if "e" not in other and orjson.dumps(float(other)).decode() != other:
                wrong.append(orjson.dumps(_good(k)).replace(b"812.5", other.encode()))
    assert wrong
    assert _settled(wrong) == set()
    assert_same_four_ways(b"\n".join(lines[:300] + wrong[:300]))


_TEXT = st.text(
    alphabet=st.sampled_from(list("ab /\\\"'é中\U0001f600\u2028\x00\x01\x07\x08\t\n\x0c\r\x1f\x7f \ud800")),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(_TEXT, min_size=4, max_size=4),
    latency=st.one_of(st.floats(0, 1e17, allow_nan=False), st.integers(0, 10**6)),
    spelling=st.sampled_from(["orjson", "json-ascii", "json-utf8", "json-spaced"]),
    own_id=st.booleans(),
)
def test_spellings_same_outcome_four_ways(
    texts: list[str], latency: float, spelling: str, own_id: bool
) -> None:
    import json

    rec = {**_good(1), "user_message": texts[0], "agent_response": texts[1], "latency_ms": latency}
    rec["metadata"] = {texts[2]: texts[0], texts[3]: 1}
    rec["agent_id"] = texts[3] or "a"
    if own_id:
        rec = {"event_id": "own-9", **rec}
    if spelling == "orjson":
        try:
            line = orjson.dumps(rec)
        except orjson.JSONEncodeError:  # a lone surrogate
            line = json.dumps(rec).encode()
    elif spelling == "json-spaced":
        line = json.dumps(rec, ensure_ascii=False).encode("utf-8", "surrogatepass")
    else:
        separators = (",", ":")
        text = json.dumps(rec, ensure_ascii=spelling == "json-ascii", separators=separators)
        line = text.encode("utf-8", "surrogatepass")
    assert_same_four_ways(b"\n".join([orjson.dumps(_good(2)), line]))


def test_ingest_file_same_bytes_with_and_without_the_scanner(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "mix.jsonl"
    src.write_bytes(mixed_block(seed=2, n=3000, bad_share=0.1) + b"\n")
    results = []
    for run, built in enumerate((True, False)):
        if not built:  # as on a machine without a C compiler: the module is missing
            monkeypatch.setattr(compiled, "_scan", None)
            assert not compiled.available()
        data = tmp_path / f"data-{run}"
        info = ingest_file(replace(settings, data_dir=data), src, progress=False, workers=0)
        stored: dict[Path, bytes] = {}
        for path in sorted(data.rglob("*.jsonl")):  # segment names differ between runs
            if "_rejects" not in path.parts:
                key = path.parent.relative_to(data)
                stored[key] = stored.get(key, b"") + path.read_bytes()
        results.append((info.accepted, info.rejected, info.duplicates, info.reject_fields, stored))
    assert results[0] == results[1]
    assert results[0][0] > 2000 and results[0][1] > 50


def test_automatic_workers_only_for_files_the_slower_paths_must_read(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import json

    from tiermem.ingest import pipeline
    from tiermem.ingest.lines import read_blocks

    monkeypatch.setattr(pipeline, "PARALLEL_AFTER_BYTES", 64 << 10)
    pools: list[str] = []
    real = pipeline.multiprocessing.get_context

    def counted(method: str) -> object:
        pools.append(method)
        return real(method)

    monkeypatch.setattr(pipeline.multiprocessing, "get_context", counted)
    recs = list(islice(samples.generate(days=2, per_day=300, seed=5), 600))
    plain = b"\n".join(orjson.dumps(rec) for rec in recs)
    spaced = b"\n".join(json.dumps(rec).encode() for rec in recs)  # ", " and ": ": slower paths only

    def run(data: bytes, workers: int, adaptive: bool) -> list[EncodedBlock]:
        blocks = read_blocks(io.BytesIO(data), LIMITS.max_record_bytes, block_bytes=16 << 10)
        return [
            b for b, _size in pipeline.encoded_blocks(blocks, DEFAULT_TS, workers, LIMITS, adaptive=adaptive)
        ]

    inline = run(plain, 0, False)
    assert [outcome(b) for b in run(plain, 2, True)] == [outcome(b) for b in inline]
    assert pools == []  # the scanner settled every line: no workers started
    assert sum(b.scanned for b in inline) == len(recs)
    assert [outcome(b) for b in run(spaced, 2, True)] == [outcome(b) for b in run(spaced, 0, False)]
    assert pools == ["fork"]  # none scanned: the rest of the file went to workers
    run(plain, 2, False)  # a worker count asked for is used whatever the file
    assert pools == ["fork", "fork"]


def _byte_mutants(seed: int, n: int) -> bytes:
    """Sample lines with random byte-level damage: flips, cuts, insertions of JSON's special bytes."""
    rnd = random.Random(seed)
    specials = [
        b'"',
        b"\\",
        b"\\u0000",
        b"\x00",
        b"\x1f",
        b"\xff",
        b"\xc3",
        b"\xed\xa0\x80",
        b",",
        b"}",
        b"{",
    ]
    specials += [b":", b" ", b"0", b"-", b".", b"e", b"\r", b"\\n", b"\\x", b"\xf4\x90\x80\x80"]
    lines = []
    for rec in islice(samples.generate(days=2, per_day=max(1, n // 2), seed=seed), n):
        line = bytearray(orjson.dumps(rec))
        for _ in range(rnd.randint(0, 3)):
            at = rnd.randrange(len(line) + 1)
            action = rnd.random()
            if action < 0.3 and line:
                line[min(at, len(line) - 1)] = rnd.randrange(256)
            elif action < 0.5:
                del line[at : at + rnd.randint(1, 4)]
            elif action < 0.9:
                line[at:at] = rnd.choice(specials)
            else:
                del line[at:]
        lines.append(bytes(line))
    return b"\n".join(lines)


def test_byte_level_damage_same_outcome_four_ways() -> None:
    for seed in range(6):
        new = assert_same_four_ways(_byte_mutants(seed, 300))
        assert new.rejects and new.stored and new.scanned  # all three kinds of line were there


def test_every_time_the_validator_accepts_gives_a_replay_safe_id() -> None:
    # Lines without an event_id get one from their time and bytes, so a re-run stores
    # them once; a time the validator reads in any of its accepted spellings must do so.
    spellings = [
        "2026-05-03T10:11:12.038z",
        "2026-05-03T10:11:12+05:30",
        "2026-05-03 10:11Z",
        "20260503T101112Z",
        "2026-05-03T10:11:12.038Z",
    ]
    block = b"\n".join(
        orjson.dumps({**{k: v for k, v in _good(n).items() if k != "ts"}, "ts": ts})
        for n, ts in enumerate(spellings)
    )
    first = assert_same_four_ways(block)
    again = assert_same_four_ways(block)
    assert len(first.ids) == len(spellings) and first.ids == again.ids


REVIEWED_EDGES = [
    # An escaped newline in an id: the joined id column looked like two good ids, and the
    # line was stored broken in two.
    b'{"type":"interaction","event_id":"d\\nd","agent_id":"a1","user_message":"u","agent_response":"r",'
    b'"ts":"2026-03-04T05:06:07.089Z"}',
    # A good id spelt with an escape: the splice cut the line one byte short.
    b'{"event_id":"\\u0041bc","type":"interaction","agent_id":"a1","user_message":"u","agent_response":"r",'
    b'"ts":"2026-03-04T05:06:07.089Z"}',
    # Times that exist with their offset but not in UTC: refused, not a crash of the whole file.
    b'{"type":"interaction","agent_id":"a","user_message":"u","agent_response":"r","ts":"0001-01-01T00:00:00+01:00"}',
    b'{"type":"interaction","agent_id":"a","user_message":"u","agent_response":"r","ts":"9999-12-31T23:59:59-01:00"}',
    b'{"type":"interaction","agentId":"a","user_message":"u","agent_response":"r","timestamp":"0001-01-01T00:00:00+01:00"}',
    # A float in a flat object is a scalar like an integer, whatever the depth limit.
    b'{"type":"interaction","agent_id":"a","user_message":"u","agent_response":"r","metadata":{"x":1.5}}',
]


def test_lines_found_in_review_same_outcome_four_ways() -> None:
    block = b"\n".join(REVIEWED_EDGES)
    new = assert_same_four_ways(block)
    assert_same_four_ways(block, LimitSettings(max_depth=2))
    assert [r[2] for r in new.rejects] == ["event_id", "ts", "ts", "ts"]
    assert all(orjson.loads(line) for line in new.stored)  # every stored line is whole JSON
    for line in REVIEWED_EDGES:
        assert_same_four_ways(line)


def test_the_scanner_takes_its_names_only_from_tuples() -> None:
    # It borrows the names for the whole scan: a generator's fresh strings would be gone.
    _scan = compiled._scan
    assert _scan is not None
    fields = compiled._fields()
    assert fields is not None
    with pytest.raises(TypeError, match="tuples"):
        _scan.scan_block(b"{}", DEFAULT_TS, list(fields), ("input_tokens",), ("global",), 1000, 1970, 2199)
    with pytest.raises(TypeError, match="tuples"):
        _scan.scan_block(b"{}", DEFAULT_TS, fields, iter(["input_tokens"]), ("global",), 1000, 1970, 2199)
