"""The turn after a question shares all of the question's match (quote_search.ANSWER_WEIGHT).

Answers repeat few of the question's words: "What made you pick the decor
for the store?" is answered by "I wanted it to look like my own style". A
fixture where that answer is delivered within a small budget only because of
the rule, and where a turn after a statement gets the plain neighbour share.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers_runtime import append, episode
from tiermem.runtime import quote_search as qs
from tiermem.runtime.memory import AgentMemory, open_memory
from tiermem.runtime.projector import project

from tiermem.settings import Settings

QUESTION = "What made Gina pick the decor of her store?"
ANSWER = "I wanted the place to look like my own style and feel cozy for my customers."


def _quotes(*turns: tuple[str, str, str]) -> list[dict[str, str]]:
    return [{"speaker": who, "text": text, "event_id": eid} for eid, who, text in turns]


@pytest.fixture
def memory(settings: Settings) -> Iterator[AgentMemory]:
    events = [
        episode(
            "shop",
            "store opening",
            "Gina shows Jon her new store.",
            key_quotes=_quotes(
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
            key_quotes=_quotes(
                ("s1", "Jon", "The decor I picked for the store made it look bigger, the decor is the key."),
                ("s2", "Gina", "Magazines always give me ideas for my home."),
            ),
            participants=["jon"],
            start_ts="2023-03-01T10:00:00Z",
            end_ts="2023-03-01T11:00:00Z",
        ),
    ]
    for k in range(12):  # other days, so that the question's words are rare
        events.append(
            episode(
                "shop",
                f"day {k}",
                "small talk",
                key_quotes=_quotes(
                    (f"x{k}", "Jon", f"The weather on day {k} was grey and the bus was late again."),
                    (f"y{k}", "Gina", f"I baked bread number {k} and walked the dog in the park."),
                ),
                participants=["jon"],
                start_ts=f"2023-04-{k + 1:02d}T10:00:00Z",
                end_ts=f"2023-04-{k + 1:02d}T11:00:00Z",
            )
        )
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
