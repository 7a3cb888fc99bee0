"""Erased text does not stay in the process's caches of prepared texts, even where no search would
serve it: the first read after an erasure drops what was read before it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers_runtime import append, episode
from tiermem.runtime import archive_stats, fts_mirror, fts_rows, own_episodes, unfolded
from tiermem.runtime.episode_text import TEXTS
from tiermem.runtime.sqlite_store import SQLiteHotStore

from tiermem import Memory
from tiermem.settings import resolve_settings


@pytest.fixture(autouse=True)
def _nothing_kept_before() -> Iterator[None]:
    """`_held` looks through every store's kept data: another test's canaries (kept for its own
    store, which no erasure here reaches) must not be counted as this test's leftovers."""
    archive_stats.clear()
    fts_mirror.clear()
    fts_rows._KEPT.clear()
    unfolded._TURNS.clear()
    own_episodes.clear()
    TEXTS.clear()
    yield


FILLER = " ".join(f"filler{k} about the garden and the pot" for k in range(120))  # long: indexed


def _held(canary: str) -> tuple[int, int]:
    """(prepared episodes whose passages hold `canary` and kept episode rows that name it, words of
    met turns and kept term statistics that are `canary`)."""
    texts = sum(any(canary in t for t in e.passages.texts) for e in TEXTS.entries.values())
    rows = sum(canary in str(row) for kept in fts_rows._KEPT.by_cols.values() for row in kept.values())
    copy = fts_mirror._KEPT.mirror  # the kept copy of the index's counts: its tokens
    tokens = sum(canary.lower() in token for token in copy.postings) if copy is not None else 0
    # The agents' own copies (runtime.own_episodes): their tokens, owners and participants.
    for own in own_episodes._KEPT.copies.values():
        tokens += sum(canary.lower() in token for token in own.postings)
        tokens += sum(canary.lower() in str(o).lower() for o in (*own.owners, *own.participants))
    words = sum(1 for _, word in unfolded._TURNS.by_word if canary.lower() in word)
    # The term statistics' words: each agent's quote words, the one word a prefix term covers, the
    # terms (a question's words) and their heads, the agents.
    low = canary.lower()
    for kept in archive_stats._KEPT.stores.values():
        words += sum(low in w for q in kept.quotes.values() for w in q.by_word)
        words += sum(low in t.word for t in kept.terms.values())
        words += sum(low in w for t in kept.terms.values() for w in t.covered or ())
        words += sum(low in t for t in kept.terms) + sum(low in t for _, t in kept.agent_terms)
        words += sum(len(h) >= 4 and h in low for h in kept.heads)
        words += sum(low in a.lower() for a in kept.agents) + sum(
            low in a.lower() for a, _ in kept.agent_terms
        )
    return texts + rows + tokens, words


def _told_secrets() -> list[dict[str, Any]]:
    """Agent a1's episode of alice's canary secret ("zqcanary") and one of bob's, each owned by its teller."""
    return [
        episode(
            "a1",
            f"{user} and the pot",
            f"{user} told the {word} secret about the pot",
            participants=[user],
            key_quotes=[{"speaker": user, "text": f"my {word} secret is blue", "event_id": f"q-{user}"}],
            source_event_ids=[f"s-{user}"],
        )
        for user, word in (("alice", "zqcanary"), ("bob", "pot"))
    ]


def _red_pot_episodes(tmp_path: Path, **canaries: str) -> None:
    """One long episode of agent a1 per user, each holding that user's canary."""
    settings = resolve_settings(data_dir=tmp_path / "data", env={})
    append(
        settings,
        *(
            episode(
                "a1",
                f"{user} and the red pot",
                f"{user} told the {canary} secret about the red pot",
                key_quotes=[{"speaker": user, "text": f"red pot {FILLER}", "event_id": f"q-{user}"}],
                participants=[user],
                source_event_ids=[f"s-{user}"],
            )
            for user, canary in canaries.items()
        ),
    )


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
        quote_words = [
            w for kept in archive_stats._KEPT.stores.values() for q in kept.quotes.values() for w in q.by_word
        ]
        assert "foldedcanary2" in quote_words  # the term weights' index of the agent's quotes
        mem.forget(event=folded[2], reason="test")
        mem.forget(event=unfolded_id, reason="test")
        mem.refresh()
        out = recall()
        assert "FOLDEDCANARY2" not in out and "LOOSECANARY" not in out
        assert _held("FOLDEDCANARY2") == (0, 0) and _held("LOOSECANARY") == (0, 0)
    finally:
        mem.close()


