"""Long conversations on the read path: prepared episodes rank exactly as scoring the text each time.

Quote and episode search no longer read, split and scan every candidate's
text per call: episodes are prepared once (runtime.episode_text) and term
counts come from an inverted index over their passages; passages are scored
over arrays. These tests pin that down against the plain way: the index's
counts against a regex pass over the text (word characters beyond ASCII,
underscores, apostrophes, overlapping prefixes), and whole searches against
a reference that scores each passage of each candidate from its text, as the
search did before (long multi-paragraph replies, named speakers, "when"
questions, months, the importance boost).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import orjson
import pytest
from helpers_dedup import dedup_set
from helpers_runtime import append, episode
from tiermem.runtime import near_duplicates as nd
from tiermem.runtime import passage_blocks, passage_compiled, turn_window
from tiermem.runtime import passage_columns as pc
from tiermem.runtime import quote_search as qs
from tiermem.runtime.episode_scores import _bm25, _term_counts
from tiermem.runtime.episode_search import _candidate_rows, _frequencies, search_episodes
from tiermem.runtime.episode_text import EpisodeTexts, TermMatcher
from tiermem.runtime.memory import AgentMemory, open_memory
from tiermem.runtime.notes import note_words, notes_for
from tiermem.runtime.passages import episode_passages
from tiermem.runtime.projector import project

from tiermem.attachments import split_described
from tiermem.dates import anchor_relative_dates, human_date
from tiermem.ids import parse_ts
from tiermem.settings import Settings

WORDS = [
    "paint",
    "painted",
    "painting",
    "paints",
    "pain",
    "painter",
    "lake",
    "dawn",
    "kitchen",
    "teal",
    "hike",
    "hiked",
    "hiking",
    "trail",
    "dog",
    "bread",
    "bake",
    "baked",
    "bakery",
    "quilt",
    "sister",
    "guitar",
    "lesson",
    "lessons",
    "concert",
    "loud",
    "kitten",
    "miso",
    "rain",
    "report",
    "budget",
    "remodel",
    "made",
    "make",
    "making",
    "went",
    "go",
    "going",
    "yesterday",
    "last",
    "week",
    "month",
    "2023",
    "may",
    "june",
]
ODD = ["café", "naïve", "foo_bar", "don't", "paint_job", "x2", "ÉCOLE", "straße", "paintérique"]


class EpisodeRows:
    """What `EpisodeTexts.prepared` asks of a connection, answered from `rows` (episode id, quotes,
    name, summary, start); the ids of each read are kept in `read`."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = list(rows)
        self.read: list[list[str]] = []

    def execute(self, sql: str, ids: list[str]) -> Any:
        self.read.append(list(ids))
        found = [r for r in self.rows if r[0] in ids]
        return SimpleNamespace(fetchall=lambda: found)


def _text(rng: random.Random, n: int) -> str:
    words = [rng.choice(WORDS if rng.random() > 0.1 else ODD) for _ in range(n)]
    out, sentence = [], []
    for i, w in enumerate(words):
        sentence.append(w)
        if len(sentence) > 6 and rng.random() < 0.2:
            out.append(" ".join(sentence).capitalize() + rng.choice([".", "!", "?"]))
            sentence = []
        if i and i % 90 == 0:
            out.append("\n\n")
    out.append(" ".join(sentence) + ".")
    return " ".join(out).replace(" \n\n ", "\n\n")


def _regex(groups: list[tuple[str, ...]]) -> re.Pattern[str]:
    """The pattern the search counted terms with: stems as prefixes, short forms whole; group k = group k."""
    parts = [
        "(" + "|".join(re.escape(f) + (r"[a-z0-9]*" if len(f) >= 4 else r"\b") for f in g) + ")"
        for g in groups
    ]
    return re.compile(r"\b(?:" + "|".join(parts) + ")")


def _regex_counts(text: str, rx: re.Pattern[str], n: int) -> list[int]:
    counts = [0] * n
    for m in rx.finditer(text):
        counts[(m.lastindex or 1) - 1] += 1
    return counts


