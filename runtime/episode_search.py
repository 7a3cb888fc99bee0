"""Episode search behind `recall_memory`: full text over the hot store's episodic archive.

Candidates come from FTS5 (`episodes_fts`: name, summary, quote texts,
participants, and the episode's agent as one token) with BM25 column weights;
query words are matched by prefix of their stem, so "painting" finds
"painted". Where the reading agent holds a small share of the archive, every
candidate try is narrowed to its episodes inside the index and chosen by its
own counts of the words (`_agent_phrase`, runtime.episode_index); where it
also has few episodes, the index is not asked: they are found and ranked over
its own copy of its episodes (`own_copy`, runtime.own_episodes). The candidates are then re-ranked
in Python by how much of the query they cover (an episode that mentions every
asked-for thing beats one that repeats a single word), with a small boost for
important episodes. Each result's quotes are ordered best match first, so a
caller that must cut to a budget cuts the least relevant quote. Dates are
returned both as timestamps and human-readable.

The quote-level search (`search_quotes` / `recall_lines`: the remembered
turns themselves, ranked across the candidates) is `runtime.quote_search`; it
uses this module's candidate query, term statistics and BM25. Neither reads
the candidates' quotes with them: `runtime.episode_text` keeps each episode
prepared (parsed, split into passages, indexed) once per process.

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
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import orjson
from tiermem.runtime import archive_stats, fts_ranks, fts_rows, fts_terms
from tiermem.runtime import own_episodes as own_copies
from tiermem.runtime.episode_index import agent_phrase
from tiermem.runtime.episode_scores import AVG_HEAD_WORDS, _episode_scores, _quote_matches, bm25_rows
from tiermem.runtime.episode_text import TEXTS, TermMatcher
from tiermem.runtime.fts_terms import agent_candidate_matches, candidate_matches, needs_window
from tiermem.runtime.hotstore import (
    HotConnection,
    database_key,
    indexes_agents,
    item_clause,
    keeps_episode_access,
)
from tiermem.runtime.own_episodes import OwnEpisodes, own_episodes
from tiermem.runtime.visibility import Principal, can_read_item

from tiermem.dates import MONTHS, human_range
from tiermem.ids import parse_ts
from tiermem.text import STOP_WORDS, stem

CANDIDATES = 60
# Without a match, the most important of at most this many newest episodes stand in.
FALLBACK_SCAN = 1000
# bm25() weights per column of episodes_fts: name, summary, quotes, participants, agent. The agent
# column weighs nothing: its phrase narrows a try to the agent's episodes and adds 0.0 to every rank
# (runtime.episode_index).
COLUMN_WEIGHTS = (2.0, 1.0, 1.2, 0.5, 0.0)
# Plain BM25 (every text column alike), as the quote search ranks its candidates.
PLAIN_WEIGHTS = (1.0, 1.0, 1.0, 1.0, 0.0)
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


_AGENT_DF: dict[tuple[str, str, int, str], int] = {}  # another backend's counts of a term per agent
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
    """(database file, the agent's episode count, all episodes).

    Counting an agent's episodes walks its index range (milliseconds at 100k),
    so the counts are kept and brought up to date with the episodes added
    (runtime.archive_stats); another backend's are kept per archive version.
    """
    if _index(conn) is None:
        return archive_stats.sizes(conn, agent_id)
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
    copy: OwnEpisodes | None = None,
) -> dict[str, float]:
    """Inverse document frequency of each term over this agent's archive.

    Per agent, because what is rare in one agent's life is not rare in
    another's: the name of the person an agent always talks to is in every
    one of its episodes and should weigh nothing. The index's own counts
    (fts5vocab) say which terms are rare overall; only those are counted per
    agent, so a query made of common words never walks tens of thousands of rows.
    Where the agent's phrase narrows its searches (it holds at most half of the
    archive), the agent's own counts are used (`_own_counts`), or those of its
    copy (`copy`: runtime.own_episodes; `overall` then holds them).
    """
    db, total, all_docs = _archive_sizes(conn, agent_id)
    index = _index(conn)
    if copy is not None:
        own: dict[str, int] | None = overall
    elif _agent_phrase(conn, agent_id):
        own = _own_counts(conn, agent_id, terms, overall, single)
    else:
        own = None
    out = {}
    for t in terms:
        df: float
        if own is not None:
            df = own[t]  # counted through the agent's token (`_own_counts`)
        elif overall[t] > EXACT_DF_LIMIT or total == all_docs:
            # Common overall (or one agent holds the whole archive): the overall count, scaled to
            # this agent's share, instead of walking thousands of rows for a word that weighs little.
            df = overall[t] * total / all_docs
        elif index is None:
            # Kept, and brought up to date with the episodes added (runtime.archive_stats).
            df = archive_stats.agent_frequency(conn, agent_id, t, _fts([t], single))
        else:
            key = (db, agent_id, total, t)  # another backend: per database file, agent and archive size
            found = _AGENT_DF.get(key)
            if found is None:
                if len(_AGENT_DF) > 50_000:
                    _AGENT_DF.clear()
                found = _AGENT_DF[key] = int(index.agent_frequency(conn, agent_id, t))
            df = found
        out[t] = math.log(1 + (total - df + 0.5) / (df + 0.5))
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


def _term_matcher(terms: list[str]) -> TermMatcher:
    """What finds every term (stems as prefixes, short words whole); group k = term k."""
    return TermMatcher([(t,) for t in terms])


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
    # From the FTS index, not the rows; `single` learns the terms that cover one indexed word. Kept,
    # and brought up to date with the episodes added (runtime.archive_stats).
    kept = fts_ranks.kept_counts(conn)  # a copy of the index's counts where one is kept
    return archive_stats.frequencies(conn, terms, single, kept)


# The two rankings the searches ask the index for: `search_episodes` weighs the columns,
# `search_quotes` ranks by plain BM25. One query over a candidate try computes both.
RANKINGS: tuple[tuple[float, ...], ...] = (COLUMN_WEIGHTS, PLAIN_WEIGHTS)
_T = TypeVar("_T")


def _rank_sql(weights: tuple[float, ...]) -> str:
    return fts_ranks.rank_sql(weights)


def _store_state(conn: sqlite3.Connection) -> tuple[int, int]:
    """What changes whenever the store's content may have: this connection's writes, other connections' commits."""
    return conn.total_changes, int(conn.execute("PRAGMA data_version").fetchone()[0])


