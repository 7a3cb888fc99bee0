"""Episode search behind `recall_memory`: full text over the hot store's episodic archive.

Candidates come from FTS5 (`episodes_fts`: name, summary, quote texts,
participants) with BM25 column weights; query words are matched by prefix of
their stem, so "painting" finds "painted". The candidates are then re-ranked
in Python by how much of the query they cover (an episode that mentions every
asked-for thing beats one that repeats a single word), with a small boost for
important episodes. Each result's quotes are ordered best match first, so a
caller that must cut to a budget cuts the least relevant quote. Dates are
returned both as timestamps and human-readable.

`search_quotes` / `recall_lines` rank the remembered turns themselves across
all candidate episodes (the answer to a question usually sits in one turn):
BM25 per quote with IDF over the agent's quotes, morphological term groups
("activities" ~ "activity", "make" ~ "made"), part of the neighbouring turns'
and the episode header's match, boosts for the named speaker, a named
month/year and, for "when" questions, turns that say when. `recall_lines`
renders the best that fit a budget as one date header per day and one
`Speaker: text (yesterday = 7 May 2023)` line per turn — the compact form
`recall_memory` should show (measured on LoCoMo in bench/results/compressor.md).

Every search takes the `Principal` of the read and returns only episodes it
may see (`tiermem.runtime.visibility`: the agent's episodes without an owner
and those of the user it serves). Term weights (IDF) are statistics over the
agent's whole archive: they change the order of what the principal sees and
never carry another user's text into a result.
"""

from __future__ import annotations

import math
import re
import sqlite3
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from tiermem.runtime.fts_terms import candidate_matches, document_frequencies, needs_window, newest_window
from tiermem.runtime.hotstore import database_key, item_clause
from tiermem.runtime.notes import Note, note_words, notes_for, shown_notes
from tiermem.runtime.packing import render_quote_block
from tiermem.runtime.passages import episode_passages
from tiermem.runtime.time_query import (
    TimeWindow,
    event_phrase,
    mentions_time,
    relative_to_event,
    time_window,
)
from tiermem.runtime.vectors import VectorIndex
from tiermem.runtime.visibility import Principal

from tiermem.attachments import split_described
from tiermem.dates import MONTHS, anchor_relative_dates, human_date, human_range
from tiermem.fusion import weighted_fusion
from tiermem.ids import parse_ts
from tiermem.text import STOP_WORDS, stem

CANDIDATES = 60
# Without a match, the most important of at most this many newest episodes stand in.
FALLBACK_SCAN = 1000
# bm25() weights per column of episodes_fts: name, summary, quotes, participants.
COLUMN_WEIGHTS = (2.0, 1.0, 1.2, 0.5)
_WORD = re.compile(r"[a-z0-9]+")


def query_terms(query: str) -> list[str]:
    out: list[str] = []
    for word in _WORD.findall(query.lower()):
        if word in STOP_WORDS or len(word) < 2:
            continue
        term = stem(word) if len(word) > 4 else word
        if term not in out:
            out.append(term)
    return out[:24]


def _fts(terms: list[str], single: dict[str, str] | None = None) -> str:
    """An OR of the terms for FTS5 MATCH; a term covering one indexed word (`single`) as that word."""
    single = single or {}
    return " OR ".join(
        f'"{single[t]}"' if t in single else f'"{t}"*' if len(t) >= 4 else f'"{t}"' for t in terms
    )


def _participant_match(participant: str) -> str | None:
    """An FTS5 phrase on the participants column (exactness is checked on the row itself)."""
    words = _WORD.findall(participant.lower())
    return f'participants : "{" ".join(words)}"' if words else None


def _matches(text_words: set[str], term: str) -> bool:
    if len(term) >= 4:
        return any(w.startswith(term) for w in text_words)
    return term in text_words


K1 = 1.2
SPEAKER_BOOST = 1.3
B = 0.75
AVG_QUOTE_WORDS = 24.0
AVG_HEAD_WORDS = 30.0


_IDF_CACHE: dict[tuple[str, str, int, str], float] = {}
_SIZE_CACHE: dict[tuple[str, str], tuple[int, int, int]] = {}
# Terms in at most this many episodes overall are counted exactly per agent (well under a ms).
EXACT_DF_LIMIT = 300


def _archive_version(conn: sqlite3.Connection) -> tuple[str, int]:
    """(database file, newest episode rowid): what the caches of term statistics are keyed by."""
    index = _index(conn)
    if index is not None:
        version: tuple[str, int] = index.version(conn)
        return version
    return database_key(conn), conn.execute("SELECT max(rowid) FROM episodes").fetchone()[0] or 0


