"""Quote-level search: the remembered turns themselves, ranked across the candidate episodes.

`search_quotes` / `recall_lines` rank the remembered turns across all
candidate episodes of `episode_search` (the answer to a question usually sits
in one turn): BM25 per passage with IDF over the agent's quotes, morphological
term groups ("activities" ~ "activity", "make" ~ "made"), part of the
neighbouring turns' and the episode header's match, boosts for the named
speaker, a named month/year and, for "when" questions, turns that say when.
`recall_lines` renders the best that fit a budget as one date header per day
and one `Speaker: text (yesterday = 7 May 2023)` line per turn — the compact
form `recall_memory` shows (measured on LoCoMo in bench/results/compressor.md).

The scores of every candidate passage are computed at once over arrays
(`_score_passages`); the episodes' prepared text and the term counts come from
`runtime.episode_text`, so a call costs what the question matches, not the
length of the candidates' text. Only the passages that can make the result
are turned into result items.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
from tiermem.runtime import archive_stats
from tiermem.runtime.episode_scores import AVG_HEAD_WORDS, AVG_QUOTE_WORDS, bm25_rows
from tiermem.runtime.episode_search import (
    _MONTHS,
    _WORD,
    PLAIN_WEIGHTS,
    _archive_sizes,
    _asked_dates,
    _candidate_rows,
    _names_in,
    own_copy,
    term_counts,
)
from tiermem.runtime.episode_text import TEXTS, Prepared, TermMatcher
from tiermem.runtime.hotstore import database_key, item_clause
from tiermem.runtime.near_duplicates import DUPLICATE_JACCARD, _anchors, _distinct, _keyed, distinct_run
from tiermem.runtime.note_cache import episode_notes
from tiermem.runtime.notes import Note, shown_notes
from tiermem.runtime.packing import render_quote_block
from tiermem.runtime.passage_blocks import block_plan
from tiermem.runtime.passage_bounds import Factors, Passages, survivors
from tiermem.runtime.passage_columns import WordNumbers
from tiermem.runtime.passage_compiled import Shares
from tiermem.runtime.passage_counts import header_counts
from tiermem.runtime.passage_layout import layout
from tiermem.runtime.passage_order import by_score
from tiermem.runtime.passage_parts import Parts, Weights, add_notes, blocked, named_passages, weigh_captions
from tiermem.runtime.query_terms import query_term_groups
from tiermem.runtime.time_query import (
    TimeWindow,
    event_phrase,
    mentions_time,
    relative_to_event,
    time_window,
)
from tiermem.runtime.turn_window import FAR_WEIGHT, further_neighbours
from tiermem.runtime.unfolded_passages import stand_ins
from tiermem.runtime.vectors import VectorIndex
from tiermem.runtime.visibility import Principal

from tiermem.dates import human_date
from tiermem.fusion import weighted_fusion
from tiermem.ids import parse_ts

if TYPE_CHECKING:
    from tiermem.runtime.query_expansion import QueryExpansion
    from tiermem.runtime.rerank import Reranker


def _group_matcher(groups: list[tuple[str, ...]]) -> TermMatcher:
    """What counts the groups (each word for the first group with a form matching it; runtime.episode_text)."""
    return TermMatcher(groups)


def _group_idf(
    conn: sqlite3.Connection, agent_id: str, groups: list[tuple[str, ...]], overall: dict[str, int]
) -> list[float]:
    """IDF of each term group over the agent's remembered turns (quotes), not its episodes.

    Quotes are what is ranked, and an episode-level count makes every word of
    a long episode look as common as its commonest. The quotes' word sets are
    read once as an index from word to quotes and brought up to date with the
    episodes added (runtime.archive_stats), so a new query's term weights cost
    a binary search per form, not a pass over every word of every remembered turn.
    Above QUOTE_IDF_MAX_EPISODES the index's episode-level counts are used
    instead (measured on LoCoMo: 0.807 evidence recall instead of 0.811).
    """
    _, total, all_docs = _archive_sizes(conn, agent_id)
    if total > QUOTE_IDF_MAX_EPISODES:
        # A large archive: counting over every remembered turn would take longer than the search,
        # so the search index's episode counts stand in (scaled to this agent's share).
        out_index = []
        for g in groups:
            df = min(total, max((overall[f] for f in g), default=0) * total / all_docs)
            out_index.append(math.log(1 + (total - df + 0.5) / (df + 0.5)))
        return out_index
    quotes = archive_stats.quote_words(conn, agent_id, _WORD.findall, QUOTE_IDF_MAX_EPISODES)
    with archive_stats.lock():  # the index grows in place when episodes are added
        return quotes.df(groups)


QUOTE_CANDIDATES = 200  # episodes whose quotes are scored one by one
QUOTE_IDF_MAX_EPISODES = 5000  # above this, term weights come from the search index, not every quote
NEIGHBOUR_WEIGHT = 0.6  # a quote answering (or asked by) a matching turn shares some of its match
# ...and all of it when the matching turn before it ends with a question: the turn after a question
# is most often its answer ("What made you pick the decor?" -> "I wanted it to look like my own
# style"), which repeats few of the question's words. Measured on LoCoMo dev (lexical), share of
# the passage before that counts, 0.6 (the plain neighbour share) / 0.8 / 1.0 / 1.2 / 1.5: gold turn
# in the top 5 0.744 / 0.747 / 0.752 / 0.749 / 0.742, top 10 0.802 / 0.809 / 0.812 / 0.811 / 0.807;
# delivered @500 evidence 0.812 / 0.818 / 0.821 (0.8 and 1.0 only), answer_recall 0.731 / 0.735 / 0.737.
ANSWER_WEIGHT = 1.0
_ENDS_ASKING = re.compile(r"\?\s*$")
QUOTE_SPEAKER_BOOST = 2.5  # stronger than for whole episodes: a quote has exactly one speaker
HEAD_WEIGHT = 0.3  # the episode's name and summary (topics, anchored dates) as context for each quote
_SHARES = Shares(ANSWER_WEIGHT, NEIGHBOUR_WEIGHT, FAR_WEIGHT, AVG_QUOTE_WORDS)  # what the blocks' pass reads
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
    same: dict[
        tuple[frozenset[int], str], list[int]
    ] = {}  # only these can restate each other (in `top` order)
    for b in top:
        same.setdefault((scored[b][1]["hits"], scored[b][1]["speaker"]), []).append(b)
    for a in top:
        qa = scored[a][1]
        hits = qa["hits"]
        if not hits or sum(weights[k] for k in hits) < RESTATEMENT_COVER * total:
            continue
        for b in same[(hits, qa["speaker"])]:
            qb = scored[b][1]
            if qb["ts"] < qa["ts"] and scored[b][0] > scored[a][0] >= RESTATEMENT_MIN_SHARE * scored[b][0]:
                scored[a] = (scored[b][0] * 1.001, qa)


@dataclass(frozen=True)
class _Asked:
    """What a question asks, prepared once for scoring every candidate passage."""

    groups: list[tuple[str, ...]]
    weights: list[float]
    rx: TermMatcher | None
    dates: tuple[set[str], set[str]]  # months, years named
    window: TimeWindow | None
    named: set[str]
    asks_when: bool
    forms: tuple[str, ...] = ()  # every query form as written: a text holding none skips the regex


def _asked(
    conn: sqlite3.Connection,
    who: Principal,
    query: str,
    groups: list[tuple[str, ...]],
    overall: dict[str, int],
) -> _Asked:
    """What the question asks, for scoring passages: its term groups with their weights, dates,
    time window, named speakers, whether it asks when. `overall`: the terms' document counts."""
    return _Asked(
        groups=groups,
        weights=_group_idf(conn, who.agent_id, groups, overall),
        rx=_group_matcher(groups) if groups else None,
        dates=_asked_dates(query),
        window=_asked_window(conn, who, query),
        named=_names_in(query),
        asks_when=bool(_ASKS_WHEN.search(query)),
        forms=tuple(f for g in groups for f in g),
    )


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


