"""The runtime CLI: context, recall, facts, identity, rebuild, chat; --json shapes of docs/runtime.md."""

from __future__ import annotations

import json

import pytest
from helpers_runtime import append, episode, interaction

from tiermem.app.cli import main
from tiermem.settings import Settings


def _run(settings: Settings, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["--data-dir", str(settings.data_dir), *argv])
    return code, capsys.readouterr().out


def _seed(settings: Settings) -> None:
    append(
        settings,
        interaction("bot", "hello, I lost my luggage in Lisbon", "I'm sorry to hear that", user="alice"),
        interaction("bot", "it was a blue suitcase", "noted", user="alice", memory_level="project"),
        episode(
            "bot",
            "Lost luggage in Lisbon",
            "Alice lost her blue suitcase at Lisbon airport",
            participants=["alice"],
            key_quotes=[{"text": "it was a blue suitcase", "event_id": "x"}],
        ),
    )


def test_context_json_shape(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    _seed(settings)
    code, out = _run(
        settings,
        capsys,
        "context",
        "bot",
        "--user",
        "alice",
        "--level",
        "global",
        "--query",
        "luggage",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert {"agent_id", "level", "total_tokens", "sections"} <= set(data)
    assert data["agent_id"] == "bot" and data["level"] == "global"
    for s in data["sections"]:
        assert {"name", "tokens", "text", "item_ids"} <= set(s)
    names = [s["name"] for s in data["sections"]]
    assert names[0] == "base" and names[-1] == "memory_context"
    recent = next(s for s in data["sections"] if s["name"] == "recent")
    assert (
        "Lisbon" in recent["text"] and "blue suitcase" not in recent["text"]
    )  # the project item is filtered out
    assert data["total_tokens"] == sum(s["tokens"] for s in data["sections"])
    code, out = _run(settings, capsys, "context", "bot", "--budget", "120", "--json")
    assert json.loads(out)["total_tokens"] <= 120
    code, out = _run(settings, capsys, "context", "bot", "--user", "alice")
    assert code == 0 and "── recent" in out
    # Without a user only agent-level memory is shown: alice's turns are hers.
    code, out = _run(settings, capsys, "context", "bot", "--query", "luggage lisbon suitcase")
    assert code == 0 and "── recent" not in out and "Lisbon" not in out


def test_recall_json_shape(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    _seed(settings)
    code, out = _run(settings, capsys, "recall", "bot", "lisbon suitcase", "--participant", "alice", "--json")
    assert code == 0
    results = json.loads(out)["results"]
    assert len(results) == 1
    keys = {
        "episode_id",
        "name",
        "summary",
        "key_quotes",
        "participants",
        "start_ts",
        "end_ts",
        "importance",
        "score",
    }
    assert keys <= set(results[0])
    assert results[0]["participants"] == ["alice"]
    code, out = _run(settings, capsys, "recall", "bot", "lisbon", "--participant", "bob", "--json")
    assert json.loads(out)["results"] == []
    code, out = _run(settings, capsys, "recall", "bot", "lisbon", "--user", "alice")
    assert "Lost luggage in Lisbon" in out
    code, out = _run(settings, capsys, "recall", "bot", "lisbon")
    assert "Lost luggage in Lisbon" not in out and "no matching episodes" in out


def test_facts_commands(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(settings, capsys, "facts", "set", "bot", "tz", "UTC", "--json")[0] == 0
    code, out = _run(settings, capsys, "facts", "get", "bot", "tz", "--json")
    assert json.loads(out)["value"] == "UTC"
    code, out = _run(settings, capsys, "facts", "list", "bot", "--json")
    assert [f["key"] for f in json.loads(out)["facts"]] == ["tz"]
    assert _run(settings, capsys, "facts", "remove", "bot", "tz")[0] == 0
    code, _ = _run(settings, capsys, "facts", "get", "bot", "tz")
    assert code == 1  # NotFoundError: a failure (exit 1)
    code, _ = _run(settings, capsys, "facts", "set", "bot", "team", "x", "--scope", "project")
    assert code == 2  # needs --project


def test_identity_commands(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(settings, capsys, "identity", "set", "bot", "I am Bot.", "--json")
    assert code == 0 and json.loads(out)["content"] == "I am Bot."
    code, out = _run(settings, capsys, "identity", "show", "bot")
    assert "I am Bot." in out and "of 1,000 characters" in out
    code = main(["--data-dir", str(settings.data_dir), "identity", "set", "bot", "x" * 1001])
    err = capsys.readouterr().err
    assert code == 2 and "1,000 characters" in err


def test_rebuild_json(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    _seed(settings)
    _run(settings, capsys, "context", "bot", "--json")
    code, out = _run(settings, capsys, "rebuild", "--json")
    data = json.loads(out)
    assert code == 0 and data["counts"]["wm_items"] == 2 and data["counts"]["episodes"] == 1
    code, out2 = _run(settings, capsys, "rebuild", "--json")
    assert json.loads(out2)["digest"] == data["digest"]


def test_chat_without_key_explains_and_fails(
    settings: Settings, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    code = main(["--data-dir", str(settings.data_dir), "chat", "--agent", "bot"])
    assert code != 0
    assert "ANTHROPIC_API_KEY" in capsys.readouterr().err
