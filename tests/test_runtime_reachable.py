"""Every turn is reachable: before compression as itself, after it through its episode, never twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiermem import Memory
from tiermem.app.api import AgentMemory

WORD = "zeppelinmuseum"
QUERY = "zeppelinmuseum ticket"


@pytest.fixture
def mem(tmp_path: Path) -> Memory:
    with Memory.open(tmp_path / "data", env={}) as m:
        yield m


def _thirty_turns(agent: AgentMemory) -> str:
    old = ""
    for i in range(30):
        message = f"turn {i}: we talked about the weather and the trains"
        if i == 3:
            message = f"My grandmother kept a {WORD} ticket from Friedrichshafen"
        event_id = agent.record_turn("nora", message, f"reply {i}").event_id
        old = event_id if i == 3 else old
    return old


def test_an_old_turn_is_reachable_before_compression_and_through_its_episode_after(mem: Memory) -> None:
    agent = mem.agent("guide", user="nora", session_id="s1")
    old = _thirty_turns(agent)

    # Before any compression: the turn is far outside the recent five, and no episode holds it.
    ctx = agent.context(query=QUERY)
    assert old not in ctx.section("recent").item_ids
    mc = ctx.section("memory_context")
    assert mc is not None and old in mc.item_ids and mc.text.count(WORD) == 1
    recall = agent.recall(QUERY)
    assert not recall.episodes and [t.event_id for t in recall.turns] == [old]
    assert WORD in recall.turns[0].user_message
    tool = agent.call_tool("recall_memory", {"query": QUERY})
    # First and once; the remembered-turn lines may add the turns around it (said in the same minutes).
    cited = [i for t in tool["turns"] for i in t["event_ids"]]
    assert cited[0] == old and cited.count(old) == 1
    assert tool["text"].count(WORD) == 1

    info = mem.compress()
    assert info.episodes >= 1

    # After: the episode answers for the turn, and the turn itself is not delivered again.
    recall = agent.recall(QUERY)
    assert recall.turns == ()
    episode_ids = {e.episode_id for e in recall.episodes}
    ctx = agent.context(query=QUERY)
    mc = ctx.section("memory_context")
    assert mc is not None and old not in mc.item_ids
    assert episode_ids & set(mc.item_ids)
    # Delivered once, as the episode (its name may repeat the words of the quote it keeps).
    assert [i for i in mc.item_ids if WORD in mc.text.split(f"[{i}]", 1)[-1]] and set(
        mc.item_ids
    ) <= episode_ids
    assert any(WORD in q for e in recall.episodes for q in e.quotes)
    assert sum(q.count(WORD) for e in recall.episodes for q in e.quotes) == 1
    tool = agent.call_tool("recall_memory", {"query": QUERY})
    assert tool["memories"]
    assert old not in {i for t in tool["turns"] for i in t["event_ids"]}


def test_the_recent_section_and_the_retrieval_never_show_one_turn_twice(mem: Memory) -> None:
    agent = mem.agent("guide", user="nora")
    for i in range(3):
        agent.record_turn("nora", f"the {WORD} opens at nine, day {i}", "noted")
    ctx = agent.context(query=QUERY)
    recent = set(ctx.section("recent").item_ids)
    assert len(recent) == 3
    mc = ctx.section("memory_context")
    assert mc is None or not recent & set(mc.item_ids)


def test_another_users_unfolded_turns_stay_out_of_reach(mem: Memory) -> None:
    agent = mem.agent("guide")
    agent.record_turn("nora", f"my {WORD} ticket is blue", "ok")
    assert agent.recall(QUERY, user="olaf").turns == ()
    assert [t.user for t in agent.recall(QUERY, user="nora").turns] == ["nora"]
    ctx = agent.context(user="olaf", query=QUERY)
    assert ctx.section("memory_context") is None
