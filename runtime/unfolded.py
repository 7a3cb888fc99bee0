"""Turns not yet folded into an episode: searched directly, so no turn is out of reach.

Between two compressions an agent's newest turns exist only as working-memory
rows: the prompt shows the last few, and episode search cannot find the rest.
This search covers that gap. A turn counts as folded once an episode names it
among its sources (`folded_turns`, filled when the episode is applied, so the
order in which a rebuild applies turns and episodes does not matter); from
then on the episode answers for it, and this search no longer returns it, so
a turn is never delivered twice nor lost in between.

Ranking is deliberately simple, as the set is small (the turns since the last
compression): how many of the query's terms a turn contains (stems matched as
prefixes, as in episode search), newest first among equals. Only the newest
`SCAN_LIMIT` unfolded turns are read (newest first along the agent's time
index), which bounds the cost for an agent that has never been compressed.
The scan reads only that index; the words of the turns met are kept in an
inverted index (word -> the turns holding it; a turn's text is read once), so
a query's terms are looked up once each, not once per scanned turn, and only
the results' texts are read.
"""

from __future__ import annotations

import heapq
import re
import sqlite3
from array import array
from typing import Any

from tiermem.runtime.episode_search import query_terms
from tiermem.runtime.hotstore import database_key, erasure_mark, item_clause
from tiermem.runtime.unfolded_rows import newest_unfolded
from tiermem.runtime.visibility import Principal

SCAN_LIMIT = 400
WORD_CACHE = 20_000  # turns whose words are kept (a few agents' scans)
POSTINGS_CACHE = 2_000_000  # (word, turn) pairs kept: long turns fill the index before the turn count does
PREFIX_MIN = 4  # a term this long matches the words it starts, as in episode search
_WORD = re.compile(r"[a-z0-9]+")


class _TurnWords:
    """The words of the turns met, per store: word -> the turns holding it.

    A turn's text never changes (an erased turn's row is gone, so it is never
    looked up again), so a turn is added once. Past either bound everything
    is dropped and read again as met. A word's turns are kept as an array of
    numbers, not a set: the garbage collector visits every member of a set on
    each full pass, and long turns hold hundreds of thousands of (word, turn)
    pairs (a third of a full pass's time, on the request it lands on).
    """

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.generation = getattr(self, "generation", -1) + 1  # turn numbers are only valid within one
        self.turns: dict[tuple[str, str], int] = {}  # (database, item id) -> turn number
        self.by_word: dict[tuple[str, str], array[int]] = {}  # (database, word) -> turn numbers
        self.by_head: dict[tuple[str, str], set[str]] = {}  # (database, first PREFIX_MIN letters) -> words
        self.postings = 0
        self.erased: dict[str, int] = {}  # database -> its erasure mark when its turns were read

    def add(self, conn: sqlite3.Connection, db: str, item_ids: list[str], mark: int | None = None) -> None:
        """Index the turns among `item_ids` not met yet (their texts read in one pass); `mark`: the
        store's erasure mark, when the caller has just read it."""
        if mark is None:
            mark = erasure_mark(conn)  # an erasure since: every word goes, the erased turn's with them
        if self.erased.get(db, mark) != mark:
            self.clear()
        self.erased[db] = mark
        missing = [i for i in item_ids if (db, i) not in self.turns]
        if not missing:
            return
        if len(self.turns) + len(missing) > WORD_CACHE or self.postings > POSTINGS_CACHE:
            self.clear()
            missing = list(dict.fromkeys(item_ids))
        for item_id, (message, response) in turn_texts(conn, missing).items():
            n = self.turns[(db, item_id)] = len(self.turns)
            words = set(_WORD.findall(f"{message} {response}".lower()))
            self.postings += len(words)
            for word in words:
                holders = self.by_word.get((db, word))
                if holders is None:
                    holders = self.by_word[(db, word)] = array("q")
                    if len(word) >= PREFIX_MIN:
                        self.by_head.setdefault((db, word[:PREFIX_MIN]), set()).add(word)
                holders.append(n)

    def holding(self, db: str, term: str, among: set[int]) -> set[int]:
        """The turns `among` holding `term`: a word it starts (four letters or more), else the word."""
        if len(term) < PREFIX_MIN:
            return among.intersection(self.by_word.get((db, term), ()))
        found: set[int] = set()
        for word in self.by_head.get((db, term[:PREFIX_MIN]), ()):
            if word.startswith(term):
                found.update(among.intersection(self.by_word[(db, word)]))
        return found


_TURNS = _TurnWords()
HELD_TERMS = 10_000  # terms whose turns among one scan's are kept with it
# Turn numbers kept with one scan, all terms together (4 bytes each: under a megabyte); past it the
# terms' turns are dropped and looked up again. A scan's common words each hold most of its turns.
HELD_NUMBERS = 200_000


