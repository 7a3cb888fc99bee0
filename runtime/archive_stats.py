"""The archive's statistics that term weights are made of, kept per process and brought up to date
with the episodes added since, instead of counted again whenever the archive grows.

A search weighs each query term by how many of the archive's episodes hold it
(runtime.fts_terms: fts5vocab's counts), by the agent's and the archive's
episode counts, by the agent's own count of a rare term, and, for the
remembered turns, by how many of the agent's quotes hold it. Counted from the
store, each walks a word's whole list of documents or a whole index range:
milliseconds that grow with the archive (a common word at a million episodes
is ~12 ms, `count(*)` of an agent's episodes ~3 ms at 100,000, more with the
page cache SQLite drops when another connection commits), and the agent's
quote words ~300 ms on a long conversation. Episodes arrive all the time in a
live system (any agent's compression run), and keyed by the newest episode
each new one threw all of them away.

So they are kept per store under what says the episodes changed otherwise
than by being added: the store (`database_key`: its file and store id), its
schema cookie and the count of deletions and updates kept by triggers
(`meta.episodes_changed`, runtime.hotstore). While that holds, the episodes
with a higher rowid than the counts were taken at are read once, and every
kept count gets what they add, exactly: a term's documents from the new
documents' tokens (FTS5's own, `fts_mirror.counted`, checked against each
document's token counts in the index), the sizes and the agent's counts from
their rows, the quote words from their quotes. Any other change (a deletion,
an erasure, an update, a store rebuilt at the same path) starts again from
nothing, and each count is then taken from the store the first time it is
asked, bounded by the newest rowid the others are at. A count is only filed
when the store still is where it was read, so none is ever taken twice. An
erasure this process makes drops its store's statistics at once (its words
are the archive's text; `EpisodeTexts.erasure_drops`), and a reader still on
an older version than what is kept is answered by the index. The new
episodes are read and tokenized without the lock every store's searches
wait on, and applied only if nothing moved meanwhile. A term longer than
`MAX_TERM` is not kept: counted by the index each time.

The index itself is not asked for the new documents: a whole word's MATCH
past a rowid seeks (~0.05 ms for a word in 94% of 100,000 documents), but a
prefix's merges the whole doclist of every word it covers first (~45 ms
there), and counts each document once where fts5vocab sums per word
(bench/recall_after_change.py --seek).

A term of four characters or more is a prefix (as in fts_terms and the
searches' MATCH): it counts, per document, each distinct token starting with
it (fts5vocab sums the documents of every word it covers), and a match of an
agent's episode counts it once. FTS5's tokenizer never makes a token holding
U+10FFFF (not a letter or digit), so "starts with" is fts5vocab's range too.

Episodes are taken to be added with rowids above every one before (SQLite's
own rowids: nothing here inserts an explicit one). A row inserted with an
explicit rowid into the gap a deletion left, after the counts were taken,
would be below their newest rowid and not be seen (as by runtime.fts_mirror
and runtime.fts_ranks, which assume the same).

Nothing is kept inside a transaction (a rollback does not take the count
back) nor on a store without the counting triggers: there every count is
taken from the store, uncached.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson
from tiermem.runtime import fts_mirror, fts_terms
from tiermem.runtime.episode_index import agent_phrase
from tiermem.runtime.episode_text import PREFIX_MIN, TEXTS  # PREFIX_MIN: as the searches' MATCH
from tiermem.runtime.hotstore import counts_changes, database_key, episode_count, indexes_agents

TRIGGER = "episodes_changed_ad"  # one of the counting triggers: their presence says the count can be trusted
# More new episodes than this since the counts were taken: they are dropped (each is then counted
# from the store once), not brought up to date one document at a time.
MAX_NEW_ROWS = 5_000
MAX_NEW_CHARS = 2_000_000  # nor more characters of their text (tokenized at 20-120 ns a character)
MAX_TERMS = 50_000  # kept terms per store (overall and per agent, each); past it, they are dropped
# Longer terms are counted from the index each time, not kept: FTS5 cuts a query token past 32,768
# bytes, which "starts with" here would not, and every kept length is a prefix cut from each new
# token under its head (a term of thousands of characters made thousands per token).
MAX_TERM = 64
MAX_STORES = 8
# What the kept statistics are filed under, read in one statement (one snapshot of the store).
_STATE = (
    "SELECT (SELECT max(rowid) FROM episodes),"
    " (SELECT value FROM meta WHERE key = 'episodes_changed'),"
    " (SELECT schema_version FROM pragma_schema_version)"
)


class TermCount:
    """What fts5vocab says of a term: its documents (summed over the words a prefix covers), how
    many words it covers (0, 1, or 2 for two or more) and the one word when it covers one; and a
    prefix's words while it covers at most `fts_terms.MAX_COVERED` (None: more, or not listed)."""

    __slots__ = ("covered", "docs", "word", "words")

    def __init__(self, docs: int, words: int, word: str, covered: Sequence[str] | None = None) -> None:
        self.docs, self.words, self.word = docs, min(words, 2), word if words == 1 else ""
        self.covered = tuple(covered) if covered is not None else None


