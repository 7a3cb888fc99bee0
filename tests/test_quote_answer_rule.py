"""The turn after a question shares all of the question's match (quote_search.ANSWER_WEIGHT).

Answers repeat few of the question's words: "What made you pick the decor
for the store?" is answered by "I wanted it to look like my own style". A
fixture where that answer is delivered within a small budget only because of
the rule, and where a turn after a statement gets the plain neighbour share.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers_runtime import append, episode, quotes, small_talk_days
from tiermem.runtime import quote_search as qs
from tiermem.runtime.memory import AgentMemory, open_memory
from tiermem.runtime.projector import project

from tiermem.settings import Settings

QUESTION = "What made Gina pick the decor of her store?"
ANSWER = "I wanted the place to look like my own style and feel cozy for my customers."


@pytest.fixture
def memory(settings: Settings) -> Iterator[AgentMemory]:
    events = [
        episode(
            "shop",
            "store opening",
            "Gina shows Jon her new store.",
            key_quotes=quotes(
                ("q1", "Jon", "Wow, what made you pick the decor?"),
                ("a1", "Gina", ANSWER),
            ),
            participants=["jon"],
            start_ts="2023-02-01T10:00:00Z",
            end_ts="2023-02-01T11:00:00Z",
        ),
        episode(
            "shop",
            "decor talk",
            "Gina and Jon chat.",
            key_quotes=quotes(
                ("s1", "Jon", "The decor I picked for the store made it look bigger, the decor is the key."),
                ("s2", "Gina", "Magazines always give me ideas for my home."),
            ),
            participants=["jon"],
            start_ts="2023-03-01T10:00:00Z",
            end_ts="2023-03-01T11:00:00Z",
        ),
    ]
    events += small_talk_days("shop", ("Jon", "Gina"), "walked the dog in the park", "jon")
    append(settings, *events)
    project(settings)
    with open_memory(settings, "shop", user="jon") as m:
        yield m


def _rank(memory: AgentMemory, event_id: str) -> int:
    found = qs.search_quotes(memory.conn, memory.principal, QUESTION, None, 10)
    return [q["event_id"] for q in found].index(event_id)


def test_the_answer_after_a_question_outranks_a_turn_after_a_statement(memory: AgentMemory) -> None:
    # The answer shares no word with the question; its rival is the turn after a statement that
    # matches the question better than the question turn does. With the rule the answer wins.
    assert _rank(memory, "a1") < _rank(memory, "s2")
    lines = qs.recall_lines(memory.conn, memory.principal, QUESTION, budget=30)
    assert any(ANSWER in text for text, _ in lines)


def test_without_the_rule_the_answer_is_not_delivered(
    memory: AgentMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(qs, "ANSWER_WEIGHT", qs.NEIGHBOUR_WEIGHT)
    assert _rank(memory, "a1") > _rank(memory, "s2")
    lines = qs.recall_lines(memory.conn, memory.principal, QUESTION, budget=30)
    assert not any(ANSWER in text for text, _ in lines)
