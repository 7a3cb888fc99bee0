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

from tiermem.dates import MONTHS

LOOKUP_CHUNK = 500  # ids per query (well under SQLite's variable limit)


Note = tuple[str, str, str]  # (kind, text, ts of the turn it was derived from)


def notes_for(
    conn: sqlite3.Connection, who: Principal, event_ids: Iterable[str]
) -> dict[tuple[str, str], list[Note]]:
    """{(turn event id, speaker): [(kind, text, ts), ...]} for the turns that have notes, in note order.

    A turn has two sides (the user's message, the agent's answer); a note
    belongs to the side it was derived from.
    """
    wanted = sorted({e for e in event_ids if e})
    out: dict[tuple[str, str], list[Note]] = {}
    if not wanted:
        return out
    visible, params = item_clause(who, "n")
    for start in range(0, len(wanted), LOOKUP_CHUNK):
        chunk = wanted[start : start + LOOKUP_CHUNK]
        marks = ",".join("?" * len(chunk))
        rows = conn.execute(
            f"SELECT n.source_event_id, n.speaker, n.kind, n.text, n.ts FROM notes n"
            f" WHERE n.source_event_id IN ({marks}) AND {visible} ORDER BY n.source_event_id, n.note_id",
            (*chunk, *params),
        )
        for source, speaker, kind, text, ts in rows:
            out.setdefault((str(source), str(speaker)), []).append((str(kind), str(text), str(ts)))
    return out


_WORD = re.compile(r"[a-z0-9]+")


SCORED_KINDS = ("dates",)


def note_words(notes: list[Note], turn_text: str) -> str:
    """The words the date notes add to their turn, to be scored with it.

    Only what the turn and its own date do not already say: the year and month
    it was said in are left out (every note of a turn said in May 2023 names
    them, and scoring them ranked every turn with a relative date above the
    turns without one for "what happened in 2023?"), so what remains is the
    other dates: "since about 2020", "2022", "7". The who-did-what notes are
    left out too: they restate the turn with the speaker's name, which nearly
    every question contains (scoring them: LoCoMo answer_recall -1.5 points at
    500 tokens); the search matches the speaker itself.
    """
    if not notes:
        return ""
    said = set(_WORD.findall(turn_text.lower()))
    for _kind, _text, ts in notes:
        if len(ts) >= 7 and ts[:4].isdigit() and ts[5:7].isdigit() and 1 <= int(ts[5:7]) <= 12:
            said.update((ts[:4], MONTHS[int(ts[5:7]) - 1].lower()))
    added = dict.fromkeys(
        w
        for kind, text, _ts in notes
        if kind in SCORED_KINDS
        for w in _WORD.findall(text.lower())
        if w not in said
    )
    return " ".join(added)


def shown_notes(notes: list[Note], kinds: tuple[str, ...] = ("dates",)) -> list[str]:
    """The notes shown after their turn (the dates; a who-did-what note restates the turn itself)."""
    return [text for kind, text, _ts in notes if kind in kinds]