# The quote words kept in all (`QuoteWords.size`, every store's agents together); past it, they are
# dropped. A word's quotes take a bit per quote up to its last: at 5,000 episodes of ten quotes each
# an agent's took ~124 MB.
MAX_QUOTE_BYTES = 64_000_000
WORD_BYTES = 120  # a word's string, its entry and its number, besides its bits


class QuoteWords:
    """One agent's remembered turns (quotes) as an index from word to the quotes holding it
    (a bit per quote, in the order read), with its words sorted; `idf` keeps what was worked
    out of it until quotes are added.

    It is kept for at most `max_episodes` episodes of the agent (past them its searches weigh terms
    by the index's counts, and it would only grow), and `size` says about how many bytes it holds."""

    def __init__(self, split: Callable[[str], Iterable[str]], max_episodes: int) -> None:
        self.split = split
        self.max_episodes = max_episodes
        self.n = 0
        self.episodes = 0
        self.words_size = 0  # the words' strings and entries
        self.bits = 0  # every word's bits, up to its last quote
        self.by_word: dict[str, int] = {}
        self.vocabulary: list[str] = []
        self.new_words: list[str] = []
        self.idf: dict[str, float] = {}
        self.idf_size = 0  # the kept IDFs' keys and entries

    def add(self, raw: str | None) -> None:
        """The quotes of one episode (its `key_quotes`)."""
        by_word = self.by_word
        self.episodes += 1
        for q in orjson.loads(raw or "[]"):
            if isinstance(q, dict) and q.get("text"):
                bit = 1 << self.n
                for word in set(self.split(str(q["text"]).lower())):
                    found = by_word.get(word)
                    if found is None:
                        self.new_words.append(word)
                        found = 0
                        self.words_size += WORD_BYTES + len(word)
                    self.bits += self.n + 1 - found.bit_length()
                    by_word[word] = found | bit
                self.n += 1
        self.idf.clear()
        self.idf_size = 0

    @property
    def size(self) -> int:
        """About how many bytes it holds."""
        return self.words_size + self.bits // 8 + self.idf_size

    def df(self, groups: Sequence[tuple[str, ...]]) -> list[float]:
        """(Under the lock.) Each group's IDF over the quotes: a quote holds a group when it holds
        one of its forms, a short form as a whole word, a longer one as the prefix of any word
        (all such words sit together in the sorted vocabulary); kept until quotes are added."""
        n, vocabulary, by_word, idfs = self.n or 1, self.sorted_words(), self.by_word, self.idf
        out = []
        for g in groups:
            key = "|".join(g)
            idf = idfs.get(key)
            if idf is None:
                if len(idfs) > 50_000:
                    idfs.clear()
                    self.idf_size = 0
                found = 0
                for form in g:
                    i = bisect_left(vocabulary, form)
                    if len(form) < PREFIX_MIN:
                        if i < len(vocabulary) and vocabulary[i] == form:
                            found |= by_word[form]
                        continue
                    while i < len(vocabulary) and vocabulary[i].startswith(form):
                        found |= by_word[vocabulary[i]]
                        i += 1
                d = found.bit_count()
                idf = idfs[key] = math.log(1 + (n - d + 0.5) / (d + 0.5))
                self.idf_size += WORD_BYTES + len(key)
            out.append(idf)
        return out

    def sorted_words(self) -> list[str]:
        """Every word, sorted (the words added since last asked merged in)."""
        if self.new_words:
            self.new_words.sort()
            self.vocabulary += self.new_words  # two sorted runs: the sort merges them
            self.vocabulary.sort()
            self.new_words = []
        return self.vocabulary


