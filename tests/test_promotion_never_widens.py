"""Promotion never widens a user's data, and the evolver never re-publishes a private fact."""

from __future__ import annotations

from helpers_evolver import append_all, interaction, proposal
from tiermem.evolver.job import run_evolve
from tiermem.runtime.memory import open_memory
from tiermem.runtime.projector import project
from tiermem.runtime.tools import call_tool

from tiermem.eventlog import EventLog
from tiermem.settings import Settings
from tiermem.sqlviews import open_catalog


def _knowledge(settings: Settings, where: str = "true") -> list[dict[str, object]]:
    con = open_catalog(settings)
    try:
        cur = con.execute(f"SELECT * FROM knowledge WHERE {where}")
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()


def test_an_agent_private_fact_touched_by_the_evolver_stays_private(
    settings: Settings, event_log: EventLog
) -> None:
    with open_memory(settings, "agent-1") as m:
        fact_id = call_tool(m, "memory_idea_save", {"content": "Deploys wait for the Friday freeze to end"})[
            "fact_id"
        ]
    # Later the compressor proposes the same thing: the evolver touches the agent's fact.
    append_all(
        event_log, [proposal("Deploys wait for the Friday freeze to end", minute=1, category="domain")]
    )
    info = run_evolve(settings)
    assert info.touched == 1
    (row,) = _knowledge(settings, f"fact_id = '{fact_id}'")
    assert row["scope"] == "agent" and row["decision"] == "touched"
    project(settings)
    with open_memory(settings, "agent-2") as other:
        found = call_tool(other, "memory_idea_recall", {"query": "deploys Friday freeze"})
        assert found["results"] == []  # never re-published as system
    with open_memory(settings, "agent-1") as own:
        assert own.visible_fact(fact_id) is not None


def test_only_untied_facts_the_policy_applies_are_promoted(settings: Settings, event_log: EventLog) -> None:
    (t1, t2) = append_all(
        event_log,
        [
            interaction("I always run the linter first", "ok", minute=0, user="alice", project_id="p1"),
            interaction("I always run the linter first.", "ok", minute=1, user="alice", project_id="p2"),
        ],
    )
    common = {"agent_type": "coder", "scope": "project"}
    append_all(
        event_log,
        [
            # From alice's turns in two projects: hers, never published to the agent type.
            proposal(
                "Alice runs the linter before committing",
                minute=2,
                project_id="p1",
                source_event_ids=[t1],
                **common,
            ),
            proposal(
                "Alice runs the linter before committing.",
                minute=3,
                project_id="p2",
                source_event_ids=[t2],
                **common,
            ),
            # Untied and sure: promoted.
            proposal("Tests run on every push", minute=6, project_id="p1", **common),
            proposal("Tests run on every push.", minute=7, project_id="p2", **common),
        ],
    )
    decided = {
        "type": "knowledge_decided",
        "agent_id": "agent-1",
        "decision": "created",
        "status": "active",
        "agent_type": "coder",
        "scope": "project",
        "project_id": "p1",
        "seen_projects": ["p1", "p2"],
    }
    append_all(
        event_log,
        [
            # Already at project scope but about alice (an older decision): held where it is.
            {**decided, "fact_id": "f-alice", "content": "Alice works late", "participant": "alice"},
            # Untied but unsure: the approval policy would not apply it without a person.
            {**decided, "fact_id": "f-unsure", "content": "Builds are cached per branch", "confidence": 0.5},
        ],
    )
    info = run_evolve(settings)
    promoted = {r["content"] for r in _knowledge(settings, "decision = 'promoted'")}
    assert promoted == {"Tests run on every push"}
    assert info.promotions_held == 2
    (alice,) = _knowledge(settings, "content LIKE 'Alice runs%' AND status = 'active'")
    assert alice["scope"] == "agent"  # a user's data stays in the agent's own scope
    project(settings)
    with open_memory(settings, "agent-2", agent_type="coder") as other:
        text = str(call_tool(other, "memory_idea_recall", {"query": "linter committing tests push"}))
        assert "Tests run on every push" in text and "linter" not in text