@dataclass(frozen=True)
class _Try:
    """One candidate try: its MATCH of the query's words (and participant), and the agent's phrase
    ANDed with it where the index holds agent tokens (runtime.episode_index)."""

    match: str
    agent: str | None

    @property
    def full(self) -> str:
        return f"({self.match}) AND {self.agent}" if self.agent else self.match


@dataclass
class _Matches:
    """One candidate try's matches that the principal may see."""

    visible: list[int]  # rowids: newest first when the try is windowed, else in the index's order
    newest: bool  # only the agent's newest `WINDOW_DOCS` matches were looked at (there are more)
    ranked: list[tuple[Any, ...]] | None = None  # every visible match as (rowid, rank per RANKINGS)


def _visible_matches(
    conn: sqlite3.Connection,
    source: str,
    agent_id: str,
    where: str,
    params: list[Any],
    attempt: _Try,
    windowed: bool,
) -> _Matches:
    """The principal's matches of one candidate try, ranked unless the try is windowed.

    Not windowed: every visible match with both BM25 ranks. Windowed: the
    agent's newest `WINDOW_DOCS` matches are walked first (newest first, the
    index stops there); with that many, the visible ones among them are the
    candidates (`newest`, fts_terms), and with fewer they are all of the
    visible matches, ranked only when a search wants fewer of them than
    there are (`_chosen`): BM25 would first count the documents of each of
    the try's common words, a walk of tens of thousands of postings.

    A recall asks for the same try twice (the episodes, then the remembered
    turns), and walking the postings of common words is most of its cost, so
    the answer is kept on the connection until the store changes: the key
    holds the connection's own change count and SQLite's `data_version`
    (which moves when another connection commits), so no stale row, and none
    another principal may see, is ever served.
    """
    key = ("try", source, attempt.full, where, tuple(params), windowed, fts_terms.WINDOW_DOCS)
    return _kept(conn, key, lambda: _walk(conn, source, agent_id, where, params, attempt, windowed))


