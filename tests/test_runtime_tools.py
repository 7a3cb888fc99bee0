"""Memory tools: specs, handlers, validation, retrieval events and recall counts, idea dedup."""

from __future__ import annotations

import pytest
from helpers_runtime import append, episode
from tiermem.runtime.memory import open_memory
from tiermem.runtime.projector import project
from tiermem.runtime.tools import RECALL_MEMORY_DESCRIPTION, call_tool, tool_specs

from tiermem.errors import NotFoundError, ValidationError
from tiermem.eventlog import EventLog
from tiermem.settings import Settings

NAMES = {
    "recall_memory",
    "memory_recall",
    "memory_fact_store",
    "memory_fact_recall",
    "memory_fact_list",
    "memory_idea_save",
    "memory_idea_recall",
    "memory_idea_list",
    "memory_write",
}


def test_specs_are_anthropic_tool_format() -> None:
    specs = tool_specs()
    assert {s["name"] for s in specs} == NAMES
    for spec in specs:
        assert set(spec) == {"name", "description", "input_schema"}
        assert spec["input_schema"]["type"] == "object"
        assert "agent_id" not in spec["input_schema"]["properties"]
    recall = next(s for s in specs if s["name"] == "recall_memory")
    assert recall["description"] == RECALL_MEMORY_DESCRIPTION
    assert recall["description"].startswith("Search your own memories")
    assert recall["input_schema"]["required"] == ["query"]


def test_bad_arguments_raise_validation_error(settings: Settings) -> None:
    with open_memory(settings, "a") as m:
        with pytest.raises(ValidationError) as exc:
            call_tool(m, "recall_memory", {})
        assert exc.value.field == "query"
        with pytest.raises(ValidationError):
            call_tool(m, "recall_memory", {"query": 3})
        with pytest.raises(ValidationError):
            call_tool(m, "memory_fact_store", {"key": "k", "value": "v", "agent_id": "b"})
        with pytest.raises(ValidationError):
            call_tool(m, "memory_fact_store", {"key": "k", "value": "v", "scope": "galaxy"})
        with pytest.raises(ValidationError):
            call_tool(m, "memory_write", {"action": "update", "layer": "L1", "content": "x"})
        with pytest.raises(ValidationError):
            call_tool(m, "no_such_tool", {})


def test_recall_memory_returns_top_three_in_first_person_and_is_recorded(settings: Settings) -> None:
    append(
        settings,
        *[
            episode(
                "npc",
                f"Night watch {i}",
                f"I kept watch over the traveller through night {i}",
                participants=["mira"] if i % 2 else ["tom"],
                key_quotes=[{"text": f"I'll be here, night {i}", "event_id": f"e{i}"}],
                emotional_context="tender",
                importance=5 + i % 5,
            )
            for i in range(6)
        ],
    )
    project(settings)
    with open_memory(settings, "npc", user="mira") as m:
        out = call_tool(m, "recall_memory", {"query": "night watch traveller"})
        assert len(out["memories"]) == 3
        # Read as Mira: Tom's nights are his, whatever the query.
        assert all(e["participants"] == ["mira"] for e in out["memories"])
        assert out["text"].startswith("I remember")
        first = out["memories"][0]
        assert first["key_quotes"] and first["emotional_context"] == "tender" and first["when"]
        only_mira = call_tool(m, "recall_memory", {"query": "night watch", "participant": "Mira"})
        assert only_mira["memories"] and all("mira" in e["participants"] for e in only_mira["memories"])
        rows = m.conn.execute("SELECT tool, item_ids, tokens FROM retrievals ORDER BY ts").fetchall()
        assert [r["tool"] for r in rows] == ["recall_memory", "recall_memory"]
        assert rows[0]["tokens"] > 0
        counts = dict(m.conn.execute("SELECT episode_id, recall_count FROM episodes").fetchall())
        for e in out["memories"]:
            assert counts[e["episode_id"]] >= 1
    # The retrieval events are in the log too ("which memories did you use?").
    with EventLog(settings) as log:
        events = [e for _, _, e in log.read("retrievals")]
    assert len(events) == 2 and events[0]["item_ids"] == [e["episode_id"] for e in out["memories"]]


