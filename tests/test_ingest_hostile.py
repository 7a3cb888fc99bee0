"""Hostile input can't hurt: the corpus of tests/hostile_corpus.py, and fuzzing.

Every good line is stored exactly once, every bad line is quarantined with its
file, line number, field and reason, nothing raises, and the log stays usable
by every reader afterwards (SQL, seal, forget).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers_log import run_cli
from hostile_corpus import Case, corpus, file_bytes, line_numbers, turn
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from tiermem.ingest import pipeline
from tiermem.ingest.pipeline import ingest_file
from tiermem.log.sql import run_query

from tiermem.registry import STREAMS
from tiermem.settings import Settings, resolve_settings


def stored_ids(settings: Settings) -> Counter[str]:
    ids: Counter[str] = Counter()
    for stream in STREAMS:
        for path in sorted((settings.log_dir / stream).glob("date=*/*.jsonl")):
            for line in path.read_bytes().splitlines():
                ids[orjson.loads(line)["event_id"]] += 1
    return ids


def rejects_of(settings: Settings, source: str) -> list[dict[str, Any]]:
    out = []
    for path in sorted(settings.rejects_dir.rglob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            rec = orjson.loads(line)
            if rec.get("file") == source:
                out.append(rec)
    return out


def check_outcome(settings: Settings, src: Path, cases: list[Case]) -> None:
    goods = [c for c in cases if c.good]
    ids = stored_ids(settings)
    assert ids == Counter(c.event_id for c in goods), "every good line stored exactly once, nothing else"
    rejects = rejects_of(settings, str(src))
    by_line = {r["line"]: r for r in rejects}
    assert len(by_line) == len(rejects), "one reject per line"
    numbers = line_numbers(cases)
    for case, number in zip(cases, numbers, strict=True):
        if case.good:
            assert number not in by_line, f"{case.kind}: a good line was rejected: {by_line.get(number)}"
            continue
        rej = by_line.get(number)
        assert rej is not None, f"{case.kind}: line {number} not quarantined"
        assert rej["field"] == case.field, f"{case.kind}: refused for {rej['field']} ({rej['reason']})"
        assert rej["reason"] and rej["source"] == f"ingest:{src}"
        assert len(rej["reason"]) < 400, f"{case.kind}: reason not one short line"
        assert 0 < len(rej["record"].encode()) <= settings.limits.max_record_bytes
    assert len(rejects) == sum(1 for c in cases if not c.good)


@pytest.mark.parametrize("workers", [0, 2])
def test_hostile_corpus_good_lines_stored_once_bad_ones_quarantined(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    cases = corpus()
    assert len(cases) >= 200 and sum(1 for c in cases if not c.good) >= 150
    src = tmp_path / "hostile.jsonl"
    src.write_bytes(file_bytes(cases))
    if workers:
        monkeypatch.setattr(pipeline, "PARALLEL_AFTER_BYTES", 0)  # workers from the first block on
    info = ingest_file(settings, src, progress=False, workers=workers)
    bad = sum(1 for c in cases if not c.good)
    assert (info.accepted, info.rejected, info.duplicates) == (len(cases) - bad, bad, 0)
    assert info.exit_code == 3
    assert info.lines == line_numbers(cases)[-1]
    check_outcome(settings, src, cases)
    # Re-running the file changes nothing: goods are duplicates, bads rejected again.
    again = ingest_file(settings, src, progress=False, workers=workers)
    assert (again.accepted, again.rejected, again.duplicates) == (0, bad, len(cases) - bad)
    assert stored_ids(settings) == Counter(c.event_id for c in cases if c.good)


def test_hostile_corpus_through_the_cli_then_every_reader_still_works(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = corpus()
    src = tmp_path / "hostile.jsonl"
    src.write_bytes(file_bytes(cases))
    code, out, err = run_cli(capsys, settings.data_dir, ["ingest", str(src), "--json"])
    assert code == 3 and "Traceback" not in err
    doc = orjson.loads(out)
    assert doc["rejected"] == sum(1 for c in cases if not c.good)
    assert doc["reject_fields"]["type"] >= 20  # every control event type, refused for its type
    # The log stays usable by every reader: SQL, seal (all good lines are in past days), forget.
    count = run_query(settings, "SELECT count(*) FROM interactions").rows[0][0]
    assert count == sum(1 for c in cases if c.good) - 1  # all but the session_ended
    code, _out, err = run_cli(capsys, settings.data_dir, ["seal", "--json"])
    assert code == 0 and "Traceback" not in err
    code, out, err = run_cli(capsys, settings.data_dir, ["forget", "--user", "user-1", "--json"])
    assert code == 0 and "Traceback" not in err
    left = run_query(settings, "SELECT count(*) FROM interactions WHERE user = 'user-1'").rows[0][0]
    assert left == 0


def test_caller_paths_refuse_control_events(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    import io
    import sys

    from tiermem.ingest.pipeline import ingest_record

    from tiermem.errors import ValidationError
    from tiermem.eventlog import EventLog
    from tiermem.events import CALLER

    erasure = {"type": "erasure", "target_kind": "agent", "target": "agent-1"}
    with pytest.raises(ValidationError) as err:
        ingest_record(settings, erasure)
    assert err.value.field == "type" and "tiermem forget" in err.value.reason
    with EventLog(settings) as log:
        res = log.append_many([erasure, turn(1)], writer=CALLER)
        assert res.accepted == 1 and [i for i, _e in res.rejected] == [0]
        # The internal path (what `tiermem forget` uses) still writes it.
        assert not log.append(erasure).duplicate
    # `tiermem append` reads one object from stdin: the same boundary, and duplicate keys refused.
    for payload, field in (
        (orjson.dumps(erasure), "type"),
        (
            b'{"type":"interaction","agent_id":"a","user_message":"q","agent_response":"r","type":"erasure"}',
            "type",
        ),
        (b"x" * (settings.limits.max_record_bytes + 10), "<record>"),
    ):
        stdin = io.TextIOWrapper(io.BytesIO(payload))
        old = sys.stdin
        sys.stdin = stdin
        try:
            code, _out, err_text = run_cli(capsys, settings.data_dir, ["append"])
        finally:
            sys.stdin = old
        assert code == 2 and err_text.count("\n") == 1 and f"error: {field}:" in err_text


# ------------------------------------------------------------------ fuzzing

_TEXT = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))
_GOOD = st.builds(
    lambda n, msg, meta: {**turn(n, user_message=msg or "q"), "metadata": meta},
    st.integers(0, 10**9),
    st.text(_TEXT, max_size=30),
    st.dictionaries(
        st.text(_TEXT, max_size=8),
        st.integers(-(2**63), 2**63 - 1)
        | st.text(_TEXT, max_size=8)
        | st.none()
        | st.floats(allow_nan=False),
        max_size=3,
    ),
)


def _mutate(line: bytes, how: int, where: int, junk: bytes) -> bytes:
    at = where % (len(line) + 1)
    if how == 0:
        return line[:at] + junk + line[at:]  # inserted bytes
    if how == 1:
        return line[:at]  # truncated
    if how == 2:
        return line[:at] + line[at + 1 :]  # one byte deleted
    if how == 3:
        return line[:-1] + b',"type":"erasure"}'  # a duplicate key
    if how == 4:
        return line.replace(b'"interaction"', b'"' + junk.replace(b'"', b"") + b'"')  # another type
    return junk  # arbitrary bytes


_LINE = st.one_of(
    _GOOD.map(lambda rec: ("good", rec)),
    st.tuples(_GOOD, st.integers(0, 5), st.integers(0, 10**6), st.binary(min_size=1, max_size=20)).map(
        lambda t: ("mutant", _mutate(orjson.dumps(t[0]), t[1], t[2], t[3]))
    ),
)


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_LINE, min_size=1, max_size=25))
def test_fuzzed_files_never_raise_and_account_for_every_line(
    tmp_path: Path, items: list[tuple[str, Any]]
) -> None:
    import tempfile

    with tempfile.TemporaryDirectory(dir=tmp_path) as tmp:
        settings = resolve_settings(data_dir=Path(tmp) / "data", env={})
        lines: list[bytes] = []
        good_ids: set[str] = set()
        good_lines: set[int] = set()
        for k, (kind, value) in enumerate(items):
            if kind == "good":
                value = {**value, "event_id": f"fuzz-{k}"}
                good_ids.add(value["event_id"])
                good_lines.add(k + 1)
                lines.append(orjson.dumps(value))
            else:
                lines.append(value.replace(b"\n", b" ").replace(b'"fuzz-', b'"fz-'))
        src = Path(tmp) / "fuzz.jsonl"
        src.write_bytes(b"\n".join(lines) + b"\n")
        info = ingest_file(settings, src, progress=False, workers=0)  # raises nothing
        nonblank = sum(1 for line in lines if line.strip())
        assert info.accepted + info.rejected + info.duplicates == nonblank
        ids = stored_ids(settings)
        assert all(n == 1 for n in ids.values())
        assert good_ids <= set(ids), "every good line stored"
        rejects = rejects_of(settings, str(src))
        assert len(rejects) == info.rejected
        assert all(r["reason"] and r["field"] and 1 <= r["line"] <= len(lines) for r in rejects)
        rejected_lines = {r["line"] for r in rejects}
        assert len(rejected_lines) == len(rejects) and not rejected_lines & good_lines


def test_a_repeated_empty_key_is_named_in_the_reject(tmp_path: Path) -> None:
    settings = resolve_settings(data_dir=tmp_path / "data", env={})
    src = tmp_path / "f.jsonl"
    src.write_bytes(
        b'{"event_id":"x1","type":"interaction","agent_id":"a","ts":"2026-02-01T00:00:00Z",'
        b'"user_message":"hi","agent_response":"yo","metadata":{"":null,"":"z"}}\n'
    )
    info = ingest_file(settings, src, progress=False, workers=0)
    (reject,) = rejects_of(settings, str(src))
    assert info.rejected == 1 and reject["field"] == '""' and "duplicate key" in reject["reason"]