class _Statistics:
    """One store's kept statistics, at `newest` (its episodes up to that rowid)."""

    def __init__(self, base: tuple[Any, ...], newest: int) -> None:
        self.base = base  # (database, schema cookie, deletions and updates counted)
        self.newest = newest
        self.terms: dict[str, TermCount] = {}
        self.total: int | None = None  # episodes
        self.agents: dict[str, int] = {}  # episodes per agent
        self.agent_terms: dict[tuple[str, str], int] = {}  # (agent, term) -> its episodes matching
        self.quotes: dict[str, QuoteWords] = {}
        # The first `PREFIX_MIN` characters of each prefix term kept -> the lengths kept under them.
        self.heads: dict[str, set[int]] = {}
        self.mark: int | None = None  # the erasure mark last seen


class _Kept:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stores: dict[str, _Statistics] = {}

    def erasure_seen(self, db: str, mark: int) -> None:
        """A read of `db` found its erasure mark at `mark`: what was kept before an erasure goes
        (its words are the archive's text), whatever the next search's version says."""
        with self.lock:
            store = self.stores.get(db)
            if store is not None and store.mark not in (None, mark):
                del self.stores[db]
            elif store is not None:
                store.mark = mark

    def erased(self, db: str) -> None:
        """This process has just erased something in `db`: nothing kept of it stays (its words and
        the questions' terms are the archive's text)."""
        with self.lock:
            self.stores.pop(db, None)


_KEPT = _Kept()
TEXTS.erasure_checks.append(_KEPT.erasure_seen)
TEXTS.erasure_drops.append(_KEPT.erased)


def state(conn: sqlite3.Connection) -> tuple[tuple[Any, ...], int] | None:
    """(base, newest rowid) of the store now; None when nothing may be kept for it here."""
    if not counts_changes(conn, TRIGGER):
        return None
    newest, changed, cookie = conn.execute(_STATE).fetchone()
    return (database_key(conn), int(cookie), str(changed or "0")), int(newest or 0)


def current(conn: sqlite3.Connection) -> tuple[_Statistics, int] | None:
    """This store's kept statistics brought up to its newest episode (and that rowid), or None.

    The new episodes are read and tokenized without the lock (every store's searches wait on it),
    and what they add is applied under it only if nothing moved meanwhile: neither what is kept
    nor the store (else it is looked at again, once; then the index answers)."""
    now = state(conn)
    if now is None:
        return None
    base, newest = now
    for _ in range(2):
        with _KEPT.lock:
            store = _KEPT.stores.get(base[0])
            if store is not None and fts_mirror.older_version(base, newest, store.base, store.newest):
                # A reader still on a snapshot before the kept one's: the index answers it, and what
                # is kept stays for the readers on the newer one (dropping it would count it again).
                return None
            if store is None or store.base != base or newest < store.newest:
                store = _renewed(base, newest)
            if newest == store.newest:
                return store, newest
            if store.total is None and not (store.agents or store.terms or store.agent_terms or store.quotes):
                store.newest = newest  # nothing kept: nothing to read
                return store, newest
            after, tokens = store.newest, bool(store.terms or store.agent_terms)
        new = _New.read(conn, after, newest, tokens)
        now = state(conn)  # a deletion or update meanwhile: what was read may not be the store's
        moved = now is None or now[0] != base
        with _KEPT.lock:
            if moved or _KEPT.stores.get(base[0]) is not store or store.newest != after:
                continue
            if new is not None and not tokens and (store.terms or store.agent_terms):
                continue  # terms filed meanwhile: the new documents' tokens were not read
            if new is None:  # too much to add: counted again from the store
                return _renewed(base, newest), newest
            try:
                new.apply(store)
            except BaseException:
                _KEPT.stores.pop(base[0], None)  # part added, part not: nothing of it is kept
                raise
            store.newest = newest
            return store, newest
    return None