def _archive_sizes(conn: sqlite3.Connection, agent_id: str) -> tuple[str, int, int]:
    """(database file, the agent's episode count, all episodes), cached per archive version.

    Counting an agent's episodes walks its index range (milliseconds at 100k);
    the newest rowid says cheaply whether the archive grew since the counts
    were taken (an erasure may leave them briefly high: they only weigh terms).
    """
    db, newest = _archive_version(conn)
    sizes = _SIZE_CACHE.get((db, agent_id))
    if sizes is None or sizes[0] != newest:
        total = (
            conn.execute("SELECT count(*) FROM episodes WHERE agent_id = ?", [agent_id]).fetchone()[0] or 1
        )
        all_docs = conn.execute("SELECT count(*) FROM episodes").fetchone()[0] or 1
        sizes = _SIZE_CACHE[(db, agent_id)] = (newest, total, all_docs)
    return db, sizes[1], sizes[2]


def _idf(
    conn: sqlite3.Connection,
    agent_id: str,
    terms: list[str],
    overall: dict[str, int],
    single: dict[str, str] | None = None,
) -> dict[str, float]:
    """Inverse document frequency of each term over this agent's archive.

    Per agent, because what is rare in one agent's life is not rare in
    another's: the name of the person an agent always talks to is in every
    one of its episodes and should weigh nothing. The index's own counts
    (fts5vocab) say which terms are rare overall; only those are counted per
    agent, so a query made of common words never walks tens of thousands of rows.
    """
    db, total, all_docs = _archive_sizes(conn, agent_id)
    out = {}
    for t in terms:
        # Cached per database file, agent and archive size: a new episode changes the key.
        key = (db, agent_id, total, t)
        cached = _IDF_CACHE.get(key)
        if cached is not None:
            out[t] = cached
            continue
        if len(_IDF_CACHE) > 50_000:
            _IDF_CACHE.clear()
        if overall[t] > EXACT_DF_LIMIT or total == all_docs:
            # Common overall (or one agent holds the whole archive): the overall count, scaled to
            # this agent's share, instead of walking thousands of rows for a word that weighs little.
            df = overall[t] * total / all_docs
        elif (index := _index(conn)) is not None:
            df = index.agent_frequency(conn, agent_id, t)
        else:
            df = conn.execute(
                "SELECT count(*) FROM episodes WHERE agent_id = ? AND rowid IN "
                "(SELECT rowid FROM episodes_fts WHERE episodes_fts MATCH ?)",
                [agent_id, _fts([t], single)],
            ).fetchone()[0]
        out[t] = _IDF_CACHE[key] = math.log(1 + (total - df + 0.5) / (df + 0.5))
    return out


_MONTHS = tuple(m.lower() for m in MONTHS)


def _asked_dates(query: str) -> tuple[set[str], set[str]]:
    """Months and years the query names ("in January 2024", "on 7 July, 2023")."""
    words = _WORD.findall(query.lower())
    months = {w for w in words if w in _MONTHS}
    years = {w for w in words if len(w) == 4 and w.isdigit() and w.startswith(("19", "20"))}
    return months, years


def _names_in(query: str) -> set[str]:
    return {w.lower() for w in re.findall(r"\b[A-Z][a-z]+", query)}


def _term_regex(terms: list[str]) -> re.Pattern[str]:
    """One pattern finding every term (stems as prefixes, short words whole); group k = term k."""
    parts = [f"({re.escape(t)})" + (r"[a-z0-9]*" if len(t) >= 4 else r"\b") for t in terms]
    return re.compile(r"\b(?:" + "|".join(parts) + ")")


def _term_counts(
    text: str, rx: re.Pattern[str] | None, n_terms: int, forms: tuple[str, ...] | None = None
) -> list[int]:
    counts = [0] * n_terms
    # Every match contains one of the `forms` as it is: a text holding none needs no regex pass.
    if forms is not None and not any(f in text for f in forms):
        return counts
    if rx is not None:
        for m in rx.finditer(text):
            counts[(m.lastindex or 1) - 1] += 1
    return counts


def _bm25(
    counts: Sequence[float], length: int, weights: list[float], avg_len: float = AVG_QUOTE_WORDS
) -> float:
    if not length:
        return 0.0
    norm = K1 * (1 - B + B * length / avg_len)
    return sum(w * tf * (K1 + 1) / (tf + norm) for tf, w in zip(counts, weights, strict=True) if tf)


def _index(conn: Any) -> Any:
    """The backend's own episode index, when it is not SQLite's FTS5 (PostgreSQL: `pg_store`).

    It answers the same questions as the FTS5 queries here: document
    frequencies, an archive version, one agent's frequency of a term, and the
    candidate rows; the scoring below is the same for every backend.
    """
    return getattr(conn, "episode_index", None)


def _frequencies(conn: Any, terms: list[str], single: dict[str, str] | None = None) -> dict[str, int]:
    index = _index(conn)
    if index is not None:
        return dict(index.frequencies(conn, terms))
    # From the FTS index, not the rows; `single` learns the terms that cover one indexed word.
    return document_frequencies(conn, "episodes_fts", terms, single=single, version=_archive_version(conn))


