"""The turn search's scan numbered once and kept while it is the same: what the plain scan finds.

`runtime.unfolded` keeps the last scan's turn numbers and, per term, the
turns holding it, while the scan is the same kept rows, the excluded turns
the same and no erasure came. These tests ask question after question,
alternating readers and excluded turns, and add turns (a new scan) and erase
one between, each answer compared with the plain scan's.
"""

from __future__ import annotations

import random

from helpers_runtime import append, interaction
from test_read_path_search import PEOPLE, QUERIES, TOPICS, _plain_unfolded
from tiermem.runtime import unfolded
from tiermem.runtime.memory import open_memory
from tiermem.runtime.projector import project
from tiermem.runtime.unfolded import search_unfolded

from tiermem import Memory
from tiermem.settings import Settings


def _turns(rng: random.Random, start: int, n: int) -> list[dict[str, object]]:
    return [
        interaction(
            "npc",
            f"{rng.choice(TOPICS)} ({i})",
            f"note: {rng.choice(TOPICS)} {i}",
            user=rng.choice(PEOPLE),
            ts=f"2026-04-{1 + i % 28:02d}T10:{i % 60:02d}:00Z",
        )
        for i in range(start, start + n)
    ]


def test_kept_scans_answer_as_the_plain_scan(settings: Settings) -> None:
    rng = random.Random(8)
    ids = append(settings, *_turns(rng, 0, 450))
    project(settings)
    excludes = [frozenset(), frozenset(ids[-5:])]
    with open_memory(settings, "npc") as m:

        def all_equal() -> int:
            kept = 0
            for user in PEOPLE[:3]:
                who = m.principal.as_user(user)
                for exclude in excludes:
                    for q in [*QUERIES, "note painting", "note"]:
                        before = unfolded._LAST[0] if unfolded._LAST else None
                        got = search_unfolded(m.conn, who, q, None, 5, exclude)
                        assert got == _plain_unfolded(m.conn, who, q, 5, exclude), (user, q, exclude)
                        kept += unfolded._LAST[0] is before
            return kept

        assert all_equal() > 20  # most questions were answered from the kept scan
        append(settings, *_turns(rng, 450, 30))  # newer turns: every reader's scan changes
        project(settings)
        assert all_equal() > 20
        erasing = Memory.open(settings.data_dir, env={}, fsync="none")
        try:  # an erasure through another process's memory: every scan is numbered again
            erasing.forget(event=ids[-1], reason="test")
            erasing.refresh()
        finally:
            erasing.close()
        generation = unfolded._TURNS.generation
        assert all_equal() > 20
        assert unfolded._TURNS.generation > generation  # the turns' words were dropped and read again
