"""The approval policy: what is safe is applied, a person sees what needs one, and each thing once."""

from __future__ import annotations

from pathlib import Path

from helpers_evolver import append_all, proposal
from tiermem.compressor.job import run_compress
from tiermem.evolver.decide import decide, review_reason
from tiermem.evolver.job import run_evolve
from tiermem.evolver.queue import approve, list_proposals
from tiermem.evolver.state import Proposal, load_state
from tiermem.ingest.pipeline import ingest_file

from tiermem.app import samples
from tiermem.eventlog import EventLog
from tiermem.settings import EvolverSettings, Settings, resolve_settings
from tiermem.similarity import text_similarity

NOW = "2026-11-21T10:00:00.000Z"
CFG = EvolverSettings()


def _p(content: str, **kw: object) -> Proposal:
    fields: dict[str, object] = {"proposal_id": "P1", "agent_id": "a", "ts": NOW, "content": content}
    fields.update({"confidence": 0.9, "origin": "compressor", "category": "user", **kw})
    return Proposal(**fields)  # type: ignore[arg-type]


def test_high_confidence_low_risk_facts_are_applied() -> None:
    d = decide(_p("alice prefers email over phone.", topic="contact"), [], CFG, now=NOW)
    assert d.action == "created" and d.changes[0].status == "active"


def test_a_person_reviews_low_confidence_claims_about_the_world_and_sensitive_topics() -> None:
    assert "confidence" in (review_reason(_p("x", confidence=0.5), CFG) or "")
    assert "category 'domain'" in (
        review_reason(_p("Exports run in the background.", category="domain"), CFG) or ""
    )
    assert "topic 'health'" in (review_reason(_p("alice is allergic to peanuts.", topic="health"), CFG) or "")
    d = decide(_p("alice is allergic to peanuts.", topic="health"), [], CFG, now=NOW)
    assert d.action == "pending" and d.changes[0].status == "pending" and "sensitive" in (d.note or "")
    # What the person says about themselves is theirs to say: no review.
    assert review_reason(_p("alice is allergic to peanuts.", topic="health", origin="user"), CFG) is None


def test_the_policy_is_configurable(tmp_path: Path) -> None:
    (tmp_path / "tiermem.toml").write_text(
        '[evolver]\nreview_categories = []\nreview_topics = ["billing"]\n', encoding="utf-8"
    )
    from_file = resolve_settings(data_dir=tmp_path, env={})
    assert from_file.evolver.review_categories == () and from_file.evolver.review_topics == ("billing",)
    from_env = resolve_settings(data_dir=tmp_path, env={"TIERMEM_EVOLVER__REVIEW_TOPICS": "health, legal"})
    assert from_env.evolver.review_topics == ("health", "legal")
    assert review_reason(_p("x", category="domain"), from_file.evolver) is None


def test_a_proposal_saying_what_a_pending_one_says_joins_it(settings: Settings, event_log: EventLog) -> None:
    first = proposal("alice might move to Osaka next year.", confidence=0.5, participant="alice", minute=0)
    again = proposal("alice might move to Osaka next year!", confidence=0.55, participant="alice", minute=5)
    other = proposal("bob might move to Osaka next year.", confidence=0.5, participant="bob", minute=6)
    append_all(event_log, [first, again, other])
    info = run_evolve(settings)
    assert info.pending == 2 and info.joined_pending == 1
    waiting = list_proposals(settings)
    assert sorted(p["proposal_id"] for p in waiting) == sorted([first["event_id"], other["event_id"]])
    (joined,) = list_proposals(settings, status="duplicate")
    assert joined["proposal_id"] == again["event_id"]
    # Approving the one in the queue brings the joined proposal's sources along.
    approve(settings, first["event_id"], by="dana")
    fact = load_state(settings).facts[f"fact:{first['event_id']}"]
    assert fact.status == "active" and again["event_id"] in fact.source_event_ids
    assert run_evolve(settings).decided == 0  # nothing is decided twice


def test_the_demo_history_queue_holds_only_what_needs_a_person(settings: Settings) -> None:
    records = list(samples.generate(days=3, per_day=150, seed=7))
    # Two people say something uncertain about their health, each twice, a day apart (other
    # batches): a person should see each once; everything routine is applied without one.
    bot = [r for r in records if r.get("agent_id") == "support-bot"]
    worried = "I'm probably allergic to cats, I think."
    for user, at in (
        ("alice", bot[3]),
        ("bob", bot[4]),
        ("alice", bot[len(bot) // 2]),
        ("bob", bot[len(bot) // 2 + 1]),
    ):
        records.append(
            {
                **at,
                "user": user,
                "session_id": f"worry-{user}",
                "user_message": worried,
                "agent_response": "Noted.",
            }
        )
    path = settings.data_dir / "sample.jsonl"
    samples.write_jsonl(path, iter(records))
    ingest_file(settings, path, progress=False)
    run_compress(settings)
    run_evolve(settings)
    state = load_state(settings)
    waiting = list_proposals(settings)
    for row in waiting:
        # Every item in the queue is there for a reason the policy states.
        assert review_reason(state.proposals[row["proposal_id"]], settings.evolver) is not None
    worries = sorted(row["content"] for row in waiting if "allergic to cats" in row["content"])
    assert worries == ["alice is probably allergic to cats.", "bob is probably allergic to cats."]
    joined = [
        state.proposals[row["proposal_id"]]
        for row in list_proposals(settings, status="duplicate")
        if "allergic to cats" in row["content"]
    ]
    # The second mentions wait with the first ones: joined to them, or (when the compressor
    # batched the person's conversation together) as a second source of the same proposal.
    for row in waiting:
        if "allergic to cats" in row["content"]:
            first = state.proposals[row["proposal_id"]]
            same = [j for j in joined if j.participant == first.participant]
            assert len(first.source_event_ids) + sum(len(j.source_event_ids) for j in same) == 2
    by_owner: dict[tuple[str, str | None], list[str]] = {}
    for row in waiting:
        p = state.proposals[row["proposal_id"]]
        by_owner.setdefault((p.agent_id, p.participant), []).append(p.content)
    for contents in by_owner.values():
        for i, a in enumerate(contents):
            assert all(text_similarity(a, b) < settings.evolver.related for b in contents[i + 1 :])
    applied = list_proposals(settings, status="applied")
    assert len(applied) > 10 * len(waiting)
    assert all(" I " not in f" {row['content']} " for row in applied)  # third person, not pasted quotes