def _candidate_rows(
    conn: sqlite3.Connection,
    who: Principal,
    cols: str,
    column_weights: tuple[float, ...] | None,
    terms: list[str],
    frequencies: dict[str, int],
    participant: str | None,
    candidates: int,
    fallback: int,
    single: dict[str, str] | None = None,
) -> list[Any]:
    """Candidate episodes for a query: `cols` plus a `rank` column, best BM25 first.

    The candidate set is bounded (see fts_terms: the rarest terms, or ANDs of
    them, pick candidates; every term still scores them afterwards). The
    participant filter is exact on the row and, since the participants column
    is indexed, also narrows candidates inside the index. When nothing matches
    (or the query has no usable words): the `fallback` most important recent
    episodes instead (among the agent's `FALLBACK_SCAN` newest).
    """
    index = _index(conn)
    if index is not None:
        rows: list[Any] = index.candidates(
            conn, who, cols, column_weights, terms, frequencies, participant, candidates, fallback
        )
        return rows
    weights = ", ".join(str(w) for w in column_weights or ())
    rank = f"bm25(episodes_fts, {weights})" if weights else "bm25(episodes_fts)"
    where, params = item_clause(who, "e")
    if participant:
        where += " AND EXISTS (SELECT 1 FROM json_each(e.participants) p WHERE lower(p.value) = lower(?))"
        params.append(participant)
    phrase = _participant_match(participant) if participant else None
    from_fts = "FROM episodes_fts JOIN episodes e ON e.rowid = episodes_fts.rowid"
    if terms:
        ranked = f"SELECT {cols}, {rank} AS rank {from_fts} WHERE episodes_fts MATCH ? AND {where} ORDER BY rank LIMIT {candidates}"
        # Every term too common, and more matches in the agent's archive than the window:
        # the newest of them, not BM25 over all of them (fts_terms).
        newest = (
            f"SELECT {cols}, 0.0 AS rank {from_fts} WHERE episodes_fts MATCH ? AND episodes_fts.rowid >= ?"
            f" AND {where} ORDER BY episodes_fts.rowid DESC LIMIT {candidates}"
        )
        windowed = needs_window(frequencies)
        for match in candidate_matches(frequencies, lambda t: _fts([t], single)):
            full = f"({match}) AND {phrase}" if phrase else match
            floor = 0
            if windowed:
                mine = ("episodes", "c.agent_id = ?", [who.agent_id])
                floor = newest_window(conn, "episodes_fts", full, owner_filter=mine)
            if floor:
                rows = conn.execute(newest, [full, floor, *params]).fetchall()
            else:
                rows = conn.execute(ranked, [full, *params]).fetchall()
            if rows:
                return rows
    latest = "ORDER BY importance DESC, end_ts DESC LIMIT ?"
    if phrase:
        sql = f"SELECT {cols}, 0.0 AS rank {from_fts} WHERE episodes_fts MATCH ? AND {where} {latest}"
        return conn.execute(sql, [phrase, *params, fallback]).fetchall()
    # The agent's newest episodes (its index, newest first) bound the scan on a large archive.
    newest = f"SELECT * FROM episodes WHERE agent_id = ? ORDER BY end_ts DESC LIMIT {FALLBACK_SCAN}"
    sql = f"SELECT {cols}, 0.0 AS rank FROM ({newest}) e WHERE {where} {latest}"
    return conn.execute(sql, [who.agent_id, *params, fallback]).fetchall()