def _walk(
    conn: sqlite3.Connection,
    source: str,
    agent_id: str,
    where: str,
    params: list[Any],
    attempt: _Try,
    windowed: bool,
) -> _Matches:
    if windowed:
        window = fts_terms.WINDOW_DOCS
        sql = (
            f"SELECT episodes_fts.rowid, {where} {source} AND e.agent_id = ?"
            f" ORDER BY episodes_fts.rowid {{order}} LIMIT {window}"
        )
        args = [*params, attempt.full, agent_id]
        if attempt.agent and _archive_sizes(conn, agent_id)[1] < window:
            # Narrowed to an agent with fewer episodes than the window, a try's matches are all of
            # them, and FTS5 walks its lists forward in about half the time it walks them backward
            # (the skips of an AND read pages either way); newest first after. (Checked: an
            # episode added meanwhile could make them the window's; then the newest are asked.)
            oldest = conn.execute(sql.format(order="ASC"), args).fetchall()
            if len(oldest) < window:
                return _Matches([r[0] for r in reversed(oldest) if r[1]], newest=False)
        newest = conn.execute(sql.format(order="DESC"), args).fetchall()
        return _Matches([r[0] for r in newest if r[1]], newest=len(newest) >= window)
    ranked = _ranked_rows(conn, source, where, params, attempt)
    return _Matches([r[0] for r in ranked], newest=False, ranked=ranked)


MEMO_ENTRIES = 64  # a connection that only reads keeps at most this many answers


class _Memos:
    """The connections keeping candidate matches. Their keys are the tries' MATCH text: the
    questions' words and the words a prefix covers, which may be any user's. Like the other copies
    of episode text they go when an erasure is made here or met by a read (runtime.episode_text),
    not at the connection's next search, which may never come."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.conns: weakref.WeakSet[HotConnection] = weakref.WeakSet()
        self.marks: dict[str, int] = {}  # per store, the erasure mark last seen

    def add(self, conn: HotConnection) -> None:
        with self.lock:
            self.conns.add(conn)

    def drop(self, db: str = "") -> None:
        """Every connection's memo (erasures are rare: any store's)."""
        with self.lock:
            for conn in list(self.conns):
                conn.candidate_memo = None

    def seen(self, db: str, mark: int) -> None:
        if self.marks.get(db, mark) != mark:
            self.drop(db)
        self.marks[db] = mark


_MEMOS = _Memos()
TEXTS.erasure_drops.append(_MEMOS.drop)
TEXTS.erasure_checks.append(_MEMOS.seen)


def _kept(conn: sqlite3.Connection, key: tuple[Any, ...], compute: Callable[[], _T]) -> _T:
    """`compute()`, kept on the connection while the store is unchanged (`_store_state`)."""
    if not isinstance(conn, HotConnection) or conn.in_transaction:
        # Inside a transaction the change counter does not go back on a rollback: what was
        # read there may be undone (rows made visible, then not), so it is not kept.
        return compute()
    state = _store_state(conn)  # taken before the read: a change during it is a change after it
    memo = conn.candidate_memo
    if memo is None or memo[0] != state or len(memo[1]) >= MEMO_ENTRIES:
        memo = conn.candidate_memo = (state, {})
        _MEMOS.add(conn)
    if key not in memo[1]:
        memo[1][key] = compute()
    found: _T = memo[1][key]
    return found


# The agent's phrase is ANDed with the tries when the agent holds at most this share of the archive:
# where it holds most of it, skipping to its documents saves little and the AND's steps cost.
AGENT_SHARE = 0.5


def _narrowed(conn: sqlite3.Connection, agent_id: str) -> int | None:
    """The agent's episodes when its searches are narrowed to them (it holds at most `AGENT_SHARE`
    of an archive whose index holds agent tokens); None when they are not."""
    if _index(conn) is not None or not indexes_agents(conn):
        return None  # another backend's index, or one made before agent tokens (a read-only store)
    _, total, all_docs = archive_stats.sizes(conn, agent_id)
    return total if total <= AGENT_SHARE * all_docs else None


def _agent_phrase(conn: sqlite3.Connection, agent_id: str) -> str | None:
    """The agent's phrase to AND with every candidate try (None: tried without it).

    The tries find the agent's episodes either way (who may see a match is
    checked on its row); the phrase only lets the index skip every other
    agent's documents (runtime.episode_index), and adds nothing to a rank."""
    return agent_phrase(agent_id) if _narrowed(conn, agent_id) is not None else None


