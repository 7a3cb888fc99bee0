"""What a passage of the recalled shortlist says beyond its search score: the reranker's word features.

The quote search folds everything it knows about a passage into one score;
the reranker (runtime.rerank) looks again at the shortlist's head with
features the score does not separate, all read from the shortlist itself and
the passages around each one in its episode, without any model:

- `cover`: the share of the question's term groups the passage holds;
- `named_self` / `named_other`: the question names someone, and the passage
  is theirs / someone else's;
- `when_dated`: a "when" question, and the passage states a date (a resolved
  relative date or a derived date note);
- `prev_asks` / `prev_cover` / `prev_other`: the turn before it ends with a
  question mark / holds that share of the question's groups / is another
  speaker's (an answer is the turn after a question that shares the words);
- `next_asks`: the turn after it is a question (a statement someone asks about);
- `day_mass`: how much of the shortlist's best (the first DAY_WINDOW) was said
  the same day, besides the passage itself (the turns of one conversation
  about the question's topic sit together);
- `image`: it carries a shared picture's description;
- `content` / `content_share`: log(1 + its content words) and their share of
  its words: words that are not stop words, small talk ("thanks", "awesome",
  "hey") or the speakers' names. "Thanks, Mel! Your kind words mean a lot."
  matches a question about kindness and says nothing;
- `number` / `entity`: it holds a number / a capitalised word inside a
  sentence that is no speaker's name (places, titles, names of things).

Each is a handful of set lookups per word of the passage: the whole set costs
a fraction of a millisecond for a 60-passage shortlist.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from tiermem.runtime.episode_text import TermMatcher
from tiermem.runtime.query_terms import query_term_groups

from tiermem.text import STOP_WORDS

WORD_FEATURES = (
    "cover",
    "named_self",
    "named_other",
    "when_dated",
    "prev_asks",
    "prev_cover",
    "prev_other",
    "next_asks",
    "day_mass",
    "image",
    "content",
    "content_share",
    "number",
    "entity",
)
DAY_WINDOW = 20  # the best passages whose days count for `day_mass`
# Small talk: words that carry no fact whatever the conversation is about.
SMALL_TALK = frozenset(
    """hey hi hello yo thanks thank thx wow whoa oh omg yeah yes yep yup yay ok okay cool awesome great
    amazing nice good glad sounds sound hear heard sorry congrats congratulations lol haha really totally
    absolutely definitely sure lovely super stoked happy proud fantastic wonderful incredible exciting
    excited dear buddy man bro mate pal lately ah aw aww wish luck keep up things thing going let know
    hope hoping cheers care take bye see soon talk later chat catch again long time been meet mean means
    lot much""".split()
)
_WORDS = re.compile(r"[a-z0-9']+")
_NUMBER = re.compile(r"\b\d+\b")
_INNER_CAPITAL = re.compile(r"(?<=[a-z,;:] )[A-Z][a-z]+")
_NAMES = re.compile(r"\b[A-Z][a-z]+")
_ASKS_WHEN = re.compile(r"^\s*(?:when|how long|what (?:year|month|date|day|time))\b", re.I)
_IMAGE = " [image:"

Neighbours = tuple[tuple[str, str] | None, tuple[str, str] | None]  # (speaker, text) before / after


def word_features(
    query: str, head: Sequence[dict[str, Any]], around: Sequence[Neighbours]
) -> NDArray[np.float64]:
    """The `WORD_FEATURES` of each passage of `head` (search results, best first), one row each;
    `around`: each passage's neighbours in its episode."""
    n = len(head)
    if not n:
        return np.zeros((0, len(WORD_FEATURES)))
    groups = query_term_groups(query)
    matcher = TermMatcher(groups) if groups else None
    named = {w.lower() for w in _NAMES.findall(query)}
    asks_when = _ASKS_WHEN.search(query) is not None
    speakers = {str(item.get("speaker") or "").lower() for item in head} - {""}
    scores = np.array([float(item["score"]) for item in head])
    top = float(scores.max()) or 1.0
    days: dict[str, float] = {}
    for item, s in zip(head[:DAY_WINDOW], scores[:DAY_WINDOW].tolist(), strict=False):
        days[item["date"]] = days.get(item["date"], 0.0) + s / top

    def is_name(word: str) -> bool:
        """A speaker's name or its start ("mel" for Melanie)."""
        return len(word) >= 3 and any(s.startswith(word) for s in speakers)

    def cover(text: str) -> float:
        if matcher is None:
            return 0.0
        return sum(1 for c in matcher.counts(text.lower()) if c) / len(groups)

    rows = []
    for i, (item, (before, after)) in enumerate(zip(head, around, strict=True)):
        text = str(item["text"])
        said = text.split(_IMAGE, 1)[0]
        words = _WORDS.findall(said.lower())
        content = [w for w in words if w not in STOP_WORDS and w not in SMALL_TALK and not is_name(w)]
        speaker = str(item.get("speaker") or "").lower()
        entities = [w for w in _INNER_CAPITAL.findall(said) if not is_name(w.lower())]
        own_day = scores[i] / top if i < DAY_WINDOW else 0.0
        rows.append(
            [
                cover(text),
                float(bool(named) and speaker in named),
                float(bool(named) and speaker not in named),
                float(asks_when and bool(item.get("anchors") or item.get("notes"))),
                float(before is not None and before[1].rstrip().endswith("?")),
                cover(before[1]) if before is not None else 0.0,
                float(before is not None and before[0].lower() != speaker),
                float(after is not None and after[1].rstrip().endswith("?")),
                days.get(item["date"], 0.0) - own_day,
                float(_IMAGE in text),
                math.log1p(len(content)),
                len(content) / max(1, len(words)),
                float(_NUMBER.search(said) is not None),
                float(bool(entities)),
            ]
        )
    return np.array(rows, dtype=np.float64)