def search_episodes(
    conn: sqlite3.Connection,
    who: Principal,
    query: str,
    participant: str | None = None,
    limit: int = 3,
) -> list[dict[str, Any]]:
    """The best `limit` episodes `who` may see for `query` (optionally only those with `participant`)."""
    agent_id = who.agent_id
    terms = query_terms(query)
    single: dict[str, str] = {}
    overall = _frequencies(conn, terms, single)
    cols = "e.episode_id, e.name, e.summary, e.key_quotes, e.participants, e.start_ts, e.end_ts, e.importance, e.emotional_context, e.important"
    rows = _candidate_rows(
        conn, who, cols, COLUMN_WEIGHTS, terms, overall, participant, CANDIDATES, limit, single
    )

    idf = _idf(conn, agent_id, terms, overall, single)
    term_weights = [idf.get(t, 0.0) for t in terms]
    rx = _term_regex(terms) if terms else None
    forms = tuple(terms)
    months, years = _asked_dates(query)
    named = _names_in(query)
    scored: list[tuple[float, dict[str, Any]]] = []
    for row in rows:
        quotes = orjson.loads(row[3] or "[]")
        texts = [str(q.get("text", "")).lower() for q in quotes]
        quote_counts = [_term_counts(t, rx, len(terms), forms) for t in texts]
        quote_scores = [
            _bm25(c, t.count(" ") + 1, term_weights) for c, t in zip(quote_counts, texts, strict=True)
        ]
        if named:
            # Who said it: a question about someone is usually answered by their own words.
            for i, q in enumerate(quotes):
                speaker = str(q.get("speaker") or "").lower()
                if speaker:
                    quote_scores[i] *= SPEAKER_BOOST if speaker in named else 1.0
        head_text = f"{row[1] or ''} {row[2] or ''}".lower()
        head_counts = _term_counts(head_text, rx, len(terms))
        head = _bm25(head_counts, head_text.count(" ") + 1, term_weights, avg_len=AVG_HEAD_WORDS)
        best = sorted(quote_scores, reverse=True)
        seen = [any(c[k] for c in [head_counts, *quote_counts]) for k in range(len(terms))]
        covered = sum(w for w, hit in zip(term_weights, seen, strict=True) if hit)
        coverage = covered / (sum(term_weights) or 1.0)
        # The best single quote carries the episode (answers live in one turn); a second good quote,
        # the header's dates and topics, and covering more of the question add to it.
        score = ((best[0] if best else 0.0) + 0.3 * (best[1] if len(best) > 1 else 0.0) + 0.4 * head) * (
            0.5 + coverage
        ) + 0.02 * int(row[7] or 0)
        if months or years:
            # The question names a time: memories from then are the ones meant.
            when = {row[5][:4], row[6][:4]} | {_MONTHS[int(row[5][5:7]) - 1], _MONTHS[int(row[6][5:7]) - 1]}
            asked = months | years
            score *= 1.0 + 0.5 * len(asked & when) / len(asked)
        order = sorted(range(len(quotes)), key=lambda i: (-quote_scores[i], i))
        ordered = [{**quotes[i], "match": round(quote_scores[i], 3)} for i in order]
        start, end = parse_ts(row[5]), parse_ts(row[6])
        scored.append(
            (
                score,
                {
                    "episode_id": row[0],
                    "name": row[1],
                    "summary": row[2],
                    "key_quotes": ordered,
                    "participants": orjson.loads(row[4] or "[]"),
                    "start_ts": row[5],
                    "end_ts": row[6],
                    "when": human_range(start, end),
                    "importance": int(row[7] or 0),
                    "emotional_context": row[8] or "",
                    "important": bool(row[9]),
                    "score": round(score, 4) if math.isfinite(score) else 0.0,
                },
            )
        )
    scored.sort(key=lambda s: (-s[0], s[1]["episode_id"]))
    return [item for _, item in scored[:limit]]


def query_matches(query: str, text: str) -> int:
    """How many of the query's terms `text` contains (the measure quotes are ordered by)."""
    words = set(_WORD.findall(text.lower()))
    return sum(1 for t in query_terms(query) if _matches(words, t))


# ------------------------------------------------------------------ quote-level search

# Words of how a question is asked rather than what it is about ("What kind of...", "Would X likely...").
# Measured on LoCoMo dev: dropping them lowered recall (their IDF is already low), so only these few.
QUESTION_FILLER = frozenset(["likely", "probably"])
# Irregular forms, so "What did she make?" meets "I made..." (both directions via the groups below).
_IRREGULAR = [
    "make made making",
    "go went gone going goes",
    "buy bought",
    "see saw seen",
    "take took taken",
    "give gave given",
    "meet met",
    "find found",
    "run ran",
    "win won",
    "teach taught",
    "bring brought",
    "feel felt",
    "leave left",
    "lose lost",
    "write wrote written",
    "begin began begun",
    "tell told",
    "say said",
    "sing sang sung",
    "swim swam",
    "drive drove driven",
    "ride rode",
    "eat ate eaten",
    "fly flew flown",
    "grow grew grown",
    "draw drew drawn",
    "know knew known",
    "break broke broken",
    "choose chose chosen",
    "catch caught",
    "fall fell fallen",
    "hear heard",
    "hold held",
    "keep kept",
    "sell sold",
    "send sent",
    "spend spent",
    "build built",
    "pay paid",
    "wear wore worn",
    "do did",
    "have had has",
    "think thought",
    "child children",
    "person people",
    "man men",
    "woman women",
]
_FORMS = {w: tuple(line.split()) for line in _IRREGULAR for w in line.split()}


def _normal_form(word: str) -> str:
    """A stem to match as a prefix: 'activities' -> 'activit', 'shopped' -> 'shop', 'status' stays."""
    if len(word) > 5 and word.endswith("ies"):
        return word[:-3]
    if word.endswith(("ss", "us", "is")):
        return word
    term = stem(word) if len(word) > 4 else word
    if term != word and len(term) >= 4 and term[-1] == term[-2] and term[-1] not in "aeiouls":
        term = term[:-1]  # doubled consonant before -ed/-ing
    return term


def query_term_groups(query: str) -> list[tuple[str, ...]]:
    """Each content word of the query as the forms that count as it (stem first)."""
    out: list[tuple[str, ...]] = []
    names = _names_in(query)
    for word in _WORD.findall(query.lower()):
        if word in STOP_WORDS or word in QUESTION_FILLER or len(word) < 2:
            continue
        forms = [_normal_form(word)]
        for other in _FORMS.get(word, ()):
            if other != word and len(_normal_form(other)) > 3:
                forms.append(_normal_form(other))
            elif other != word:
                forms.append(other)
        if word.endswith("e") and len(word) >= 4 and word not in names:
            forms.append(word[:-1] + "ing")  # "make" -> "making", which the prefix "make" misses
        group = tuple(dict.fromkeys(forms))
        if all(group[0] != g[0] for g in out):
            out.append(group)
    return out[:24]