def own_copy(conn: sqlite3.Connection, agent_id: str) -> OwnEpisodes | None:
    """The copy of the agent's own episodes its searches are answered from (runtime.own_episodes),
    where it holds a small share of the archive (its phrase is ANDed otherwise) and few episodes."""
    episodes = _narrowed(conn, agent_id)
    return None if episodes is None else own_episodes(conn, agent_id, episodes)


def term_counts(
    conn: sqlite3.Connection, terms: list[str], single: dict[str, str], copy: OwnEpisodes | None
) -> dict[str, int]:
    """The episodes holding each term that a search goes by: the agent's own where its episodes are
    copied (`own_copy`), else the whole index's (`single` learns the prefixes covering one word)."""
    if copy is None:
        return _frequencies(conn, terms, single)
    with own_copies.lock():
        return copy.counts(terms)


def _own_counts(
    conn: sqlite3.Connection,
    agent_id: str,
    terms: list[str],
    overall: dict[str, int],
    single: dict[str, str] | None,
    listed: dict[str, tuple[str, ...]] | None = None,
) -> dict[str, int]:
    """The agent's own episodes holding each term, counted through its token (runtime.episode_index)
    and kept (runtime.archive_stats): a word's count skips through its list of documents to the
    agent's, and so does a prefix's written as the few words it covers.

    A prefix covering more words than are listed (`fts_terms.MAX_COVERED`) and common overall is
    not counted: FTS5 would merge every one of its words' lists first, a walk of the whole index's
    documents of them (100 ms for a prefix of 18 words at 100k episodes). Its overall count scaled
    to the agent's share stands in, as it does where the agent holds the archive (`_idf`).
    `listed`: `archive_stats.covered` of the terms, when the caller has read it."""
    if listed is None:
        listed = archive_stats.covered(conn, terms)
    _, total, all_docs = _archive_sizes(conn, agent_id)
    out = {}
    for t in terms:
        n = overall.get(t, 0)
        if not n:
            out[t] = 0
        elif len(t) >= 4 and t not in listed and not (single and t in single) and n > EXACT_DF_LIMIT:
            out[t] = max(1, round(n * total / all_docs))
        else:
            out[t] = archive_stats.agent_frequency(conn, agent_id, t, _fts([t], single))
    return out


def _from_fts(table: str) -> str:
    """The candidate tries' FROM: the index's matches, each joined to its row of `table` as `e`.

    CROSS JOIN: the matches drive the loop (without an ORDER BY on the rank,
    the planner would otherwise walk all of the agent's episodes and probe the
    index for each).
    """
    return (
        f"FROM episodes_fts CROSS JOIN {table} e ON e.rowid = episodes_fts.rowid WHERE episodes_fts MATCH ?"
    )


