"""Document frequencies from the FTS5 index itself, and a bounded candidate query.

Full-text search over a large archive is only as fast as its most common
query word: BM25 over an OR-query scores every document that matches any
term, and a word found in half of 100,000 episodes makes every query that
contains it scan 50,000 rows. The index already knows how many documents each
term is in (`fts5vocab`), so the search can ask the index, not the rows:

* `document_frequencies` reads those counts (a prefix term sums the counts of
  the words it covers, an upper bound when one document holds two of them);
* `candidate_terms` keeps the rarest terms while the documents they can match
  stay under a cap, so the candidate set is bounded whatever the query. The
  dropped terms are the least informative ones (lowest IDF); the caller still
  scores candidates on every term, so ranking uses the whole question;
* `candidate_matches` turns them into FTS5 MATCH expressions: an OR of the
  kept terms, or, when even the rarest term is too common on its own, ANDs
  of the rarest terms (documents about several asked-for things first).

When even the rarest term is too common on its own, the AND tries can still
match tens of thousands of documents, and BM25 would score every one of them.
`newest_window` then bounds each try to the newest `WINDOW_DOCS` documents it
matches (the index walks its postings by descending rowid and stops there),
and the caller takes the newest visible ones of those: on a large archive,
among documents that all contain the asked-for words (which weigh little,
being common), the recent ones are the candidates, and the caller's own
scoring over every term orders them.

On a small archive (every term together under the cap) nothing is dropped,
and the search behaves exactly as an unbounded one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

# At most this many documents behind the candidate query (about 1-2 ms of BM25 in SQLite).
CANDIDATE_DOC_CAP = 1500
# Documents behind a try when every term is more common than that (newest first, no BM25).
WINDOW_DOCS = 500


def _ensure_vocab(conn: sqlite3.Connection, fts_table: str) -> str:
    vocab = f"{fts_table}_vocab"
    # A temp virtual table: per connection, nothing written to the database file.
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{vocab} USING fts5vocab(main, {fts_table}, 'row')")
    return vocab


def document_frequencies(
    conn: sqlite3.Connection,
    fts_table: str,
    terms: Sequence[str],
    prefix_min_len: int = 4,
    single: dict[str, str] | None = None,
    kept: Callable[[str, bool], tuple[int, str] | None] | None = None,
) -> dict[str, int]:
    """Documents containing each term (terms of `prefix_min_len`+ characters match as prefixes).

    `single`, when given, receives each prefix term that covers exactly one
    indexed word, with that word: matching the word itself finds the same
    documents with the same BM25, without the cost of a prefix query (FTS5
    merges the postings of every word in a prefix's range on each query).

    The index counts a term's documents by walking its postings (milliseconds
    for a word in most of 100,000 documents): the searches keep what it says,
    across new episodes (runtime.archive_stats). `kept`, when given, answers a term as the index
    would (its documents and, for a prefix, the one word it covers, else ""; None when it
    cannot): a copy of the index's counts that costs no query (runtime.fts_mirror).
    """
    out: dict[str, int] = {}
    for term in terms:
        found = kept(term, len(term) >= prefix_min_len) if kept is not None else None
        if found is not None:
            out[term], only = found
        else:
            prefix = len(term) >= prefix_min_len
            out[term], words, first = vocab_counts(conn, fts_table, term, prefix)
            only = first if prefix and words == 1 else ""
        if single is not None and only:
            single[term] = only
    return out


# A prefix term's words are listed (`vocab_counts`' `covered`) when it covers at most this many: an
# agent's search writes the prefix as the OR of them (runtime.archive_stats), each word's list
# skipped through, where FTS5 merges a prefix's whole list of documents first.
MAX_COVERED = 32


def vocab_counts(
    conn: sqlite3.Connection, fts_table: str, term: str, prefix: bool, covered: list[str] | None = None
) -> tuple[int, int, str]:
    """(documents, words, the first word) of a term in the index: a prefix term sums the documents of
    every indexed word it covers; a whole word covers itself. `covered`, when given, receives a
    prefix term's words (sorted) when it covers at most `MAX_COVERED` of them."""
    vocab = _ensure_vocab(conn, fts_table)
    if prefix:
        # Every indexed word starting with `term`: [term, term + U+10FFFF) in the index order. A token
        # never holds a space (FTS5's tokenizer splits there), so the words can be joined by one.
        row = conn.execute(
            f"SELECT coalesce(sum(doc), 0), count(*), min(term),"
            f" CASE WHEN count(*) <= {MAX_COVERED} THEN group_concat(term, ' ') END"
            f" FROM temp.{vocab} WHERE term >= ? AND term < ?",
            (term, term + "\U0010ffff"),
        ).fetchone()
        if covered is not None and row[3] is not None:
            covered.extend(sorted(row[3].split(" ")))
        return int(row[0] or 0), int(row[1]), str(row[2] or "")
    row = conn.execute(f"SELECT coalesce(sum(doc), 0) FROM temp.{vocab} WHERE term = ?", (term,)).fetchone()
    docs = int(row[0] or 0)
    return docs, int(docs > 0), term if docs else ""