def _group_regex(groups: list[tuple[str, ...]]) -> re.Pattern[str]:
    parts = [
        "(" + "|".join(re.escape(f) + (r"[a-z0-9]*" if len(f) >= 4 else r"\b") for f in g) + ")"
        for g in groups
    ]
    return re.compile(r"\b(?:" + "|".join(parts) + ")")


_QUOTE_INDEX: dict[tuple[str, str], tuple[int, int, list[str], list[int]]] = {}
_GROUP_DF: dict[tuple[str, str, int, str], float] = {}


def _group_idf(
    conn: sqlite3.Connection, agent_id: str, groups: list[tuple[str, ...]], overall: dict[str, int]
) -> list[float]:
    """IDF of each term group over the agent's remembered turns (quotes), not its episodes.

    Quotes are what is ranked, and an episode-level count makes every word of
    a long episode look as common as its commonest. The quotes' word sets are
    loaded once per archive version (the episode count is the version: a
    compression run adds episodes) as an index from word to quotes, and only
    the newest version per agent is kept.
    Above QUOTE_IDF_MAX_EPISODES the index's episode-level counts are used
    instead (measured on LoCoMo: 0.807 evidence recall instead of 0.811).
    """
    db, total, all_docs = _archive_sizes(conn, agent_id)
    if total > QUOTE_IDF_MAX_EPISODES:
        # A large archive: counting over every remembered turn would take longer than the search,
        # so the search index's episode counts stand in (scaled to this agent's share).
        out_index = []
        for g in groups:
            df = min(total, max((overall[f] for f in g), default=0) * total / all_docs)
            out_index.append(math.log(1 + (total - df + 0.5) / (df + 0.5)))
        return out_index
    _, n_quotes, vocabulary, masks = _quote_index(conn, db, agent_id, total)
    n = n_quotes or 1
    out = []
    for g in groups:
        key = (db, agent_id, total, "|".join(g))
        idf = _GROUP_DF.get(key)
        if idf is None:
            if len(_GROUP_DF) > 50_000:
                _GROUP_DF.clear()
            # The quotes holding a form of the group: a short form as a whole word, a longer one
            # as the prefix of any word (all such words sit together in the sorted vocabulary).
            found = 0
            for form in g:
                i = bisect_left(vocabulary, form)
                if len(form) < 4:
                    if i < len(vocabulary) and vocabulary[i] == form:
                        found |= masks[i]
                    continue
                while i < len(vocabulary) and vocabulary[i].startswith(form):
                    found |= masks[i]
                    i += 1
            df = found.bit_count()
            idf = _GROUP_DF[key] = math.log(1 + (n - df + 0.5) / (df + 0.5))
        out.append(idf)
    return out


def _quote_index(
    conn: sqlite3.Connection, db: str, agent_id: str, total: int
) -> tuple[int, int, list[str], list[int]]:
    """(version, quotes, sorted vocabulary, per word the set of quotes holding it as a bit mask).

    Built once per archive version of the agent (the newest only), so a new
    query's term weights cost a binary search per form, not a pass over every
    word of every remembered turn.
    """
    cached = _QUOTE_INDEX.get((db, agent_id))
    if cached is None or cached[0] != total:
        by_word: dict[str, int] = {}
        n = 0
        for (raw,) in conn.execute("SELECT key_quotes FROM episodes WHERE agent_id = ?", [agent_id]):
            for q in orjson.loads(raw or "[]"):
                if isinstance(q, dict) and q.get("text"):
                    bit = 1 << n
                    for word in set(_WORD.findall(str(q["text"]).lower())):
                        by_word[word] = by_word.get(word, 0) | bit
                    n += 1
        vocabulary = sorted(by_word)
        cached = _QUOTE_INDEX[(db, agent_id)] = (total, n, vocabulary, [by_word[w] for w in vocabulary])
    return cached