# Who may see each match is checked on `episode_access`, the narrow copy of the episodes' agent and
# owner (runtime.hotstore): the same rule (`item_clause`) on the same values, from rows that stay in
# the page cache. A try that names a participant needs the episode row itself.
_FROM_ACCESS = _from_fts("episode_access")
_FROM_EPISODES = _from_fts("episodes")


def _ranked_rows(
    conn: sqlite3.Connection, source: str, where: str, params: list[Any], attempt: _Try
) -> list[tuple[Any, ...]]:
    # An OR of words: summed from each word's kept ranks, bit for bit. Those are every document's
    # (whoever's), filed without the agent's phrase, which adds nothing to a rank.
    kept = fts_ranks.ranked_rows(conn, where, params, attempt.match, RANKINGS)
    if kept is not None:
        return kept
    ranks = ", ".join(_rank_sql(w) for w in RANKINGS)
    rows = conn.execute(f"SELECT episodes_fts.rowid, {ranks} {source} AND {where}", [attempt.full, *params])
    return [tuple(r) for r in rows]


def _chosen(
    conn: sqlite3.Connection,
    source: str,
    found: _Matches,
    where: str,
    params: list[Any],
    attempt: _Try,
    rank: int,
    candidates: int,
    rankable: bool = True,
) -> list[tuple[Any, ...]]:
    """The try's best `candidates` as (rowid, ranks...): by rank (ties to the older), or newest first
    unranked (`rankable` false: BM25 would walk more than it may, fts_terms.agent_candidate_matches)."""
    if found.newest or not rankable or (found.ranked is None and len(found.visible) <= candidates):
        # Newest first, ranked 0: a window's newest matches, or every visible match when all are wanted.
        return [(r, *(0.0 for _ in RANKINGS)) for r in found.visible[:candidates]]
    if found.ranked is None:
        found.ranked = _ranked_rows(conn, source, where, params, attempt)
    return sorted(found.ranked, key=lambda r: (r[rank], r[0]))[:candidates]


def _rows_at(
    conn: sqlite3.Connection, who: Principal, cols: str, chosen: list[tuple[Any, ...]], rank: int
) -> list[tuple[Any, ...]]:
    """`cols` of the chosen matches, in their order, each with its rank (position `rank`) last.

    Each row's own agent and owner are checked again (`can_read_item`): the matches were
    found visible on `episode_access` or in an earlier statement, and a row read here is the one served.
    """
    if not chosen:
        return []
    by_rowid = fts_rows.rows_by_rowid(conn, f"{cols}, e.agent_id, e.owner", [c[0] for c in chosen])
    out = []
    for c in chosen:
        row = by_rowid.get(c[0])
        if row is not None and can_read_item(who, row[-2], row[-1]):
            out.append((*tuple(row)[:-2], c[rank]))
    return out


@dataclass(frozen=True)
class _Scope:
    """What every candidate try of one search is narrowed by: its FROM, who may see a match (SQL and
    parameters), the participant's phrase and the agent's (None: not narrowed by it)."""

    source: str
    where: str
    params: list[Any]
    phrase: str | None
    agent: str | None


