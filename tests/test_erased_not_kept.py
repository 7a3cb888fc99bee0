"""Erased text does not stay in the process's caches of prepared texts, even where no search would
serve it: the first read after an erasure drops what was read before it."""

from __future__ import annotations

from pathlib import Path

from tiermem.runtime import unfolded
from tiermem.runtime.episode_text import TEXTS

from tiermem import Memory

FILLER = " ".join(f"filler{k} about the garden and the pot" for k in range(120))  # long: indexed


def _held(canary: str) -> tuple[int, int]:
    """(prepared episodes whose passages hold `canary`, words of met turns that are `canary`)."""
    texts = sum(any(canary in t for t in e.passages.texts) for e in TEXTS.entries.values())
    words = sum(1 for _, word in unfolded._TURNS.by_word if canary.lower() in word)
    return texts, words


def test_an_erased_turn_leaves_the_prepared_texts_and_the_turn_words(tmp_path: Path) -> None:
    mem = Memory.open(tmp_path / "data", env={}, compressor={"min_unprocessed": 1, "keep_recent": 0})
    try:
        bot = mem.agent("a1")
        folded = [
            bot.record_turn(
                "alice",
                f"I hid the FOLDEDCANARY{i} key. {FILLER} It is under the red pot.",
                f"Under the red pot, number {i}.",
                ts=f"2024-03-01T1{i}:00:00Z",
            ).event_id
            for i in range(4)
        ]
        mem.compress()
        mem.refresh()
        unfolded_id = bot.record_turn(
            "alice",
            "The spare LOOSECANARY key is under the red pot too.",
            "Noted.",
            ts="2024-03-02T10:00:00Z",
        ).event_id
        mem.refresh()

        def recall() -> str:
            return str(bot.call_tool("recall_memory", {"query": "key under the red pot"}, user="alice"))

        recall()  # reads the episodes and the unfolded turn into the caches
        assert _held("FOLDEDCANARY2")[0] and _held("LOOSECANARY")[1]
        mem.forget(event=folded[2], reason="test")
        mem.forget(event=unfolded_id, reason="test")
        mem.refresh()
        out = recall()
        assert "FOLDEDCANARY2" not in out and "LOOSECANARY" not in out
        assert _held("FOLDEDCANARY2") == (0, 0) and _held("LOOSECANARY") == (0, 0)
    finally:
        mem.close()