def test_an_erased_episode_leaves_the_kept_rows_whoever_reads_first(tmp_path: Path) -> None:
    """The kept candidate rows go at the first read after an erasure, even a reader's whose
    question reads no episode row at all."""
    _red_pot_episodes(tmp_path, alice="EPICANARY", bob="BOBCANARY")
    mem = Memory.open(tmp_path / "data", env={})
    try:
        mem.refresh()
        bot = mem.agent("a1")
        bot.call_tool("recall_memory", {"query": "red pot secret"}, user="alice")
        bot.call_tool("recall_memory", {"query": "told the secret"}, user="alice")  # new words: the copy
        copy = fts_mirror._KEPT.mirror
        assert copy is not None and "epicanary" in copy.postings  # her episode's words are kept
        assert _held("EPICANARY")[0]  # her episode's row and text are kept
        mem.forget(user="alice", reason="test")
        mem.refresh()
        bot.call_tool("recall_memory", {"query": "what is it"}, user="carol")  # no word: no copy asked
        assert fts_mirror._KEPT.mirror is None
        out = str(bot.call_tool("recall_memory", {"query": "zzzz qqqq"}, user="carol"))  # sees nothing
        assert "EPICANARY" not in out
        assert _held("EPICANARY") == (0, 0)
        out = str(bot.call_tool("recall_memory", {"query": "red pot secret"}, user="bob"))
        assert "EPICANARY" not in out
        assert _held("EPICANARY") == (0, 0)
        assert _held("BOBCANARY")[0]  # what is read after the erasure is kept again
    finally:
        mem.close()


def test_an_erased_episode_leaves_the_tokenizers_runs(tmp_path: Path) -> None:
    """Text with other than ASCII letters is tokenized by the index's own tokenizer, whose runs are
    kept for every store of the process: an erasure in any store drops them."""
    _red_pot_episodes(tmp_path, alice="EPICANARYé", bob="BOBCANARYé")
    fts_mirror.clear()
    mem = Memory.open(tmp_path / "data", env={})

    def runs(canary: str) -> int:
        return sum(canary in run for run in fts_mirror._TOKENIZER.kept)

    try:
        mem.refresh()
        bot = mem.agent("a1")
        bot.call_tool("recall_memory", {"query": "red pot secret"}, user="alice")
        bot.call_tool("recall_memory", {"query": "told the secret"}, user="alice")  # new words: the copy
        assert fts_mirror._KEPT.mirror is not None and runs("EPICANARY")
        mem.forget(user="alice", reason="test")
        mem.refresh()
        bot.call_tool("recall_memory", {"query": "what is it"}, user="carol")
        assert not runs("EPICANARY")
        bot.call_tool("recall_memory", {"query": "red pot secret"}, user="bob")
        bot.call_tool("recall_memory", {"query": "told the pot"}, user="bob")
        assert fts_mirror._KEPT.mirror is not None and runs("BOBCANARY") and not runs("EPICANARY")
    finally:
        mem.close()
        fts_mirror.clear()


def test_an_erasure_leaves_the_term_statistics_with_no_read_after_it(tmp_path: Path) -> None:
    """The erasure drops the store's term statistics at once: its quote words, the words its terms
    cover and the terms of the erased user's questions, though no search reads the store after it."""
    settings = resolve_settings(data_dir=tmp_path / "data", env={})
    append(settings, *_told_secrets())
    mem = Memory.open(tmp_path / "data", env={})
    try:
        mem.refresh()
        bot = mem.agent("a1")
        bot.call_tool("recall_memory", {"query": "zqcanary secret"}, user="alice")
        bot.call_tool("recall_memory", {"query": "my qzdiagnosis pot"}, user="alice")
        assert _held("zqcanary")[1] and _held("qzdiagnosis")[1]  # kept before
        mem.forget(user="alice", reason="test")
        mem.refresh()
        assert _held("zqcanary") == (0, 0) and _held("qzdiagnosis") == (0, 0)
        bot.call_tool("recall_memory", {"query": "pot story"}, user="bob")
        assert _held("zqcanary") == (0, 0) and _held("qzdiagnosis") == (0, 0)
    finally:
        mem.close()