QUOTE_CANDIDATES = 200  # episodes whose quotes are scored one by one
QUOTE_IDF_MAX_EPISODES = 5000  # above this, term weights come from the search index, not every quote
NEIGHBOUR_WEIGHT = 0.6  # a quote answering (or asked by) a matching turn shares some of its match
QUOTE_SPEAKER_BOOST = 2.5  # stronger than for whole episodes: a quote has exactly one speaker
HEAD_WEIGHT = 0.3  # the episode's name and summary (topics, anchored dates) as context for each quote
DUPLICATE_JACCARD = 0.9
# A caption's words count half a said word: a captioner describes the picture ("a man standing on
# a beach"), which matches questions about it less surely than what the person said. Measured on
# LoCoMo dev @500 (lexical): 0.5 ranked better than 1.0 (+0.3 evidence with every caption shown)
# and better than 0 (captions ignored: -0.4).
CAPTION_WEIGHT = 0.5
WHEN_BOOST = 1.2  # "When did...": a quote that says when (a date or a relative time) is the likelier answer
_SAYS_WHEN = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|ago|last|next|weekend|week|month|year|since|(?:19|20)\d\d|"
    + "|".join(_MONTHS)
    + r")\b"
)
_ASKS_WHEN = re.compile(r"^\s*(?:when|how long|what (?:year|month|date|day|time))\b", re.I)
COVERAGE_FLOOR = 0.5  # score x (floor + share of the question's weight the quote and its context cover)
WINDOW_BOOST = 0.5  # a turn said within the question's time window ("last year", "before the trip")
RESTATEMENT_POOL = 60  # the best passages among which a newer restatement is moved above the older
RESTATEMENT_COVER = 0.6  # share of the question's weight two turns must both contain to restate each other
RESTATEMENT_MIN_SHARE = 0.5  # ...and the newer one's score at least this share of the older one's


def _dedup_key(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.lower()))


@dataclass(frozen=True)
class DenseSearch:
    """How the dense side takes part in a quote search (absent: lexical only).

    `mode` "hybrid" fuses the two rankings (weighted fusion, `weight` the
    dense share, both sides over their `candidates` best); "dense" ranks by
    cosine alone (for comparison; the lexical path is not consulted).
    """

    index: VectorIndex
    mode: str = "hybrid"
    weight: float = 0.4
    candidates: int = 100


def _rows_by_id(
    conn: sqlite3.Connection, who: Principal, cols: str, ids: list[str], participant: str | None
) -> list[Any]:
    """The visible episodes among `ids` (the dense side's candidates), with a zero lexical rank."""
    if not ids:
        return []
    where, params = item_clause(who, "e")
    if participant and getattr(conn, "dialect", "sqlite") == "postgres":
        where += (
            " AND EXISTS (SELECT 1 FROM jsonb_array_elements_text(coalesce(e.participants, '[]')::jsonb)"
            " AS p(value) WHERE lower(p.value) = lower(?))"
        )
        params.append(participant)
    elif participant:
        where += " AND EXISTS (SELECT 1 FROM json_each(e.participants) p WHERE lower(p.value) = lower(?))"
        params.append(participant)
    marks = ",".join("?" * len(ids))
    sql = f"SELECT {cols}, 0.0 AS rank FROM episodes e WHERE e.episode_id IN ({marks}) AND {where}"
    return conn.execute(sql, [*ids, *params]).fetchall()


def _reference_time(conn: sqlite3.Connection, who: Principal) -> datetime | None:
    """The present of the memory: when the newest turn `who` may see was said."""
    where, params = item_clause(who, "e")
    row = conn.execute(f"SELECT max(e.end_ts) FROM episodes e WHERE {where}", params).fetchone()
    return parse_ts(row[0]) if row and row[0] else None


def _asked_window(conn: sqlite3.Connection, who: Principal, query: str) -> TimeWindow | None:
    """The date window of the question's time expression, if it has one (runtime.time_query)."""
    if not mentions_time(query):
        return None  # most questions: no lookup of the memory's present
    relative = event_phrase(query)
    if relative is not None:
        # "before the trip": when the trip was is what the best turn about it says.
        found = search_quotes(conn, who, relative[1], limit=1)
        if found:
            return relative_to_event(relative[0], parse_ts(found[0]["ts"]), " ".join(relative))
    ref = _reference_time(conn, who)
    return time_window(query, ref) if ref is not None else None


def _restatements_first(scored: list[tuple[float, dict[str, Any]]], weights: list[float]) -> None:
    """A newer restatement by the same speaker ranks just above the older one it restates.

    Two turns restate each other, for a question, when the same speaker said
    both and they contain the same of the question's words, covering most of
    its weight ("my budget for the remodel is $12,000" and, later, "the
    remodel budget is now $15,500"): the newer one is what holds now, so it
    must not lose to the stale one on word counts or length.
    """
    total = sum(weights) or 1.0
    top = sorted(range(len(scored)), key=lambda i: -scored[i][0])[:RESTATEMENT_POOL]
    for a in top:
        qa = scored[a][1]
        hits = qa["hits"]
        if not hits or sum(weights[k] for k in hits) < RESTATEMENT_COVER * total:
            continue
        for b in top:
            qb = scored[b][1]
            if (
                qb["hits"] == hits
                and qb["speaker"] == qa["speaker"]
                and qb["ts"] < qa["ts"]
                and scored[b][0] > scored[a][0] >= RESTATEMENT_MIN_SHARE * scored[b][0]
            ):
                scored[a] = (scored[b][0] * 1.001, qa)