def _renewed(base: tuple[Any, ...], newest: int) -> _Statistics:
    """(Under the lock.) An empty store at `newest`, in place of what was kept for this database."""
    stores = _KEPT.stores
    stores.pop(base[0], None)
    if len(stores) >= MAX_STORES:
        del stores[next(iter(stores))]
    store = stores[base[0]] = _Statistics(base, newest)
    return store


def file_if_current(
    conn: sqlite3.Connection, store: _Statistics, newest: int, put: Callable[[], None]
) -> None:
    """Run `put` (filing counts taken from the store at `newest`) if the store still is there:
    counted after the version was read, they may hold episodes added since (then not kept)."""
    if state(conn) != (store.base, newest):
        return
    with _KEPT.lock:
        if _KEPT.stores.get(store.base[0]) is store and store.newest == newest:
            put()


class _New:
    """The episodes with rowids in (after, upto]: their agents and quotes, and each document's
    tokens (when terms are kept) or why they could not be the index's (`unsure`)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str, str | None]] = []
        self.docs: list[tuple[int, set[str]]] = []
        self.unsure = False

    @classmethod
    def read(cls, conn: sqlite3.Connection, after: int, upto: int, tokens: bool) -> _New | None:
        """(Without the lock.) None when there is more than is worth adding (`MAX_NEW_ROWS` rows,
        `MAX_NEW_CHARS` characters of text: rowids are not reused while the count holds)."""
        if upto - after > MAX_NEW_ROWS:
            return None
        chars = conn.execute(
            "SELECT coalesce(sum(ifnull(length(name), 0) + ifnull(length(summary), 0)"
            " + ifnull(length(key_quotes), 0) + ifnull(length(participants), 0)), 0)"
            " FROM episodes WHERE rowid > ? AND rowid <= ?",
            [after, upto],
        ).fetchone()[0]
        if chars > MAX_NEW_CHARS:
            return None
        new = cls()
        new.rows = conn.execute(
            "SELECT rowid, agent_id, key_quotes FROM episodes WHERE rowid > ? AND rowid <= ? ORDER BY rowid",
            [after, upto],
        ).fetchall()
        if new.rows and tokens:
            try:
                new.docs = _documents(conn, after, upto, len(new.rows))
            except fts_mirror.Unsure:
                new.unsure = True
        return new

    def apply(self, store: _Statistics) -> None:
        """(Under the lock.) What these episodes add to each count kept."""
        agents = {}
        for rowid, agent, raw in self.rows:
            agents[rowid] = agent
            if store.total is not None:
                store.total += 1
            if agent in store.agents:
                store.agents[agent] += 1
            quotes = store.quotes.get(agent)
            if quotes is not None:
                quotes.add(raw)
                if quotes.episodes > quotes.max_episodes:  # its searches no longer read it
                    del store.quotes[agent]
        if self.rows and store.quotes and _quote_bytes() > MAX_QUOTE_BYTES:
            _drop_quotes()
        if self.unsure:
            store.terms.clear()  # its tokens could not be the index's: counted again
            store.agent_terms.clear()
            _heads_again(store)
            return
        terms, agent_terms = store.terms, store.agent_terms
        for rowid, tokens in self.docs:
            agent = agents.get(rowid, "")
            for term, n in _covered(tokens, store.heads).items():
                kept = terms.get(term)
                if kept is not None:
                    _count(kept, term, n, tokens)
                if (agent, term) in agent_terms:
                    agent_terms[(agent, term)] += 1


def _documents(conn: sqlite3.Connection, after: int, upto: int, rows: int) -> list[tuple[int, set[str]]]:
    """(Without the lock.) The distinct tokens of each new document of the index (`rows`: the
    episodes read)."""
    if not fts_mirror.defined_here(conn):  # another table definition: its tokens are left to the index
        raise fts_mirror.Unsure("the index is not defined as the one copied")
    docs = fts_mirror.index_documents(conn, after, upto)
    if len(docs) != rows:
        raise fts_mirror.Unsure("the index's documents are not the episodes")
    return [(int(row[0]), _tokens(row)) for row in docs]


def _tokens(row: tuple[Any, ...]) -> set[str]:
    """The distinct tokens of an index row (id, its columns, sizes), as FTS5 made them."""
    tokens: set[str] = set()
    for found, _ in fts_mirror.document_tokens(row, fts_mirror.varints(row[-1])):
        tokens.update(found)
    return tokens


def _covered(tokens: set[str], heads: dict[str, set[int]]) -> Counter[str]:
    """Per term that may be kept, the distinct tokens among `tokens` it covers: each prefix of a
    token as long as a term kept under its head, or a short token whole."""
    covered: Counter[str] = Counter()
    for w in tokens:
        if len(w) < PREFIX_MIN:
            covered[w] += 1
            continue
        lengths = heads.get(w[:PREFIX_MIN])
        if lengths is not None:  # mostly not: a token no kept term starts
            for k in lengths:
                if k <= len(w):
                    covered[w[:k]] += 1
    return covered


def _listed(words: Iterable[str]) -> tuple[str, ...] | None:
    """A prefix's words as kept (`TermCount.covered`), sorted; None past `fts_terms.MAX_COVERED` of
    them or with one longer than `MAX_TERM` (a token can be 32,768 bytes: not kept, as terms)."""
    found = sorted(set(words))
    if len(found) > fts_terms.MAX_COVERED or any(len(w) > MAX_TERM for w in found):
        return None
    return tuple(found)


def _count(kept: TermCount, term: str, n: int, tokens: set[str]) -> None:
    """A new document holding `n` distinct tokens `term` covers (`tokens`: all of its own)."""
    kept.docs += n
    if len(term) < PREFIX_MIN:
        return
    if kept.covered is not None:
        kept.covered = _listed(set(kept.covered) | {w for w in tokens if w.startswith(term)})
    if kept.words >= 2:
        return
    words = {w for w in tokens if w.startswith(term)}
    if kept.words == 1:
        words.add(kept.word)
    kept.words, kept.word = min(len(words), 2), next(iter(words)) if len(words) == 1 else ""


def keep_terms(store: _Statistics, found: dict[str, TermCount]) -> None:
    """(Through `file_if_current`.) Terms counted by the index at the store's version (a long one is not kept)."""
    found = {t: c for t, c in found.items() if len(t) <= MAX_TERM}
    if len(store.terms) + len(found) > MAX_TERMS:
        store.terms.clear()
        _heads_again(store)
    store.terms.update(found)
    _met(store, found)


