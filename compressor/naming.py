"""Offline episode names: a short phrase a person would write about the moment.

"alice moved to Osaka", "bob prefers to be contacted by email", "eve asks:
will you still be here when I wake up?", "Small talk with hana" — not a list
of keywords. The name comes from the episode's weightiest turn: the fact it
stated if it stated one (already third person, dates resolved), else its most
telling sentence turned to the third person, else the question it asked.
Dates stay out of the name: an episode carries its own start and end.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tiermem.compressor.facts import DISCOURSE, clauses, substance, third_person
from tiermem.compressor.scoring import FactDraft, Interaction

MAX_WORDS = 10
SMALL_TALK_MAX = 2  # an episode whose best turn scores this little is small talk, whatever its words
WEIGHTY = 5
_CUT = re.compile(r"\s*(?:;|\s[—–]\s)\s*")
_ACCORDING = re.compile(r"^according to [^,]+,\s*", re.IGNORECASE)
_ASKS_ABOUT = re.compile(r"^(?:tell (?:me|us) (?:about|more about)|what about|explain|describe)\s+", re.I)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_TRAILING = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "with",
        "by",
        "from",
        "as",
        "so",
        "that",
        "which",
        "who",
    ]
)


def shorten(text: str, max_words: int = MAX_WORDS) -> str:
    """`text` cut to a phrase: its first clause, at most `max_words` words (… when cut mid-clause)."""
    text = _ACCORDING.sub("", text.strip().rstrip(".!"))
    first = _CUT.split(text, maxsplit=1)[0]
    words = first.split()
    if len(words) <= max_words:
        return first
    head = " ".join(words[:max_words])
    comma = head.rfind(", ")
    if comma > len(head) // 2:
        return head[:comma]
    kept = words[:max_words]
    while kept and kept[-1].lower().strip(",") in _TRAILING:
        kept.pop()
    return " ".join(kept).rstrip(",") + "…"


def _sentence_name(it: Interaction, min_words: int) -> str | None:
    """The turn's most telling statement (not a question), in the third person; the person's first."""
    best: tuple[int, str] | None = None
    for i, (speaker, text) in enumerate(it.spoken):
        is_user = i == 0 and bool(it.user_message.strip())
        listener = it.agent_name if is_user else (it.user or "the user")
        for clause, _sentence in clauses(text):
            clause = DISCOURSE.sub("", clause).strip()
            if is_user and _ASKS_ABOUT.match(clause):
                continue  # "tell me about X" is a question: the answer names the moment better
            weight = len(substance(clause))
            if weight >= min_words and (best is None or weight > best[0]):
                best = (weight, third_person(clause, speaker, listener))
        if best is not None:
            return best[1]
    return None


def _question_name(it: Interaction) -> str | None:
    """What the person asked, when that is what the turn is about."""
    if not it.user_message.strip():
        return None
    sentences = [c for c in _SENTENCE_END.split(it.user_message.strip()) if c.strip()]
    asked = [c for c in sentences if c.rstrip().endswith("?")]
    question = DISCOURSE.sub("", (asked or sentences or [""])[-1].strip()).strip()
    who = it.user or "someone"
    if _ASKS_ABOUT.match(question):
        return f"{who} asks about {shorten(_ASKS_ABOUT.sub('', question), MAX_WORDS - 3)}"
    if question.endswith("?") and substance(question):
        return f"{who} asks: {shorten(question, MAX_WORDS + 2).rstrip('?')}?"
    return None


def _said_name(it: Interaction) -> str:
    """The person's own first words, quoted: for a weighty turn no rule above could name."""
    speaker, text = it.spoken[0]
    first = clauses(text)
    said = shorten(first[0][1] if first else text, MAX_WORDS - 2)
    return f'{speaker} says: "{said}"'


def episode_name(
    ranked: list[Interaction],
    facts: dict[str, list[FactDraft]],
    participants: Iterable[str],
    lead: str,
    top_score: int,
) -> str:
    """The name of the episode whose turns are `ranked` (weightiest first, the first scoring `top_score`).

    In order: a fact one of its turns stated; a telling sentence (three content
    words or more); the person's question; a shorter sentence; for a weighty
    moment the person's own words; else small talk.
    """
    who = " and ".join(sorted(participants)) or lead or "someone"
    if top_score <= SMALL_TALK_MAX:
        return f"Small talk with {who}"
    for it in ranked:
        stated = facts.get(it.event_id, ())
        if stated:
            best = min(stated, key=lambda f: (f.category != "user", -f.confidence, -len(f.content)))
            return shorten(best.content)
        sentence = _sentence_name(it, 3)
        if sentence:
            return shorten(sentence)
    for it in ranked:
        question = _question_name(it)
        if question:
            return question
    for it in ranked:
        sentence = _sentence_name(it, 2)
        if sentence:
            return shorten(sentence)
    if top_score >= WEIGHTY:
        return _said_name(ranked[0])
    return f"Small talk with {who}"