@dataclass
class _Scored:
    """The candidate passages of one search and their scores, one array entry per passage (in passage
    order; with a bound, only the passages that can make the result, runtime.passage_bounds)."""

    rows: list[Any]
    entries: list[Prepared]
    scores: np.ndarray
    counts: np.ndarray  # (passages, term groups)
    episode: np.ndarray  # each passage's candidate (index into rows / entries)
    local: np.ndarray  # each passage's position among its episode's passages
    boosts: list[float]  # per candidate: the time boost
    notes: dict[tuple[str, str], list[Note]]
    near: dict[tuple[str, int], float]
    complete: bool = True  # every candidate passage is here (else only those that can make the best)
    _starts: dict[int, tuple[datetime, str]] = field(default_factory=dict)  # per candidate: start, date
    # The near-duplicate check's vocabulary when the search started (EpisodeTexts.dedup).
    numbers: WordNumbers = field(default_factory=lambda: TEXTS.numbers)
    asked: tuple[str, ...] = ()  # the question's forms: filed under last (`late_words`)

    def item(self, i: int) -> dict[str, Any]:
        """Passage `i` as a result item of the fused ranking (before the final touches of `_distinct`),
        with the groups it holds (`hits`, which the restatement check reads)."""
        k, j = int(self.episode[i]), int(self.local[i])
        row, p = self.rows[k], self.entries[k].passages
        start, date = self._starts.get(k) or self._starts.setdefault(
            k, (t := parse_ts(row[4]), human_date(t))
        )
        speaker, event_id = p.speaker(j), p.event_id(j)
        return {
            "text": p.text(j),
            "speaker": speaker,
            "event_id": event_id,
            "part": int(p.part[j]),
            "notes": shown_notes(self.notes.get((event_id, speaker), [])),
            "episode_id": row[0],
            "ts": row[4],
            "date": date,
            "at": start,
            "cosine": self.near.get((row[0], j)),
            "_passage": (self.entries[k], j),
            "boost": self.boosts[k],
            "hits": frozenset(np.flatnonzero(self.counts[i]).tolist()),
        }

    def result(
        self, k: int, j: int, score: float, placed: list[tuple[Prepared, int]] | None
    ) -> dict[str, Any]:
        """Passage j of candidate k as `search_quotes` returns it (what `item` and `_distinct` make of
        it, in one step: built only for the passages kept); `placed` receives its passage."""
        row, entry = self.rows[k], self.entries[k]
        p, ts = entry.passages, row[4]
        got = self._starts.get(k)
        if got is None:
            got = self._starts[k] = ((t := parse_ts(ts)), human_date(t))
        q, texts = int(p.quote[j]), p.texts
        speaker, event_id = p.quote_speakers[q], p.quote_events[q]
        text = texts.joined[texts.at[j] : texts.at[j + 1]]
        stored = self.notes.get((event_id, speaker)) if self.notes else None
        notes = shown_notes(stored) if stored else []
        if placed is not None:
            placed.append((entry, j))
        return {
            "text": text,
            "speaker": speaker,
            "event_id": event_id,
            "part": p.part[j],
            "notes": notes,
            "episode_id": row[0],
            "ts": ts,
            "date": got[1],
            "cosine": self.near.get((row[0], j)) if self.near else None,
            # A turn's stored date notes say what its relative dates meant; older turns are resolved here.
            "anchors": [] if notes else _anchors(text, got[0], (entry, j), ts),
            "score": round(score, 4),
        }

    def shown(
        self, order: list[tuple[int, float]], stored: int
    ) -> Iterator[tuple[tuple[int, int, float], np.ndarray]]:
        """The ranked passages a search can show (a positive score, or any of a stored episode's:
        the stand-ins after them are kept only when they match), as ((candidate, place, score), its
        distinct words for the near-duplicate check, numbered when its episode was prepared:
        runtime.passage_columns; a slice, nothing built)."""
        episode, local, entries, numbers = self.episode, self.local, self.entries, self.numbers
        for i, score in order:
            k = int(episode[i])
            if score > 0 or k < stored:
                ids, at = TEXTS.dedup(entries[k], numbers)
                j = int(local[i])
                yield (k, j, score), ids[at[j] : at[j + 1]]

    def late_words(self) -> frozenset[int]:
        """The question's own words' numbers: filed under last by the near-duplicate check (they are
        in nearly every result: first in the filing order, they would make every result meet every
        other; any one order per search keeps the check exact)."""
        got = (self.numbers.numbers.get(f) for f in self.asked)
        return frozenset(n for n in got if n is not None)


