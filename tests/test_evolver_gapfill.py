"""Session-end gap-fill: what the agent did not save, and a session summary, exactly once."""

from __future__ import annotations

from helpers_evolver import append_all, at, interaction, proposal
from tiermem.evolver.gapfill import extract_statements, is_correction, process_session_end

from tiermem.eventlog import EventLog
from tiermem.settings import Settings


def knowledge_and_episodes(settings: Settings) -> tuple[list[dict], list[dict]]:  # type: ignore[type-arg]
    with EventLog(settings) as log:
        props = [
            e
            for _s, _l, e in log.read("knowledge")
            if e["type"] == "knowledge_proposed" and e.get("origin") == "gap_fill"
        ]
        eps = [e for _s, _l, e in log.read("episodes")]
    return props, eps


def test_extraction_patterns() -> None:
    assert extract_statements("I prefer dark mode in every editor.") == [
        ("The user prefers dark mode in every editor.", "user", None)
    ]
    assert extract_statements("My timezone is CET.") == [("The user's timezone is CET.", "user", "timezone")]
    assert extract_statements("Can you call me tomorrow?") == []
    assert extract_statements("What's the weather?") == []
    assert is_correction("No, that's wrong: it's Tuesday.") and is_correction(
        "Actually, I meant the other file"
    )
    assert not is_correction("Now show me the logs")


def test_unsaved_preference_and_correction_become_proposals_with_a_summary(
    settings: Settings, event_log: EventLog
) -> None:
    turns = append_all(
        event_log,
        [
            interaction("My timezone is PST.", "Got it.", minute=0),
            interaction("Schedule it at 9.", "Scheduled at 9 PST.", minute=1),
            interaction("No, my timezone is CET.", "Sorry, CET then.", minute=2),
        ],
    )
    info = process_session_end(settings, "agent-1", "s1")
    assert (info.interactions, info.preferences, info.corrections, info.events_appended) == (3, 1, 1, 3)
    props, eps = knowledge_and_episodes(settings)
    pref, corr = props
    assert pref["content"] == "The user's timezone is PST." and pref["source_event_ids"] == [turns[0]]
    assert corr["is_correction"] and corr["key"] == "timezone" and corr["corrects"] == "Scheduled at 9 PST."
    assert corr["evidence"] == [{"text": "No, my timezone is CET.", "event_id": turns[2]}]
    (summary,) = eps
    assert summary["kind"] == "session_summary" and summary["source_event_ids"] == turns
    assert summary["participants"] == ["alice"] and "corrected the agent 1 time" in summary["summary"]
    again = process_session_end(settings, "agent-1", "s1")
    assert again.events_appended == 0 and again.duplicates == 3


def test_what_the_agent_saved_is_not_filled_again(settings: Settings, event_log: EventLog) -> None:
    append_all(
        event_log,
        [
            interaction("I prefer tabs over spaces.", "Saved.", minute=0, tools_used=["memory_write"]),
            interaction("I always use vim.", "Noted.", minute=1),
            proposal("The user always uses vim", origin="agent", minute=1.5),
            interaction("I hate long answers.", "Ok.", minute=2),
        ],
    )
    info = process_session_end(settings, "agent-1", "s1")
    assert info.already_saved == 2 and info.preferences == 1
    props, _eps = knowledge_and_episodes(settings)
    assert [p["content"] for p in props] == ["The user hates long answers."]
    assert at(2) == props[0]["ts"]


def test_unknown_session_does_nothing(settings: Settings) -> None:
    info = process_session_end(settings, "agent-1", "nope")
    assert info.interactions == 0 and info.events_appended == 0 and info.summary_event_id is None
