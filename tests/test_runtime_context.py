"""Context assembly: prompt order, budgets, identity limit, memory-context injection."""

from __future__ import annotations

import pytest
from helpers_runtime import append, episode
from tiermem.runtime.context import PROMPT_ORDER, assemble_context
from tiermem.runtime.memory import AgentMemory, open_memory, record_turn
from tiermem.runtime.projector import project
from tiermem.runtime.tools import call_tool

from tiermem.errors import LimitExceededError
from tiermem.settings import Settings
from tiermem.tokens import count_tokens


def _memory(settings: Settings) -> AgentMemory:
    m = open_memory(settings, "bot", agent_type="support", project_id="web", user="alice")
    m.set_identity("I am Bot, a patient support agent.")
    for i in range(8):
        record_turn(m, f"message {i}", f"reply {i}")
    m.store_fact("tz", "UTC", "project")
    m.add_knowledge("Bob works nights", category="user", participant="bob")
    m.add_knowledge("Alice has two cats", category="user", participant="alice")
    m.add_knowledge("Never promise refunds before approval", category="constraint")
    m.store_fact("style", "Use British spelling in this project", "override")
    append(
        settings,
        {
            "type": "relationship_updated",
            "agent_id": "bot",
            "participant": "alice",
            "summary": "Friendly regular.",
            "trust": 0.8,
        },
        episode(
            "bot", "Cat emergency", "Alice's cat was sick and I helped her find a vet", participants=["alice"]
        ),
    )
    project(settings, m.store)
    return m


def test_sections_follow_the_seed_order(settings: Settings) -> None:
    with _memory(settings) as m:
        ctx = assemble_context(m, query="what about the cat vet?")
        names = [s.name for s in ctx.sections]
        assert names == [n for n in PROMPT_ORDER if n in names]
        assert names == list(PROMPT_ORDER)  # every tier has content here
        assert ctx.total_tokens == sum(s.tokens for s in ctx.sections)
        assert all(s.tokens == count_tokens(s.text) for s in ctx.sections)
        assert "Friendly regular." in ctx.section("relationship").text  # type: ignore[union-attr]
        assert "Use British spelling" in ctx.section("scope_rules").text  # type: ignore[union-attr]
        assert "Never promise refunds" in ctx.section("constraints").text  # type: ignore[union-attr]
        assert "Never promise refunds" not in ctx.section("knowledge").text  # type: ignore[union-attr]


def test_last_five_interactions_and_participant_first_knowledge(settings: Settings) -> None:
    with _memory(settings) as m:
        ctx = assemble_context(m)
        recent = ctx.section("recent")
        assert recent is not None and len(recent.item_ids) == 5
        assert "message 3" in recent.text and "message 7" in recent.text and "message 2" not in recent.text
        assert recent.text.index("message 3") < recent.text.index("message 7")  # oldest first
        knowledge = ctx.section("knowledge")
        assert knowledge is not None
        with open_memory(settings, "bot", agent_type="support", project_id="web") as agent_level:
            agent_level.add_knowledge("Refunds take five working days", category="domain")
        # The user's own facts first, then the agent-level ones; another user's never.
        knowledge = assemble_context(m).section("knowledge")
        assert knowledge is not None and "Bob works nights" not in knowledge.text
        assert knowledge.text.index("Alice has two cats") < knowledge.text.index("Refunds take five")
        bob_first = assemble_context(m, user="bob").section("knowledge")
        assert bob_first is not None and "Alice has two cats" not in bob_first.text
        assert bob_first.text.index("Bob works nights") < bob_first.text.index("Refunds take five")


def test_memory_context_is_injected_into_the_user_message_with_ids(settings: Settings) -> None:
    with _memory(settings) as m:
        ctx = assemble_context(m, query="cat vet")
        mc = ctx.section("memory_context")
        assert mc is not None and mc.item_ids
        assert mc.text.startswith("<memory-context>\n") and mc.text.endswith("\n</memory-context>")
        for item_id in mc.item_ids:
            assert f"[{item_id}]" in mc.text
        message = ctx.user_message("Is my cat OK?")
        assert message.startswith("<memory-context>") and message.endswith("Is my cat OK?")
        assert "<memory-context>" not in ctx.system_prompt
        assert assemble_context(m).user_message("hi") == "hi"


def test_overall_cap_drops_lowest_value_items_whole(settings: Settings) -> None:
    with _memory(settings) as m:
        full = assemble_context(m, query="cat vet")
        for cap in (60, 150, 250, 400):
            ctx = assemble_context(m, query="cat vet", budget=cap)
            assert ctx.total_tokens <= cap
            kept = {i for s in ctx.sections for i in s.item_ids}
            assert kept.isdisjoint(ctx.dropped)
            # Nothing is cut: every kept item's text appears whole as in the uncapped context.
            for s in ctx.sections:
                ref = full.section(s.name)
                assert ref is not None
                for line in s.text.splitlines():
                    assert line in ref.text
        small = assemble_context(m, budget=250)
        assert small.section("identity") is not None  # the most valuable tier survives
        assert small.dropped  # knowledge/recent items went first
        recent = small.section("recent")
        assert recent is None or len(recent.item_ids) < 5


def test_tier_budget_keeps_whole_items(settings: Settings) -> None:
    with _memory(settings) as m:
        ctx = assemble_context(m, tier_budgets={"recent": 40})
        recent = ctx.section("recent")
        assert recent is not None and recent.tokens <= 40 and 1 <= len(recent.item_ids) < 5


