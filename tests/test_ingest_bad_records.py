"""Bad records: each kind rejected with a message naming the field; the good ones around them stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers_log import all_lines, interaction, run_cli, write_jsonl
from tiermem.ingest.pipeline import ingest_file

from tiermem.errors import ValidationError
from tiermem.events import validate
from tiermem.settings import Settings


def _without(field: str) -> dict[str, Any]:
    rec = interaction(1)
    del rec[field]
    return rec


BAD: list[tuple[str, Any, str]] = [
    ("not json", b'{"type": "interaction", "agent_id": ', "<line>"),
    ("array", b"[1, 2]", "<record>"),
    ("missing type", {k: v for k, v in interaction(1).items() if k != "type"}, "type"),
    ("unknown type", interaction(1, type="chat"), "type"),
    ("type not a string", interaction(1, type=5), "type"),
    ("missing agent", _without("agent_id"), "agent_id"),
    ("blank agent", interaction(1, agent_id="  "), "agent_id"),
    ("agent not a string", interaction(1, agent_id=17), "agent_id"),
    ("missing user_message", _without("user_message"), "user_message"),
    ("user_message a number", interaction(1, user_message=3), "user_message"),
    ("both texts empty", interaction(1, user_message="", agent_response=""), "user_message"),
    ("ts not a time", interaction(1, ts="yesterday"), "ts"),
    ("ts without offset", interaction(1, ts="2026-03-01T10:00:00"), "ts"),
    # Python reads these as offsets with seconds, which would move the time by 12.038 s.
    ("ts with seconds in its offset", interaction(1, ts="2026-05-03T10:11:12.038+00:00:12.038"), "ts"),
    ("ts with text after its Z", interaction(1, ts="2026-05-03T10:11:12.038Z:12.038"), "ts"),
    ("negative tokens", interaction(1, usage={"input_tokens": -5}), "usage.input_tokens"),
    ("unknown usage field", interaction(1, usage={"inputs": 5}), "usage.inputs"),
    ("usage not an object", interaction(1, usage=[1]), "usage"),
    ("tools_used not a list", interaction(1, tools_used="recall_memory"), "tools_used"),
    ("tool not a string", interaction(1, tools_used=["a", 2]), "tools_used[1]"),
    ("negative latency", interaction(1, latency_ms=-1), "latency_ms"),
    ("latency a boolean", interaction(1, latency_ms=True), "latency_ms"),
    ("wrong response_length", interaction(1, response_length=3), "response_length"),
    ("bad memory level", interaction(1, memory_level="galaxy"), "memory_level"),
    ("future schema", interaction(1, schema_version=99), "schema_version"),
    ("event_id with a slash", interaction(1, event_id="a/b"), "event_id"),
    ("metadata a string", interaction(1, metadata="x"), "metadata"),
    ("NUL in text", interaction(1, agent_response="a\x00b"), "agent_response"),
]


@pytest.mark.parametrize(("kind", "record", "field"), [b for b in BAD if not isinstance(b[1], bytes)])
def test_validate_names_the_field(kind: str, record: Any, field: str) -> None:
    with pytest.raises(ValidationError) as err:
        validate(record)
    assert err.value.field == field, kind
    assert err.value.reason and field in str(err.value)


def test_bulk_file_rejects_each_bad_kind_and_stores_the_good_around_them(
    settings: Settings, tmp_path: Path
) -> None:
    lines: list[Any] = []
    for n, (_kind, record, _field) in enumerate(BAD):
        lines.append(interaction(100 + n, event_id=f"good-{n}"))
        lines.append(record)
    lines.append(interaction(999, event_id="good-last"))
    src = write_jsonl(tmp_path / "mixed.jsonl", lines)
    info = ingest_file(settings, src, progress=False)
    assert (info.accepted, info.rejected, info.duplicates) == (len(BAD) + 1, len(BAD), 0)
    assert info.exit_code == 3
    stored = {orjson.loads(x)["event_id"] for x in all_lines(settings.data_dir)}
    assert stored == {f"good-{n}" for n in range(len(BAD))} | {"good-last"}
    rejects = [
        orjson.loads(x) for p in settings.rejects_dir.rglob("*.jsonl") for x in p.read_bytes().splitlines()
    ]
    assert [r["field"] for r in rejects] == [f for _k, _r, f in BAD]
    assert all(r["reason"] and r["record"] for r in rejects)
    assert info.reject_fields["user_message"] == 3
    assert info.rejects_path is not None and Path(info.rejects_path).exists()


def test_ingest_cli_json_contract_and_exit_codes(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write_jsonl(tmp_path / "good.jsonl", [interaction(i, event_id=f"g{i}") for i in range(10)])
    code, out, _ = run_cli(capsys, settings.data_dir, ["ingest", str(good), "--json"])
    doc = orjson.loads(out)
    assert code == 0 and (doc["accepted"], doc["rejected"], doc["duplicates"]) == (10, 0, 0)
    mixed = write_jsonl(
        tmp_path / "mixed.jsonl", [interaction(i, event_id=f"g{i}") for i in range(12)] + [b"nope"]
    )
    code, out, _ = run_cli(capsys, settings.data_dir, ["ingest", str(mixed), "--json"])
    doc = orjson.loads(out)
    assert code == 3 and (doc["accepted"], doc["rejected"], doc["duplicates"]) == (2, 1, 10)
    code, out, _ = run_cli(capsys, settings.data_dir, ["ingest", str(mixed)])
    assert code == 3 and "0 accepted" in out and "<line> (1)" in out


def test_append_cli_from_flags_and_from_stdin(
    settings: Settings, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run_cli(
        capsys,
        settings.data_dir,
        [
            "append",
            "--agent",
            "bot",
            "--user",
            "alice",
            "--message",
            "hi",
            "--response",
            "hello",
            "--model",
            "claude-haiku-4-5",
            "--input-tokens",
            "12",
            "--tools",
            "recall_memory,search",
            "--json",
        ],
    )
    res = orjson.loads(out)
    assert code == 0 and not res["duplicate"] and res["line"] == 0
    (line,) = all_lines(settings.data_dir)
    ev = orjson.loads(line)
    assert ev["usage"] == {"input_tokens": 12} and ev["tools_used"] == ["recall_memory", "search"]
    assert ev["response_length"] == 5 and ev["user"] == "alice"
    import io
    import sys

    payload = orjson.dumps(interaction(3, event_id="from-stdin"))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(payload)))
    code, out, _ = run_cli(capsys, settings.data_dir, ["append"])
    assert code == 0 and "from-stdin" in out
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"type":"interaction"}')))
    code, _out, err = run_cli(capsys, settings.data_dir, ["append"])
    assert code == 2 and "agent_id" in err
