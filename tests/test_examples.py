"""The scripts in examples/ run offline, as a user would run them, and do what they say."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import anthropic
import httpx2
import orjson
import pytest

from tiermem import Memory

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _offline_env() -> dict[str, str]:
    """The caller's environment without an API key or tiermem settings: the offline path."""
    return {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY" and not k.startswith("TIERMEM_")}


def _run(script: str, *args: str, cwd: Path) -> str:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=cwd,
        env=_offline_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_there_are_at_least_three_examples() -> None:
    assert {"agent_loop.py", "analyst.py", "chat_import.py"} <= {p.name for p in EXAMPLES.glob("*.py")}


# ---------------------------------------------------------------- the agent loop


def test_agent_loop_script_runs_offline_and_logs_enriched_turns(tmp_path: Path) -> None:
    data = tmp_path / "data"
    out = _run("agent_loop.py", "--data-dir", str(data), cwd=tmp_path)
    assert "scripted stand-in" in out
    assert "[tool] memory_fact_store" in out and "[tool] memory_fact_recall" in out
    assert '"value": "14A"' in out  # the second turn recalled what the first stored
    assert "logged tool uses: 3" in out
    with Memory.open(data, env={}) as mem:
        rows = mem.sql("SELECT user, model, tools_used, usage FROM interactions ORDER BY ts").to_pylist()
        assert [r["tools_used"] for r in rows] == [
            ["memory_fact_store"],
            ["memory_fact_recall"],
            ["memory_recall"],
        ]
        assert all(r["user"] == "alice" and r["model"] == "scripted-stand-in" for r in rows)
        assert all(r["usage"]["tool_calls"] == 1 for r in rows)
        assert mem.agent("travel-bot", user="alice").facts["preferred_seat"] == "14A"  # said by alice: hers
        assert mem.agent("travel-bot").facts.get("preferred_seat") is None


def test_agent_loop_over_an_injected_client(tmp_path: Path) -> None:
    """The example's loop, driven over the real SDK by this test's own mock Messages API."""
    loop = _load("agent_loop")
    requests: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        requests.append(body)
        if len(requests) == 1:
            content: list[dict[str, Any]] = [
                {"type": "text", "text": "Let me note that."},
                {
                    "type": "tool_use",
                    "id": "tu_1",
                    "name": "memory_fact_store",
                    "input": {"key": "home_airport", "value": "LIS"},
                },
            ]
            stop = "tool_use"
        else:
            content, stop = [{"type": "text", "text": "Noted: you fly from Lisbon."}], "end_turn"
        return httpx2.Response(
            200,
            json={
                "id": f"msg_{len(requests)}",
                "type": "message",
                "role": "assistant",
                "model": "claude-test-1",
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {"input_tokens": 100, "output_tokens": 10, "cache_read_input_tokens": 60},
            },
        )

    client = anthropic.Anthropic(
        api_key="test", http_client=httpx2.Client(transport=httpx2.MockTransport(handler)), max_retries=0
    )
    with Memory.open(tmp_path / "data", env={}) as mem:
        agent = mem.agent("travel-bot")
        agent.set_identity("I am a travel assistant.")
        reply = loop.run_turn(agent, "alice", "I always fly from Lisbon.", client, "claude-test-1")
        assert reply == "Noted: you fly from Lisbon."
        first, second = requests
        assert {t["name"] for t in first["tools"]} >= {"recall_memory", "memory_fact_store"}
        assert "I am a travel assistant." in first["system"][0]["text"]
        assert first["messages"][0]["content"].endswith("I always fly from Lisbon.")
        assert second["messages"][1]["content"][0] == {"type": "text", "text": "Let me note that."}
        result = second["messages"][2]["content"][0]
        assert result["tool_use_id"] == "tu_1" and result["is_error"] is False
        assert json.loads(result["content"])["stored"] is True
        assert mem.agent("travel-bot", user="alice").facts["home_airport"] == "LIS"  # alice said it: hers
        assert agent.facts.get("home_airport") is None
        (turn,) = mem.sql("SELECT * FROM interactions").to_pylist()
        assert turn["model"] == "claude-test-1" and turn["tools_used"] == ["memory_fact_store"]
        assert turn["usage"]["input_tokens"] == 200 and turn["usage"]["cache_read_tokens"] == 120
        assert turn["user"] == "alice" and turn["agent_response"] == reply


# ---------------------------------------------------------------- the analyst


def test_analyst_script_writes_a_chart_from_sql_and_polars(tmp_path: Path) -> None:
    data = tmp_path / "data"
    chart = tmp_path / "out" / "cost.png"
    out = _run("analyst.py", "--data-dir", str(data), "--out", str(chart), cwd=tmp_path)
    assert "loaded a generated week of" in out
    assert "claude-sonnet-5" in out and "estimated cost $" in out
    assert f"chart: {chart}" in out
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 5_000
    # on a root that already has turns, it analyses them and loads nothing
    again = _run("analyst.py", "--data-dir", str(data), "--out", str(chart), cwd=tmp_path)
    assert "loaded" not in again
    turns = int(out.split(" turns over ")[0].rsplit("\n", 1)[-1])
    with Memory.open(data, env={}) as mem:
        assert mem.sql("SELECT count(*) AS n FROM interactions")["n"][0].as_py() == turns


# ---------------------------------------------------------------- the chat import


def test_chat_import_script_recalls_what_was_said(tmp_path: Path) -> None:
    data = tmp_path / "data"
    out = _run("chat_import.py", "--data-dir", str(data), cwd=tmp_path)
    assert "converted 26 exchanges of travel-bot" in out
    assert "ingested: 26 new" in out
    lisbon, passport = out.split("recall ")[1:3]
    assert "(with alice)" in lisbon and "window seat" in lisbon and "passport" not in lisbon
    assert "(with bob)" in passport and "C4X9912" in passport
    again = _run(
        "chat_import.py",
        "--data-dir",
        str(data),
        "--ask",
        "window seat",
        "--participant",
        "bob",
        cwd=tmp_path,
    )
    assert "ingested: 0 new, 26 already in the log" in again  # re-importing adds nothing
    heading, episodes = again.split("recall ")[1].split("\n", 1)
    assert "(with bob)" in heading
    assert "alice" not in episodes and "aisle seat" not in episodes  # alice's memories are not bob's


def test_chat_export_conversion(tmp_path: Path) -> None:
    chat = _load("chat_import")
    export = {
        "format": "tiermem-chat-export/1",
        "agent": "bot",
        "conversations": [
            {
                "id": "c1",
                "participant": "ann",
                "messages": [
                    {"role": "assistant", "text": "Welcome!"},  # nothing asked yet: not a turn
                    {"role": "user", "ts": "2026-01-02T10:00:00Z", "text": "hello"},
                    {"role": "user", "ts": "2026-01-02T10:00:05Z", "text": "are you there?"},
                    {"role": "assistant", "text": "yes"},
                    {"role": "assistant", "text": "how can I help?"},
                    {"role": "user", "ts": "2026-01-02T10:01:00Z", "text": "bye"},
                ],
            }
        ],
    }
    turns = list(chat.to_interactions(export))
    assert [(t["ts"], t["user_message"], t["agent_response"]) for t in turns] == [
        ("2026-01-02T10:00:00Z", "hello\nare you there?", "yes\nhow can I help?"),
        ("2026-01-02T10:01:00Z", "bye", ""),
    ]
    assert all(t["session_id"] == "c1" and t["user"] == "ann" and t["agent_id"] == "bot" for t in turns)
    bad = tmp_path / "bad.json"
    bad.write_bytes(orjson.dumps({"conversations": []}))
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "chat_import.py"), str(bad), "--data-dir", str(tmp_path / "d")],
        env=_offline_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "tiermem-chat-export/1" in proc.stderr


@pytest.mark.parametrize("script", ["agent_loop.py", "analyst.py", "chat_import.py"])
def test_examples_explain_themselves(script: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), "--help"], capture_output=True, text=True, check=True
    )
    assert "--data-dir" in proc.stdout