def test_index_counts_are_those_of_a_regex_pass_over_the_text(scoring: str) -> None:
    """With the compiled count of ranges of the index and with the numpy one."""
    rng = random.Random(5)
    texts = EpisodeTexts()
    raws = [
        orjson.dumps(
            [{"text": _text(rng, rng.choice([5, 40, 300])), "event_id": f"e{i}.{j}"} for j in range(4)]
        )
        for i in range(30)
    ]
    said = "2023-05-08T13:56:00Z"
    rows = [(f"ep{i}", raw.decode(), f"Name {i}", _text(rng, 12), said) for i, raw in enumerate(raws)]

    entries = texts.prepared(EpisodeRows(rows), "db", [r[0] for r in rows])  # type: ignore[arg-type]
    assert {e.start >= 0 for e in entries} == {True, False}  # long episodes indexed, short ones not
    # A long episode's relative dates are resolved when it is prepared, against its start: those
    # of the text itself (a short one's when a search first shows them).
    at, long = parse_ts(said), [e for e in entries if e.start >= 0]
    resolved = [
        (list(e.said_anchors.get(j, ())), anchor_relative_dates(t, at))
        for e in long
        for j, t in enumerate(e.passages.texts)
    ]
    assert all(e.said_ts == said for e in long) and all(kept == fresh for kept, fresh in resolved)
    assert sum(1 for kept, _ in resolved if kept) > 10
    assert all(e.said_ts is None and not e.said_anchors for e in entries if e.start < 0)
    for groups in (
        [("paint",), ("pain",), ("lake",)],  # a word counts for the first group whose prefix it has
        [("pain",), ("paint",)],
        [("go", "went", "going"), ("make", "made", "making")],
        [("x2",), ("foo",), ("caf",), ("don",), ("t",)],
        [("stra",), ("naï",), ("école",)],
    ):
        rx = _regex(groups)
        counts = texts.term_counts(entries, groups, qs._group_matcher(groups))
        expected = [_regex_counts(p.text.lower(), rx, len(groups)) for e in entries for p in e.passages]
        assert counts.astype(int).tolist() == expected
        matcher = TermMatcher(groups)
        assert [matcher.counts(p.text.lower()) for e in entries for p in e.passages] == expected
        # A few episodes, in another order: only the postings inside them are read (a small part).
        some = [entries[k] for k in (29, 2, 19, 11, 7)]
        assert 0 < 2 * sum(len(e.passages) for e in some if e.start >= 0) < texts.words.size
        assert texts.term_counts(some, groups, qs._group_matcher(groups)).astype(int).tolist() == [
            _regex_counts(p.text.lower(), rx, len(groups)) for e in some for p in e.passages
        ]
        # The headers (name and summary) are indexed too, every episode's, and counted the same way.
        heads = [f"{r[2]} {r[3]}".lower() for r in rows]
        assert texts.head_counts(entries, groups).astype(int).tolist() == [
            _regex_counts(h, rx, len(groups)) for h in heads
        ]
        assert [e.head_spaces for e in entries] == [h.count(" ") for h in heads]
    # A second call reads nothing: every episode is prepared.
    assert texts.prepared(None, "db", ["ep3", "ep1"]) == [entries[3], entries[1]]  # type: ignore[arg-type]
    # An episode read again under another name (deleted, inserted again) is prepared again.
    rows[3] = (
        "ep3",
        orjson.dumps([{"text": "quite different words", "event_id": "x"}]).decode(),
        "renamed",
        "",
        said,
    )
    again = texts.prepared(EpisodeRows(rows), "db", ["ep3", "ep1"], ["renamed", None])  # type: ignore[arg-type]
    assert list(again[0].lowered) == ["quite different words"] and again[1] is entries[1]
    assert texts.head_counts(again, [("renamed",), ("name",)]).tolist() == [[1, 0], [0, 1]]
    twice = [again[1], again[0], again[1]]
    assert texts.head_counts(twice, [("renamed",), ("name",)]).tolist() == [[0, 1], [1, 0], [0, 1]]


def said_counts(text: str, asked: Any, n: int) -> list[float]:
    """A passage's term counts as the original per-passage scorer weighed them: its attachments'
    descriptions (`[image: ...]`) at CAPTION_WEIGHT of a said word."""
    said, described = split_described(text)
    counts: list[float] = list(_term_counts(said, asked.rx, n, asked.forms))
    if described:
        for k, c in enumerate(_term_counts(described, asked.rx, n, asked.forms)):
            counts[k] += qs.CAPTION_WEIGHT * c
    return counts


