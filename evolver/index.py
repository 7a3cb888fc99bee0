"""Candidate lookup for dedup: which facts are worth a similarity score at all.

Scoring a proposal against every fact of its agent is quadratic (100k proposals
against 10k facts is a billion comparisons). Two texts can only reach the
evolver's thresholds if they share content words, so an inverted index from
stemmed content token to fact ids, ranked by IDF-weighted overlap, gives a short
candidate list; facts sharing the proposal's `key` or `topic` and the fact a
correction names are always included, so contradictions are never missed for
want of a shared word.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from tiermem.evolver.state import ACTIVE, Fact, Proposal

from tiermem.similarity import content_tokens

DEFAULT_LIMIT = 20
COMMON_MIN = 64  # below this many facts, every word is worth scanning
COMMON_FRACTION = 0.1


class FactIndex:
    """Active facts of one agent (or those of another `status`), indexed by content token, key and topic."""

    def __init__(self, facts: Iterable[Fact] = (), *, status: str = ACTIVE) -> None:
        self.status = status
        self.facts: dict[str, Fact] = {}
        self._tokens: dict[str, set[str]] = defaultdict(set)
        self._by_key: dict[str, set[str]] = defaultdict(set)
        self._by_topic: dict[str, set[str]] = defaultdict(set)
        self._indexed: dict[str, tuple[set[str], str | None, str | None]] = {}
        for fact in facts:
            self.put(fact)

    def put(self, fact: Fact) -> None:
        """Insert or replace a fact; facts of another status leave the index (they are not candidates)."""
        self._drop(fact.fact_id)
        self.facts[fact.fact_id] = fact
        if fact.status != self.status:
            return
        tokens = set(content_tokens(fact.content))
        for t in tokens:
            self._tokens[t].add(fact.fact_id)
        if fact.key:
            self._by_key[fact.key].add(fact.fact_id)
        if fact.topic:
            self._by_topic[fact.topic].add(fact.fact_id)
        self._indexed[fact.fact_id] = (tokens, fact.key, fact.topic)

    def _drop(self, fact_id: str) -> None:
        old = self._indexed.pop(fact_id, None)
        if old is None:
            return
        tokens, key, topic = old
        for t in tokens:
            self._tokens[t].discard(fact_id)
        if key:
            self._by_key[key].discard(fact_id)
        if topic:
            self._by_topic[topic].discard(fact_id)

    def candidates(self, p: Proposal, limit: int = DEFAULT_LIMIT) -> list[Fact]:
        """The facts a decision about `p` needs to see (ranked overlap, plus key/topic/corrects)."""
        n = max(1, len(self._indexed))
        scores: dict[str, float] = defaultdict(float)
        probe = set(content_tokens(p.content))
        if p.corrects:
            probe |= set(content_tokens(p.corrects))
        postings = sorted((len(self._tokens[t]), t) for t in probe if self._tokens.get(t))
        common = max(COMMON_MIN, int(n * COMMON_FRACTION))
        for size, t in postings:
            # Words in a large share of the facts ("user") rank nothing and cost a full scan;
            # they only count when nothing rarer matched.
            if size > common and scores:
                break
            idf = math.log(1 + n / size)
            for fid in self._tokens[t]:
                scores[fid] += idf
        ranked = sorted(scores, key=lambda fid: (-scores[fid], fid))[:limit]
        extra: set[str] = set()
        if p.key:
            extra |= self._by_key.get(p.key, set())
        if p.topic:  # same topic and at least one shared word: a possible contradiction
            extra |= self._by_topic.get(p.topic, set()) & scores.keys()
        if p.corrects and p.corrects in self.facts:
            extra.add(p.corrects)
        chosen = list(dict.fromkeys([*ranked, *sorted(extra)]))
        return [self.facts[fid] for fid in chosen if fid in self.facts]
