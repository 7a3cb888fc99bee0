"""Which passages a quote search shows past the ones that match: every passage of a stored episode
that was a candidate, even one scoring nothing, in its episode's order after those that score."""

from __future__ import annotations

from helpers_runtime import append, episode, quotes
from tiermem.runtime import quote_search as qs
from tiermem.runtime.memory import open_memory
from tiermem.runtime.projector import project

from tiermem.settings import Settings


def test_a_stored_episode_s_passages_scoring_nothing_are_shown(settings: Settings) -> None:
    turns = [
        ("v0", "Ada", "I started violin lessons at the old school."),
        ("v1", "Tim", "That sounds lovely, how is it going?"),
        ("v2", "Ada", "Slowly, my fingers hurt after an hour."),
        ("v3", "Tim", "Keep going, it gets easier."),
        ("v4", "Ada", "We also repainted the kitchen yellow."),
        ("v5", "Tim", "Yellow kitchens feel warm in winter."),
        ("v6", "Ada", "The cat hated the smell of paint."),
        ("v7", "Tim", "Cats usually hate new smells."),
    ]
    append(settings, episode("talker", "a day at home", "chatting", key_quotes=quotes(*turns)))
    project(settings)
    with open_memory(settings, "talker", user="ada") as m:
        # An episode stored without an importance (the column allows it; the search reads it as 0):
        # a passage without a matching word, nor one beside it, then scores exactly nothing.
        m.conn.execute("UPDATE episodes SET importance = NULL")
        found = qs.search_quotes(m.conn, m.principal, "violin", None, 20)
    shown = [item["event_id"] for item in found]
    assert shown[0] == "v0"
    assert sorted(shown) == [e for e, _, _ in turns]  # every turn of the candidate episode
    nothing = [item["event_id"] for item in found if item["score"] == 0]
    assert nothing == ["v3", "v4", "v5", "v6", "v7"]  # nothing said beside a match
