"""The evolve job end to end: real log, real DuckDB views, real CLI."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from datetime import timedelta
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from helpers_evolver import T0, append_all, at, interaction, proposal
from tiermem.evolver.gapfill import process_session_end
from tiermem.evolver.job import run_evolve

from tiermem.app.cli import main
from tiermem.eventlog import EventLog
from tiermem.ids import new_event_id
from tiermem.settings import Settings
from tiermem.sqlviews import open_catalog


def knowledge(settings: Settings, where: str = "true") -> list[dict[str, Any]]:
    con = open_catalog(settings)
    try:
        cur = con.execute(f"SELECT * FROM knowledge WHERE {where} ORDER BY created_at, fact_id")
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()


def knowledge_events(settings: Settings) -> list[dict[str, Any]]:
    log = EventLog(settings)
    try:
        return [ev for _s, _l, ev in log.read("knowledge") if ev["type"] == "knowledge_decided"]
    finally:
        log.close()


def test_preference_then_correction_leaves_only_the_corrected_fact_active(
    settings: Settings, event_log: EventLog
) -> None:
    append_all(
        event_log,
        [
            interaction("Hi! I prefer tea in the morning.", "Noted, tea in the morning.", minute=0),
            interaction("What should I drink?", "Tea, as you like it.", minute=1),
            interaction("No, actually I prefer coffee in the morning.", "Sorry, coffee it is.", minute=2),
        ],
    )
    gap = process_session_end(settings, "agent-1", "s1")
    assert (gap.preferences, gap.corrections) == (1, 1)
    run_evolve(settings)
    rows = knowledge(settings)
    active = [r["content"] for r in rows if r["status"] == "active"]
    inactive = [r for r in rows if r["status"] == "inactive"]
    assert active == ["The user prefers coffee in the morning."]
    assert [r["content"] for r in inactive] == ["The user prefers tea in the morning."]
    assert inactive[0]["decision"] == "deactivated"  # kept for audit, never returned as active


def test_correction_of_a_fact_the_agent_wrote_itself(settings: Settings, event_log: EventLog) -> None:
    # Channel 1: the agent saved a (wrong) fact, decided by the agent, like the runtime does
    # while it talks to alice (so the fact is about her).
    pid = new_event_id(T0)
    append_all(
        event_log,
        [
            proposal(
                "The user's name is Rob",
                origin="agent",
                confidence=1.0,
                event_id=pid,
                key="name",
                participant="alice",
            ),
            {
                "type": "knowledge_decided",
                "ts": at(0.5),
                "agent_id": "agent-1",
                "proposal_id": pid,
                "decision": "created",
                "fact_id": f"fact:{pid}",
                "content": "The user's name is Rob",
                "status": "active",
                "key": "name",
                "participant": "alice",
                "decided_by": "agent",
            },
            interaction("Hello, I'm back.", "Welcome back, Rob!", minute=1, session_id="s2"),
            interaction("No, my name is Bob.", "Sorry Bob!", minute=2, session_id="s2"),
        ],
    )
    process_session_end(settings, "agent-1", "s2")
    run_evolve(settings)
    rows = {r["content"]: r["status"] for r in knowledge(settings)}
    assert rows["The user's name is Rob"] == "inactive"
    assert rows["The user's name is Bob."] == "active"
    assert list(rows.values()).count("active") == 1


def test_near_duplicate_proposals_merge_into_one_fact(settings: Settings, event_log: EventLog) -> None:
    ids = append_all(
        event_log,
        [
            proposal("User prefers green tea", minute=0, source_event_ids=["T1"]),
            proposal("user prefers green tea.", minute=1, source_event_ids=["T2"]),
            proposal("User prefers green tea every day", minute=2, source_event_ids=["T3"]),
        ],
    )
    info = run_evolve(settings)
    assert (info.created, info.touched, info.merged) == (1, 1, 1)
    rows = knowledge(settings)
    assert len(rows) == 1 and rows[0]["status"] == "active"
    assert rows[0]["content"] == "User prefers green tea every day"
    assert set(rows[0]["source_event_ids"]) == {"T1", "T2", "T3", *ids}


def test_contradictory_proposal_supersedes_with_a_note(settings: Settings, event_log: EventLog) -> None:
    append_all(
        event_log,
        [
            proposal("User has 2 cats", minute=0, topic="pets"),
            proposal("User has 3 cats", minute=5, topic="pets"),
        ],
    )
    info = run_evolve(settings)
    assert info.superseded == 1
    rows = {r["content"]: r for r in knowledge(settings)}
    assert rows["User has 2 cats"]["status"] == "inactive"
    new = rows["User has 3 cats"]
    assert new["status"] == "active" and new["previous_content"] == "User has 2 cats"
    assert "2 cats" in new["note"] and "newer wins" in new["note"]


def test_promotion_across_projects_and_archiving_of_stale_facts(
    settings: Settings, event_log: EventLog
) -> None:
    append_all(
        event_log,
        [
            proposal(
                "Run the linter before committing",
                minute=0,
                project_id="p1",
                agent_type="coder",
                scope="project",
            ),
            proposal(
                "Run the linter before committing.",
                minute=1,
                project_id="p2",
                agent_type="coder",
                scope="project",
            ),
            proposal("User mentioned the weather once", minute=2, importance=2),
            proposal("User mentioned a cat video once", minute=3, importance=2),
            proposal("User is allergic to peanuts", minute=4, importance=9),
        ],
    )
    # On the test's own clock, not the machine's: the facts' age at the later run below must not
    # depend on the day the suite runs.
    info = run_evolve(settings, now=T0 + timedelta(minutes=5))
    assert info.promoted == 1 and info.archived == 0
    (promoted,) = knowledge(settings, "decision = 'promoted'")
    assert (
        promoted["scope"] == "agent_type"
        and promoted["agent_type"] == "coder"
        and promoted["project_id"] is None
    )

    # One of the two trivial facts gets recalled: that one stays.
    cat = knowledge(settings, "content LIKE '%cat video%'")[0]["fact_id"]
    append_all(
        event_log,
        [
            {
                "type": "retrieval",
                "ts": at(10),
                "agent_id": "agent-1",
                "tool": "memory_recall",
                "item_ids": [cat],
            }
        ],
    )
    later = run_evolve(settings, now=T0 + timedelta(days=settings.evolver.archive_after_days + 5))
    assert later.archived == 1
    rows = {r["content"]: r for r in knowledge(settings)}
    assert rows["User mentioned the weather once"]["status"] == "archived"
    assert rows["User mentioned a cat video once"]["status"] == "active"
    assert rows["User mentioned a cat video once"]["recall_count"] == 1
    assert rows["User is allergic to peanuts"]["status"] == "active"


def test_rerun_appends_nothing_and_decision_ids_are_deterministic(settings: Settings, tmp_path: Path) -> None:
    records = [
        proposal(f"Memory about subject{i} and detail{i * 7}", minute=i, event_id=f"P{i:04d}")
        for i in range(30)
    ]
    ids_per_root = []
    for root in ("a", "b"):
        s = settings.with_data_dir(tmp_path / root)
        log = EventLog(s)
        append_all(log, [dict(r) for r in records])
        log.close()
        first = run_evolve(s)
        again = run_evolve(s)
        assert first.events_appended == first.decided == 30
        assert again.events_appended == 0 and again.decided == 0
        ids_per_root.append(sorted(ev["event_id"] for ev in knowledge_events(s)))
    assert ids_per_root[0] == ids_per_root[1]


def test_evolve_json_contract(settings: Settings, event_log: EventLog) -> None:
    append_all(
        event_log, [proposal("User likes jazz"), proposal("User lives in Lyon", minute=1, confidence=0.1)]
    )
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["--data-dir", str(settings.data_dir), "evolve", "--json"])
    assert code == 0
    data = json.loads(out.getvalue())
    for key in (
        "decided",
        "created",
        "touched",
        "merged",
        "superseded",
        "pending",
        "promoted",
        "archived",
        "events_appended",
        "active_facts",
        "path",
        "elapsed_s",
    ):
        assert key in data
    assert (data["decided"], data["created"], data["pending"], data["path"]) == (2, 1, 1, "offline")


def _claude_client(handler: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="test", http_client=httpx2.Client(transport=httpx2.MockTransport(handler)), max_retries=0
    )


def test_claude_merge_path_through_the_real_sdk(settings: Settings, event_log: EventLog) -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        seen.append(body)
        return httpx2.Response(
            200,
            json={
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "merged_memory",
                        "input": {"content": "User prefers green tea, daily", "contradiction": False},
                    }
                ],
                "stop_reason": "tool_use",
                "stop_sequence": None,
                "usage": {"input_tokens": 50, "output_tokens": 12},
            },
        )

    append_all(
        event_log,
        [proposal("User prefers green tea"), proposal("User prefers green tea every day", minute=1)],
    )
    info = run_evolve(settings, claude_client=_claude_client(handler))
    assert info.path == "claude" and info.merged == 1 and info.claude_merge_failures == 0
    assert len(seen) == 1 and seen[0]["tool_choice"] == {"type": "tool", "name": "merged_memory"}
    assert "prefer the newer information" in seen[0]["messages"][0]["content"]
    (row,) = knowledge(settings)
    assert row["content"] == "User prefers green tea, daily"
    assert knowledge_events(settings)[-1]["decided_by"] == "claude"


def test_claude_merge_failure_falls_back_to_the_offline_merge(
    settings: Settings, event_log: EventLog
) -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(
            529, json={"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
        )

    append_all(
        event_log,
        [proposal("User prefers green tea"), proposal("User prefers green tea every day", minute=1)],
    )
    info = run_evolve(settings, claude_client=_claude_client(handler))
    assert info.merged == 1 and info.claude_merge_failures == 1
    (row,) = knowledge(settings)
    assert row["content"] == "User prefers green tea every day"


@pytest.mark.parametrize("agent", ["agent-1", "agent-2"])
def test_agent_filter_only_decides_that_agent(settings: Settings, event_log: EventLog, agent: str) -> None:
    append_all(
        event_log,
        [proposal("User likes jazz", agent="agent-1"), proposal("User likes rock", agent="agent-2")],
    )
    info = run_evolve(settings, agent=agent)
    assert info.decided == 1
    assert [r["agent_id"] for r in knowledge(settings)] == [agent]


def test_explicit_kv_write_overtakes_a_learned_fact_with_the_same_key(
    settings: Settings, event_log: EventLog
) -> None:
    append_all(event_log, [proposal("Deploy branch is main", key="deploy_branch", scope="system")])
    run_evolve(settings, now=T0 + timedelta(minutes=1))
    append_all(
        event_log,
        [
            {
                "type": "fact_set",
                "ts": at(5),
                "agent_id": "agent-1",
                "key": "deploy_branch",
                "value": "release",
                "scope": "system",
                "source": "user",
            }
        ],
    )
    info = run_evolve(settings, now=T0 + timedelta(minutes=10))
    assert info.superseded_by_writes == 1 and info.decided == 0
    rows = {r["content"]: (r["status"], r["note"]) for r in knowledge(settings)}
    assert rows["Deploy branch is main"][0] == "inactive" and "release" in rows["Deploy branch is main"][1]
    assert rows["deploy_branch: release"][0] == "active"
    assert run_evolve(settings).events_appended == 0
