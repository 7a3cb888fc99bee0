"""Pinned memory and completed work: key-value facts and identity are never displaced by newer
insights, important episodes are preferred when the retrieval budget is tight, and finished
tasks and projects leave their summary at the level above (a solo task: global)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tiermem import Memory
from tiermem.eventlog import EventLog


@pytest.fixture
def mem(tmp_path: Path) -> Memory:
    with Memory.open(tmp_path / "data", env={}) as m:
        yield m


def _append_internal(mem: Memory, record: dict[str, Any]) -> None:
    """Episodes are the compressor's events: callers cannot send them through `Memory.append`,
    so the test writes them as the compressor does."""
    with EventLog(mem.settings) as log:
        log.append(record)
    mem.refresh()


def test_kv_facts_and_identity_stay_in_context_after_many_newer_insights(mem: Memory) -> None:
    agent = mem.agent("helper", user="ines")
    agent.set_identity("I am Helper, a patient assistant.")
    kv_ids = [agent.facts.set(key, value).fact_id for key, value in (("name", "Ines"), ("city", "Porto"))]
    for i in range(30):
        saved = agent.call_tool(
            "memory_idea_save", {"content": f"Insight {i}: ines mentioned hobby number {i} of {i * 7} kinds"}
        )
        assert saved["action"] == "created"
    ctx = agent.context()
    knowledge = ctx.section("knowledge")
    assert knowledge is not None
    assert set(kv_ids) <= set(knowledge.item_ids)
    assert set(knowledge.item_ids[: len(kv_ids)]) == set(kv_ids)
    assert len(knowledge.item_ids) == mem.settings.runtime.top_knowledge
    assert ctx.section("identity") is not None
    # Under a tight overall cap the insights go before the pinned facts do.
    tight = agent.context(budget=ctx.total_tokens - 200)
    assert tight.section("knowledge") is not None
    assert set(kv_ids) <= set(tight.section("knowledge").item_ids)
    assert any(i not in kv_ids for i in tight.dropped)


def _episode(name: str, summary: str, important: bool, n: int) -> dict[str, object]:
    return {
        "type": "episode",
        "agent_id": "guide",
        "name": name,
        "summary": summary + " More detail. " * 12,
        "start_ts": f"2026-03-0{n}T10:00:00Z",
        "end_ts": f"2026-03-0{n}T11:00:00Z",
        "importance": 9 if important else 4,
        "important": important,
        "source_event_ids": [f"src-{n}"],
        "participants": [],
        "key_quotes": [],
    }


QUERY = "lighthouse keeper storm"


def test_important_episodes_are_preferred_when_the_retrieval_budget_is_tight(mem: Memory) -> None:
    for n in range(1, 4):
        _append_internal(
            mem,
            _episode(
                f"Lighthouse storm night {n}", f"The lighthouse keeper and the storm, part {n}.", False, n
            ),
        )
    _append_internal(mem, _episode("The promise", "The keeper promised to come back.", True, 4))
    agent = mem.agent("guide")
    roomy = agent.context(query=QUERY).section("memory_context")
    assert roomy is not None and len(roomy.item_ids) == 4
    important = next(e.episode_id for e in agent.recall(QUERY, limit=5).episodes if e.name == "The promise")
    assert roomy.item_ids[-1] == important  # the least relevant when there is room for all
    # Room for one episode only: the important one is kept.
    one = max(len(line) for line in roomy.text.splitlines()) // 4 + 12
    tiers = {**mem.settings.runtime.tier_budgets, "memory_context": one}
    with Memory.open(mem.data_dir, env={}, runtime={"tier_budgets": tiers}) as tight_mem:
        tight = tight_mem.agent("guide").context(query=QUERY).section("memory_context")
        assert tight is not None and tight.item_ids == (important,)


def test_task_and_project_completion_write_their_summaries_at_the_level_above(mem: Memory) -> None:
    worker = mem.agent("worker", project_id="chart", task_id="t1", session_id="s")
    worker.record_turn(None, "plan the organisation chart", "planned", memory_level="project")
    worker.record_turn(None, "move box 3 two pixels left", "moved", memory_level="task")
    done = worker.finish_task("I finished drawing the chart's boxes.")
    assert (done.finished, done.level) == ("task", "project")
    recent = worker.context().section("recent")
    assert recent is not None and "I finished drawing the chart's boxes." in recent.text
    assert "plan the organisation chart" in recent.text and "two pixels" not in recent.text
    finished = worker.finish_project("Delivered the organisation chart.")
    assert (finished.finished, finished.level) == ("project", "global")
    top = worker.context().section("recent")
    assert top is not None and "Delivered the organisation chart." in top.text
    assert "I finished drawing" not in top.text and "plan the organisation chart" not in top.text

    # A solo task (no project) returns to the agent's global level, where its summary stays.
    solo = mem.agent("solo", task_id="t9")
    solo.record_turn(None, "tidy the notes", "tidied", memory_level="task")
    alone = solo.finish_task("I tidied the notes.")
    assert (alone.finished, alone.level) == ("task", "global")
    assert "I tidied the notes." in solo.context(level="global").section("recent").text

    # Each completion is one `memory_transition` in the log, with the levels it crossed.
    rows = mem.sql(
        "SELECT agent_id, from_level, to_level, summary, task_id FROM transitions_events"
        " WHERE type = 'memory_transition' ORDER BY ts, event_id"
    ).to_pylist()
    assert [(r["agent_id"], r["from_level"], r["to_level"], r["task_id"]) for r in rows] == [
        ("worker", "task", "project", "t1"),
        ("worker", "project", "global", None),
        ("solo", "task", "global", "t9"),
    ]