def _tried(
    conn: sqlite3.Connection,
    who: Principal,
    cols: str,
    column_weights: tuple[float, ...],
    terms: list[str],
    frequencies: dict[str, int],
    candidates: int,
    single: dict[str, str] | None,
    scope: _Scope,
) -> list[Any] | None:
    """The candidate rows of the first try through the index that finds a visible match (None: none does)."""
    source, where, params, phrase, agent = scope.source, scope.where, scope.params, scope.phrase, scope.agent
    rank = 1 + RANKINGS.index(column_weights)

    def render(term: str) -> str:
        return _fts([term], single)

    if agent:
        # Narrowed to the agent's episodes, the tries are chosen by its own counts: on a store of
        # many agents the whole index's say every word is common (every try windowed) and pick
        # words this agent never used (no try finds anything; the search falls back).
        listed = archive_stats.covered(conn, terms)
        own = _own_counts(conn, who.agent_id, terms, frequencies, single, listed)

        def expand(term: str) -> str:
            """The words a prefix covers, where few, as an OR the index can skip through."""
            words = listed.get(term)
            if not words or (single and term in single):
                return render(term)
            return f"({archive_stats.words_match(words)})"

        tries, rankable = agent_candidate_matches(own, frequencies, render, expand=expand)
        windowed = not rankable
    else:
        # Every term too common, and more matches in the agent's archive than the window:
        # the newest of them, not BM25 over all of them (fts_terms).
        tries, windowed, rankable = (
            candidate_matches(frequencies, render),
            needs_window(frequencies),
            True,
        )
    for match in tries:
        attempt = _Try(f"({match}) AND {phrase}" if phrase else match, agent)
        found = _visible_matches(conn, source, who.agent_id, where, params, attempt, windowed)
        if found.visible:
            chosen = _chosen(conn, source, found, where, params, attempt, rank, candidates, rankable)
            return _rows_at(conn, who, cols, chosen, rank)
    return None


