"""The projector and hot store: rebuild to the same digest, idempotence, erasure, many processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers_runtime import append, episode, interaction
from tiermem.runtime import hotstore
from tiermem.runtime.context import assemble_context
from tiermem.runtime.episode_search import search_episodes
from tiermem.runtime.memory import open_memory, record_turn
from tiermem.runtime.projector import content_digest, project, rebuild
from tiermem.runtime.tools import call_tool

from tiermem.settings import Settings


def _populate(settings: Settings) -> None:
    with open_memory(settings, "bot", agent_type="support", project_id="web", user="alice") as m:
        for i in range(6):
            record_turn(m, f"alice question {i} about the refund", f"answer {i}")
        call_tool(m, "memory_fact_store", {"key": "tz", "value": "Europe/Paris"})
        call_tool(m, "memory_fact_store", {"key": "branch", "value": "main", "scope": "project"})
        call_tool(m, "memory_idea_save", {"content": "Alice prefers email over phone", "topic": "contact"})
        call_tool(
            m, "memory_write", {"action": "add", "layer": "L0", "content": "I am a patient support agent."}
        )
    append(
        settings,
        episode("bot", "The refund saga", "Alice fought for her refund", participants=["alice"]),
        {
            "type": "relationship_updated",
            "agent_id": "bot",
            "participant": "alice",
            "summary": "Warm, direct.",
        },
        {
            "type": "memory_transition",
            "agent_id": "bot",
            "from_level": "task",
            "to_level": "project",
            "summary": "done",
        },
        {
            "type": "knowledge_decided",
            "agent_id": "bot",
            "decision": "created",
            "fact_id": "k1",
            "content": "Refunds take 5 days",
            "status": "active",
        },
    )
    project(settings)
    with open_memory(settings, "bot", user="alice") as m:
        call_tool(m, "recall_memory", {"query": "refund"})


def test_rebuild_gives_the_identical_digest(settings: Settings) -> None:
    _populate(settings)
    project(settings)
    before = content_digest(settings)
    counts_before = hotstore.table_counts(hotstore.open_hot_store(settings))
    info = rebuild(settings)
    assert info.digest == before
    assert info.counts == counts_before
    assert info.counts["episodes"] == 1 and info.counts["wm_items"] >= 8
    # Projecting again changes nothing.
    project(settings)
    assert content_digest(settings) == before


def test_recall_count_survives_rebuild(settings: Settings) -> None:
    _populate(settings)
    conn = hotstore.open_hot_store(settings)
    assert conn.execute("SELECT recall_count FROM episodes").fetchone()[0] == 1
    rebuild(settings)
    conn = hotstore.open_hot_store(settings)
    assert conn.execute("SELECT recall_count FROM episodes").fetchone()[0] == 1


def test_latest_decision_wins_and_inactive_facts_are_never_returned(settings: Settings) -> None:
    base = {"type": "knowledge_decided", "agent_id": "a", "fact_id": "f1", "category": "user"}
    append(
        settings,
        {
            **base,
            "decision": "created",
            "content": "Bob likes jazz",
            "status": "active",
            "ts": "2026-03-01T00:00:00Z",
        },
        {
            **base,
            "decision": "deactivated",
            "content": "Bob likes jazz",
            "status": "inactive",
            "ts": "2026-03-02T00:00:00Z",
        },
    )
    project(settings)
    with open_memory(settings, "a") as m:
        assert call_tool(m, "memory_idea_recall", {"query": "jazz"})["results"] == []
        assert "jazz" not in assemble_context(m, query="jazz").system_prompt
    # An older decision arriving later (another stream order) does not win.
    append(
        settings,
        {
            **base,
            "decision": "created",
            "content": "Bob likes jazz",
            "status": "active",
            "ts": "2026-02-01T00:00:00Z",
            "event_id": "old-one",
        },
    )
    project(settings)
    conn = hotstore.open_hot_store(settings)
    assert conn.execute("SELECT status FROM facts WHERE fact_id='f1'").fetchone()[0] == "inactive"


def _all_text(settings: Settings) -> bytes:
    data = b""
    for p in settings.hot_dir.iterdir():
        data += p.read_bytes()
    return data


def test_user_erasure_reaches_every_projection_and_blocks_re_adding(settings: Settings) -> None:
    ids = append(
        settings,
        interaction("bot", "my secret is zanzibar42", user="carol"),
        interaction("bot", "hello from dave", user="dave"),
        episode("bot", "Carol's secret", "carol said zanzibar42", participants=["carol"]),
        {
            "type": "relationship_updated",
            "agent_id": "bot",
            "participant": "carol",
            "summary": "knows zanzibar42",
        },
    )
    project(settings)
    with open_memory(settings, "bot", user="carol") as m:
        assert search_episodes(m.conn, m.principal, "zanzibar42")
    with open_memory(settings, "bot", user="dave") as m:
        assert search_episodes(m.conn, m.principal, "zanzibar42") == []  # carol's, not dave's
    append(
        settings, {"type": "erasure", "target_kind": "user", "target": "carol", "erased_event_ids": [ids[0]]}
    )
    info = project(settings)
    assert info.erasures == 1
    conn = hotstore.open_hot_store(settings)
    assert conn.execute("SELECT count(*) FROM wm_items WHERE user='carol'").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM episodes").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM relationships").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM wm_items WHERE user='dave'").fetchone()[0] == 1
    conn.close()
    assert b"zanzibar42" not in _all_text(settings)
    # Re-projecting or rebuilding from the same log never brings it back.
    digest = content_digest(settings)
    assert rebuild(settings).digest == digest
    with open_memory(settings, "bot", user="carol") as m:
        assert search_episodes(m.conn, m.principal, "zanzibar42") == []
        ctx = assemble_context(m, query="zanzibar42")
        assert all("zanzibar42" not in s.text for s in ctx.sections)


def test_agent_and_event_erasure(settings: Settings) -> None:
    ids = append(
        settings,
        interaction("gone", "bye"),
        interaction("stay", "keep this"),
        interaction("stay", "drop this one"),
        {"type": "fact_set", "agent_id": "gone", "key": "k", "value": "v"},
    )
    project(settings)
    append(
        settings,
        {"type": "erasure", "target_kind": "agent", "target": "gone"},
        {"type": "erasure", "target_kind": "event", "target": ids[2]},
    )
    project(settings)
    conn = hotstore.open_hot_store(settings)
    assert [tuple(r) for r in conn.execute("SELECT user_message FROM wm_items")] == [("keep this",)]
    assert conn.execute("SELECT count(*) FROM facts").fetchone()[0] == 0
    # A later direct write of a tombstoned event id is refused too.
    with open_memory(settings, "stay") as m:
        m.append([interaction("stay", "drop this one", event_id=ids[2])])
        assert m.conn.execute("SELECT count(*) FROM wm_items").fetchone()[0] == 1


WRITER = """
import sys
from tiermem.settings import resolve_settings
from tiermem.runtime.memory import open_memory, record_turn
from tiermem.runtime.projector import project
from tiermem.runtime.context import assemble_context
s = resolve_settings(data_dir=sys.argv[1], env={})
agent = sys.argv[2]
with open_memory(s, agent) as m:
    for i in range(40):
        record_turn(m, f"{agent} message {i}", "reply")
        if i % 10 == 0:
            project(s)
        assemble_context(m, query="message")