def candidate_terms(frequencies: dict[str, int], cap: int | None = None) -> list[str]:
    """The rarest terms whose documents add up to at most `cap` (always the rarest one that occurs)."""
    cap = CANDIDATE_DOC_CAP if cap is None else cap
    present = sorted((t for t, df in frequencies.items() if df > 0), key=lambda t: (frequencies[t], t))
    kept: list[str] = []
    total = 0
    for term in present:
        if kept and total + frequencies[term] > cap:
            break
        kept.append(term)
        total += frequencies[term]
    return kept


def needs_window(frequencies: dict[str, int], cap: int | None = None) -> bool:
    """True when the candidate tries are not bounded by the terms' own counts (see `newest_window`)."""
    cap = CANDIDATE_DOC_CAP if cap is None else cap
    present = [df for df in frequencies.values() if df > 0]
    return bool(present) and min(present) > cap


def newest_window(
    conn: sqlite3.Connection,
    fts_table: str,
    match: str,
    cap: int | None = None,
    *,
    owner_filter: tuple[str, str, Sequence[object]] | None = None,
) -> int:
    """The lowest rowid among the newest `cap` documents matching `match` (0: fewer match, no bound).

    `owner_filter` = (content table, condition on it as `c`, parameters) counts
    only the documents one owner holds (an agent's, in a shared index).
    """
    cap = WINDOW_DOCS if cap is None else cap
    source, where = fts_table, ""
    params: tuple[object, ...] = ()
    if owner_filter is not None:
        table, condition, args = owner_filter
        params = tuple(args)
        source = f"{fts_table} JOIN {table} c ON c.rowid = {fts_table}.rowid"
        where = f" AND {condition}"
    row = conn.execute(
        f"SELECT {fts_table}.rowid FROM {source} WHERE {fts_table} MATCH ?{where}"
        f" ORDER BY {fts_table}.rowid DESC LIMIT 1 OFFSET ?",
        (match, *params, cap - 1),
    ).fetchone()
    return int(row[0]) if row else 0


def candidate_matches(
    frequencies: dict[str, int], render: Callable[[str], str], cap: int | None = None
) -> list[str]:
    """FTS5 MATCH expressions for a bounded candidate set, to try in order until one finds rows.

    Normally one: the OR of the kept terms. When even the rarest term is too
    common on its own, documents about several of the asked-for things are the
    ones worth scoring: the AND of every term, then of the two rarest, then the
    rarest alone (each then bounded by `newest_window`).
    """
    kept = candidate_terms(frequencies, cap)
    if not kept:
        return []
    if not needs_window(frequencies, cap):
        return [" OR ".join(render(t) for t in kept)]
    present = sorted((t for t, df in frequencies.items() if df > 0), key=lambda t: (frequencies[t], t))
    tries = [" AND ".join(render(t) for t in present)]
    if len(present) > 2:
        tries.append(f"{render(present[0])} AND {render(present[1])}")
    if len(present) > 1:
        tries.append(render(present[0]))
    return tries


def agent_candidate_matches(
    own: dict[str, int],
    overall: dict[str, int],
    render: Callable[[str], str],
    cap: int | None = None,
    expand: Callable[[str], str] | None = None,
) -> tuple[list[str], bool]:
    """MATCH expressions for tries narrowed to one agent's episodes (ANDed with its token), chosen
    by the agent's own counts (`own`); and whether BM25 may rank them.

    Only words the agent has are tried, rarest in its own archive first (ties:
    rarest overall). The OR of the rarest of them (`candidate_terms` over the
    agent's counts) is ranked by BM25 when that costs little: `bm25()` first
    counts each of the try's words over the whole index, a walk of every
    document holding it whoever's it is, so the words' counts overall must stay
    under the cap too. Otherwise the tries are those of a window (`newest
    window`, unranked, newest first): documents about several of the asked-for
    things first (the AND of every word the agent has, then of its two rarest),
    then its rarest word alone, then the OR. Those are not ranked, so a term
    may be written as the OR of the words it covers (`expand`), which the index
    can skip through to the agent's documents where a prefix it cannot.
    """
    cap = CANDIDATE_DOC_CAP if cap is None else cap
    present = sorted((t for t, df in own.items() if df > 0), key=lambda t: (own[t], overall.get(t, 0), t))
    if not present:
        return [], True
    kept = candidate_terms({t: own[t] for t in present}, cap)
    either = " OR ".join(render(t) for t in kept)
    if not needs_window(own, cap) and sum(overall.get(t, 0) for t in kept) <= cap:
        return [either], True
    each = expand or render
    tries = [" AND ".join(each(t) for t in present)]
    if len(present) > 2:
        tries.append(f"{each(present[0])} AND {each(present[1])}")
    if len(present) > 1:
        tries.append(each(present[0]))
    if len(kept) > 1:
        tries.append(" OR ".join(each(t) for t in kept))
    return tries, False