def _neighbours(
    own: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
    idx: np.ndarray,
    asking: np.ndarray,
    whole: np.ndarray,
) -> np.ndarray:
    """The share of its neighbours' match passage `idx` gets: NEIGHBOUR_WEIGHT of the better neighbour
    within its episode, ANSWER_WEIGHT of the one before when that one ends with a question (`asking`)
    and the passage is a whole turn (`whole`; a long reply's first part is not lifted by the question
    before it: on generated long-reply conversations that cost answers at 500 tokens)."""
    before_at, after_at = np.maximum(idx - 1, 0), np.minimum(idx + 1, len(own) - 1)
    before = np.where(first[idx], 0.0, own[before_at])
    after = np.where(last[idx], 0.0, own[after_at])
    answers = ~first[idx] & asking[before_at] & whole[idx]
    near = np.maximum(np.where(answers, ANSWER_WEIGHT, NEIGHBOUR_WEIGHT) * before, NEIGHBOUR_WEIGHT * after)
    return np.maximum(
        near, further_neighbours(own, first, last, idx)
    )  # the same speaker's turns on the topic


def _headers(
    rows: list[Any], entries: list[Prepared], asked: _Asked
) -> tuple[np.ndarray, np.ndarray, list[float], list[float]]:
    """Per candidate: its name and summary's BM25, which groups they hold, its time boost, its importance.

    The headers' counts come from the index (prepared with the episode, from
    the same row the candidate query read), as a pass over their text counts them.
    """
    head_counts = header_counts(TEXTS, entries, asked.groups)
    lengths = np.array([e.head_spaces + 1 for e in entries], dtype=np.float64)
    heads = bm25_rows(head_counts, lengths, asked.weights, AVG_HEAD_WORDS)
    boosts = [_date_boost(row, asked) for row in rows]
    importance = [0.01 * int(row[6] or 0) for row in rows]
    return heads, head_counts > 0, boosts, importance


