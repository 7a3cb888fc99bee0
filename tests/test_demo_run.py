"""`tiermem demo` end to end on a temporary data root (a real subprocess, offline)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
import pytest
from helpers_scheduler import clean_env, tiermem_cmd
from tiermem.runtime.context import PROMPT_ORDER

from tiermem.app.demo_story import STORY


def _demo(data: Path) -> dict:
    proc = subprocess.run(
        tiermem_cmd(data, "demo", "--json", "--per-day", "100"),
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(),  # no ANTHROPIC_API_KEY: the offline path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return orjson.loads(proc.stdout)


def _count(data: Path, sql: str) -> int:
    proc = subprocess.run(
        tiermem_cmd(data, "sql", "--json", sql), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return int(next(iter(orjson.loads(proc.stdout)[0].values())))


@pytest.mark.slow
def test_demo_tells_the_whole_story_offline_and_reruns_idempotently(tmp_path: Path) -> None:
    data = tmp_path / "data"
    out = _demo(data)
    assert out["path"] == "offline"
    assert out["ingest"]["accepted"] == out["records"] == 5 * 100
    story = out["story"]
    assert story["turns_recorded"] == sum(len(s.turns) for s in STORY)
    # Every session ended through the runtime and was processed inline (no scheduler runs).
    assert [s["session_end_path"] for s in story["sessions"]] == ["inline"] * len(STORY)
    assert all(s["gap_fill"] for s in story["sessions"])
    assert any(s["compression"].get("episodes", 0) > 0 for s in story["sessions"])
    assert set(story["paths"].values()) == {"offline"}
    assert story["evolve"]["decided"] > 0
    assert story["report_files"] and all(Path(f).exists() for f in story["report_files"])
    assert story["charts"] and all(Path(f).suffix == ".png" and Path(f).exists() for f in story["charts"])
    # The SQL part saw every story session.
    sessions = next(
        rows for title, rows in story["queries"].items() if title.startswith("the story in the log")
    )
    assert sum(r["turns"] for r in sessions) == story["turns_recorded"]
    # Today's contexts: tiers in prompt order, token costs that add up, the participant's relationship.
    for ctx in story["contexts"]:
        names = [s["name"] for s in ctx["sections"]]
        assert names == [n for n in PROMPT_ORDER if n in names]
        assert sum(s["tokens"] for s in ctx["sections"]) == ctx["total_tokens"] <= ctx["cap"]
        assert {"base", "recent", "instructions"} <= set(names)
    # recall_memory found the story's own episodes, in the first person.
    alice, mira = story["recalls"]
    assert any("4471" in str(m) for m in alice["memories"])
    assert alice["text"].startswith("I remember")
    assert any("mira" in m["participants"] for m in mira["memories"])

    turns_before = _count(data, "SELECT count(*) FROM interactions")
    episodes_before = _count(data, "SELECT count(*) FROM episodes")
    again = _demo(data)
    assert again["ingest"]["accepted"] == 0 and again["ingest"]["duplicates"] == out["records"]
    assert _count(data, "SELECT count(*) FROM interactions") == turns_before
    assert _count(data, "SELECT count(*) FROM episodes") == episodes_before
