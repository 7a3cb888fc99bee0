"""`tiermem facts edit|remove` by fact id: the change is an event with its editor, reason, before and after."""

from __future__ import annotations

import json

import pytest
from helpers_evolver import append_all, proposal
from tiermem.evolver.job import run_evolve
from tiermem.evolver.revise import edit_fact, remove_fact
from tiermem.evolver.state import load_state
from tiermem.runtime.memory import open_memory
from tiermem.runtime.projector import project
from tiermem.runtime.scopes import list_facts

from tiermem.app.cli import main
from tiermem.eventlog import EventLog
from tiermem.settings import Settings
from tiermem.sqlviews import open_catalog


def _cli(settings: Settings, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["--data-dir", str(settings.data_dir), *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _learned(settings: Settings, event_log: EventLog, content: str = "alice moved to Lisbon.") -> str:
    append_all(event_log, [proposal(content, participant="alice", topic="home")])
    run_evolve(settings)
    (fact,) = [f for f in load_state(settings).facts.values() if f.content == content]
    return fact.fact_id


def _knowledge(settings: Settings, fact_id: str) -> dict[str, object]:
    con = open_catalog(settings)
    try:
        cur = con.execute(
            "SELECT content, status, decision, previous_content, note, source FROM knowledge WHERE fact_id = ?",
            [fact_id],
        )
        cols = [d[0] for d in cur.description]
        row = cur.fetchone()
    finally:
        con.close()
    assert row is not None
    return dict(zip(cols, row, strict=True))


def _visible(settings: Settings, agent: str = "agent-1", user: str = "alice") -> dict[str, str]:
    project(settings)
    with open_memory(settings, agent, user=user) as memory:  # the facts are about alice: read as her
        return {r["fact_id"]: r["content"] for r in list_facts(memory.conn, memory.scope)}


def test_edit_by_id_records_editor_reason_before_and_after(
    settings: Settings, event_log: EventLog, capsys: pytest.CaptureFixture[str]
) -> None:
    fact_id = _learned(settings, event_log)
    assert _visible(settings)[fact_id] == "alice moved to Lisbon."
    code, out, _ = _cli(
        settings,
        capsys,
        "facts",
        "edit",
        "agent-1",
        fact_id,
        "alice moved to Osaka in October 2026.",
        "--by",
        "dana",
        "--reason",
        "she wrote in to correct it",
        "--json",
    )
    assert code == 0
    result = json.loads(out)
    assert (
        result["before"] == "alice moved to Lisbon."
        and result["after"] == "alice moved to Osaka in October 2026."
    )
    assert result["decided_by"] == "dana" and result["events_appended"] == 1
    row = _knowledge(settings, fact_id)
    assert row["content"] == "alice moved to Osaka in October 2026." and row["status"] == "active"
    assert row["decision"] == "edited" and row["previous_content"] == "alice moved to Lisbon."
    assert row["note"] == "edited by dana: she wrote in to correct it"
    # The evolver's own fold and the hot store the runtime reads agree with the view.
    folded = load_state(settings).facts[fact_id]
    assert folded.content == row["content"] and folded.decided_by == "dana" and folded.revision == 2
    assert _visible(settings)[fact_id] == "alice moved to Osaka in October 2026."


def test_remove_by_id_hides_the_fact_and_keeps_its_text_for_audit(
    settings: Settings, event_log: EventLog, capsys: pytest.CaptureFixture[str]
) -> None:
    fact_id = _learned(settings, event_log)
    code, out, _ = _cli(settings, capsys, "facts", "remove", "agent-1", fact_id, "--by", "dana", "--json")
    assert code == 0 and json.loads(out)["action"] == "removed"
    row = _knowledge(settings, fact_id)
    assert row["status"] == "inactive" and row["decision"] == "removed"
    assert row["content"] == "alice moved to Lisbon." and row["note"] == "removed by dana"
    assert fact_id not in _visible(settings)
    # A second removal is refused: the fact is no longer active.
    code, _out, err = _cli(settings, capsys, "facts", "remove", "agent-1", fact_id)
    assert code != 0 and "inactive" in err and "Traceback" not in err


def test_key_value_facts_are_edited_and_removed_by_id(settings: Settings) -> None:
    with open_memory(settings, "agent-1") as memory:
        fact_id = memory.store_fact("deploy_branch", "main")
    edited = edit_fact(settings, "agent-1", fact_id, "release", by="dana")
    assert (edited["before"], edited["after"]) == ("main", "release")
    project(settings)
    with open_memory(settings, "agent-1") as memory:
        row = memory.get_fact("deploy_branch")
        assert row is not None and row["content"] == "release"
    remove_fact(settings, "agent-1", fact_id, by="dana", reason="branch deleted")
    project(settings)
    with open_memory(settings, "agent-1") as memory:
        assert memory.get_fact("deploy_branch") is None
    assert load_state(settings).facts[fact_id].note == "removed by dana: branch deleted"


def test_a_fact_of_another_agent_or_a_pending_one_is_not_revised_here(
    settings: Settings, event_log: EventLog, capsys: pytest.CaptureFixture[str]
) -> None:
    fact_id = _learned(settings, event_log)
    code, _out, err = _cli(settings, capsys, "facts", "edit", "agent-2", fact_id, "x")
    assert code != 0 and "no fact" in err
    append_all(event_log, [proposal("alice might like jazz.", confidence=0.4, minute=5)])
    run_evolve(settings)
    (pending,) = [f for f in load_state(settings).facts.values() if f.status == "pending"]
    code, _out, err = _cli(settings, capsys, "facts", "remove", "agent-1", pending.fact_id)
    assert code != 0 and "tiermem proposals" in err
    code, _out, err = _cli(settings, capsys, "facts", "edit", "agent-1", "deploy_branch", "x")
    assert code != 0 and "fact id" in err