"""


@pytest.mark.slow
def test_many_processes_read_and_write_at_once(settings: Settings, tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(settings.data_dir), f"agent{i}"], stderr=subprocess.PIPE
        )
        for i in range(4)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    project(settings)
    conn = hotstore.open_hot_store(settings)
    rows = dict(conn.execute("SELECT agent_id, count(*) FROM wm_items GROUP BY agent_id").fetchall())
    assert rows == {f"agent{i}": 40 for i in range(4)}
    digest = content_digest(settings)
    assert rebuild(settings).digest == digest


def test_projection_survives_sealing_and_rebuilds_from_parquet(settings: Settings) -> None:
    from tiermem.log.seal import seal

    old = [
        interaction("bot", f"old turn {i}", ts=f"2026-01-0{1 + i % 3}T10:00:0{i}Z", user="zoe")
        for i in range(6)
    ]
    append(settings, *old, episode("bot", "Old times", "zoe and I met", participants=["zoe"]))
    project(settings)
    before = content_digest(settings)
    seal(settings)
    assert list(settings.log_dir.glob("interactions/date=2026-01-01/*.parquet"))
    info = project(settings)
    assert info.by_type == {}  # nothing new: sealed segments keep their positions
    assert content_digest(settings) == before
    assert rebuild(settings).digest == before  # rebuilt from Parquet
    append(settings, interaction("bot", "a new turn", user="zoe"))
    assert project(settings).by_type == {"interaction": 1}