def keep_agent_terms(store: _Statistics, found: dict[tuple[str, str], int]) -> None:
    """(Through `file_if_current`.) An agent's episodes matching a term, counted at the store's version (a long
    term is not kept)."""
    found = {k: n for k, n in found.items() if len(k[1]) <= MAX_TERM}
    if len(store.agent_terms) + len(found) > MAX_TERMS:
        # The older half goes (filed first): with many agents every recall files a few counts, and
        # dropping them all would make every agent count its words again at once.
        kept = list(store.agent_terms.items())
        store.agent_terms = dict(kept[len(kept) // 2 :])
        _heads_again(store)
    store.agent_terms.update(found)
    _met(store, [t for _, t in found])


def _met(store: _Statistics, terms: Iterable[str]) -> None:
    for t in terms:
        if len(t) >= PREFIX_MIN:
            store.heads.setdefault(t[:PREFIX_MIN], set()).add(len(t))


def _heads_again(store: _Statistics) -> None:
    """(Under the lock.) The prefix lengths to cut new tokens at, for the terms still kept only: once
    terms are dropped their heads would otherwise stay, and grow, for the store's whole life."""
    store.heads = {}
    _met(store, store.terms)
    _met(store, [t for _, t in store.agent_terms])


def frequencies(
    conn: sqlite3.Connection,
    terms: Sequence[str],
    single: dict[str, str] | None,
    copy: Callable[[str, bool], tuple[int, str] | None] | None,
) -> dict[str, int]:
    """`fts_terms.document_frequencies` of the episode index, kept (`copy`: the kept copy of the
    index, runtime.fts_mirror, which answers first where there is one and keeps itself)."""
    found = current(conn)
    if found is None:
        return fts_terms.document_frequencies(conn, "episodes_fts", terms, single=single, kept=copy)
    store, newest = found
    out: dict[str, int] = {}
    missing = []
    with _KEPT.lock:
        for t in terms:
            kept = store.terms.get(t)
            if kept is None:
                missing.append(t)
                continue
            out[t] = kept.docs
            if single is not None and kept.word:
                single[t] = kept.word
    counted: dict[str, TermCount] = {}
    copied = False
    for t in missing:
        prefix = len(t) >= PREFIX_MIN
        answer = copy(t, prefix) if copy is not None else None
        if answer is not None:
            out[t], only = answer
            copied = True
        else:
            listed: list[str] = []
            docs, words, first = fts_terms.vocab_counts(conn, "episodes_fts", t, prefix, covered=listed)
            # A prefix's words are listed while few (none listed past `MAX_COVERED`: not known).
            words_of = _listed(listed) if prefix and (listed or not words) else None
            kept = counted[t] = TermCount(docs, words if prefix else 0, first, words_of)
            out[t], only = docs, kept.word
        if single is not None and only:
            single[t] = only
    if counted:
        file_if_current(conn, store, newest, lambda: keep_terms(store, counted))
    if copied:
        with _KEPT.lock:
            store.terms.clear()  # the copy answers for this store, and brings itself up to date
            _heads_again(store)
    return out


def lock() -> threading.Lock:
    """Held while reading what is kept (it is changed in place when episodes are added)."""
    return _KEPT.lock


def sizes(conn: sqlite3.Connection, agent_id: str) -> tuple[str, int, int]:
    """(database, the agent's episodes, all episodes), each at least 1."""
    found = current(conn)
    if found is None:
        total = conn.execute("SELECT count(*) FROM episodes WHERE agent_id = ?", [agent_id]).fetchone()[0]
        return database_key(conn), total or 1, episode_count(conn) or 1
    store, newest = found
    with _KEPT.lock:
        total, all_docs = store.agents.get(agent_id), store.total
    if total is None or all_docs is None:
        # Bounded by the version: an episode added meanwhile is the next version's.
        if total is None:
            sql = "SELECT count(*) FROM episodes WHERE agent_id = ? AND rowid <= ?"
            total = int(conn.execute(sql, [agent_id, newest]).fetchone()[0])
        if all_docs is None:
            all_docs = episode_count(conn, newest)  # kept by triggers (hotstore), else counted
        agent_total, archive = total, all_docs

        def put() -> None:
            store.agents[agent_id], store.total = agent_total, archive

        file_if_current(conn, store, newest, put)
    return store.base[0], total or 1, all_docs or 1


def agent_frequency(conn: sqlite3.Connection, agent_id: str, term: str, match: str) -> int:
    """The agent's episodes matching `term` (`match`: its MATCH expression, a prefix from
    `PREFIX_MIN` characters, or the one word it covers).

    What is kept is counted with the term's own MATCH (its prefix), not `match`: the one word was
    worked out at the version the overall counts were read, and another connection may have added
    a second word the prefix covers before this count's version (then the one word's count, filed
    for the prefix, would be short for good). While it covers one word, the two count alike."""
    sql = (
        "SELECT count(*) FROM episodes WHERE agent_id = ? AND rowid IN "
        "(SELECT rowid FROM episodes_fts WHERE episodes_fts MATCH ?{bound})"
    )
    # With agent tokens, the index itself skips every other agent's documents (runtime.episode_index).
    agent = f" AND {agent_phrase(agent_id)}" if indexes_agents(conn) else ""
    found = current(conn)
    if found is None:
        return int(conn.execute(sql.format(bound=""), [agent_id, f"({match}){agent}"]).fetchone()[0])
    store, newest = found
    with _KEPT.lock:
        kept = store.agent_terms.get((agent_id, term))
        counted = store.terms.get(term)
    if kept is not None:
        return kept
    own = f'"{term}"*' if len(term) >= PREFIX_MIN else f'"{term}"'
    listed = counted.covered if counted is not None and len(term) >= PREFIX_MIN else None
    if agent and listed is None and own.endswith("*") and not match.endswith("*"):
        # Not kept here, but the one word the prefix covered when the overall counts were read:
        # counted by that word (the prefix's merge is the whole index's), not kept (see above).
        return int(
            conn.execute(
                sql.format(bound=" AND rowid <= ?"), [agent_id, f"{match}{agent}", newest]
            ).fetchone()[0]
        )
    if agent and listed is not None:
        # The prefix's words, as an OR: FTS5 merges the whole list of documents of every word a
        # prefix covers before the AND can skip to the agent's, where each word's list is skipped
        # through (35 ms against 0.3 for a word in 94% of a million episodes). The words are those
        # at this version or a later one (they only grow until a deletion, which starts again),
        # and the count is bounded by this version's newest rowid, so it is the prefix's.
        own = f"({words_match(listed)})" if listed else ""
    if not own:
        df = 0
    else:
        args = [agent_id, f"{own}{agent}", newest]
        df = int(conn.execute(sql.format(bound=" AND rowid <= ?"), args).fetchone()[0])
    file_if_current(conn, store, newest, lambda: keep_agent_terms(store, {(agent_id, term): df}))
    return df


def words_match(words: Sequence[str]) -> str:
    """An FTS5 OR of whole words (tokens: letters and digits, never a double quote)."""
    return " OR ".join(f'"{w}"' for w in words)


def covered(conn: sqlite3.Connection, terms: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The words each prefix term covers, where they are kept and few (`TermCount.covered`), at
    the store's version now: an episode committed between this and the search's own read may
    bring a word not among them (that search misses it; the next one has it)."""
    found = current(conn)
    if found is None:
        return {}
    store, _ = found
    out = {}
    with _KEPT.lock:
        for t in terms:
            counted = store.terms.get(t)
            if len(t) >= PREFIX_MIN and counted is not None and counted.covered is not None:
                out[t] = counted.covered
    return out


def _quote_bytes() -> int:
    """(Under the lock.) What the quote words of every store take."""
    return sum(q.size for store in _KEPT.stores.values() for q in store.quotes.values())


def _drop_quotes() -> None:
    """(Under the lock.) Every store's quote words dropped: each is read again when next asked."""
    for store in _KEPT.stores.values():
        store.quotes.clear()


def quote_words(
    conn: sqlite3.Connection, agent_id: str, split: Callable[[str], Iterable[str]], max_episodes: int
) -> QuoteWords:
    """The agent's quote words (`split` makes the words of a lowered text), read once per version of
    the store and then brought up to date with the quotes of its episodes added since, while the
    agent has at most `max_episodes` episodes and all of them fit in `MAX_QUOTE_BYTES`."""
    found = current(conn)
    if found is not None:
        store, newest = found
        with _KEPT.lock:
            kept = store.quotes.get(agent_id)
        if kept is not None:
            return kept
    quotes = QuoteWords(split, max_episodes)
    sql = "SELECT key_quotes FROM episodes WHERE agent_id = ?" + (" AND rowid <= ?" if found else "")
    for (raw,) in conn.execute(sql, [agent_id, *([found[1]] if found else [])]):
        quotes.add(raw)
    if found is not None:
        store, newest = found

        def put() -> None:
            if quotes.episodes > max_episodes or quotes.size > MAX_QUOTE_BYTES:
                return
            if _quote_bytes() + quotes.size > MAX_QUOTE_BYTES:
                _drop_quotes()
            store.quotes[agent_id] = quotes

        file_if_current(conn, store, newest, put)
    return quotes


def clear() -> None:
    """Drop everything kept (tests)."""
    with _KEPT.lock:
        _KEPT.stores.clear()
