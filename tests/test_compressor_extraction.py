"""Offline extraction: atomic third-person facts with absolute dates, a category, a topic and a
calibrated confidence; episode names a person would write; facts filed where a read path sees them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from helpers_compressor import log_lines
from tiermem.compressor.facts import extract, third_person, topic_of
from tiermem.compressor.job import run_compress
from tiermem.compressor.offline_scorer import OfflineScorer
from tiermem.compressor.scoring import Interaction
from tiermem.evolver.job import run_evolve
from tiermem.runtime.memory import open_memory
from tiermem.runtime.projector import project
from tiermem.runtime.scopes import list_facts

from tiermem.eventlog import EventLog
from tiermem.ids import derived_event_id, format_ts
from tiermem.settings import Settings
from tiermem.sqlviews import open_catalog

SAID = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)  # a Monday


def _facts(text: str, speaker: str = "Caroline", *, user: bool = True, listener: str = "Mel") -> list[str]:
    return [s.content for s in extract(speaker, text, at=SAID, listener=listener, speaker_is_user=user)]


def test_a_statement_becomes_an_atomic_third_person_fact_with_its_absolute_date() -> None:
    assert _facts("I moved from Sweden 4 years ago with my mom.") == [
        "Caroline moved from Sweden in 2019 with their mom."
    ]
    assert _facts("I went to a LGBTQ support group yesterday and it was so powerful.") == [
        "Caroline went to a LGBTQ support group on 7 May 2023 and it was so powerful."
    ]
    # Two statements in one sentence are two facts; a question is none; a mood is none.
    assert _facts("I love hiking in the Alps, my favorite trail is near Zermatt.") == [
        "Caroline loves hiking in the Alps.",
        "Caroline's favorite trail is near Zermatt.",
    ]
    assert _facts("I moved to Osaka, can you update my billing address?", "alice") == [
        "alice moved to Osaka."
    ]
    assert _facts("I feel so happy, my dog Rex passed away last month.") == [
        "Caroline's dog Rex passed away in April 2023."
    ]
    assert _facts("Can you tell me more about it?") == []
    assert _facts("Hey! Thanks so much!") == []


def test_requests_corrections_and_reports_about_the_person() -> None:
    assert _facts("Please cancel my Team plan at the end of the month.", "ivan", listener="support-bot") == [
        "ivan asked support-bot to cancel their Team plan at the end of the month."
    ]
    (correction,) = extract(
        "alice", "Actually the double charge was $59, not $49.", at=SAID, listener="bot", speaker_is_user=True
    )
    assert correction.content == "According to alice (8 May 2023), the double charge was $59, not $49."
    assert correction.is_correction
    # What the agent reports about the person's account is a fact about the person.
    (report,) = extract(
        "support-bot",
        "Done: your billing address is now in Osaka.",
        at=SAID,
        listener="alice",
        speaker_is_user=False,
    )
    assert report.content == "alice's billing address is now in Osaka." and report.about_listener


def test_confidence_is_calibrated_on_who_says_it_and_how() -> None:
    def conf(text: str, *, user: bool = True) -> float:
        (s,) = extract("alice" if user else "npc", text, at=SAID, listener="x", speaker_is_user=user)
        return s.confidence

    preference = conf("I prefer to be contacted by email, not phone.")
    plain = conf("I work at a bakery in Lisbon.")
    plan = conf("I'm going to start a pottery class in Lisbon.")
    hedged = conf("I think I work at a bakery in Lisbon now, maybe.")
    in_character = conf("I remember the fire in Lisbon, and who carried the children out.", user=False)
    assert preference > plain > plan > hedged
    assert plain > in_character
    assert hedged < 0.7 <= plan  # below the policy's threshold: a person looks at it


def test_categories_and_topics() -> None:
    (about_user,) = extract(
        "alice", "My sister Emma lives in Stockholm.", at=SAID, listener="x", speaker_is_user=True
    )
    assert (about_user.category, about_user.topic) == ("user", "family")
    (own,) = extract("npc", "I grew up in the eastern archive.", at=SAID, listener="x", speaker_is_user=False)
    assert own.category == "personal"
    assert topic_of("I'm allergic to peanuts") == "health"
    assert topic_of("The Glass Compass points north") == "compass"  # no vocabulary word: the most telling one


def test_third_person_agreement() -> None:
    assert (
        third_person("I need help and I go every week", "alice", "bot")
        == "alice needs help and goes every week"
    )
    assert third_person("you were right, I was wrong", "alice", "bot") == "bot was right, alice was wrong"
    assert third_person("My mom and I are close", "alice", "bot") == "alice's mom and alice are close"
    assert third_person("I'd rather stay home", "alice", "bot") == "alice would rather stay home"


def _turn(i: int, user_message: str, agent_response: str, user: str = "caroline") -> Interaction:
    return Interaction(
        event_id=f"t{i}",
        agent_id="mel",
        ts=SAID + timedelta(minutes=i),
        user=user,
        session_id="s1",
        project_id="",
        memory_level="global",
        user_message=user_message,
        agent_response=agent_response,
    )


def test_episode_names_are_phrases_not_keyword_lists() -> None:
    scorer = OfflineScorer()

    def name(*turns: tuple[str, str]) -> str:
        (episode,) = scorer.score_batch("mel", [_turn(i, u, a) for i, (u, a) in enumerate(turns)]).episodes
        return episode.name

    assert name(("I moved to Osaka last month.", "How exciting!")) == "caroline moved to Osaka in April 2023"
    assert (
        name(("Will you still be here when I wake up?", "I don't go anywhere. Sleep. I'll be here."))
        == "caroline asks: Will you still be here when I wake up?"
    )
    assert name(("Hello.", "Hello.")) == "Small talk with caroline"
    assert name(("Tell me about the Ninth Key.", "The Ninth Key was last seen in the eastern archive.")) == (
        "The Ninth Key was last seen in the eastern archive"
    )


def test_repeated_statements_in_a_batch_become_one_proposal_with_every_turn_as_evidence() -> None:
    turns = [_turn(i, "I prefer to be contacted by email, not phone.", "Noted.") for i in range(3)]
    result = OfflineScorer().score_batch("mel", turns)
    (fact,) = result.facts
    assert fact.content == "caroline prefers to be contacted by email, not phone."
    assert [q.event_id for q in fact.evidence] == ["t0", "t1", "t2"]


def _append(log: EventLog, agent: str, n: int, *, project: str | None = None) -> None:
    start = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
    records = []
    for i in range(n):
        ts = start + timedelta(minutes=5 * i)
        record = {
            "type": "interaction",
            "event_id": derived_event_id(ts, "extraction-test", agent, str(i)),
            "ts": format_ts(ts),
            "agent_id": agent,
            "user": "alice",
            "session_id": "s1",
            "user_message": f"I prefer tea over coffee, and my cat is called Miso {i}.",
            "agent_response": "Noted.",
        }
        if project:
            record["project_id"] = project
        records.append(record)
    assert not log.append_many(records).rejected


def test_facts_of_an_agent_without_a_project_are_its_own_and_visible_to_it(
    settings: Settings, event_log: EventLog
) -> None:
    _append(event_log, "solo", 30)
    _append(event_log, "teamed", 30, project="web")
    run_compress(settings)
    con = open_catalog(settings)
    try:
        scopes = dict(
            con.execute(
                "SELECT agent_id, list_distinct(list(coalesce(scope, '(none)'))) FROM knowledge_events"
                " WHERE type = 'knowledge_proposed' GROUP BY 1"
            ).fetchall()
        )
    finally:
        con.close()
    # No project: the event names no scope (the agent's own); a project: the project's.
    assert scopes == {"solo": ["(none)"], "teamed": ["project"]}
    run_evolve(settings)
    project(settings)
    with open_memory(settings, "solo", user="alice") as solo:  # learned from alice: read as her
        mine = list_facts(solo.conn, solo.scope)
        assert mine and {r["scope"] for r in mine} == {"agent"}
        assert any("alice prefers tea over coffee" in r["content"] for r in mine)
    with open_memory(settings, "other", user="alice") as other:
        assert list_facts(other.conn, other.scope) == []  # private to the agent that learned them
    lines = log_lines(settings.data_dir)
    run_compress(settings)
    assert log_lines(settings.data_dir) == lines