@dataclass(frozen=True)
class _Asked:
    """What a question asks, prepared once for scoring every candidate passage."""

    groups: list[tuple[str, ...]]
    weights: list[float]
    rx: re.Pattern[str] | None
    dates: tuple[set[str], set[str]]  # months, years named
    window: TimeWindow | None
    named: set[str]
    asks_when: bool
    forms: tuple[str, ...] = ()  # every query form as written: a text holding none skips the regex


def _date_boost(row: Any, asked: _Asked) -> float:
    """x1 + up to 0.5 for an episode of the month/year the question names, or inside its time window."""
    months, years = asked.dates
    if months or years:
        when = {row[4][:4], row[5][:4], _MONTHS[int(row[4][5:7]) - 1], _MONTHS[int(row[5][5:7]) - 1]}
        named = months | years
        return 1.0 + 0.5 * len(named & when) / len(named)
    w = asked.window
    if w is not None and (w.contains(parse_ts(row[4])) or w.contains(parse_ts(row[5]))):
        return 1.0 + WINDOW_BOOST
    return 1.0


def _said_counts(text: str, asked: _Asked, n_groups: int) -> list[float]:
    """Term counts of a passage, its attachments' descriptions weighing CAPTION_WEIGHT of its words."""
    said, described = split_described(text)
    counts: list[float] = list(_term_counts(said, asked.rx, n_groups, asked.forms))
    if described and CAPTION_WEIGHT:
        for k, c in enumerate(_term_counts(described, asked.rx, n_groups, asked.forms)):
            counts[k] += CAPTION_WEIGHT * c
    return counts


def _score_episode(
    row: Any,
    quotes: Any,
    asked: _Asked,
    near: dict[tuple[str, int], float],
    notes: dict[tuple[str, str], list[Note]],
) -> list[tuple[float, dict[str, Any]]]:
    """Every passage of one candidate episode (`quotes`: its parsed key quotes) with its lexical score."""
    passages = episode_passages(quotes)
    if not passages:
        return []
    n_groups, weights = len(asked.groups), asked.weights
    total_weight = sum(weights) or 1.0
    texts = [
        f"{p.text} {note_words(notes.get((p.event_id, p.speaker), []), p.text)}".lower() for p in passages
    ]
    counts = [_said_counts(t, asked, n_groups) for t in texts]
    # A passage is weighed by the length of its whole turn: a long reply that mentions the topic on
    # every page is not more of an answer for being cut in parts (measured on long-reply conversations:
    # weighed by its own length, the reply's passages crowded short user turns out of small budgets).
    turn_words: dict[int, int] = {}
    for p, t in zip(passages, texts, strict=True):
        turn_words[p.quote] = turn_words.get(p.quote, 0) + t.count(" ") + 1
    own = [_bm25(c, turn_words[p.quote], weights) for c, p in zip(counts, passages, strict=True)]
    head_text = f"{row[1] or ''} {row[2] or ''}".lower()
    head_counts = _term_counts(head_text, asked.rx, n_groups)
    head = _bm25(head_counts, head_text.count(" ") + 1, weights, avg_len=AVG_HEAD_WORDS)
    start = parse_ts(row[4])
    boost = _date_boost(row, asked)
    out: list[tuple[float, dict[str, Any]]] = []
    for i, p in enumerate(passages):
        beside = max(own[i - 1] if i > 0 else 0.0, own[i + 1] if i + 1 < len(passages) else 0.0)
        seen = [
            bool(counts[i][k] or head_counts[k] or (i > 0 and counts[i - 1][k]))
            or bool(i + 1 < len(passages) and counts[i + 1][k])
            for k in range(n_groups)
        ]
        coverage = sum(w for w, hit in zip(weights, seen, strict=True) if hit) / total_weight
        score = (
            (own[i] + NEIGHBOUR_WEIGHT * beside + HEAD_WEIGHT * head) * (COVERAGE_FLOOR + coverage) * boost
        )
        if asked.named and p.speaker.lower() in asked.named:
            score *= QUOTE_SPEAKER_BOOST
        if asked.asks_when and _SAYS_WHEN.search(texts[i]):
            score *= WHEN_BOOST
        score += 0.01 * int(row[6] or 0)
        item = {
            "text": p.text,
            "speaker": p.speaker,
            "event_id": p.event_id,
            "part": p.part,
            "notes": shown_notes(notes.get((p.event_id, p.speaker), [])),
            "episode_id": row[0],
            "ts": row[4],
            "date": human_date(start),
            "at": start,
            "cosine": near.get((row[0], p.idx)),
            "hits": frozenset(k for k in range(n_groups) if counts[i][k]),
            "boost": boost,
        }
        out.append((score, item))
    return out


