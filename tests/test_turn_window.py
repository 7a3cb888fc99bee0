"""A speaker's next turn on a matching topic shares that turn's match (runtime.turn_window).

"I adopted a pup from the shelter" / "That is wonderful news!" / "He is a golden
retriever called Ned": the third turn answers "What breed is the pup James
adopted from the shelter?" without a word of it, and the turn between says
nothing either. A fixture where it is delivered within a small budget only
because of the rule, against a turn elsewhere with one of the question's words.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from helpers_runtime import append, episode, quotes, small_talk_days
from tiermem.runtime import quote_search as qs
from tiermem.runtime import turn_window
from tiermem.runtime.memory import AgentMemory, open_memory
from tiermem.runtime.projector import project

from tiermem.settings import Settings

QUESTION = "What breed is the pup James adopted from the shelter?"
ANSWER = "He is a golden retriever called Ned and he loves the beach."


@pytest.fixture
def memory(settings: Settings) -> Iterator[AgentMemory]:
    events = [
        episode(
            "pets",
            "weekend news",
            "Two friends catch up.",
            key_quotes=quotes(
                ("a1", "James", "I adopted a pup from the shelter in Stamford last week."),
                ("a2", "John", "That is wonderful news, congratulations!"),
                ("a3", "James", ANSWER),
            ),
            participants=["john"],
            start_ts="2023-02-01T10:00:00Z",
            end_ts="2023-02-01T11:00:00Z",
        ),
        episode(
            "pets",
            "work talk",
            "Two friends chat.",
            key_quotes=quotes(
                ("r1", "John", "My cousin volunteers at a shelter on Sundays."),
                ("r2", "James", "Nice, my week was all spreadsheets."),
            ),
            participants=["john"],
            start_ts="2023-03-01T10:00:00Z",
            end_ts="2023-03-01T11:00:00Z",
        ),
    ]
    events += small_talk_days("pets", ("John", "James"), "fixed the bike", "john")
    append(settings, *events)
    project(settings)
    with open_memory(settings, "pets", user="john") as m:
        yield m


def _rank(memory: AgentMemory, event_id: str) -> int:
    found = qs.search_quotes(memory.conn, memory.principal, QUESTION, None, 10)
    return [q["event_id"] for q in found].index(event_id)


def test_the_speakers_next_turn_outranks_a_turn_with_one_word(memory: AgentMemory) -> None:
    assert _rank(memory, "a1") == 0
    assert _rank(memory, "a3") < _rank(memory, "r1")
    lines = qs.recall_lines(memory.conn, memory.principal, QUESTION, budget=60)
    assert any(ANSWER in text for text, _ in lines)


def test_without_the_rule_the_answer_is_not_delivered(
    memory: AgentMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(turn_window, "FAR_WEIGHT", 0.0)
    assert _rank(memory, "a3") > _rank(memory, "r1")
    lines = qs.recall_lines(memory.conn, memory.principal, QUESTION, budget=60)
    assert not any(ANSWER in text for text, _ in lines)


def test_two_places_away_stays_within_the_episode() -> None:
    own = np.array([5.0, 0.0, 0.0, 7.0, 0.0, 1.0])
    first = np.array([True, False, False, True, False, False])  # two episodes: passages 0-2, 3-5
    last = np.array([False, False, True, False, False, True])
    far = turn_window.further_neighbours(own, first, last, np.arange(len(own)))
    share = turn_window.FAR_WEIGHT
    # Passage 2 gets passage 0's match; passage 1 has nothing two away in its episode; passage 3
    # (the second episode's first) does not reach back to passage 1 nor get passage 5's wrong side.
    assert far.tolist() == pytest.approx([0.0, 0.0, 5.0 * share, 1.0 * share, 0.0, 7.0 * share])
    # Asked for some passages only (the bounded search), each gets what it gets among all of them.
    some = np.array([2, 3, 5])
    assert turn_window.further_neighbours(own, first, last, some).tolist() == pytest.approx(
        far[some].tolist()
    )