def test_memory_recall_tries_kv_first_then_search(settings: Settings) -> None:
    with open_memory(settings, "a") as m:
        call_tool(m, "memory_fact_store", {"key": "deploy_branch", "value": "main"})
        call_tool(m, "memory_idea_save", {"content": "Deploys happen from the main branch on fridays"})
        kv = call_tool(m, "memory_recall", {"query": "deploy_branch"})
        assert kv["source"] == "kv" and kv["value"] == "main"
        found = call_tool(m, "memory_recall", {"query": "when do deploys happen"})
        assert found["source"] == "search" and "fridays" in found["results"][0]["content"]
        listed = call_tool(m, "memory_fact_list", {})
        assert [f["key"] for f in listed["facts"]] == ["deploy_branch"]


def test_idea_save_dedups_touch_merge_create(settings: Settings) -> None:
    with open_memory(settings, "a") as m:
        first = call_tool(
            m, "memory_idea_save", {"content": "The staging database resets every night", "topic": "infra"}
        )
        assert first["action"] == "created"
        again = call_tool(
            m, "memory_idea_save", {"content": "The staging database resets every night", "topic": "infra"}
        )
        assert again["action"] == "deduplicated" and again["fact_id"] == first["fact_id"]
        close = call_tool(
            m, "memory_idea_save", {"content": "The staging database resets every night at 2am"}
        )
        assert close["action"] == "merged" and close["fact_id"] == first["fact_id"]
        other = call_tool(m, "memory_idea_save", {"content": "Alice owns the billing service"})
        assert other["action"] == "created" and other["fact_id"] != first["fact_id"]
        ideas = call_tool(m, "memory_idea_list", {})["ideas"]
        assert len(ideas) == 2
        assert "2am" in next(i for i in ideas if i["fact_id"] == first["fact_id"])["content"]
        infra = call_tool(m, "memory_idea_recall", {"query": "staging database", "topic": "infra"})
        assert infra["results"][0]["fact_id"] == first["fact_id"]


def test_memory_write_layers(settings: Settings) -> None:
    with open_memory(settings, "a") as m:
        call_tool(m, "memory_write", {"action": "add", "layer": "L0", "content": "Name: Ada."})
        call_tool(m, "memory_write", {"action": "add", "layer": "L0", "content": "Timezone: UTC."})
        assert m.identity() == "Name: Ada.\nTimezone: UTC."
        call_tool(m, "memory_write", {"action": "remove", "layer": "L0", "content": "Timezone: UTC."})
        assert m.identity() == "Name: Ada."
        call_tool(m, "memory_write", {"action": "update", "layer": "L0", "content": "Name: Ada Lovelace."})
        assert m.identity() == "Name: Ada Lovelace."
        added = call_tool(
            m,
            "memory_write",
            {"action": "add", "layer": "L1", "content": "User prefers tea", "tags": ["preference"]},
        )
        fid = added["id"]
        call_tool(
            m,
            "memory_write",
            {"action": "update", "layer": "L1", "content": "User prefers green tea", "target_id": fid},
        )
        row = m.conn.execute("SELECT content, status, category FROM facts WHERE fact_id=?", (fid,)).fetchone()
        assert tuple(row) == ("User prefers green tea", "active", "preference")
        call_tool(m, "memory_write", {"action": "remove", "layer": "L1", "content": "", "target_id": fid})
        assert m.conn.execute("SELECT status FROM facts WHERE fact_id=?", (fid,)).fetchone()[0] == "inactive"
        assert call_tool(m, "memory_idea_recall", {"query": "green tea"})["results"] == []
        with pytest.raises(NotFoundError):
            call_tool(m, "memory_write", {"action": "remove", "layer": "L1", "content": "", "target_id": fid})


def test_recall_memory_also_returns_the_dated_turns_with_their_ids(settings: Settings) -> None:
    append(
        settings,
        episode(
            "npc",
            "The kite",
            "Mira and the keeper flew a kite on the hill",
            participants=["mira"],
            start_ts="2023-05-08T13:56:00Z",
            end_ts="2023-05-08T14:30:00Z",
            key_quotes=[
                {
                    "text": "Yesterday the red kite broke on the hill.",
                    "event_id": "turn-1",
                    "speaker": "Mira",
                },
                {"text": "We can mend it together.", "event_id": "turn-2", "speaker": "npc"},
            ],
        ),
    )
    project(settings)
    with open_memory(settings, "npc", user="mira") as m:
        out = call_tool(m, "recall_memory", {"query": "when did the kite break?"})
        cited = {i for t in out["turns"] for i in t["event_ids"]}
        assert "turn-1" in cited
        kite = next(t["line"] for t in out["turns"] if "turn-1" in t["event_ids"])
        assert "red kite broke" in kite
        # The relative date is resolved against the day it was said, and the text shows it.
        assert "7 May 2023" in out["text"] and "red kite broke" in out["text"]