def search_quotes(
    conn: sqlite3.Connection,
    who: Principal,
    query: str,
    participant: str | None = None,
    limit: int = 40,
    dense: DenseSearch | None = None,
) -> list[dict[str, Any]]:
    """The agent's remembered turns best matching `query`, across episodes, best first.

    Episodes are only the unit of retrieval from FTS; the answer to a question
    usually sits in one turn, so every passage of the candidate episodes (a
    short turn whole, a long one in parts: runtime.passages) is scored on its
    own (BM25 with the agent's IDF, stems matched as prefixes), plus part of
    its neighbours' match (a question and its answer are adjacent turns) and
    of its episode's name/summary, and a boost when the question names its
    speaker, its month/year or a time window it falls in (runtime.time_query).
    With `dense`, the candidates of the vector index join those of FTS and
    the two rankings are fused (or, in "dense" mode, cosine alone ranks).
    A newer restatement ranks above the older one; near-identical passages are
    kept once. Each result carries its date and the relative dates it
    contains resolved against that date, so `render_quote_block` can state
    when it was said compactly.
    """
    groups = query_term_groups(query)
    terms = [f for g in groups for f in g]
    single: dict[str, str] = {}
    overall = _frequencies(conn, terms, single)
    cols = "e.episode_id, e.name, e.summary, e.key_quotes, e.start_ts, e.end_ts, e.importance"
    near: dict[tuple[str, int], float] = {}
    if dense is not None:
        near = dense.index.nearest(conn, query, dense.candidates)
    rows: list[Any] = []
    if dense is None or dense.mode != "dense":
        rows = _candidate_rows(
            conn, who, cols, None, terms, overall, participant, QUOTE_CANDIDATES, 3, single
        )
    if near:
        have = {r[0] for r in rows}
        rows += _rows_by_id(conn, who, cols, sorted({e for e, _ in near} - have), participant)
    weights = _group_idf(conn, who.agent_id, groups, overall)
    asked = _Asked(
        groups=groups,
        weights=weights,
        rx=_group_regex(groups) if groups else None,
        dates=_asked_dates(query),
        window=_asked_window(conn, who, query),
        named=_names_in(query),
        asks_when=bool(_ASKS_WHEN.search(query)),
        forms=tuple(f for g in groups for f in g),
    )
    # Notes derived from a turn (absolute dates) are scored as part of it and shown after it.
    quotes = [orjson.loads(row[3] or "[]") for row in rows]  # parsed once: for the notes and the scoring
    notes = notes_for(conn, who, _quoted_event_ids(quotes))
    scored = [
        s for row, qs in zip(rows, quotes, strict=True) for s in _score_episode(row, qs, asked, near, notes)
    ]
    if dense is not None:
        scored = _fused(scored, dense)
    _restatements_first(scored, weights)
    scored.sort(key=lambda s: (-s[0], s[1]["ts"], s[1]["event_id"], s[1]["part"]))
    out: list[dict[str, Any]] = []
    keys: list[frozenset[str]] = []
    for score, item in scored:
        key = _dedup_key(item["text"])
        if any(len(key & k) >= DUPLICATE_JACCARD * len(key | k) for k in keys):
            continue
        keys.append(key)
        at = item.pop("at")
        # A turn's stored date notes say what its relative dates meant; older turns are resolved here.
        item["anchors"] = [] if item["notes"] else anchor_relative_dates(item["text"], at)
        item.pop("boost")
        item.pop("hits")
        item["score"] = round(score, 4)
        out.append(item)
        if len(out) >= limit:
            break
    return out


def _quoted_event_ids(quotes: list[Any]) -> set[str]:
    ids: set[str] = set()
    for qs in quotes:
        for q in qs:
            if isinstance(q, dict) and q.get("event_id"):
                ids.add(str(q["event_id"]))
    return ids


def _fused(
    scored: list[tuple[float, dict[str, Any]]], dense: DenseSearch
) -> list[tuple[float, dict[str, Any]]]:
    """Lexical scores fused with the cosines of the dense candidates (runtime doc: tiermem.fusion).

    The lexical side is every scored passage (a passage without a shared word
    scores about 0); the dense side only the passages among the index's
    nearest. The time and speaker boosts were applied to the lexical score;
    the dense side gets the time boost too, so "in May" still favours May.
    """
    if dense.mode == "dense":
        return [(item["cosine"] * item["boost"], item) for _, item in scored if item["cosine"] is not None]
    lexical = {i: s for i, (s, _) in enumerate(scored)}
    near = {
        i: item["cosine"] * item["boost"] for i, (_, item) in enumerate(scored) if item["cosine"] is not None
    }
    return [(s, scored[i][1]) for i, s in weighted_fusion(lexical, near, dense.weight)]


RECALL_QUOTES = 60


def recall_lines(
    conn: sqlite3.Connection,
    who: Principal,
    query: str,
    participant: str | None = None,
    budget: int | None = None,
    dense: DenseSearch | None = None,
) -> list[tuple[str, tuple[str, ...]]]:
    """What `recall_memory` should show for `query`: the best remembered turns as a dated block.

    One call for both the recall tool and the context harness, so what is
    measured is what the agent reads. Lines are (text, cited event ids).
    """
    found = search_quotes(conn, who, query, participant, limit=RECALL_QUOTES, dense=dense)
    return render_quote_block(found, budget, query)
