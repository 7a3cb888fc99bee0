"""Worth the tokens: topics detected at write time, topic filters that keep untagged memories,
ideas saved with tags, a scope and a summary beside the original, and recall_memory within
its token budget."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tiermem import Memory
from tiermem.eventlog import EventLog
from tiermem.topics import detect_topic


@pytest.fixture
def mem(tmp_path: Path) -> Memory:
    with Memory.open(tmp_path / "data", env={}) as m:
        yield m


@pytest.mark.parametrize(
    ("text", "topic"),
    [
        ("I bought a train ticket to Oslo for the holiday", "travel"),
        ("The deploy branch is main and tests run in CI", "tech"),
        ("My daughter and my husband baked a cake", "family"),  # family 2, food 2: the first listed wins
        ("Nothing to see here", None),
        ("tests and bread", "food"),  # "tests" and its singular are both tech words: one hit, then the tie
    ],
)
def test_the_topic_is_the_keyword_class_mentioned_most(text: str, topic: str | None) -> None:
    assert detect_topic(text) == topic


def _append_internal(mem: Memory, record: dict[str, Any]) -> None:
    """Episodes are the compressor's events: callers cannot send them through `Memory.append`,
    so the test writes them as the compressor does."""
    with EventLog(mem.settings) as log:
        log.append(record)
    mem.refresh()


def test_turns_facts_and_ideas_get_a_topic_when_written(mem: Memory) -> None:
    agent = mem.agent("helper", user="ines")
    turn = agent.record_turn("ines", "My flight to Lisbon leaves from the airport at six", "Noted.")
    fact = agent.facts.set("favourite_food", "pasta with a glass of wine")
    idea = agent.call_tool("memory_idea_save", {"content": "Ines gets anxious and stressed before exams"})
    conn = agent.runtime.conn
    assert (
        conn.execute("SELECT topic FROM wm_items WHERE event_id=?", (turn.event_id,)).fetchone()[0]
        == "travel"
    )
    assert conn.execute("SELECT topic FROM facts WHERE fact_id=?", (fact.fact_id,)).fetchone()[0] == "food"
    assert idea["topic"] == "feelings"
    # The idea's topic is in the log too: the knowledge view shows it.
    rows = mem.sql(f"SELECT topic FROM knowledge WHERE fact_id = '{idea['fact_id']}'").to_pylist()
    assert rows == [{"topic": "feelings"}]


def test_a_topic_filter_keeps_untagged_memories(mem: Memory) -> None:
    agent = mem.agent("helper")
    for i in range(3):
        agent.call_tool(
            "memory_idea_save",
            {"content": f"Release {i} of the billing service ships on fridays", "topic": "releases"},
        )
    untagged = agent.runtime.add_knowledge("The billing service owner is Kai")
    conn = agent.runtime.conn
    conn.execute("UPDATE facts SET topic = NULL WHERE fact_id = ?", (untagged,))  # a memory with no topic
    conn.commit()
    other = agent.call_tool(
        "memory_idea_save", {"content": "Billing service dashboards live in grafana", "topic": "dashboards"}
    )
    found = agent.call_tool("memory_idea_recall", {"query": "billing service", "topic": "releases"})[
        "results"
    ]
    ids = {r["fact_id"] for r in found}
    assert untagged in ids and other["fact_id"] not in ids and len(ids) == 4
    listed = {i["fact_id"] for i in agent.call_tool("memory_idea_list", {"topic": "releases"})["ideas"]}
    assert untagged in listed and other["fact_id"] not in listed


def test_idea_save_takes_tags_and_scope_and_keeps_a_summary_beside_a_long_original(mem: Memory) -> None:
    agent = mem.agent("planner", project_id="apollo")
    long_text = "The launch checklist is owned by the release team. " + " ".join(
        f"Step {i} verifies subsystem {i} and records the result in the launch log." for i in range(40)
    )
    saved = agent.call_tool(
        "memory_idea_save", {"content": long_text, "tags": ["launch", "process"], "scope": "project"}
    )
    assert (
        saved["action"] == "created"
        and saved["scope"] == "project"
        and saved["tags"] == ["launch", "process"]
    )
    summary = saved["summary"]
    assert summary.startswith("The launch checklist is owned by the release team.")
    assert len(summary) < len(long_text) // 3
    row = mem.sql(
        f"SELECT scope, content, original FROM knowledge WHERE fact_id = '{saved['fact_id']}'"
    ).to_pylist()[0]
    assert (row["scope"], row["content"], row["original"]) == ("project", summary, long_text)
    hot = agent.runtime.conn.execute(
        "SELECT scope, content, original FROM facts WHERE fact_id=?", (saved["fact_id"],)
    ).fetchone()
    assert tuple(hot) == ("project", summary, long_text)
    # Another agent of the project sees it; a short idea is stored as it is, with no original.
    peer = mem.agent("builder", project_id="apollo")
    assert saved["fact_id"] in {i["fact_id"] for i in peer.call_tool("memory_idea_list", {})["ideas"]}
    short = agent.call_tool("memory_idea_save", {"content": "Kai reviews every launch"})
    assert "summary" not in short and short["scope"] == "agent"
    # While serving a user, a shared scope asked for is narrowed to the agent's own.
    served = mem.agent("planner", project_id="apollo", user="ines")
    narrowed = served.call_tool(
        "memory_idea_save", {"content": "Ines prefers morning launches", "scope": "project"}
    )
    assert narrowed["scope"] == "agent" and "note" in narrowed


def _long_episode(n: int) -> dict[str, object]:
    return {
        "type": "episode",
        "agent_id": "keeper",
        "name": f"Harbour night {n}",
        "summary": f"Night {n} at the harbour: the keeper and the fishermen mended nets. " * 4,
        "start_ts": f"2026-02-{n + 10:02d}T20:00:00Z",
        "end_ts": f"2026-02-{n + 10:02d}T23:00:00Z",
        "importance": 6,
        "source_event_ids": [f"src-{n}"],
        "participants": [],
        "key_quotes": [
            {
                "text": f"The nets at the harbour tore again on night {n}, said the keeper.",
                "event_id": f"q{n}-{k}",
            }
            for k in range(4)
        ],
    }


@pytest.mark.parametrize("budget", [150, 300, 500])
def test_recall_memory_stays_within_its_token_budget_and_never_cuts_an_item(
    tmp_path: Path, budget: int
) -> None:
    import orjson

    from tiermem.tokens import count_tokens

    with Memory.open(tmp_path / "data", env={}, runtime={"recall_budget_tokens": budget}) as mem:
        for n in range(6):
            _append_internal(mem, _long_episode(n))
        agent = mem.agent("keeper")
        out = agent.call_tool("recall_memory", {"query": "harbour nets keeper"})
        assert count_tokens(orjson.dumps(out).decode()) <= budget
        stored = {f"Harbour night {n}": _long_episode(n)["summary"] for n in range(6)}
        for m in out["memories"]:
            assert m["summary"] == stored[m["name"]]  # whole, never half
            assert m["name"] in out["text"] and m["summary"] in out["text"]
        for t in out["turns"]:
            assert t["line"] in out["text"]
        assert out["memories"] or out["turns"]
        recorded = agent.runtime.conn.execute("SELECT tokens FROM retrievals").fetchone()[0]
        assert recorded <= budget
