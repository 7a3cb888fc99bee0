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

On a small archive (every term together under the cap) nothing is dropped,
and the search behaves exactly as an unbounded one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

# At most this many documents behind the candidate query (about 1-2 ms of BM25 in SQLite).
CANDIDATE_DOC_CAP = 1500


def _ensure_vocab(conn: sqlite3.Connection, fts_table: str) -> str:
    vocab = f"{fts_table}_vocab"
    # A temp virtual table: per connection, nothing written to the database file.
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{vocab} USING fts5vocab(main, {fts_table}, 'row')")
    return vocab


def document_frequencies(
    conn: sqlite3.Connection, fts_table: str, terms: Sequence[str], prefix_min_len: int = 4
) -> dict[str, int]:
    """Documents containing each term (terms of `prefix_min_len`+ characters match as prefixes)."""
    vocab = _ensure_vocab(conn, fts_table)
    out: dict[str, int] = {}
    for term in terms:
        if len(term) >= prefix_min_len:
            # Every indexed word starting with `term`: [term, term + U+10FFFF) in the index order.
            row = conn.execute(
                f"SELECT coalesce(sum(doc), 0) FROM temp.{vocab} WHERE term >= ? AND term < ?",
                (term, term + "\U0010ffff"),
            ).fetchone()
        else:
            row = conn.execute(
                f"SELECT coalesce(sum(doc), 0) FROM temp.{vocab} WHERE term = ?", (term,)
            ).fetchone()
        out[term] = int(row[0] or 0)
    return out


def candidate_terms(frequencies: dict[str, int], cap: int = CANDIDATE_DOC_CAP) -> list[str]:
    """The rarest terms whose documents add up to at most `cap` (always the rarest one that occurs)."""
    present = sorted((t for t, df in frequencies.items() if df > 0), key=lambda t: (frequencies[t], t))
    kept: list[str] = []
    total = 0
    for term in present:
        if kept and total + frequencies[term] > cap:
            break
        kept.append(term)
        total += frequencies[term]
    return kept


def candidate_matches(
    frequencies: dict[str, int], render: Callable[[str], str], cap: int = CANDIDATE_DOC_CAP
) -> list[str]:
    """FTS5 MATCH expressions for a bounded candidate set, to try in order until one finds rows.

    Normally one: the OR of the kept terms. When even the rarest term is too
    common on its own, documents about several of the asked-for things are the
    ones worth scoring: the AND of every term, then of the two rarest, then the
    rarest alone (which is then bounded only by its own frequency).
    """
    kept = candidate_terms(frequencies, cap)
    if not kept:
        return []
    if frequencies[kept[0]] <= cap:
        return [" OR ".join(render(t) for t in kept)]
    present = sorted((t for t, df in frequencies.items() if df > 0), key=lambda t: (frequencies[t], t))
    tries = [" AND ".join(render(t) for t in present)]
    if len(present) > 2:
        tries.append(f"{render(present[0])} AND {render(present[1])}")
    if len(present) > 1:
        tries.append(render(present[0]))
    return tries
