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
from typing import Any

import orjson
import pytest
from helpers_runtime import append, episode
from tiermem.runtime import quote_search as qs
from tiermem.runtime.episode_search import _candidate_rows, _frequencies, _term_counts, search_episodes
from tiermem.runtime.episode_text import EpisodeTexts, TermMatcher
from tiermem.runtime.memory import AgentMemory, open_memory
from tiermem.runtime.notes import notes_for
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


def test_index_counts_are_those_of_a_regex_pass_over_the_text() -> None:
    rng = random.Random(5)
    texts = EpisodeTexts()
    raws = [
        orjson.dumps(
            [{"text": _text(rng, rng.choice([5, 40, 300])), "event_id": f"e{i}.{j}"} for j in range(4)]
        )
        for i in range(30)
    ]
    rows = [(f"ep{i}", raw.decode()) for i, raw in enumerate(raws)]

    class Conn:  # what `prepared` asks of a connection: the quotes of the missing episodes
        def execute(self, sql: str, ids: list[str]) -> Any:
            class Cursor:
                def fetchall(self) -> list[tuple[str, str]]:
                    return [r for r in rows if r[0] in ids]

            return Cursor()

    entries = texts.prepared(Conn(), "db", [r[0] for r in rows])  # type: ignore[arg-type]
    assert {e.start >= 0 for e in entries} == {True, False}  # long episodes indexed, short ones not
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
    # A second call reads nothing: every episode is prepared.
    assert texts.prepared(None, "db", ["ep3", "ep1"]) == [entries[3], entries[1]]  # type: ignore[arg-type]
    # An episode read again under another name (deleted, inserted again) is prepared again.
    rows[3] = ("ep3", orjson.dumps([{"text": "quite different words", "event_id": "x"}]).decode())
    again = texts.prepared(Conn(), "db", ["ep3", "ep1"], ["renamed", None])  # type: ignore[arg-type]
    assert again[0].lowered == ["quite different words"] and again[1] is entries[1]


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
    rows = _candidate_rows(conn, who, cols, None, terms, overall, None, qs.QUOTE_CANDIDATES, 3, single)
    weights = qs._group_idf(conn, who.agent_id, groups, overall)
    asked = qs._Asked(
        groups=groups,
        weights=weights,
        rx=qs._group_matcher(groups) if groups else None,
        dates=qs._asked_dates(query),
        window=qs._asked_window(conn, who, query),
        named=qs._names_in(query),
        asks_when=bool(qs._ASKS_WHEN.search(query)),
        forms=tuple(terms),
    )
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
            f"{p.text} {qs.note_words(notes.get((p.event_id, p.speaker), []), p.text)}".lower()
            for p in passages
        ]
        counts = [said_counts(t, asked, n) for t in texts]
        turn_words: dict[int, int] = {}
        for p, t in zip(passages, texts, strict=True):
            turn_words[p.quote] = turn_words.get(p.quote, 0) + t.count(" ") + 1
        own = [qs._bm25(c, turn_words[p.quote], weights) for c, p in zip(counts, passages, strict=True)]
        head_text = f"{row[1] or ''} {row[2] or ''}".lower()
        head_counts = _term_counts(head_text, asked.rx, n)
        head = qs._bm25(head_counts, head_text.count(" ") + 1, weights, avg_len=qs.AVG_HEAD_WORDS)
        start = parse_ts(row[4])
        boost = qs._date_boost(row, asked)
        for i, p in enumerate(passages):
            answers = i > 0 and p.parts == 1 and passages[i - 1].text.lower().rstrip().endswith("?")
            share = qs.ANSWER_WEIGHT if answers else qs.NEIGHBOUR_WEIGHT
            beside = max(
                share * own[i - 1] if i > 0 else 0.0,
                qs.NEIGHBOUR_WEIGHT * own[i + 1] if i + 1 < len(passages) else 0.0,
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
        key = qs._dedup_key(item["text"])
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
    append(settings, *events)
    project(settings)
    with open_memory(settings, "talker", user="ada") as m:
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


def test_quote_search_ranks_exactly_as_scoring_every_passage_from_its_text(memory: AgentMemory) -> None:
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