def _score_passages(
    rows: list[Any],
    entries: list[Prepared],
    asked: _Asked,
    near: dict[tuple[str, int], float],
    notes: dict[tuple[str, str], list[Note]],
    keep: int | None = None,
) -> _Scored:
    """Every passage of the candidate episodes with its lexical score (with `keep`: every one that can
    be among the best `keep`, runtime.passage_bounds).

    Per passage: BM25 with the length of its whole turn (a long reply that
    mentions the topic on every page is not more of an answer for being cut in
    parts: weighed by its own length, a reply's passages crowded short user
    turns out of small budgets), plus NEIGHBOUR_WEIGHT of the better of its
    neighbours and HEAD_WEIGHT of the episode's name and summary, times the
    share of the question's weight that it, its neighbours or the header
    cover, times the time boost; the named speaker, a "when" question's turn
    that says when, and the episode's importance on top.
    """
    n_groups, weights = len(asked.groups), asked.weights
    if not entries:
        nothing = np.zeros(0, dtype=np.int64)
        return _Scored(rows, entries, np.zeros(0), np.zeros((0, n_groups)), nothing, nothing, [], notes, near)
    laid = layout(entries, _ENDS_ASKING, _SAYS_WHEN, asked.asks_when)  # runtime.passage_layout
    sizes, firsts, episode, local = laid.sizes, laid.firsts, laid.episode, laid.local
    # With blocks (runtime.passage_blocks), only the passages that can be among the best are counted;
    # `counts` then holds only what captions (and, apart, notes) change, applied to what is counted.
    plan = (TEXTS.blocks, entries, sizes, firsts, {e for e, _ in notes})
    blocks = block_plan(*plan, keep if asked.groups else None)
    counts = TEXTS.term_counts(entries, asked.groups, asked.rx) if blocks is None else np.zeros((1, n_groups))
    # Each passage weighed by its whole turn's words (prepared with the episode; notes add to them).
    turn_words, says_when = laid.turn_words, laid.says_when
    changes = (counts, counts) if blocks is None else (np.zeros((len(episode), n_groups)),) * 2
    if blocks is not None and notes:
        changes = (changes[0], np.zeros((len(episode), n_groups)))
    weigh_captions(entries, firsts, asked, changes[0], CAPTION_WEIGHT)
    add_notes(entries, firsts, notes, asked, changes[1], (turn_words, says_when), _SAYS_WHEN)
    heads, head_seen, boosts, importance = _headers(rows, entries, asked)
    parts = Parts(
        weights=weights,
        named=bool(asked.named),
        asks_when=asked.asks_when,
        episode=episode,
        first=laid.first,
        last=laid.last,
        turn_words=turn_words,
        says_when=says_when,
        asking=laid.asking,
        whole=laid.whole,
        by_named=named_passages(entries, firsts, asked.named, len(episode)),
        heads=heads,
        head_seen=head_seen,
        boost=np.array(boosts),
        gain=np.array(importance),
        k=Weights(HEAD_WEIGHT, COVERAGE_FLOOR, QUOTE_SPEAKER_BOOST, WHEN_BOOST),
        answers=laid.answers,
    )
    most = np.where(parts.by_named, QUOTE_SPEAKER_BOOST, 1.0) * (WHEN_BOOST if asked.asks_when else 1.0)
    if blocks is not None:
        have = (entries, local, changes, _neighbours)
        idx, scores, kept = blocked(blocks, parts, most, asked, have, keep or 0, _SHARES)
        found = _Scored(rows, entries, scores, kept, episode[idx], local[idx], boosts, notes, near)
        found.complete = len(idx) == len(episode)
        return found
    own = bm25_rows(counts, turn_words, weights, AVG_QUOTE_WORDS)
    factors = Factors(
        head_share=HEAD_WEIGHT,
        floor=COVERAGE_FLOOR,
        neighbour=max(ANSWER_WEIGHT, NEIGHBOUR_WEIGHT),
        full=COVERAGE_FLOOR + 1.0,
        far_share=FAR_WEIGHT,
    )
    bound = Passages(
        own=own,
        hit_weight=(counts > 0) @ np.array(weights, dtype=np.float64),
        total_weight=sum(weights) or 1.0,
        head=heads[episode],
        boost=parts.boost[episode],
        importance=parts.gain[episode],
        most_boost=most,
    )
    chosen = survivors(bound, factors, keep)
    idx = np.arange(len(episode)) if chosen is None else chosen
    scores = parts.exact(idx, np.arange(len(episode)), counts, own, _neighbours)
    found = _Scored(rows, entries, scores, counts[idx], episode[idx], local[idx], boosts, notes, near)
    found.complete = chosen is None
    return found