def _candidate_rows(
    conn: sqlite3.Connection,
    who: Principal,
    cols: str,
    column_weights: tuple[float, ...],
    terms: list[str],
    frequencies: dict[str, int],
    participant: str | None,
    candidates: int,
    fallback: int,
    single: dict[str, str] | None = None,
    copy: OwnEpisodes | None = None,
) -> list[Any]:
    """Candidate episodes for a query: `cols` plus a `rank` column, best BM25 first.

    The candidate set is bounded (see fts_terms: the rarest terms, or ANDs of
    them, pick candidates; every term still scores them afterwards). The
    participant filter is exact on the row and, since the participants column
    is indexed, also narrows candidates inside the index. When nothing matches
    (or the query has no usable words): the `fallback` most important recent
    episodes instead (among the agent's `FALLBACK_SCAN` newest).
    `column_weights` is one of `RANKINGS`; ties in rank go to the older episode.
    With the agent's `copy` (`own_copy`), the candidates are found and ranked
    there, over the agent's own episodes only (runtime.own_episodes).
    """
    index = _index(conn)
    if index is not None:
        rows: list[Any] = index.candidates(
            conn, who, cols, column_weights, terms, frequencies, participant, candidates, fallback
        )
        return rows
    where, params = item_clause(who, "e")
    source = _FROM_ACCESS if keeps_episode_access(conn) else _FROM_EPISODES
    if participant:
        source = _FROM_EPISODES
        where += " AND EXISTS (SELECT 1 FROM json_each(e.participants) p WHERE lower(p.value) = lower(?))"
        params.append(participant)
    phrase = _participant_match(participant) if participant else None
    agent = _agent_phrase(conn, who.agent_id)
    from_fts = "FROM episodes_fts JOIN episodes e ON e.rowid = episodes_fts.rowid"
    if terms and copy is not None:
        with own_copies.lock():
            own_chosen = copy.candidates(who, terms, column_weights, participant, candidates)
        if own_chosen:
            return _rows_at(conn, who, cols, own_chosen, 1)
    elif terms:
        found = _tried(
            conn,
            who,
            cols,
            column_weights,
            terms,
            frequencies,
            candidates,
            single,
            _Scope(source, where, params, phrase, agent),
        )
        if found is not None:
            return found
    latest = "ORDER BY importance DESC, end_ts DESC LIMIT ?"
    if phrase:
        sql = f"SELECT {cols}, 0.0 AS rank {from_fts} WHERE episodes_fts MATCH ? AND {where} {latest}"
        return conn.execute(sql, [_Try(phrase, agent).full, *params, fallback]).fetchall()
    # The agent's newest episodes (its index, newest first) bound the scan on a large archive;
    # both searches of a recall fall back alike, so the choice is kept as the tries' matches are.
    newest_sql = (
        f"SELECT rowid AS rid, * FROM episodes WHERE agent_id = ? ORDER BY end_ts DESC LIMIT {FALLBACK_SCAN}"
    )
    sql = f"SELECT e.rid FROM ({newest_sql}) e WHERE {where} {latest}"
    args = [who.agent_id, *params, fallback]
    key = ("fallback", where, tuple(params), fallback, FALLBACK_SCAN)
    rowids = _kept(conn, key, lambda: [r[0] for r in conn.execute(sql, args)])
    return _rows_at(conn, who, cols, [(r, 0.0) for r in rowids], 1)


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
    copy = own_copy(conn, agent_id)
    overall = term_counts(conn, terms, single, copy)
    # The quotes are not read with the candidates: runtime.episode_text has them prepared.
    cols = "e.episode_id, e.name, e.summary, NULL, e.participants, e.start_ts, e.end_ts, e.importance, e.emotional_context, e.important"
    rows = _candidate_rows(
        conn, who, cols, COLUMN_WEIGHTS, terms, overall, participant, CANDIDATES, limit, single, copy
    )

    idf = _idf(conn, agent_id, terms, overall, single, copy)
    term_weights = [idf.get(t, 0.0) for t in terms]
    rx = _term_matcher(terms) if terms else None
    months, years = _asked_dates(query)
    named = _names_in(query)
    entries = TEXTS.prepared(conn, database_key(conn), [str(r[0]) for r in rows], [r[1] for r in rows])
    all_counts, all_scores = _quote_matches(entries, terms, term_weights, rx)
    # Headers (name and summary) counted from the index of prepared headers, not their text.
    head_counts_all = TEXTS.head_counts(entries, [(t,) for t in terms])
    head_lengths = np.array([e.head_spaces + 1 for e in entries], dtype=np.float64)
    heads = bm25_rows(head_counts_all, head_lengths, term_weights, AVG_HEAD_WORDS)
    scores, quote_scores = _episode_scores(
        rows, entries, all_counts, all_scores, heads, head_counts_all > 0, term_weights, named
    )
    if months or years:
        # The question names a time: memories from then are the ones meant.
        asked = months | years
        for n, row in enumerate(rows):
            when = {row[5][:4], row[6][:4]} | {_MONTHS[int(row[5][5:7]) - 1], _MONTHS[int(row[6][5:7]) - 1]}
            scores[n] *= 1.0 + 0.5 * len(asked & when) / len(asked)
    scored = [
        (score, str(row[0]), n) for n, (score, row) in enumerate(zip(scores.tolist(), rows, strict=True))
    ]
    scored.sort(key=lambda s: (-s[0], s[1]))
    # Only the results are built (their quotes best match first, copied from the prepared episode).
    out = []
    for score, _, n in scored[:limit]:
        row, quotes = rows[n], entries[n].quotes
        shown = quote_scores(n)
        order = sorted(range(len(quotes)), key=lambda i: (-shown[i], i))
        start, end = parse_ts(row[5]), parse_ts(row[6])
        out.append(
            {
                "episode_id": row[0],
                "name": row[1],
                "summary": row[2],
                "key_quotes": [{**quotes[i], "match": round(shown[i], 3)} for i in order],
                "participants": orjson.loads(row[4] or "[]"),
                "start_ts": row[5],
                "end_ts": row[6],
                "when": human_range(start, end),
                "importance": int(row[7] or 0),
                "emotional_context": row[8] or "",
                "important": bool(row[9]),
                "score": round(score, 4) if math.isfinite(score) else 0.0,
            }
        )
    return out


def query_matches(query: str, text: str) -> int:
    """How many of the query's terms `text` contains (the measure quotes are ordered by)."""
    words = set(_WORD.findall(text.lower()))
    return sum(1 for t in query_terms(query) if _matches(words, t))
