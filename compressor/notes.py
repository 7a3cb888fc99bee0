"""Derived notes: what a later question needs from a turn, written once when the turn is compressed.

A turn says "I've been running for 3 years" or "we went camping last week";
months later the question is "since when does she run?" or "when did they go
camping?", and the answer is a date the turn never wrote. The compressor knows
the day each turn was said, so it writes the date down next to the turn as a
`derived_note` event citing it:

- `dates`: each relative time phrase and duration with what it meant that day
  ("last week = the week before 8 May 2023; for 3 years = since about 2020");
- `who_did_what`: each sentence holding such a phrase, restated in the third
  person with the absolute date ("Caroline went to a support group on 7 May
  2023"), so the statement stands on its own when read beside other turns.

Notes are deterministic (same turn, same notes, same ids: a re-run appends
nothing), short, and cite exactly one source turn: erasing the turn erases
them, like everything else derived from it. The runtime shows them with the
turn they cite and scores them as part of it.
"""

from __future__ import annotations

import re
from typing import Any

from tiermem.compressor.scoring import Interaction

from tiermem.dates import anchor_relative_dates, resolved_if_dated
from tiermem.events import SCHEMA_VERSION
from tiermem.ids import derived_event_id, format_ts

NOTE_ANCHORS = 4  # relative time phrases per side of a turn
MAX_STATEMENTS = 2  # who-did-what sentences per side of a turn
MAX_STATEMENT_CHARS = 240
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
# First-person words, replaced by the speaker's name so the statement stands alone.
_FIRST_PERSON: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(rx), repl)
    for rx, repl in (
        (r"\bI'm\b|\bI am\b", "{name} is"),
        (r"\bI've\b|\bI have\b", "{name} has"),
        (r"\bI'll\b", "{name} will"),
        (r"\bI'd\b", "{name} would"),
        (r"\bI was\b", "{name} was"),
        (r"\bI\b", "{name}"),
        (r"\b[Mm]yself\b", "{name}"),
        (r"\b[Mm]y\b", "{name}'s"),
        (r"\bme\b", "{name}"),
        (r"\bmine\b", "{name}'s"),
    )
)


def third_person(sentence: str, name: str) -> str:
    """`sentence` with the speaker's first-person words replaced by their name."""
    out = sentence
    for rx, repl in _FIRST_PERSON:
        out = rx.sub(repl.replace("{name}", name), out)
    return out


def _statements(text: str, speaker: str, interaction: Interaction) -> list[str]:
    """Who did what, with the date made absolute, for the sentences that say when."""
    out: list[str] = []
    for sentence in _SENTENCE.split(text):
        sentence = sentence.strip()
        resolved = resolved_if_dated(sentence, interaction.ts) if sentence else None
        if resolved is None:
            continue  # only the sentences that say when
        stated = third_person(resolved, speaker)
        if len(stated) > MAX_STATEMENT_CHARS:
            stated = stated[: MAX_STATEMENT_CHARS - 1].rsplit(" ", 1)[0] + "…"
        out.append(stated)
        if len(out) >= MAX_STATEMENTS:
            break
    return out


def turn_notes(agent_id: str, interaction: Interaction) -> list[dict[str, Any]]:
    """The `derived_note` events for one turn (none when it says nothing about time)."""
    out: list[dict[str, Any]] = []
    said = ""  # the turn's time in stored form, made once for all its notes
    for side, (speaker, text) in enumerate(interaction.spoken):
        anchors = anchor_relative_dates(text, interaction.ts, NOTE_ANCHORS)
        if not anchors:
            continue
        texts = [("dates", "; ".join(f"{phrase} = {when}" for phrase, when in anchors))]
        texts += [("who_did_what", s) for s in _statements(text, speaker, interaction)]
        said = said or format_ts(interaction.ts)
        for n, (kind, note) in enumerate(texts):
            event: dict[str, Any] = {
                "event_id": derived_event_id(
                    interaction.ts, "derived_note", agent_id, interaction.event_id, str(side), str(n)
                ),
                "type": "derived_note",
                "schema_version": SCHEMA_VERSION,
                "ts": said,
                "agent_id": agent_id,
                "text": note,
                "kind": kind,
                "speaker": speaker,
                "said_ts": said,
                "source_event_ids": [interaction.event_id],
            }
            if interaction.user:
                event["user"] = interaction.user
            if interaction.session_id:
                event["session_id"] = interaction.session_id
            out.append(event)
    return out


def batch_notes(agent_id: str, batch: list[Interaction]) -> list[dict[str, Any]]:
    """Every note of a batch of turns, in turn order."""
    return [note for it in batch for note in turn_notes(agent_id, it)]
