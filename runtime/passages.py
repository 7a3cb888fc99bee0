"""Long remembered turns as passages: the unit that is ranked, embedded and packed.

An agent's reply often runs to a thousand tokens (a plan, code, a long
explanation) while the fact a later question needs sits in one paragraph of
it, or in a short user turn next to it. Ranked and packed whole, such a reply
is all-or-nothing: at a small budget it never fits, at a larger one it fits
and crowds out several short turns, so more tokens delivered less evidence.
A turn longer than `PASSAGE_CHARS` is therefore split into passages of at most
that size, at paragraph, then sentence, then word boundaries; each passage is
scored, embedded and packed on its own and cites the turn it came from.

Passages are derived from an episode's `key_quotes` deterministically, so the
hot store needs no separate table for them: the same quotes always give the
same passages and the same `idx` (which keys the passage's vector).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PASSAGE_CHARS = 480  # about 120 tokens: a paragraph; short turns (almost all) stay whole
_PARAGRAPH = re.compile(r"\n\s*\n")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[*-])|\n+")


@dataclass(frozen=True)
class Passage:
    """One rankable piece of an episode: a whole short quote or a part of a long one."""

    idx: int  # position among the episode's passages
    quote: int  # position of its quote in key_quotes
    part: int  # 0 for the first (or only) passage of a quote
    parts: int  # how many passages the quote was split into
    text: str
    speaker: str
    event_id: str


def _pieces(text: str, pattern: re.Pattern[str]) -> list[str]:
    return [p.strip() for p in pattern.split(text) if p and p.strip()]


def _pack(pieces: list[str], limit: int, sep: str) -> list[str]:
    """Consecutive pieces joined while they fit `limit`."""
    out: list[str] = []
    buf = ""
    for piece in pieces:
        candidate = f"{buf}{sep}{piece}" if buf else piece
        if len(candidate) <= limit or not buf:
            buf = candidate
        else:
            out.append(buf)
            buf = piece
    if buf:
        out.append(buf)
    return out


def split_text(text: str, limit: int = PASSAGE_CHARS) -> list[str]:
    """`text` as passages of at most `limit` characters (a single longer word stays whole)."""
    text = text.strip()
    if len(text) <= limit:
        return [text] if text else []
    out: list[str] = []
    for para in _pack(_pieces(text, _PARAGRAPH), limit, "\n\n"):
        if len(para) <= limit:
            out.append(para)
            continue
        for sentence_group in _pack(_pieces(para, _SENTENCE), limit, " "):
            if len(sentence_group) <= limit:
                out.append(sentence_group)
            else:
                out.extend(_pack(sentence_group.split(), limit, " "))
    return out


def episode_passages(quotes: Sequence[Any], limit: int = PASSAGE_CHARS) -> list[Passage]:
    """The passages of an episode's key_quotes, in the order they were said."""
    out: list[Passage] = []
    for qi, q in enumerate(quotes):
        if not isinstance(q, dict) or not q.get("text"):
            continue
        parts = split_text(str(q["text"]), limit)
        for pi, part in enumerate(parts):
            out.append(
                Passage(
                    idx=len(out),
                    quote=qi,
                    part=pi,
                    parts=len(parts),
                    text=part,
                    speaker=str(q.get("speaker") or ""),
                    event_id=str(q.get("event_id") or ""),
                )
            )
    return out
