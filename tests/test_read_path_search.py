"""Episode search on the read path: the faster internals rank exactly as the plain queries did.

The read path avoids three costs of a large archive without changing what a
small one returns: a prefix term covering one indexed word is matched as that
word, document counts are cached per archive version, and the no-match
fallback reads only the agent's newest episodes. Only when every query term
is more common than the candidate cap do candidates come from the newest
matches (a window), which these tests show on a tiny cap.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from helpers_runtime import append, episode
from tiermem.runtime import archive_stats, episode_search, fts_terms, own_episodes
from tiermem.runtime.episode_search import search_episodes
from tiermem.runtime.memory import AgentMemory, open_memory
from tiermem.runtime.projector import project
from tiermem.runtime.quote_search import recall_lines, search_quotes

from tiermem.settings import Settings

TOPICS = [
    "painting a lake at dawn",
    "painted the kitchen walls teal",
    "paint shop opened downtown",
    "hiking on Mount Tam with the dog",
    "hiked the coastal trail in May",
    "baking sourdough bread on Sunday",
    "the bakery sold out of croissants",
    "quilt for my sister in mustard and teal",
    "guitar lessons every Tuesday evening",
    "the concert in January 2024 was loud",
    "adopted a kitten named Miso",
    "the weather report promised rain",
]
PEOPLE = ["alice", "bob", "carol"]
QUERIES = [
    "What did she paint?",
    "When did Alice go hiking?",
    "bread baking",
    "What colour was the quilt?",
    "guitar lessons Tuesday",
    "concert January 2024",
    "kitten name",
    "weather rain report",
    "painted walls teal",
    "zebra crossing",  # no match: the fallback
    "the a of",  # stop words only
    "hike dog trail lake",
]


def _archive(settings: Settings, agents: tuple[str, ...] = ("npc", "other"), per_agent: int = 120) -> None:
    rng = random.Random(3)
    events = []
    for agent in agents:
        for i in range(per_agent):
            day = 1 + i % 28
            a, b = rng.sample(TOPICS, 2)
            events.append(
                episode(
                    agent,
                    f"{a.split()[0]} {i}",
                    f"{a}; later {b}",
                    key_quotes=[
                        {"text": f"I remember {a}", "event_id": f"{agent}-q{i}a", "speaker": "Alice"},
                        {"text": f"and then {b}", "event_id": f"{agent}-q{i}b", "speaker": "Bob"},
                    ],
                    participants=rng.sample(PEOPLE, 1 + i % 2),
                    start_ts=f"2026-03-{day:02d}T10:00:00Z",
                    end_ts=f"2026-03-{day:02d}T11:00:00Z",
                    importance=1 + i % 10,
                    source_event_ids=[f"src-{agent}-{i}"],
                )
            )
    append(settings, *events)
    project(settings)


@pytest.fixture
def memory(settings: Settings) -> Iterator[AgentMemory]:
    _archive(settings)
    with open_memory(settings, "npc") as m:
        yield m


def _plain_frequencies(conn: Any, terms: Any, *_: Any) -> dict[str, int]:
    """The frequencies as before: no single-word rewrite, no cache."""
    return fts_terms.document_frequencies(conn, "episodes_fts", terms)


def _all_results(m: AgentMemory) -> list[Any]:
    out: list[Any] = []
    for user in (None, *PEOPLE):
        who = m.principal.as_user(user) if user else m.principal
        for q in QUERIES:
            out.append(search_episodes(m.conn, who, q, None, 5))
            out.append(search_episodes(m.conn, who, q, "bob", 5))
            out.append(search_quotes(m.conn, who, q, None, 40))
            out.append(recall_lines(m.conn, who, q, None, 300))
    return out


def test_the_fast_path_ranks_exactly_as_the_plain_queries(
    memory: AgentMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = _all_results(memory)
    again = _all_results(memory)  # now from the caches
    with monkeypatch.context() as patch:
        patch.setattr(archive_stats, "frequencies", _plain_frequencies)
        plain = _all_results(memory)
    assert fast == again == plain
    assert sum(1 for r in fast if r) > len(fast) // 2  # most queries do find something


def test_single_word_prefixes_are_matched_as_that_word(memory: AgentMemory) -> None:
    single: dict[str, str] = {}
    df = fts_terms.document_frequencies(
        memory.conn, "episodes_fts", ["kitten", "paint", "hike"], single=single
    )
    # "kitten" and "hike"(d) each cover one indexed word; "paint" covers paint, painted, painting.
    assert single == {"kitten": "kitten", "hike": "hiked"}
    assert df["paint"] > df["kitten"] > 0


def test_counts_follow_a_new_episode(memory: AgentMemory, settings: Settings) -> None:
    before = fts_terms.document_frequencies(memory.conn, "episodes_fts", ["kitten"])
    kept = episode_search._frequencies(memory.conn, ["kitten"])  # kept by the searches' statistics
    assert kept == before
    append(settings, episode("npc", "kitten again", "the kitten Miso again", source_event_ids=["src-k"]))
    project(settings)
    after = fts_terms.document_frequencies(memory.conn, "episodes_fts", ["kitten"])
    assert after["kitten"] == before["kitten"] + 1
    assert episode_search._frequencies(memory.conn, ["kitten"]) == after


def test_common_terms_take_candidates_from_the_newest_matches(
    memory: AgentMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every term above the cap: the window decides, BM25 does not scan every match (through the
    # index: no agent's own copy answers, runtime.own_episodes).
    monkeypatch.setattr(own_episodes, "MAX_EPISODES", 0)
    monkeypatch.setattr(fts_terms, "CANDIDATE_DOC_CAP", 5)
    monkeypatch.setattr(fts_terms, "WINDOW_DOCS", 12)
    conn = memory.conn
    mine = ("episodes", "c.agent_id = ?", ["npc"])
    floor = fts_terms.newest_window(conn, "episodes_fts", '"teal"', owner_filter=mine)
    newest = conn.execute(
        "SELECT f.rowid FROM episodes_fts f JOIN episodes e ON e.rowid = f.rowid"
        " WHERE episodes_fts MATCH '\"teal\"' AND e.agent_id = 'npc' ORDER BY f.rowid DESC LIMIT 12"
    ).fetchall()
    assert len(newest) == 12 and floor == newest[-1][0]
    found = search_episodes(conn, memory.principal.as_user("alice"), "teal", None, 50)
    rowids = {
        conn.execute("SELECT rowid FROM episodes WHERE episode_id = ?", [e["episode_id"]]).fetchone()[0]
        for e in found
    }
    assert found and rowids <= {r[0] for r in newest}
    assert all(r >= floor for r in rowids)
    # Fewer matches than the window: no bound at all.
    assert fts_terms.newest_window(conn, "episodes_fts", '"nosuchword"') == 0


def test_the_fallback_reads_only_the_newest_episodes(
    memory: AgentMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = memory.principal.as_user("alice")
    everything = search_episodes(memory.conn, alice, "zebra crossing", None, 5)
    assert everything  # nothing matches: the most important recent episodes stand in
    monkeypatch.setattr(episode_search, "FALLBACK_SCAN", 20)
    bounded = search_episodes(memory.conn, alice, "zebra crossing", None, 5)
    newest = {
        r[0]
        for r in memory.conn.execute(
            "SELECT episode_id FROM episodes WHERE agent_id = 'npc' ORDER BY end_ts DESC LIMIT 20"
        )
    }
    assert bounded and {e["episode_id"] for e in bounded} <= newest
    assert {e["episode_id"] for e in everything} != {e["episode_id"] for e in bounded}


def _plain_unfolded(conn: Any, who: Any, query: str, limit: int, exclude: frozenset[str]) -> list[Any]:
    """The search over turns no episode covers yet, as first written: every row's words, every term."""
    from tiermem.runtime.episode_search import query_matches
    from tiermem.runtime.hotstore import item_clause

    where, params = item_clause(who, "w")
    rows = conn.execute(
        "SELECT w.event_id, w.ts, w.user, w.user_message, w.agent_response FROM wm_items w"
        f" WHERE w.kind = 'interaction' AND {where}"
        " AND NOT EXISTS (SELECT 1 FROM folded_turns t WHERE t.event_id = w.event_id)"
        " ORDER BY w.ts DESC, w.item_id DESC LIMIT 400",
        params,
    ).fetchall()
    scored = []
    for rank, r in enumerate(rows):
        hits = query_matches(query, f"{r[3] or ''} {r[4] or ''}")
        if r[0] not in exclude and hits:
            item = {"event_id": r[0], "ts": r[1], "user": r[2], "user_message": r[3] or ""}
            scored.append((-hits, rank, {**item, "agent_response": r[4] or "", "score": float(hits)}))
    scored.sort(key=lambda s: (s[0], s[1]))
    return [item for _, _, item in scored[:limit]]


