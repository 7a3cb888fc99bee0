"""Pinned memory: key-value facts and identity are never displaced by newer insights, and
important episodes are preferred when the retrieval's budget is tight."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiermem import Memory


@pytest.fixture
def mem(tmp_path: Path) -> Memory:
    with Memory.open(tmp_path / "data", env={}) as m:
        yield m


def test_kv_facts_and_identity_stay_in_context_after_many_newer_insights(mem: Memory) -> None:
    agent = mem.agent("helper", user="ines")
    agent.set_identity("I am Helper, a patient assistant.")
    kv_ids = [agent.facts.set(key, value).fact_id for key, value in (("name", "Ines"), ("city", "Porto"))]
    for i in range(30):
        saved = agent.call_tool(
            "memory_idea_save", {"content": f"Insight {i}: ines mentioned hobby number {i} of {i * 7} kinds"}
        )
        assert saved["action"] == "created"
    ctx = agent.context()
    knowledge = ctx.section("knowledge")
    assert knowledge is not None
    assert set(kv_ids) <= set(knowledge.item_ids)
    assert set(knowledge.item_ids[: len(kv_ids)]) == set(kv_ids)
    assert len(knowledge.item_ids) == mem.settings.runtime.top_knowledge
    assert ctx.section("identity") is not None
    # Under a tight overall cap the insights go before the pinned facts do.
    tight = agent.context(budget=ctx.total_tokens - 200)
    assert tight.section("knowledge") is not None
    assert set(kv_ids) <= set(tight.section("knowledge").item_ids)
    assert any(i not in kv_ids for i in tight.dropped)


def _episode(name: str, summary: str, important: bool, n: int) -> dict[str, object]:
    return {
        "type": "episode",
        "agent_id": "guide",
        "name": name,
        "summary": summary + " More detail. " * 12,
        "start_ts": f"2026-03-0{n}T10:00:00Z",
        "end_ts": f"2026-03-0{n}T11:00:00Z",
        "importance": 9 if important else 4,
        "important": important,
        "source_event_ids": [f"src-{n}"],
        "participants": [],
        "key_quotes": [],
    }


QUERY = "lighthouse keeper storm"


def test_important_episodes_are_preferred_when_the_retrieval_budget_is_tight(mem: Memory) -> None:
    for n in range(1, 4):
        mem.append(
            _episode(
                f"Lighthouse storm night {n}", f"The lighthouse keeper and the storm, part {n}.", False, n
            )
        )
    mem.append(_episode("The promise", "The keeper promised to come back.", True, 4))
    agent = mem.agent("guide")
    roomy = agent.context(query=QUERY).section("memory_context")
    assert roomy is not None and len(roomy.item_ids) == 4
    important = next(e.episode_id for e in agent.recall(QUERY, limit=5).episodes if e.name == "The promise")
    assert roomy.item_ids[-1] == important  # the least relevant when there is room for all
    # Room for one episode only: the important one is kept.
    one = max(len(line) for line in roomy.text.splitlines()) // 4 + 12
    tiers = {**mem.settings.runtime.tier_budgets, "memory_context": one}
    with Memory.open(mem.data_dir, env={}, runtime={"tier_budgets": tiers}) as tight_mem:
        tight = tight_mem.agent("guide").context(query=QUERY).section("memory_context")
        assert tight is not None and tight.item_ids == (important,)
