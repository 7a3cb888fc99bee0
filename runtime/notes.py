"""Derived notes in the hot store: what the compressor wrote down beside a turn, read with it.

A note (`derived_note` event, table `notes`) cites one turn. Searches that rank
turns one by one (`episode_search.search_quotes`) fetch the notes of the
turns they score, add the notes' words to the turn's (so "2020" finds the
turn that said "for 3 years") and show them after it. Notes are read under the
same visibility as turns: the principal's agent, rows without an owner or
owned by its user.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable

from tiermem.runtime.hotstore import item_clause
from tiermem.runtime.visibility import Principal

LOOKUP_CHUNK = 500  # ids per query (well under SQLite's variable limit)


def notes_for(
    conn: sqlite3.Connection, who: Principal, event_ids: Iterable[str]
) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """{(turn event id, speaker): [(kind, text), ...]} for the turns that have notes, in note order.

    A turn has two sides (the user's message, the agent's answer); a note
    belongs to the side it was derived from.
    """
    wanted = sorted({e for e in event_ids if e})
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    if not wanted:
        return out
    visible, params = item_clause(who, "n")
    for start in range(0, len(wanted), LOOKUP_CHUNK):
        chunk = wanted[start : start + LOOKUP_CHUNK]
        marks = ",".join("?" * len(chunk))
        rows = conn.execute(
            f"SELECT n.source_event_id, n.speaker, n.kind, n.text FROM notes n"
            f" WHERE n.source_event_id IN ({marks}) AND {visible} ORDER BY n.source_event_id, n.note_id",
            (*chunk, *params),
        )
        for source, speaker, kind, text in rows:
            out.setdefault((str(source), str(speaker)), []).append((str(kind), str(text)))
    return out


_WORD = re.compile(r"[a-z0-9]+")


SCORED_KINDS = ("dates",)


def note_words(notes: list[tuple[str, str]], turn_text: str) -> str:
    """The words the date notes add to their turn (the absolute dates), to be scored with it.

    Only words the turn does not already say, and not the who-did-what notes:
    those restate the turn with the speaker's name, which questions nearly
    always contain, so scoring them ranked every turn that mentions a time
    above the others (measured on LoCoMo: answer_recall -1.5 points at 500
    tokens). The speaker is matched by the search itself.
    """
    if not notes:
        return ""
    said = set(_WORD.findall(turn_text.lower()))
    added = dict.fromkeys(
        w
        for kind, text in notes
        if kind in SCORED_KINDS
        for w in _WORD.findall(text.lower())
        if w not in said
    )
    return " ".join(added)


def shown_notes(notes: list[tuple[str, str]], kinds: tuple[str, ...] = ("dates",)) -> list[str]:
    """The notes shown after their turn (the dates; a who-did-what note restates the turn itself)."""
    return [text for kind, text in notes if kind in kinds]
