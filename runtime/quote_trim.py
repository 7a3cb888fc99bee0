"""Filler sentences left out of a recalled turn, so more of what was said fits a budget.

A conversational turn wraps its facts in greetings and reactions: "Hey Tim!
Great to hear from you. My week's been busy - I started doing seminars..."
The first two sentences say nothing a question can ask about, yet they take
the room of another turn in a token-bound block. `trim_filler` leaves out of
each recalled turn the sentences made only of filler words — stop words,
small talk ("thanks", "awesome", "hey": runtime.rerank_features.SMALL_TALK)
and the speakers' names — unless the sentence shares a word with the
question (a question about what makes someone happy keeps "I'm so happy!").
A turn whose sentences are all filler, or that is one sentence, is shown
whole: it ranked for a reason and nothing else would be left of it. Every
content word of a turn stays, so a line still states what its turn said;
only its length changes.

The passage's relative dates are resolved from the whole turn before this
(runtime.quote_search), so a left-out sentence cannot take a date's
explanation with it: a sentence with "yesterday" holds a content word and
stays.

The left-out sentences are not marked: measured on LoCoMo dev (bench/RESULTS.md,
"Packing the budget: filler sentences left out"), marking each gap with "…"
cost more than it said (at 250 tokens the answers fell below the untrimmed
block's), while the unmarked lines raised or held every figure at 250, 500 and
1,000 tokens.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tiermem.runtime.rerank_features import SMALL_TALK

from tiermem.attachments import split_described
from tiermem.text import STOP_WORDS, WORD_RE

# A sentence ends at ., ! or ? followed by a space; "Mr. Smith" splits too, harmlessly: a piece
# that holds a content word is kept, and both pieces of a name are content words. (Matched from the
# mark itself: a look-behind split tries every position of a long reply.)
_SENTENCE_END = re.compile(r"[.!?]\s+")
# Filler is short: the longest sentence of filler words only among LoCoMo dev's recalled turns has 55
# characters. Longer sentences are kept unread, which keeps the pass cheap on long replies.
FILLER_CHARS = 80


def name_words(speakers: Sequence[str]) -> frozenset[str]:
    """The words of the speakers' names, whole: a shortened name ("car" of Caroline) is also a word
    that can be the fact itself, so no prefix counts."""
    return frozenset(w for s in speakers if s for w in WORD_RE.findall(s.lower()))


def filler_words(names: frozenset[str]) -> frozenset[str]:
    """Words that carry no fact: stop words, small talk and the words of the speakers' names
    (`name_words`)."""
    return STOP_WORDS | SMALL_TALK | names


def _sentences(text: str) -> list[str]:
    """`text` cut after each sentence mark followed by white space (the space dropped)."""
    out, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        if m.end() < len(text):  # a mark at the very end closes the last sentence
            out.append(text[start : m.start() + 1])
            start = m.end()
    out.append(text[start:])
    return out


def trimmed(said: str, asked: frozenset[str], filler: frozenset[str]) -> str:
    """`said` without its filler sentences (see the module doc); `asked`: the question's own words
    that are not filler."""
    sentences = _sentences(said)
    if len(sentences) < 2:
        return said
    keep = []
    for sentence in sentences:
        if len(sentence) > FILLER_CHARS:
            keep.append(True)  # longer than any filler met: not worth reading word by word
            continue
        words = WORD_RE.findall(sentence.lower())
        keep.append(not asked.isdisjoint(words) or not filler.issuperset(words))
    if all(keep) or not any(keep):
        return said
    return " ".join(s for s, kept in zip(sentences, keep, strict=True) if kept)


def trim_filler(quotes: Sequence[dict[str, Any]], query: str) -> list[dict[str, Any]]:
    """The quotes with their filler sentences left out (a quote changed is a copy; the caption of
    a shared picture is kept as it was)."""
    names = name_words(list(dict.fromkeys(str(q.get("speaker") or "") for q in quotes)))  # each once
    filler = filler_words(names)
    # A small-talk word the question uses ("what makes her happy?") keeps its sentence: only stop
    # words and names (in nearly every sentence of their speaker) are no sign of an answer.
    asked = frozenset(WORD_RE.findall(query.lower())) - STOP_WORDS - names
    out = []
    for q in quotes:
        text = str(q["text"])
        said, described = split_described(text)
        short = trimmed(said, asked, filler)
        if short == said:
            out.append(q)
            continue
        out.append({**q, "text": f"{short} {described}" if described else short})
    return out