def _reference_quotes(m: AgentMemory, query: str, limit: int = 40) -> list[dict[str, Any]]:
    """search_quotes as it scored before: every passage of every candidate from the stored text."""
    conn, who = m.conn, m.principal
    groups = qs.query_term_groups(query)
    terms = [f for g in groups for f in g]
    single: dict[str, str] = {}
    overall = _frequencies(conn, terms, single)
    cols = "e.episode_id, e.name, e.summary, e.key_quotes, e.start_ts, e.end_ts, e.importance"
    rows = _candidate_rows(
        conn, who, cols, qs.PLAIN_WEIGHTS, terms, overall, None, qs.QUOTE_CANDIDATES, 3, single
    )
    asked = qs._asked(conn, who, query, groups, overall)
    weights = asked.weights
    quotes = [orjson.loads(row[3] or "[]") for row in rows]
    notes = notes_for(conn, who, {str(q["event_id"]) for qq in quotes for q in qq if q.get("event_id")})
    scored: list[tuple[float, dict[str, Any]]] = []
    for row, qq in zip(rows, quotes, strict=True):
        passages = episode_passages(qq)
        if not passages:
            continue
        n = len(groups)
        total_weight = sum(weights) or 1.0
        texts = [
            f"{p.text} {note_words(notes.get((p.event_id, p.speaker), []), p.text)}".lower() for p in passages
        ]
        counts = [said_counts(t, asked, n) for t in texts]
        turn_words: dict[int, int] = {}
        for p, t in zip(passages, texts, strict=True):
            turn_words[p.quote] = turn_words.get(p.quote, 0) + t.count(" ") + 1
        own = [_bm25(c, turn_words[p.quote], weights) for c, p in zip(counts, passages, strict=True)]
        head_text = f"{row[1] or ''} {row[2] or ''}".lower()
        head_counts = _term_counts(head_text, asked.rx, n)
        head = _bm25(head_counts, head_text.count(" ") + 1, weights, avg_len=qs.AVG_HEAD_WORDS)
        start = parse_ts(row[4])
        boost = qs._date_boost(row, asked)
        for i, p in enumerate(passages):
            answers = i > 0 and p.parts == 1 and passages[i - 1].text.lower().rstrip().endswith("?")
            share = qs.ANSWER_WEIGHT if answers else qs.NEIGHBOUR_WEIGHT
            beside = max(
                share * own[i - 1] if i > 0 else 0.0,
                qs.NEIGHBOUR_WEIGHT * own[i + 1] if i + 1 < len(passages) else 0.0,
                # The same speaker's turn two places away (runtime.turn_window).
                turn_window.FAR_WEIGHT * own[i - 2] if i > 1 else 0.0,
                turn_window.FAR_WEIGHT * own[i + 2] if i + 2 < len(passages) else 0.0,
            )
            seen = [
                bool(counts[i][k] or head_counts[k] or (i > 0 and counts[i - 1][k]))
                or bool(i + 1 < len(passages) and counts[i + 1][k])
                for k in range(n)
            ]
            coverage = sum(w for w, hit in zip(weights, seen, strict=True) if hit) / total_weight
            score = (own[i] + beside + qs.HEAD_WEIGHT * head) * (qs.COVERAGE_FLOOR + coverage) * boost
            if asked.named and p.speaker.lower() in asked.named:
                score *= qs.QUOTE_SPEAKER_BOOST
            if asked.asks_when and qs._SAYS_WHEN.search(texts[i]):
                score *= qs.WHEN_BOOST
            score += 0.01 * int(row[6] or 0)
            item = {
                "text": p.text,
                "speaker": p.speaker,
                "event_id": p.event_id,
                "part": p.part,
                "notes": qs.shown_notes(notes.get((p.event_id, p.speaker), [])),
                "episode_id": row[0],
                "ts": row[4],
                "date": human_date(start),
                "at": start,
                "cosine": None,
                "hits": frozenset(k for k in range(n) if counts[i][k]),
            }
            scored.append((score, item))
    qs._restatements_first(scored, weights)
    scored.sort(key=lambda s: (-s[0], s[1]["ts"], s[1]["event_id"], s[1]["part"]))
    out: list[dict[str, Any]] = []
    keys: list[frozenset[str]] = []
    for score, item in scored:
        key = nd._dedup_key(item["text"])
        if any(len(key & k) >= qs.DUPLICATE_JACCARD * len(key | k) for k in keys):
            continue
        keys.append(key)
        at = item.pop("at")
        item["anchors"] = [] if item["notes"] else anchor_relative_dates(item["text"], at)
        item.pop("hits")
        item["score"] = round(score, 4)
        out.append(item)
        if len(out) >= limit:
            break
    return out


@pytest.fixture
def memory(settings: Settings) -> Iterator[AgentMemory]:
    rng = random.Random(11)
    events = []
    for i in range(40):
        day = 1 + i % 28
        quotes = [
            {
                "text": _text(rng, rng.choice([8, 12, 250, 400])),
                "event_id": f"t{i}.{j}",
                "speaker": ["Ada", "Talker"][j % 2],
            }
            for j in range(6)
        ]
        if i % 3 == 0:  # a shared picture: its caption is scored at its own weight
            quotes[1] = {**quotes[1], "text": f"{quotes[1]['text']} [image: {_text(rng, 9).rstrip('.')}]"}
        if i % 4 == 1:  # a question: the turn after it shares all of its match (ANSWER_WEIGHT)
            quotes[2] = {**quotes[2], "text": quotes[2]["text"][:-1] + "?"}
        if i % 5 == 0:  # the same turn said again later: kept once
            quotes.append({**quotes[0], "event_id": f"t{i}.again"})
        events.append(
            episode(
                "talker",
                f"{rng.choice(WORDS)} {i}",
                _text(rng, 20),
                key_quotes=quotes,
                participants=["ada"],
                start_ts=f"2023-0{5 + i % 2}-{day:02d}T10:00:00Z",
                end_ts=f"2023-0{5 + i % 2}-{day:02d}T11:00:00Z",
                importance=1 + i % 10,
                source_event_ids=[f"src-{i}"],
            )
        )
    # Date notes on some turns, long (split into passages) and short: their words count with the
    # turn and lengthen every passage of it.
    notes: list[dict[str, Any]] = [
        {
            "type": "derived_note",
            "agent_id": "talker",
            "text": f"last week = {rng.choice(['2 May 2023', 'June 2023', '2022'])}; paint {rng.choice(WORDS)}",
            "kind": "dates",
            "speaker": ["Ada", "Talker"][j % 2],
            "said_ts": "2023-05-09T10:00:00Z",
            "ts": "2023-05-09T10:00:00Z",
            "user": "ada",
            "source_event_ids": [f"t{i}.{j}"],
        }
        for i in range(0, 40, 3)
        for j in (0, 2, 3)
    ]
    append(settings, *events, *notes)
    project(settings)
    with open_memory(settings, "talker", user="ada") as m:
        assert m.conn.execute("SELECT count(*) FROM notes").fetchone()[0] == len(notes)
        yield m