def test_turns_search_finds_what_the_plain_scan_found(settings: Settings) -> None:
    from helpers_runtime import interaction
    from tiermem.runtime.unfolded import search_unfolded

    rng = random.Random(5)
    turns = [
        interaction(
            "npc",
            f"{rng.choice(TOPICS)} ({i})",
            f"Caf\u00e9 note: {rng.choice(TOPICS)}; painting-walls? {i}",
            user=rng.choice(PEOPLE),
            ts=f"2026-04-{1 + i % 28:02d}T10:{i % 60:02d}:00Z",
        )
        for i in range(600)  # more than the scan reads
    ]
    ids = append(settings, *turns)
    project(settings)
    exclude = frozenset(ids[-7:])
    with open_memory(settings, "npc") as m:
        for user in PEOPLE:
            who = m.principal.as_user(user)
            for q in [*QUERIES, "caf note", "painting walls"]:
                for _ in range(2):  # the second time from the word cache
                    assert search_unfolded(m.conn, who, q, None, 5, exclude) == _plain_unfolded(
                        m.conn, who, q, 5, exclude
                    )


def test_quote_term_weights_count_what_a_pass_over_every_quote_counts(memory: AgentMemory) -> None:
    import math

    import orjson
    from tiermem.runtime.episode_search import _WORD
    from tiermem.runtime.quote_search import _group_idf, query_term_groups

    quote_words = [
        frozenset(_WORD.findall(str(q["text"]).lower()))
        for (raw,) in memory.conn.execute("SELECT key_quotes FROM episodes WHERE agent_id = 'npc'")
        for q in orjson.loads(raw or "[]")
        if isinstance(q, dict) and q.get("text")
    ]
    n = len(quote_words)
    for q in [*QUERIES, "What did she make?", "the people she met", "I do"]:
        groups = query_term_groups(q)
        expected = []
        for g in groups:
            exact = {f for f in g if len(f) < 4}
            prefixes = tuple(f for f in g if len(f) >= 4)
            df = sum(1 for ws in quote_words if (ws & exact) or any(w.startswith(prefixes) for w in ws))
            expected.append(math.log(1 + (n - df + 0.5) / (df + 0.5)))
        assert _group_idf(memory.conn, "npc", groups, {}) == expected
