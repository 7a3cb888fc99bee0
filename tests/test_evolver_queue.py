"""The review queue round trip: pending -> list -> show (provenance, diff) -> approve / reject."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest
from helpers_evolver import append_all, interaction, proposal
from tiermem.evolver import queue
from tiermem.evolver.job import run_evolve

from tiermem.app.cli import main
from tiermem.errors import NotFoundError, ValidationError
from tiermem.eventlog import EventLog
from tiermem.settings import Settings
from tiermem.sqlviews import open_catalog


def cli(settings: Settings, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["--data-dir", str(settings.data_dir), *args])
    return code, out.getvalue()


def facts(settings: Settings) -> dict[str, str]:
    con = open_catalog(settings)
    try:
        return dict(con.execute("SELECT content, status FROM knowledge").fetchall())
    finally:
        con.close()


def test_low_confidence_proposal_round_trip_with_provenance_and_diff(
    settings: Settings, event_log: EventLog
) -> None:
    (turn,) = append_all(
        event_log, [interaction("I moved to Berlin last month.", "Berlin, exciting!", minute=0)]
    )
    append_all(
        event_log,
        [proposal("User lives in Paris", minute=1, confidence=0.95, topic="home", participant="alice")],
    )
    (pid,) = append_all(
        event_log,
        [
            proposal(
                "User lives in Berlin",
                minute=2,
                confidence=0.4,
                topic="home",
                source_event_ids=[turn],
                evidence=[{"text": "I moved to Berlin last month.", "event_id": turn}],
            )
        ],
    )
    info = run_evolve(settings)
    assert info.pending == 1 and info.created == 1
    assert facts(settings) == {"User lives in Paris": "active"}  # pending is not knowledge yet

    code, out = cli(settings, "proposals", "list", "--json")
    assert code == 0
    rows = json.loads(out)
    assert [(r["proposal_id"], r["status"]) for r in rows] == [(pid, "pending")]

    shown = queue.show_proposal(settings, pid)
    (src,) = shown["provenance"]["source_turns"]
    assert src["event_id"] == turn and src["user_message"] == "I moved to Berlin last month."
    outcome = shown["if_approved"]
    assert outcome["action"] == "superseded"
    old_change = next(c for c in outcome["changes"] if c["status"] == "inactive")
    assert old_change["current_content"] == "User lives in Paris"
    assert "-User lives in Paris" in next(
        c["diff"] for c in outcome["changes"] if c.get("diff") and c["status"] == "active"
    )

    code, out = cli(settings, "proposals", "show", pid)
    assert code == 0 and "I moved to Berlin last month." in out and "if approved: superseded" in out

    code, out = cli(settings, "proposals", "approve", pid, "--json")
    assert code == 0 and json.loads(out)["decided_by"] == "user"
    assert facts(settings) == {"User lives in Paris": "inactive", "User lives in Berlin": "active"}
    code, out = cli(settings, "proposals", "list", "--status", "all", "--json")
    assert {r["proposal_id"]: r["status"] for r in json.loads(out)}[pid] == "approved"
    assert queue.list_proposals(settings) == []
    with pytest.raises(ValidationError):
        queue.approve(settings, pid)  # not pending any more


def test_reject_keeps_the_store_unchanged_and_is_recorded(settings: Settings, event_log: EventLog) -> None:
    (pid,) = append_all(event_log, [proposal("User hates music", confidence=0.3)])
    run_evolve(settings)
    result = queue.reject(settings, pid, reason="never said that")
    assert result["action"] == "rejected" and result["events_appended"] == 1
    assert facts(settings) == {}
    (row,) = queue.list_proposals(settings, status="all")
    assert row["status"] == "rejected"
    assert run_evolve(settings).decided == 0  # a rejected proposal is not decided again


def test_approve_merging_into_an_existing_fact(settings: Settings, event_log: EventLog) -> None:
    append_all(event_log, [proposal("User prefers green tea", confidence=0.9)])
    (pid,) = append_all(event_log, [proposal("User prefers green tea every day", minute=1, confidence=0.5)])
    run_evolve(settings)
    shown = queue.show_proposal(settings, pid)
    assert shown["if_approved"]["action"] == "merged"
    assert shown["if_approved"]["changes"][0]["current_content"] == "User prefers green tea"
    queue.approve(settings, pid)
    assert facts(settings) == {"User prefers green tea every day": "active"}


def test_unknown_proposal(settings: Settings) -> None:
    with pytest.raises(NotFoundError):
        queue.show_proposal(settings, "nope")
    code, _out = cli(settings, "proposals", "approve", "nope")
    assert code == NotFoundError.exit_code