def test_given_budget_lets_retrieval_fill_the_room(settings: Settings) -> None:
    with _memory(settings) as m:
        for i in range(30):
            append(
                settings, episode("bot", f"Cat story {i}", f"Alice told me cat story number {i} " + "x" * 200)
            )
        project(settings, m.store)
        default = assemble_context(m, query="cat story")
        roomy = assemble_context(m, query="cat story", budget=6000)
        assert len(roomy.section("memory_context").item_ids) >= len(
            default.section("memory_context").item_ids
        )  # type: ignore[union-attr]
        assert roomy.total_tokens <= 6000


def test_identity_hard_limit(settings: Settings) -> None:
    with open_memory(settings, "bot") as m:
        m.set_identity("x" * 1000)
        with pytest.raises(LimitExceededError, match="1,000 characters"):
            m.set_identity("x" * 1001)
        with pytest.raises(LimitExceededError):
            call_tool(m, "memory_write", {"action": "add", "layer": "L0", "content": "one more line"})
        assert m.identity() == "x" * 1000


def test_record_true_appends_a_retrieval_event(settings: Settings) -> None:
    with _memory(settings) as m:
        ctx = assemble_context(m, query="cat vet", record=True)
        row = m.conn.execute("SELECT tool, item_ids, tokens FROM retrievals WHERE tool='context'").fetchone()
        mc = ctx.section("memory_context")
        assert row is not None and mc is not None
        assert row["tokens"] == mc.tokens
        ep = m.conn.execute("SELECT recall_count FROM episodes").fetchone()[0]
        assert ep == 1


def test_retrieval_shares_keep_room_for_episodes_and_facts_when_turns_rank_first() -> None:
    from tiermem.runtime.context import ContextItem, _fit_retrieval

    turns = [ContextItem(f"t{i}", f"[t{i}] " + "turn words " * 30, 80.0 - i) for i in range(6)]
    eps = [ContextItem(f"e{i}", f"[e{i}] " + "episode " * 20, 40.0 - i) for i in range(3)]
    facts = [ContextItem(f"f{i}", f"[f{i}] a short fact", 30.0 - i) for i in range(3)]
    items = [*turns, *eps, *facts]  # rank order: every turn first
    kinds = {
        it.item_id: ("turn" if it.item_id[0] == "t" else "episode" if it.item_id[0] == "e" else "fact")
        for it in items
    }
    budget = 300
    plain = _fit_retrieval(items, budget, kinds, {"episodes": 0.0, "facts": 0.0})
    assert "episode" not in {kinds[it.item_id] for it in plain}  # turns crowd the episodes out
    shared = _fit_retrieval(items, budget, kinds, {"episodes": 0.25, "facts": 0.1})
    got = [it.item_id for it in shared]
    assert any(i.startswith("e") for i in got) and any(i.startswith("f") for i in got)
    assert got == [it.item_id for it in items if it.item_id in got]  # shown in rank order
    assert (
        count_tokens("<memory-context>\n" + "\n".join(it.text for it in shared) + "\n</memory-context>")
        <= budget
    )
    everything = _fit_retrieval(items, 5000, kinds, {"episodes": 0.25, "facts": 0.1})
    assert everything == items  # when all fits, shares change nothing


def test_shown_turns_keep_the_retrieval_from_repeating_what_the_caller_shows(settings: Settings) -> None:
    """A fact whose source turns, or an episode whose quotes, a recall answer already shows is
    left out of the per-turn retrieval; one with a turn not shown stays."""
    decided = {"type": "knowledge_decided", "agent_id": "bot", "decision": "created", "status": "active"}
    append(
        settings,
        {**decided, "fact_id": "f-shown", "content": "Dana paints lighthouses", "source_event_ids": ["t1"]},
        {
            **decided,
            "fact_id": "f-other",
            "content": "Dana paints harbours",
            "source_event_ids": ["t1", "t2"],
        },
        episode(
            "bot",
            "Lighthouse painting",
            "Dana paints lighthouses",
            key_quotes=[{"text": "I paint lighthouses", "event_id": "t1", "speaker": "Dana"}],
        ),
    )
    project(settings)
    with open_memory(settings, "bot") as m:
        both = assemble_context(m, query="Dana paints lighthouses harbours", budget=400)
        mc = both.section("memory_context")
        assert mc is not None and {"f-shown", "f-other"} <= set(mc.item_ids)
        assert "episode" in both.retrieval_kinds.values()
        rest = assemble_context(
            m, query="Dana paints lighthouses harbours", budget=400, shown_turns=frozenset({"t1"})
        )
        mc = rest.section("memory_context")
        assert mc is not None and "f-shown" not in mc.item_ids and "f-other" in mc.item_ids
        assert "episode" not in rest.retrieval_kinds.values()


def test_facts_recency_is_measured_from_the_given_moment_not_the_clock(settings: Settings) -> None:
    from datetime import timedelta

    from tiermem.ids import parse_ts

    with _memory(settings) as m:
        first = assemble_context(m, user="alice", query="Alice cats")
        fact_id = next(i for i, kind in first.retrieval_kinds.items() if kind == "fact")
        row = m.store.visible_fact(m.as_user("alice"), fact_id)
        assert row is not None
        written = parse_ts(row["updated_at"])
        # Measured from the moment it was written, and ten years on: the decay is the only
        # difference (1.0 against its floor, 0.8), whatever day the test runs.
        fresh = assemble_context(m, user="alice", query="Alice cats", now=written)
        old = assemble_context(m, user="alice", query="Alice cats", now=written + timedelta(days=3650))
        again = assemble_context(m, user="alice", query="Alice cats", now=written)
        assert fresh.retrieval_scores == again.retrieval_scores
        ratio = old.retrieval_scores[fact_id] / fresh.retrieval_scores[fact_id]
        assert abs(ratio - 0.8) < 1e-3
