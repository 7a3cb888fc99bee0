"""One-line errors everywhere: every command, with bad arguments, files, data roots and configs.

Nothing here may print a traceback: each run ends in exit 0, 1 (failure),
2 (usage) or 3 (partial), and a failing run says why in exactly one line.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers_log import interaction, write_jsonl
from tiermem.ingest.pipeline import ingest_file

from tiermem.app.cli import build_parser, main
from tiermem.settings import resolve_settings

# Enough arguments for argparse to accept each command (their effect is tested elsewhere).
MINIMAL: dict[str, list[str]] = {
    "ingest": ["{file}"],
    "append": ["--agent", "a", "--message", "q", "--response", "r"],
    "seal": [],
    "sql": ["SELECT 1"],
    "compress": [],
    "review": [],
    "evolve": [],
    "proposals": ["list"],
    "export": ["--user", "u"],
    "forget": ["--user", "nobody-at-all"],
    "context": ["agent-1"],
    "recall": ["agent-1", "anything"],
    "facts": ["list", "agent-1"],
    "identity": ["show", "agent-1"],
    "rebuild": [],
    "chat": ["--agent", "a"],
    "mcp": ["--agent", "a"],
    "schedule": ["--list"],
    "demo": ["--log-only", "--days", "1", "--per-day", "5"],
    "bench": ["locomo", "--data", "{missing}"],
    "keys": ["list"],
    "serve": ["--port", "0"],
}
# Commands that serve or converse until stopped: run only where they must fail before starting.
LONG_RUNNING = {"mcp", "chat", "schedule", "demo", "bench", "serve"}

BAD_ARGS: list[list[str]] = [
    ["ingest", "{missing}"],
    ["ingest", "{dir}"],
    ["ingest", "{file}", "--workers", "many"],
    ["ingest", "{file}", "--fsync", "sometimes"],
    ["ingest"],
    ["append", "--agent", "a", "--message", "q", "--response", "r", "--ts", "yesterday"],
    ["append", "--agent", "a", "--message", "q", "--response", "r", "--ts", "9999-12-31T23:59:59Z"],
    ["append", "--agent", "a", "--message", "q", "--response", "r", "--input-tokens", "-5"],
    ["append", "--agent", "a", "--message", "q", "--response", "r", "--latency-ms", "nan"],
    ["append", "--agent", "a", "--message", "q", "--response", "r", "--level", "galaxy"],
    ["append", "--agent", "a", "--message", "q", "--response", "r", "--event-id", "a/b"],
    ["append", "--agent", "", "--message", "q", "--response", "r"],
    ["append", "--input-tokens", "x"],
    ["append"],  # stdin is empty
    ["seal", "--before", "2026-13-45"],
    ["seal", "--before", "yesterday"],
    ["sql", ""],
    ["sql", "SELEC 1"],
    ["sql", "-"],  # stdin is empty
    ["sql", "SELECT 1", "--timeout", "-1"],
    ["sql", "SELECT 1", "--timeout", "soon"],
    ["sql", "SELECT * FROM no_such_view"],
    ["sql"],
    ["review", "--day", "2026-02-30"],
    ["review", "--day", "tomorrow"],
    ["proposals"],
    ["proposals", "approve"],
    ["proposals", "show", "no-such-proposal"],
    ["proposals", "reject", "no-such-proposal"],
    ["proposals", "list", "--status", "weird"],
    ["export"],
    ["export", "--user", "u", "--format", "xml"],
    ["export", "--user", "u", "--out", "{dir}"],
    ["export", "--user", "u", "--agent", "a"],
    ["forget"],
    ["forget", "--event", "no-such-event"],
    ["context"],
    ["context", "agent-1", "--level", "galaxy"],
    ["context", ""],
    ["recall", "agent-1"],
    ["recall", "agent-1", "q", "--limit", "x"],
    ["facts", "get", "agent-1"],
    ["facts", "set", "agent-1", "k"],
    ["facts", "get", "agent-1", "no-such-key"],
    ["facts", "list", "agent-1", "--scope", "galaxy"],
    ["facts", "explode", "agent-1"],
    ["identity", "set", "agent-1", "x" * 5000],
    ["chat"],
    ["chat", "--agent", "a"],  # no API key
    ["mcp"],
    ["schedule", "--once", "nap"],
    ["demo", "--days", "many"],
    ["bench"],
    ["bench", "locomo"],
    ["bench", "locomo", "--data", "{missing}"],
    ["bench", "locomo", "--data", "{dir}"],
    ["keys", "create"],
    ["keys", "create", "--operator", "--agent", "a"],
    ["keys", "revoke"],
    ["keys", "revoke", "key_000000000000"],
    ["keys", "shred"],
    ["serve", "--port", "http"],
    ["serve", "--port", "99999"],
    ["serve", "--max-body-bytes", "-1"],
    ["no-such-command"],
    ["--no-such-flag"],
]

BAD_CONFIGS: dict[str, str | bytes | None] = {
    "missing config file": None,
    "config is a directory": "{dir}",
    "not TOML": "fsync = [unclosed",
    "not UTF-8": b"fsync = '\xff'",
    "unknown key": "colour = 'blue'",
    "wrong type": "segment_max_bytes = 'big'",
    "wrong type in a section": "[compressor]\nbatch_size = 'ten'",
    "section not a table": "compressor = 5",
    "bad fsync": "fsync = 'sometimes'",
    "limit out of range": "[limits]\nmax_depth = 100000",
    "bad sql timeout": "[sql]\ntimeout_seconds = -3",
    "prices not a table": "prices = 3",
}


def all_commands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sorted(sub.choices)  # type: ignore[attr-defined]


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    for key in list(__import__("os").environ):
        if key.startswith("TIERMEM_"):
            monkeypatch.delenv(key)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    data = tmp_path / "data"
    settings = resolve_settings(data_dir=data, env={})
    src = write_jsonl(tmp_path / "in.jsonl", [interaction(i, event_id=f"w{i}") for i in range(12)])
    ingest_file(settings, src, progress=False)
    (tmp_path / "a-dir").mkdir()
    names = {
        "data": str(data),
        "file": str(src),
        "missing": str(tmp_path / "no-such.jsonl"),
        "dir": str(tmp_path / "a-dir"),
        "missing_dir": str(tmp_path / "no" / "such" / "dir"),
        "tmp": str(tmp_path),
    }
    yield names


def _fill(args: list[str], names: dict[str, str]) -> list[str]:
    return [a.format(**names) if "{" in a else a for a in args]


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: --help or a usage error
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_clean(argv: list[str], code: int, err: str) -> None:
    assert "Traceback" not in err, (argv, err)
    assert code in (0, 1, 2, 3), (argv, code, err)
    lines = [line for line in err.splitlines() if line.strip()]
    if code not in (0, 3):
        # One line says why (a server may have announced itself on the line before).
        errors = [line for line in lines if "error" in line or "needed" in line or "needs" in line]
        assert len(errors) == 1 and errors[0] == lines[-1] and len(lines) <= 2, (argv, err)
    assert not any("unexpected error" in line for line in lines), (argv, err)


def test_every_command_is_covered() -> None:
    assert set(all_commands()) == set(MINIMAL)


@pytest.mark.parametrize("args", BAD_ARGS, ids=lambda a: " ".join(a)[:60])
def test_bad_arguments_end_in_one_line(
    world: dict[str, str], capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    argv = ["--data-dir", world["data"], *_fill(args, world)]
    code, _out, err = run(capsys, argv)
    assert code != 0, (argv, err)
    assert_clean(argv, code, err)


@pytest.mark.parametrize("command", sorted(MINIMAL))
def test_every_command_with_a_missing_or_wrong_data_root(
    world: dict[str, str], capsys: pytest.CaptureFixture[str], command: str
) -> None:
    args = _fill([command, *MINIMAL[command]], world)
    tmp = Path(world["tmp"])
    for root in (
        tmp / "mistyped-root",
        Path(world["file"]),
        Path(world["file"]) / "below-a-file",
        Path("/sys/tiermem-no"),
    ):
        if command in LONG_RUNNING and root == tmp / "mistyped-root":
            continue  # these create their data root and then serve
        argv = ["--data-dir", str(root), *args]
        code, out, err = run(capsys, argv)
        assert_clean(argv, code, err)
        if root == tmp / "mistyped-root":
            reads = command not in ("ingest", "append", "demo", "mcp", "chat", "schedule", "bench", "serve")
            if reads:
                assert code == 1 and "does not exist" in err, (argv, err)
                assert not root.exists(), "a read command must not create the data root"
            else:
                assert code in (0, 1) and root.exists(), (argv, err)
        elif command not in ("bench", "schedule"):  # bench has a root of its own; schedule --list only looks
            assert code in (1, 2), (argv, out, err)


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_every_command_with_a_bad_config(
    world: dict[str, str], capsys: pytest.CaptureFixture[str], case: str
) -> None:
    tmp = Path(world["tmp"])
    content = BAD_CONFIGS[case]
    if content is None:
        config = tmp / "no-such.toml"
    elif content == "{dir}":
        config = Path(world["dir"])
    else:
        config = tmp / "bad.toml"
        config.write_bytes(content if isinstance(content, bytes) else content.encode())
    for command in sorted(MINIMAL):
        argv = [
            "--data-dir",
            world["data"],
            "--config",
            str(config),
            *_fill([command, *MINIMAL[command]], world),
        ]
        code, _out, err = run(capsys, argv)
        assert code == 2 and "error" in err, (argv, err)
        assert_clean(argv, code, err)


def test_read_commands_still_run_on_a_good_root(
    world: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    for command in sorted(set(MINIMAL) - LONG_RUNNING - {"ingest", "append", "forget"}):
        argv = ["--data-dir", world["data"], *_fill([command, *MINIMAL[command]], world)]
        code, _out, err = run(capsys, argv)
        assert code == 0, (argv, err)