class _Scan:
    """One scan's turns numbered (turn number -> its rank in the scan), and per term the numbers of
    those holding it: the same for every question while the scan is the same kept rows
    (runtime.unfolded_rows keeps them until a turn or a fold changes), the turns' numbering the
    same (`_TurnWords.generation`) and no erasure came since."""

    def __init__(self, key: tuple[Any, ...], numbers: dict[int, int]) -> None:
        self.key = key  # (the rows, database, excluded turns, generation, erasure mark)
        self.numbers = numbers
        self.among = set(numbers)
        # Per term, its turns as an array of numbers (turn numbers stay under `WORD_CACHE` and a
        # few scans more): a tuple of ints costs ten times the memory.
        self.held: dict[str, array[int]] = {}
        self.held_numbers = 0

    def same(self, key: tuple[Any, ...]) -> bool:
        return self.key[0] is key[0] and self.key[1:] == key[1:]

    def holding(self, db: str, term: str) -> array[int]:
        """`_TURNS.holding` of `term` among this scan's turns, kept."""
        found = self.held.get(term)
        if found is None:
            found = array("i", _TURNS.holding(db, term, self.among))
            if len(self.held) >= HELD_TERMS or self.held_numbers + len(found) > HELD_NUMBERS:
                self.held, self.held_numbers = {}, 0
            if len(found) <= HELD_NUMBERS:
                self.held[term] = found
                self.held_numbers += len(found)
        return found


_LAST: list[_Scan] = []  # the last scan (one: a reader asks question after question of the same scan)


def _scanned(conn: sqlite3.Connection, db: str, rows: list[Any], exclude: frozenset[str]) -> _Scan:
    """The scan's turns indexed and numbered, from the last scan's when it is the same."""
    mark = erasure_mark(conn)
    last = _LAST[0] if _LAST else None
    if last is not None and last.same((rows, db, exclude, _TURNS.generation, mark)):
        return last
    _TURNS.add(conn, db, [r[3] for r in rows if r[0] not in exclude], mark)
    numbers = {
        n: rank
        for rank, row in enumerate(rows)
        if row[0] not in exclude and (n := _TURNS.turns.get((db, row[3]))) is not None
    }
    # Keyed after the turns were added: the numbering they were added under.
    scan = _Scan((rows, db, exclude, _TURNS.generation, mark), numbers)
    _LAST[:] = [scan]
    return scan


def search_unfolded(
    conn: sqlite3.Connection,
    who: Principal,
    query: str,
    participant: str | None = None,
    limit: int = 5,
    exclude: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """The visible turns no episode covers yet that match `query`, best first.

    `exclude` names turns the caller already shows (the prompt's recent
    section), so they are not repeated.
    """
    terms = query_terms(query)
    if limit <= 0 or not terms:
        return []
    where, params = item_clause(who, "w")
    if participant:
        where += " AND lower(w.user) = lower(?)"
        params.append(participant)
    # The scan reads the index only (texts are fetched for turns not yet seen, and for the results);
    # its rows are kept until a turn or a fold changes.
    rows = newest_unfolded(conn, where, params, SCAN_LIMIT)
    db = database_key(conn)
    scan = _scanned(conn, db, rows, exclude)
    numbers = scan.numbers
    hits: dict[int, int] = {}
    for term in terms:
        for n in scan.holding(db, term):
            hits[n] = hits.get(n, 0) + 1
    # Most hits, then newest: (-hits, rank) orders every turn (ranks are distinct), so the best few
    # are taken without sorting them all (a query of common words hits nearly every scanned turn).
    best = [
        (neg, rows[rank]) for neg, rank in heapq.nsmallest(limit, [(-h, numbers[n]) for n, h in hits.items()])
    ]
    texts = turn_texts(conn, [row[3] for _, row in best])
    return [
        {
            "event_id": row[0],
            "ts": row[1],
            "user": row[2],
            "user_message": texts[row[3]][0],
            "agent_response": texts[row[3]][1],
            "score": float(-neg),
        }
        for neg, row in best
    ]


def turn_texts(conn: sqlite3.Connection, item_ids: list[str]) -> dict[str, tuple[str, str]]:
    """(user message, agent response) of each of these working-memory items, read in chunks."""
    out: dict[str, tuple[str, str]] = {}
    for start in range(0, len(item_ids), 500):
        chunk = item_ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for item_id, message, response in conn.execute(
            f"SELECT item_id, user_message, agent_response FROM wm_items WHERE item_id IN ({marks})", chunk
        ):
            out[item_id] = (message or "", response or "")
    return out
