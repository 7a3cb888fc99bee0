"""The pure decision function: proposal + current facts -> complete resulting facts."""

from __future__ import annotations

from tiermem.evolver.decide import decide, new_fact_id
from tiermem.evolver.state import Fact, Proposal

from tiermem.merging import contradicts, merge_offline
from tiermem.settings import EvolverSettings

NOW = "2026-11-21T10:00:00.000Z"
CFG = EvolverSettings()


def prop(content: str, pid: str = "P2", **kw: object) -> Proposal:
    base: dict[str, object] = {
        "proposal_id": pid,
        "agent_id": "a",
        "ts": NOW,
        "content": content,
        "confidence": 0.9,
    }
    base.update(kw)
    return Proposal(**base)  # type: ignore[arg-type]


def fact(content: str, fid: str = "fact:P1", **kw: object) -> Fact:
    base: dict[str, object] = {
        "fact_id": fid,
        "agent_id": "a",
        "content": content,
        "status": "active",
        "scope": "agent",
        "created_at": "2026-11-01T00:00:00.000Z",
        "updated_at": "2026-11-01T00:00:00.000Z",
        "revision": 1,
        "source_event_ids": ("T1", "P1"),
    }
    base.update(kw)
    return Fact(**base)  # type: ignore[arg-type]


def test_no_similar_fact_creates_a_new_one() -> None:
    d = decide(prop("User lives in Lyon", source_event_ids=("T9",)), [fact("User likes jazz")], CFG, now=NOW)
    assert d.action == "created"
    (new,) = d.changes
    assert new.fact_id == new_fact_id("P2") and new.status == "active" and new.revision == 1
    assert new.source_event_ids == ("T9", "P2")


def test_near_identical_touches_and_adds_the_source_without_changing_content() -> None:
    old = fact("User prefers tea over coffee")
    d = decide(prop("user prefers tea over coffee.", source_event_ids=("T2",)), [old], CFG, now=NOW)
    assert d.action == "touched"
    (touched,) = d.changes
    assert touched.fact_id == old.fact_id and touched.content == old.content
    assert touched.updated_at == NOW and touched.revision == 2
    assert set(touched.source_event_ids) == {"T1", "P1", "T2", "P2"}


def test_related_proposal_merges_into_the_existing_fact() -> None:
    old = fact("User prefers tea over coffee")
    d = decide(prop("The user prefers tea rather than coffee"), [old], CFG, now=NOW)
    assert d.action == "merged"
    (merged,) = d.changes
    assert merged.fact_id == old.fact_id
    assert merged.previous_content == old.content
    assert 0.8 <= (merged.similarity or 0) <= 0.95


def test_contradiction_supersedes_and_notes_the_change() -> None:
    old = fact("User prefers tea over coffee")
    d = decide(prop("User prefers coffee over tea"), [old], CFG, now=NOW)
    assert d.action == "superseded"
    retired, new = d.changes
    assert (
        retired.fact_id == old.fact_id and retired.status == "inactive" and retired.decision == "superseded"
    )
    assert new.status == "active" and new.content == "User prefers coffee over tea"
    assert new.note and "newer wins" in new.note and "tea over coffee" in new.note


def test_same_key_with_new_value_supersedes() -> None:
    old = fact("Deploy branch is main", key="deploy_branch")
    d = decide(prop("Deploy branch is release", key="deploy_branch"), [old], CFG, now=NOW)
    assert d.action == "superseded"
    assert [f.status for f in d.changes] == ["inactive", "active"]


def test_correction_deactivates_the_wrong_fact_and_activates_the_right_one() -> None:
    wrong = fact("The user's name is Rob", key="name")
    other = fact("User likes jazz", fid="fact:P0")
    p = prop("The user's name is Bob", key="name", is_correction=True, origin="gap_fill")
    d = decide(p, [wrong, other], CFG, now=NOW)
    assert d.action == "corrected"
    deactivated, right = d.changes
    assert deactivated.fact_id == wrong.fact_id and deactivated.status == "inactive"
    assert deactivated.decision == "deactivated" and "Bob" in (deactivated.note or "")
    assert right.status == "active" and right.content == "The user's name is Bob"
    assert right.previous_content == "The user's name is Rob"


def test_correction_by_fact_id() -> None:
    wrong = fact("Meeting is on Tuesday", fid="fact:X")
    d = decide(prop("Meeting is on Thursday", corrects="fact:X", origin="user"), [wrong], CFG, now=NOW)
    assert [(f.fact_id, f.status) for f in d.changes] == [("fact:X", "inactive"), ("fact:P2", "active")]


def test_low_confidence_waits_for_review_unless_the_user_said_it() -> None:
    d = decide(prop("User lives in Lyon", confidence=0.2), [], CFG, now=NOW)
    assert d.action == "pending"
    assert d.changes[0].status == "pending" and d.changes[0].fact_id == "fact:P2"
    d = decide(prop("User lives in Lyon", confidence=0.2, origin="user"), [], CFG, now=NOW)
    assert d.action == "created"


def test_long_memory_keeps_a_summary_for_search_and_the_original() -> None:
    long_text = " ".join(
        f"Sentence number {i} explains one more detail of the deployment process." for i in range(40)
    )
    d = decide(prop(long_text), [], CFG, now=NOW)
    (new,) = d.changes
    assert new.original == long_text
    assert len(new.content) < len(long_text) / 3
    assert new.content.startswith("Sentence number 0")


def test_other_agents_and_inactive_facts_are_not_candidates() -> None:
    d = decide(
        prop("User prefers tea over coffee"),
        [fact("User prefers tea over coffee", agent_id="b")],
        CFG,
        now=NOW,
    )
    assert d.action == "created"
    d = decide(
        prop("User prefers tea over coffee"),
        [fact("User prefers tea over coffee", status="inactive")],
        CFG,
        now=NOW,
    )
    assert d.action == "created"


def test_offline_merge_is_deterministic_and_notes_contradictions() -> None:
    r = merge_offline("User has 2 cats. User lives in Lyon.", "User has 3 cats.")
    assert r.contradiction and "2 cats" in (r.note or "") and "3 cats" in r.content and "Lyon" in r.content
    assert merge_offline("a b c", "a b c d") == merge_offline("a b c", "a b c d")
    assert contradicts("User likes tea", "User does not like tea")
    assert not contradicts("User likes green tea", "User likes green tea a lot")