def _best_indices(scores: np.ndarray, n: int) -> list[int]:
    """The first `n` of the passages sorted by score, best first, ties in passage order (ascending)."""
    if len(scores) > n:
        floor = np.partition(scores, len(scores) - n)[len(scores) - n]
        chosen = np.flatnonzero(scores >= floor)  # every passage that can be among the best n
    else:
        chosen = np.arange(len(scores))
    return sorted(chosen[np.argsort(-scores[chosen], kind="stable")][:n].tolist())


def _restated(found: _Scored, weights: list[float]) -> np.ndarray:
    """The scores after `_restatements_first` (which only reorders within the best RESTATEMENT_POOL)."""
    scores = found.scores.copy()
    pool = _best_indices(scores, RESTATEMENT_POOL)
    scored = []
    held = (found.counts[pool] != 0).tolist()  # each one's groups, read in one step
    for i, row in zip(pool, held, strict=True):
        k, j = int(found.episode[i]), int(found.local[i])
        hits = frozenset(g for g, h in enumerate(row) if h)
        item = {"hits": hits, "speaker": found.entries[k].passages.speaker(j), "ts": found.rows[k][4]}
        scored.append((float(scores[i]), item))
    _restatements_first(scored, weights)
    for i, (score, _) in zip(pool, scored, strict=True):
        scores[i] = score
    return scores


def _best_first(found: _Scored, scores: np.ndarray, enough: int) -> list[tuple[int, float]]:
    """(passage, score) in result order ((-score, date, turn, part)), at least the best `enough`.

    Everything scoring at least the `enough`-th best is sorted, so the order
    of what is returned is exactly that of sorting every passage; the rest of
    the key is read only for passages that tie on a score (runtime.passage_order).
    """
    n = len(scores)
    if n > enough:
        floor = np.partition(scores, n - enough)[n - enough]
        chosen = np.flatnonzero(scores >= floor)
    else:
        chosen = np.arange(n)

    def rest(i: int) -> tuple[str, str, int]:
        k, j = int(found.episode[i]), int(found.local[i])
        p = found.entries[k].passages
        return found.rows[k][4], p.quote_events[p.quote[j]], int(p.part[j])

    return by_score(scores, chosen, rest)


def _kept(
    found: _Scored,
    order: list[tuple[int, float]],
    stored: int,
    limit: int,
    placed: list[tuple[Prepared, int]] | None,
) -> list[dict[str, Any]]:
    """The first `limit` passages of `order` a search shows, near-identical ones kept once, as items."""
    run = distinct_run(found.shown(order, stored), found.late_words(), DUPLICATE_JACCARD, limit)
    return [found.result(k, j, score, placed) for k, j, score in run]


