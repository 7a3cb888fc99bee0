"""The turn search's scan numbered once and kept while it is the same: what the plain scan finds.

`runtime.unfolded` keeps the last scan's turn numbers and, per term, the
turns holding it, while the scan is the same kept rows, the excluded turns
the same and no erasure came. These tests ask question after question, each
exclusion asked by one reader after another (a reader's scan must never
answer the next), and add turns (a new scan) and erase one between, each
answer compared with the plain scan's; and they bound what a scan keeps.
"""

from __future__ import annotations

import random
from array import array

import pytest
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
    queries = [*QUERIES, "note painting", "note"]
    with open_memory(settings, "npc") as m:

        def ask(user: str, q: str, exclude: frozenset[str]) -> unfolded._Scan:
            who = m.principal.as_user(user)
            got = search_unfolded(m.conn, who, q, None, 5, exclude)
            assert got == _plain_unfolded(m.conn, who, q, 5, exclude), (user, q, exclude)
            return unfolded._LAST[0]

        def all_equal() -> int:
            kept = 0
            for exclude in excludes:  # the same exclusion asked by each reader in turn
                scans = []
                for user in PEOPLE[:3]:
                    first = ask(user, queries[0], exclude)
                    assert all(first is not other for other in scans), user  # never another reader's
                    scans.append(first)
                    for q in queries[1:]:
                        kept += ask(user, q, exclude) is first
                # Readers alternating question by question: each question scans its reader's turns.
                for q in queries[:4]:
                    before = None
                    for user in [*PEOPLE[:3], PEOPLE[0]]:
                        scan = ask(user, q, exclude)
                        assert scan is not before, (user, q)
                        before = scan
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


def test_a_scan_keeps_a_bounded_number_of_turns(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """However many terms are asked, the turns kept with a scan stay under `HELD_NUMBERS` in all,
    as compact arrays, and the answers stay the plain scan's."""
    rng = random.Random(9)
    append(settings, *_turns(rng, 0, 120))
    project(settings)
    monkeypatch.setattr(unfolded, "HELD_NUMBERS", 150)
    words = [*sorted({w for topic in TOPICS for w in topic.lower().split() if len(w) > 2}), "note"]
    with open_memory(settings, "npc") as m:
        who = m.principal.as_user(PEOPLE[0])
        most = 0
        for _ in range(3):
            for word in words:
                got = search_unfolded(m.conn, who, word, None, 5)
                assert got == _plain_unfolded(m.conn, who, word, 5, frozenset()), word
                scan = unfolded._LAST[0]
                held = sum(len(turns) for turns in scan.held.values())
                assert held == scan.held_numbers <= unfolded.HELD_NUMBERS, word
                assert all(isinstance(turns, array) for turns in scan.held.values())
                most = max(most, held)
        assert most > 100  # the bound was reached: terms were dropped and looked up again