QUERIES = [
    "What did Ada paint?",
    "When did Talker go hiking?",
    "bread baking in May",
    "How long was the guitar lesson?",
    "kitten miso rain",
    "budget remodel made",
    "café naïve foo_bar",
    "zebra",
    "the a of",
    "paint",
]


@pytest.fixture(params=["compiled", "numpy"])
def scoring(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test with the compiled pass, then with the numpy path forced."""
    if request.param == "compiled":
        if passage_compiled._blockscore is None:
            pytest.skip("the optional extension tiermem.runtime._blockscore is not built")
        monkeypatch.setattr(passage_compiled, "ENABLED", True)
    else:
        monkeypatch.setattr(passage_compiled, "ENABLED", False)
    return str(request.param)


def test_quote_search_ranks_exactly_as_scoring_every_passage_from_its_text(
    memory: AgentMemory, scoring: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for least in (passage_blocks.MIN_PASSAGES, 0):  # as a search of this size runs, then in blocks
        monkeypatch.setattr(passage_blocks, "MIN_PASSAGES", least)
        for query in QUERIES:
            for limit in (5, 40):
                expected = _reference_quotes(memory, query, limit)
                assert qs.search_quotes(memory.conn, memory.principal, query, None, limit) == expected, query
    assert any(len(qs.search_quotes(memory.conn, memory.principal, q, None, 40)) == 40 for q in QUERIES)


def test_episode_search_quotes_come_best_first_from_the_prepared_text(memory: AgentMemory) -> None:
    for query in QUERIES:
        for ep in search_episodes(memory.conn, memory.principal, query, None, 5):
            matches = [q["match"] for q in ep["key_quotes"]]
            assert matches == sorted(matches, reverse=True)
            stored = orjson.loads(
                memory.conn.execute(
                    "SELECT key_quotes FROM episodes WHERE episode_id = ?", [ep["episode_id"]]
                ).fetchone()[0]
            )
            assert sorted(q["event_id"] for q in ep["key_quotes"]) == sorted(q["event_id"] for q in stored)
            assert all(isinstance(q["match"], float) or q["match"] == 0 for q in ep["key_quotes"])


def test_turn_search_index_finds_what_the_plain_scan_found_across_cache_drops(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inverted index over unfolded turns, also when it is dropped and rebuilt mid-way."""
    from helpers_runtime import interaction
    from test_read_path_search import _plain_unfolded
    from tiermem.runtime import unfolded

    rng = random.Random(7)
    people = ["ada", "bo"]
    turns = [
        interaction(
            "npc",
            _text(rng, rng.choice([3, 30])),
            _text(rng, rng.choice([5, 200])),
            # Agent-level turns (no user) are in every user's scan, so one scan meets some
            # turns already indexed and some not.
            **({"user": people[i % 3]} if i % 3 < 2 else {}),
            ts=f"2026-04-{1 + i % 28:02d}T10:{i % 60:02d}:00Z",
        )
        for i in range(450)
    ]
    ids = append(settings, *turns)
    project(settings)
    exclude = frozenset(ids[-5:])
    unfolded._TURNS.clear()
    # Small bounds: a user's scan (300 turns) after another's overflows the cache, so it is
    # dropped and everything the scan needs is read again, the turns it had already too.
    monkeypatch.setattr(unfolded, "WORD_CACHE", 350)
    with open_memory(settings, "npc") as m:
        for user in [*people, None, *people]:
            who = m.principal.as_user(user)
            for q in ["paint lake", "go made", "café x2", "trail dog budget", "t", "zebra", *QUERIES]:
                got = unfolded.search_unfolded(m.conn, who, q, None, 5, exclude)
                assert got == _plain_unfolded(m.conn, who, q, 5, exclude), (user, q)
        assert len(unfolded._TURNS.turns) <= 350
    monkeypatch.setattr(unfolded, "POSTINGS_CACHE", 100)  # the word-count bound drops it too
    with open_memory(settings, "npc") as m:
        who = m.principal.as_user("ada")
        for q in ["paint lake", "dawn"]:
            assert unfolded.search_unfolded(m.conn, who, q, None, 5, exclude) == _plain_unfolded(
                m.conn, who, q, 5, exclude
            )


def test_near_duplicate_word_sets_are_each_passages_words_numbered_in_one_order(memory: AgentMemory) -> None:
    """The word sets taken when an episode is prepared are exactly the words the near-duplicate check
    splits the passage's text into (numbered once, never renumbered), and a prefix is the last-met
    words of its set: words met later (by later episodes) must not change a set taken before, or
    two near-identical passages could miss each other."""
    from tiermem.runtime.episode_text import TEXTS

    def taken() -> dict[tuple[int, int], tuple[frozenset[int], tuple[int, ...]]]:
        out = {}
        for k, e in enumerate(TEXTS.entries.values()):
            for j in range(len(e.passages)):
                out[(k, j)] = dedup_set(*TEXTS.dedup(e, TEXTS.numbers), j, qs.DUPLICATE_JACCARD)
        return out

    qs.search_quotes(memory.conn, memory.principal, QUERIES[0], None, 40)
    before = taken()
    for query in QUERIES:
        qs.search_quotes(memory.conn, memory.principal, query, None, 40)
    after = taken()
    assert len(before) > 40 and all(after[k] == v for k, v in before.items())
    word_of = {n: w for w, n in TEXTS.numbers.numbers.items()}
    for k, e in enumerate(TEXTS.entries.values()):
        for j in range(len(e.passages)):
            key, prefix = after[(k, j)]
            assert {word_of[n] for n in key} == nd._dedup_key(e.passages[j].text)
            by_order = sorted(key, reverse=True)  # the last met first
            assert prefix == tuple(by_order[: len(key) - int(qs.DUPLICATE_JACCARD * len(key)) + 2])


def test_near_duplicate_words_of_any_text_are_those_of_splitting_it() -> None:
    """Taken from the index's words (ASCII text without an underscore) or split apart (any other):
    the same set as the near-duplicate check's own split of the lowered text."""
    from collections import Counter

    from tiermem.runtime.episode_text import _RUN

    for text in ["Plain words, twice: words!", "snake_case and x2", "Café naïve ÉCOLE", "", "a1b2 c_d-e"]:
        low = text.lower()
        indexed = Counter(_RUN.findall(low)).keys()
        assert set(pc.dedup_words(low, indexed)) == nd._dedup_key(text)
        assert set(pc.dedup_words(low, None)) == nd._dedup_key(text)


def _reference_episodes(m: AgentMemory, query: str, limit: int) -> list[tuple[str, float, list[Any]]]:
    """search_episodes' ranking as first written: every candidate's header and quotes from the text."""
    from tiermem.runtime import episode_scores
    from tiermem.runtime import episode_search as es

    conn, who = m.conn, m.principal
    terms = es.query_terms(query)
    single: dict[str, str] = {}
    overall = _frequencies(conn, terms, single)
    cols = "e.episode_id, e.name, e.summary, e.key_quotes, e.participants, e.start_ts, e.end_ts, e.importance"
    rows = _candidate_rows(
        conn, who, cols, es.COLUMN_WEIGHTS, terms, overall, None, es.CANDIDATES, limit, single
    )
    idf = es._idf(conn, who.agent_id, terms, overall, single)
    weights = [idf.get(t, 0.0) for t in terms]
    rx = es._term_matcher(terms) if terms else None
    months, years = es._asked_dates(query)
    named = es._names_in(query)
    scored = []
    for row in rows:
        quotes = orjson.loads(row[3] or "[]")
        q_scores: list[float] = []
        hits = [False] * len(terms)
        for q in quotes:
            text = str(q.get("text", "")).lower()
            counts = _term_counts(text, rx, len(terms))
            hits = [h or bool(c) for h, c in zip(hits, counts, strict=True)]
            s = _bm25(counts, text.count(" ") + 1, weights) if any(counts) else 0
            speaker = str(q.get("speaker") or "").lower()
            q_scores.append(s * (episode_scores.SPEAKER_BOOST if named and speaker in named else 1.0))
        head_text = f"{row[1] or ''} {row[2] or ''}".lower()
        head_counts = _term_counts(head_text, rx, len(terms))
        head = _bm25(head_counts, head_text.count(" ") + 1, weights, avg_len=episode_scores.AVG_HEAD_WORDS)
        best = sorted(q_scores, reverse=True)
        seen = [bool(head_counts[k]) or hits[k] for k in range(len(terms))]
        coverage = sum(w for w, hit in zip(weights, seen, strict=True) if hit) / (sum(weights) or 1.0)
        score = ((best[0] if best else 0.0) + 0.3 * (best[1] if len(best) > 1 else 0.0) + 0.4 * head) * (
            0.5 + coverage
        ) + 0.02 * int(row[7] or 0)
        if months or years:
            when = {row[5][:4], row[6][:4]} | {
                es._MONTHS[int(row[5][5:7]) - 1],
                es._MONTHS[int(row[6][5:7]) - 1],
            }
            score *= 1.0 + 0.5 * len((months | years) & when) / len(months | years)
        order = sorted(range(len(quotes)), key=lambda i: (-q_scores[i], i))
        scored.append((score, str(row[0]), [quotes[i]["event_id"] for i in order]))
    scored.sort(key=lambda s: (-s[0], s[1]))
    return [(e, round(s, 4), ids) for s, e, ids in scored[:limit]]


def test_episode_search_ranks_exactly_as_scoring_every_candidate_from_its_text(memory: AgentMemory) -> None:
    """Headers and quotes weighed from the prepared index, as from the stored text (the long
    episodes' passages, every header)."""
    for query in [*QUERIES, "Talker 3 kitchen", "teal quilt in June"]:
        for limit in (3, 10):
            got = [
                (e["episode_id"], e["score"], [q["event_id"] for q in e["key_quotes"]])
                for e in search_episodes(memory.conn, memory.principal, query, None, limit)
            ]
            assert got == _reference_episodes(memory, query, limit), query


def test_section_fitting_counts_what_rendering_the_section_counts() -> None:
    """`_fit` counts a section's tokens from lengths: the same items as rendering it for each item."""
    from tiermem.runtime import context as cx

    from tiermem.tokens import count_tokens

    def rendered_fit(name: str, items: list[Any], budget: int) -> list[Any]:
        kept: list[Any] = []
        for item in items:
            if count_tokens(cx._render(name, [*kept, item])) <= budget:
                kept.append(item)
        return kept

    rng = random.Random(3)
    for _ in range(300):
        name = rng.choice(cx.PROMPT_ORDER)
        items = [cx.ContextItem(f"i{k}", "x" * rng.randint(0, 90), 1.0) for k in range(rng.randint(0, 12))]
        budget = rng.randint(0, 200)
        assert cx._fit(name, items, budget) == rendered_fit(name, items, budget), (name, budget)


def test_prepared_episodes_are_dropped_before_looking_when_the_cache_is_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past a bound everything is dropped, then every episode asked for is read again: those
    prepared before as well as the new ones (none is looked up after the drop and missed)."""
    from tiermem.runtime import episode_text

    rng = random.Random(2)
    rows = {
        f"ep{i}": (
            f"ep{i}",
            orjson.dumps([{"text": _text(rng, 400), "event_id": f"e{i}"}]).decode(),
            f"Name {i}",
            "summary",
            "2023-05-08T13:56:00Z",
        )
        for i in range(6)
    }
    conn = EpisodeRows(list(rows.values()))
    read = conn.read

    texts = EpisodeTexts()
    first = texts.prepared(conn, "db", ["ep0", "ep1"])  # type: ignore[arg-type]
    monkeypatch.setattr(episode_text, "MAX_PASSAGES", texts.passages - 1)
    again = texts.prepared(conn, "db", ["ep1", "ep2"])  # type: ignore[arg-type]
    assert read[-1] == ["ep1", "ep2"]  # ep1 read again: the drop came first
    assert again[0] is not first[1] and list(again[0].lowered) == list(first[1].lowered)
    assert texts.head_counts(again, [("name",), ("2",)]).tolist() == [[1, 0], [1, 1]]
    monkeypatch.setattr(episode_text, "MAX_PASSAGES", 10**6)
    assert texts.prepared(conn, "db", ["ep2", "ep1"]) == [again[1], again[0]]  # type: ignore[arg-type]
    assert len(read) == 2


def test_prompt_data_is_one_line_as_the_pattern_makes_it() -> None:
    """`as_data` skips the pattern for ASCII text without breaks: the same text as always passing it."""
    from tiermem.runtime import context as cx

    rng = random.Random(4)
    pieces = ["word", " ", "<", ">", "é", "\r", "\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029",
              "\t", "\x1b", "\x1f"]  # fmt: skip
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        expected = cx._LINE_BREAKS.sub(" ", text).replace("<", "&lt;").replace(">", "&gt;")
        assert cx.as_data(text) == expected, repr(text)


def test_a_large_preparation_ends_with_one_full_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Preparing many passages in one call collects once, on that call (not on a later search);
    a small batch does not, nor does any when the application turned the collector off."""
    import gc

    from tiermem.runtime import episode_text

    rng = random.Random(4)
    rows = [
        (f"ep{i}", orjson.dumps([{"text": _text(rng, 300), "event_id": f"e{i}"}]).decode(), "n", "", None)
        for i in range(12)
    ]

    collected: list[int] = []
    monkeypatch.setattr(gc, "collect", lambda *a: collected.append(1) or 0)
    texts = EpisodeTexts()
    first = texts.prepared(EpisodeRows(rows), "db", ["ep0", "ep1"])  # type: ignore[arg-type]
    monkeypatch.setattr(episode_text, "SETTLE_PASSAGES", sum(e.passages.n for e in first) + 1)
    assert collected == []  # two episodes: below the bound
    texts.prepared(EpisodeRows(rows), "db", [f"ep{i}" for i in range(2, 8)])  # type: ignore[arg-type]
    assert collected == [1]
    texts.prepared(EpisodeRows(rows), "db", [f"ep{i}" for i in range(8)])  # type: ignore[arg-type]
    assert collected == [1]  # nothing new prepared
    was = gc.isenabled()
    gc.disable()
    try:
        texts.prepared(EpisodeRows(rows), "db", [f"ep{i}" for i in range(8, 12)])  # type: ignore[arg-type]
    finally:
        if was:
            gc.enable()
    assert collected == [1]


def test_one_search_numbers_every_word_set_in_one_vocabulary() -> None:
    """Everything dropped meanwhile (a new vocabulary): a search that started before keeps numbering
    in its own, and the next search numbers every entry again in the new one, words unchanged."""
    from tiermem.runtime.passage_columns import WordNumbers

    rng = random.Random(6)
    rows = [
        (f"ep{i}", orjson.dumps([{"text": _text(rng, n), "event_id": f"e{i}"}]).decode(), "n", "", None)
        for i, n in enumerate([400, 8, 300, 5])
    ]

    texts = EpisodeTexts()
    entries = texts.prepared(EpisodeRows(rows), "db", [r[0] for r in rows])  # type: ignore[arg-type]
    assert {e.start >= 0 for e in entries} == {True, False}
    started = texts.numbers
    before = [texts.dedup(e, started) for e in entries]
    texts.numbers = WordNumbers()  # as dropping everything does
    texts.numbers.sets([["zebra", "quilt"]])  # other words met first: other numbers
    for e, (ids, at) in zip(entries, before, strict=True):
        again = texts.dedup(e, started)
        assert again[0].tolist() == ids.tolist() and again[1].tolist() == at.tolist()
    for e in entries:
        ids, at = texts.dedup(e, texts.numbers)
        word_of = {n: w for w, n in texts.numbers.numbers.items()}
        for j, text in enumerate(e.passages.texts):
            assert {word_of[n] for n in ids[at[j] : at[j + 1]].tolist()} == nd._dedup_key(text)
        assert e.dedup_by is texts.numbers


def test_near_identical_sets_share_a_filing_word_whatever_words_are_filed_last() -> None:
    """Prefix filing stays exact when a search's own words go last: any two sets near-identical enough
    to be dropped share a word of their prefixes (else `_distinct` would keep both)."""
    rng = random.Random(4)
    near = 0
    for _ in range(300):
        base = rng.sample(range(200), rng.randint(3, 80))
        other = list(base)
        for _ in range(rng.randint(0, max(1, len(base) // 12))):  # a few words changed
            other[rng.randrange(len(other))] = rng.randrange(200, 260)
        late = frozenset(rng.sample(base, min(len(base), rng.randint(0, 6))))
        sets = [np.array(sorted(set(s)), dtype=np.int64) for s in (base, other)]
        a, b = (frozenset(s.tolist()) for s in sets)
        pa, pb = (nd.filing_prefix(s, late, qs.DUPLICATE_JACCARD) for s in sets)
        if nd._near_identical(a, b):
            near += 1
            assert set(pa) & set(pb), (sorted(a), sorted(b), late)
    assert near > 100


def test_reranker_facts_of_a_prepared_episode_are_those_of_splitting_each_passage(
    memory: AgentMemory,
) -> None:
    """The reranker reads a passage's words from the numbers its episode was prepared with: the same
    word set, and the same count of content words for any names, as splitting the passage's text."""
    from tiermem.runtime import rerank_features as rf
    from tiermem.runtime.episode_text import TEXTS

    for query in QUERIES:
        qs.search_quotes(memory.conn, memory.principal, query, None, 40)
    names = frozenset({"ada", "tal", "talk", "talker", "paint"})
    no_content = rf.STOP_WORDS | rf.SMALL_TALK | names
    assert TEXTS.numbers.numbered(rf._NO_CONTENT) == {
        n for w, n in TEXTS.numbers.numbers.items() if w in rf._NO_CONTENT
    }
    checked = {True: 0, False: 0}
    for e in list(TEXTS.entries.values()):
        for j in range(len(e.passages)):
            facts = rf._facts(e, j)  # numbered for a long (indexed) episode, spelled out for a short one
            split = frozenset(re.findall(r"[a-z0-9]+", e.passages[j].text.lower()))
            assert (facts.numbered is not None) == (e.start >= 0) and facts.words == split
            by_text = facts._replace(distinct=tuple(split), numbered=None)
            assert rf._content(facts, (names, no_content), {}) == len(split - no_content)
            assert rf._content(by_text, (names, no_content), {}) == len(split - no_content)
            checked[e.start >= 0] += 1
    assert checked[True] > 100 and checked[False] > 10, checked


def test_a_filing_prefix_is_the_set_read_in_one_order_the_question_words_last() -> None:
    """A set's filing prefix (`near_duplicates.filing_prefix`) is the first words of the set read
    last-met first, with `late` words moved after all others, whatever share of the set they are
    (none, some, most, all)."""
    rng = random.Random(5)
    for _ in range(400):
        words = sorted(rng.sample(range(200), rng.randint(1, 40)))
        late = frozenset(rng.sample(words, rng.randint(0, len(words))) + rng.sample(range(200, 210), 2))
        prefix = nd.filing_prefix(np.array(words, dtype=np.int64), late, qs.DUPLICATE_JACCARD)
        order = words[::-1]
        length = len(order) - int(qs.DUPLICATE_JACCARD * len(order)) + 2
        expected = ([w for w in order if w not in late] + [w for w in order if w in late])[:length]
        assert prefix == expected


def test_a_fixed_word_sets_numbers_follow_the_words_met_later() -> None:
    """`WordNumbers.numbered` keeps what it found: words met after the first ask are found at the
    next, and a set asked again is the same numbers as looking every word up."""
    vocabulary, fixed = pc.WordNumbers(), frozenset({"the", "and", "thanks"})
    assert vocabulary.numbered(fixed) == set()
    vocabulary.sets([["kite", "the"], ["sky"]])
    assert vocabulary.numbered(fixed) == {vocabulary.numbers["the"]}
    vocabulary.sets([["and", "thanks", "kite"]])
    expected = {vocabulary.numbers[w] for w in fixed}
    assert vocabulary.numbered(fixed) == expected and vocabulary.numbered(fixed) == expected


def test_restatements_move_as_comparing_every_pair_moves_them() -> None:
    """A newer restatement is moved above the older exactly as when every pair of the pool is compared
    (the pairs of other words or speakers cannot restate each other), moves made earlier included."""

    def every_pair(scored: list[tuple[float, dict[str, Any]]], weights: list[float]) -> None:
        total = sum(weights) or 1.0
        top = sorted(range(len(scored)), key=lambda i: -scored[i][0])[: qs.RESTATEMENT_POOL]
        for a in top:
            qa = scored[a][1]
            if not qa["hits"] or sum(weights[k] for k in qa["hits"]) < qs.RESTATEMENT_COVER * total:
                continue
            for b in top:
                qb = scored[b][1]
                if (
                    qb["hits"] == qa["hits"]
                    and qb["speaker"] == qa["speaker"]
                    and qb["ts"] < qa["ts"]
                    and scored[b][0] > scored[a][0] >= qs.RESTATEMENT_MIN_SHARE * scored[b][0]
                ):
                    scored[a] = (scored[b][0] * 1.001, qa)

    rng = random.Random(3)
    moved = 0
    for _ in range(300):
        weights = [rng.choice([0.5, 1.0, 2.0]) for _ in range(rng.randint(1, 4))]
        scored = [
            (
                float(rng.choice([1, 2, 3, 4, 5, 6])) * rng.choice([1.0, 0.7]),
                {
                    "hits": frozenset(g for g in range(len(weights)) if rng.random() < 0.7),
                    "speaker": rng.choice(["Ada", "Talker"]),
                    "ts": f"2023-05-{rng.randint(1, 9):02d}",
                },
            )
            for _ in range(rng.randint(1, 80))
        ]
        original, expected = list(scored), list(scored)
        every_pair(expected, weights)
        qs._restatements_first(scored, weights)
        assert scored == expected
        moved += sum(1 for a, b in zip(scored, original, strict=True) if a[0] != b[0])
    assert moved > 50, moved


def test_quote_search_keeps_the_same_results_with_the_python_near_duplicate_check(
    memory: AgentMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The near-duplicate check's Python path (no compiled `_distinct`) keeps what scoring every
    passage from its text keeps (the turns said again are dropped the same way)."""
    from tiermem.runtime import near_duplicates

    monkeypatch.setattr(near_duplicates, "ENABLED", False)
    for query in QUERIES:
        for limit in (5, 40):
            expected = _reference_quotes(memory, query, limit)
            assert qs.search_quotes(memory.conn, memory.principal, query, None, limit) == expected, query


def test_the_reranker_orders_a_search_s_results_alike_from_their_places_or_looked_up(
    memory: AgentMemory,
) -> None:
    """Word features read on the spot from the search's own prepared episodes order the shortlist as
    the kept surroundings of each passage looked up again do."""
    from tiermem.runtime.rerank import MODELS, Reranker

    reranker = Reranker(None, MODELS["words"], 60)
    moved = 0
    for query in QUERIES:
        placed: list[Any] = []
        found = qs.search_quotes(memory.conn, memory.principal, query, None, 60, placed=placed)
        # Every result's place came back, in order: otherwise `recall_lines` silently looks them up again.
        assert [entry.passages[j].text for entry, j in placed] == [item["text"] for item in found], query
        on_the_spot = reranker.reorder(memory.conn, query, found, placed)
        assert on_the_spot == reranker.reorder(memory.conn, query, found, None), query
        moved += on_the_spot != found
    assert moved >= 5  # the reranker did reorder