def search_quotes(
    conn: sqlite3.Connection,
    who: Principal,
    query: str,
    participant: str | None = None,
    limit: int = 40,
    dense: DenseSearch | None = None,
    placed: list[tuple[Prepared, int]] | None = None,
    expand: QueryExpansion | None = None,
) -> list[dict[str, Any]]:
    """The agent's remembered turns best matching `query`, across episodes, best first.

    Episodes are only the unit of retrieval from FTS; the answer to a question
    usually sits in one turn, so every passage of the candidate episodes (a
    short turn whole, a long one in parts: runtime.passages) is scored on its
    own (`_score_passages`: BM25 with the agent's IDF, stems matched as
    prefixes, part of its neighbours' and its episode header's match, boosts
    for the named speaker, month/year or time window: runtime.time_query).
    With `dense`, the candidates of the vector index join those of FTS and
    the two rankings are fused (or, in "dense" mode, cosine alone ranks).
    A newer restatement ranks above the older one; near-identical passages are
    kept once. Each result carries its date and the relative dates it
    contains resolved against that date, so `render_quote_block` can state
    when it was said compactly. `placed`, when given, receives each result's
    prepared episode and place in it (what the reranker reads around it).
    """
    groups = query_term_groups(query)
    if expand is not None:  # retrieval.expand: each word's nearest words count as it
        groups = expand.expand(query, groups)
    terms = [f for g in groups for f in g]
    single: dict[str, str] = {}
    copy = own_copy(conn, who.agent_id)
    overall = term_counts(conn, terms, single, copy)  # the agent's own counts where it has a copy
    # The quotes themselves are not read with the candidates: runtime.episode_text has them prepared.
    cols = "e.episode_id, e.name, e.summary, NULL, e.start_ts, e.end_ts, e.importance"
    near: dict[tuple[str, int], float] = {}
    if dense is not None:
        near = dense.index.nearest(conn, query, dense.candidates)
    rows: list[Any] = []
    if dense is None or dense.mode != "dense":
        rows = _candidate_rows(
            conn, who, cols, PLAIN_WEIGHTS, terms, overall, participant, QUOTE_CANDIDATES, 3, single, copy
        )
    if near:
        have = {r[0] for r in rows}
        rows += _rows_by_id(conn, who, cols, sorted({e for e, _ in near} - have), participant)
    asked = _asked(conn, who, query, groups, overall)
    entries = TEXTS.prepared(conn, database_key(conn), [str(r[0]) for r in rows], [r[1] for r in rows])
    # Notes derived from a turn (absolute dates) are scored as part of it and shown after it.
    notes = episode_notes(conn, who, [str(r[0]) for r in rows], [e.event_ids for e in entries])
    stored = len(rows)  # the candidates from here on stand in for the turns no episode covers yet
    if dense is None or dense.mode != "dense":  # ...scored alike, kept when they or a neighbour match
        more_rows, more = stand_ins(conn, who, participant)
        rows, entries = [*rows, *more_rows], [*entries, *more]
    enough = 4 * limit + RESTATEMENT_POOL
    found = _score_passages(rows, entries, asked, near, notes, None if dense else enough)
    found.asked = asked.forms
    if dense is not None:
        scored = _fused([(s, found.item(i)) for i, s in enumerate(found.scores.tolist())], dense)
        _restatements_first(scored, asked.weights)
        scored.sort(key=lambda s: (-s[0], s[1]["ts"], s[1]["event_id"], s[1]["part"]))
        return _distinct(((s, item, _keyed(item["text"])) for s, item in scored), limit, placed)
    scores = _restated(found, asked.weights)
    while True:
        order = _best_first(found, scores, enough)
        if placed is not None:
            placed.clear()  # a deeper pass starts the results again
        out = _kept(found, order, stored, limit, placed)
        if len(out) >= limit or (len(order) == len(scores) and found.complete):
            return out
        enough *= 4  # many near-duplicates among the best: look further down
        if not found.complete:  # ...past what the bound kept: score again for the new depth
            found = _score_passages(rows, entries, asked, near, notes, enough)
            found.asked = asked.forms
            scores = _restated(found, asked.weights)


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
    rerank: Reranker | None = None,
    expand: QueryExpansion | None = None,
) -> list[tuple[str, tuple[str, ...]]]:
    """What `recall_memory` should show for `query`: the best remembered turns as a dated block.

    One call for both the recall tool and the context harness, so what is
    measured is what the agent reads. Lines are (text, cited event ids).
    With `rerank` (retrieval.rerank), the shortlist's head is reordered first.
    """
    placed: list[tuple[Prepared, int]] = []
    found = search_quotes(
        conn, who, query, participant, limit=RECALL_QUOTES, dense=dense, placed=placed, expand=expand
    )
    if rerank is not None:
        # Each result's prepared episode goes along: the reranker reads its neighbours there.
        found = rerank.reorder(conn, query, found, placed if len(placed) == len(found) else None)
    return render_quote_block(found, budget, query)