def test_a_projection_that_fails_after_its_erasure_still_drops_the_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The erasure's batch is committed, then the pass fails (a later batch, a full disk): the scrub
    at the pass's end is not reached, and the caches drop the erased text all the same."""
    _red_pot_episodes(tmp_path, alice="EPICANARY", bob="BOBCANARY")
    mem = Memory.open(tmp_path / "data", env={})
    try:
        mem.refresh()
        bot = mem.agent("a1")
        bot.call_tool("recall_memory", {"query": "red pot secret"}, user="alice")
        assert _held("EPICANARY")[0]
        apply_batch = SQLiteHotStore.apply_batch

        def then_fail(self: SQLiteHotStore, batch: Any, meta: Any, info: Any) -> Any:
            out = apply_batch(self, batch, meta, info)
            if info.erasures:
                raise OSError("no space left on device")
            return out

        monkeypatch.setattr(SQLiteHotStore, "apply_batch", then_fail)
        with pytest.raises(OSError):
            mem.forget(user="alice", reason="test")  # its projection pass fails after the erasure
        assert _held("EPICANARY") == (0, 0)
    finally:
        monkeypatch.undo()
        mem.close()


def test_an_erasure_drops_every_connections_kept_tries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kept candidate tries are keyed by their MATCH text: for an agent among others, a prefix is
    written as the words it covers, whoever's they are. An erasure drops every connection's, not
    only at that connection's next search (which may never come)."""
    from tiermem.runtime import episode_search, fts_terms

    monkeypatch.setattr(fts_terms, "CANDIDATE_DOC_CAP", 1)  # every try windowed, the words written out
    monkeypatch.setattr(own_episodes, "MAX_EPISODES", 0)  # tried through the index, not a1's own copy
    settings = resolve_settings(data_dir=tmp_path / "data", env={})
    events = [
        episode(
            "a1",
            "alice paints",
            "alice painted the paintzcanary fence",
            participants=["alice"],
            source_event_ids=["s-a"],
        ),
        episode(
            "a1", "bob paints", "bob is painting the shed", participants=["bob"], source_event_ids=["s-b"]
        ),
        *(
            episode("a2", f"other {i}", f"painter and painted walls {i}", source_event_ids=[f"s-o{i}"])
            for i in range(6)
        ),
    ]
    append(settings, *events)
    mem = Memory.open(tmp_path / "data", env={})
    try:
        mem.refresh()
        bot = mem.agent("a1")
        assert "paintzcanary" not in str(bot.call_tool("recall_memory", {"query": "painting"}, user="bob"))

        def kept_words() -> int:
            memos = [c.candidate_memo for c in list(episode_search._MEMOS.conns) if c.candidate_memo]
            return sum("paintzcanary" in str(key) for memo in memos for key in memo[1])

        assert kept_words() == 1  # bob's try names alice's word (never her episode)
        mem.forget(user="alice", reason="test")
        assert kept_words() == 0
    finally:
        mem.close()


def test_an_erasure_drops_the_agents_own_copy(tmp_path: Path) -> None:
    """An agent with a small share of the archive is searched over its own copy of its episodes
    (runtime.own_episodes): the copy holds the erased user's words until the erasure drops it."""
    settings = resolve_settings(data_dir=tmp_path / "data", env={})
    events = [
        *_told_secrets(),
        *(
            episode("a2", f"other {i}", f"other pot {i}", participants=["carol"], source_event_ids=[f"o-{i}"])
            for i in range(6)
        ),
    ]
    append(settings, *events)
    mem = Memory.open(tmp_path / "data", env={})
    try:
        mem.refresh()
        bot = mem.agent("a1")
        assert "zqcanary" in str(bot.call_tool("recall_memory", {"query": "zqcanary secret"}, user="alice"))
        assert own_episodes._KEPT.copies and _held("zqcanary")[0]
        mem.forget(user="alice", reason="test")
        assert _held("zqcanary") == (0, 0)
        assert "zqcanary" not in str(bot.call_tool("recall_memory", {"query": "pot zqcanary"}, user="bob"))
        assert own_episodes._KEPT.copies and _held("zqcanary") == (0, 0)
    finally:
        mem.close()
