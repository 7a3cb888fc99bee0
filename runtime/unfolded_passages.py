"""The turns no episode covers yet, as passages the quote search scores beside the episodes'.

The quote search (runtime.quote_search) ranks the remembered turns of the
candidate episodes. Between two compressions an agent's newest turns belong
to no episode: the prompt's recent section shows the last few and the
unfolded-turn search (runtime.unfolded) finds a handful by counting words,
but the ranked, dated block that `recall_memory` shows and the context
harness delivers never held them. On LoCoMo that was the whole last session
of every conversation: 14 of 1,033 questions had every gold turn there and
were delivered nothing at any budget.

So the newest unfolded turns the reader may see (the same scan and the same
visibility clause as the unfolded-turn search) are grouped by the ten minutes
they were said in (a chat's consecutive turns) into stand-in episodes, one
quote per side of a turn, exactly as the compressor would quote them (the
user's side under the user's name, the agent's under the display name its
episodes give it), and scored with the same BM25,
neighbour shares and boosts as any episode's passages. A stand-in has no name
or summary (its header scores nothing) and no importance.

A stand-in is named by a digest of the turns it holds (`wm:<digest>`): its
text is fixed by those turns (a turn's text never changes; an erasure clears
every prepared text, runtime.episode_text), so it is prepared once and kept
with the episodes' prepared text, where the reranker finds it too. A new
turn, or a fold that takes turns into an episode, makes another set of turns,
hence another stand-in; the old one is simply never asked for again. The turn
just recorded changes only its own ten minutes: a recall after every turn
prepares those few turns again, not the whole day.
"""

from __future__ import annotations

import hashlib
import sqlite3
from typing import Any

import orjson
from tiermem.runtime.episode_text import TEXTS, Prepared, _anchor, settle
from tiermem.runtime.hotstore import database_key, item_clause
from tiermem.runtime.unfolded import turn_texts
from tiermem.runtime.unfolded_rows import newest_unfolded
from tiermem.runtime.visibility import Principal

# The newest unfolded turns scored as passages: a compressed agent has one session or two here; an
# agent never compressed is bounded like the unfolded-turn search (whose scan this shares).
TURNS = 120
# Turns are grouped by the first SPAN characters of their time (ISO 8601: the same ten minutes of
# one day). A new turn changes only its own group, and the oldest turn leaving the scan only the
# oldest group, so only that group is prepared again (a day of long replies is not).
SPAN = len("2023-05-08T13:5")
PREFIX = "wm:"
# (database, agent, the reader's visibility clause and its values) -> ((the agent's newest episode's
# end, the store's erasure mark) then, the display name): a name is read from the turns one reader
# may see, so it is kept for that reader only, and an erasure reads it again.
_NAMES: dict[tuple[Any, ...], tuple[Any, str]] = {}
# (database, reader) -> the stand-ins its last search used: one that a new turn or a fold replaced is
# dropped from the prepared texts (it would never be asked for again, yet stay).
_LIVE: dict[tuple[Any, ...], set[str]] = {}
_ERASED: dict[str, int] = {}  # database -> its erasure mark when its names were last read
NAME_EPISODES = 20  # the newest episodes looked at for the agent's display name
_MAX_READERS = 4096  # (agent, reader) entries kept of names and of live stand-ins


def agent_name(conn: sqlite3.Connection, who: Principal, db: str, mark: int) -> str:
    """The name the agent's own turns are quoted under, from the newest episodes this reader may see.

    The compressor quotes the agent's side of a turn under its display name
    (`metadata.agent_name`, else the agent id), which working-memory rows do
    not keep: a quote of one of the newest NAME_EPISODES episodes whose text
    is the agent's side of its turn says it. Kept per agent and reader until a
    newer episode of the agent is added or `mark` (the store `db`'s erasure
    mark) moves (the agent id when none says it yet).
    """
    newest = conn.execute("SELECT max(end_ts) FROM episodes WHERE agent_id = ?", [who.agent_id]).fetchone()[0]
    if _ERASED.get(db, mark) != mark:  # an erasure: no name read before it stays, for any reader
        for gone in [k for k in _NAMES if k[0] == db]:
            del _NAMES[gone]
    _ERASED[db] = mark
    version = (newest, mark)
    where, params = item_clause(who, "e")
    key = (db, who.agent_id, where, *params)
    kept = _NAMES.get(key)
    if kept is not None and kept[0] == version:
        return kept[1]
    # Plain SQL and the JSON read here: the same on every engine the store runs on.
    said: dict[str, list[tuple[str, str]]] = {}
    for (raw,) in conn.execute(
        f"SELECT e.key_quotes FROM episodes e WHERE {where} ORDER BY e.end_ts DESC LIMIT ?",
        [*params, NAME_EPISODES],
    ):
        for q in orjson.loads(raw or "[]"):
            if isinstance(q, dict) and q.get("event_id") and q.get("speaker"):
                said.setdefault(str(q["event_id"]), []).append((str(q.get("text") or ""), str(q["speaker"])))
    responses = _responses(conn, list(said))
    name = next(
        (
            speaker
            for event_id, quoted in said.items()
            for text, speaker in quoted
            if text and text == responses.get(event_id)
        ),
        who.agent_id,
    )
    if len(_NAMES) >= _MAX_READERS:
        _NAMES.clear()
    _NAMES[key] = (version, name)
    return name


def _responses(conn: sqlite3.Connection, event_ids: list[str]) -> dict[str, str]:
    """The agent's side of each of these turns (event id -> its text)."""
    out: dict[str, str] = {}
    for start in range(0, len(event_ids), 500):
        chunk = event_ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for event_id, response in conn.execute(
            f"SELECT event_id, agent_response FROM wm_items WHERE event_id IN ({marks})", chunk
        ):
            out[str(event_id)] = response or ""
    return out


def _prepare(db: str, episode_id: str, raw: str, said: str) -> Prepared:
    """A stand-in prepared as `EpisodeTexts.prepared` prepares a stored episode, with an empty header
    (called under `TEXTS.lock`, as `stand_ins` holds it: its passages are numbered as one run)."""
    entry = TEXTS._add(raw)
    if entry.start >= 0:
        _anchor(entry, said)
        TEXTS.long_dbs.add(db)
    entry.head, entry.head_spaces = TEXTS.heads.add(""), 0
    TEXTS.entries[(db, episode_id)] = entry
    return entry


def _quotes(
    rows: list[tuple[Any, ...]], texts: dict[str, tuple[str, str]], agent: str
) -> list[dict[str, str]]:
    """One quote per non-empty side of each turn, in the order said (as the compressor quotes a turn)."""
    out = []
    for event_id, _ts, user, item_id in rows:
        message, response = texts.get(item_id, ("", ""))
        if message.strip():
            out.append({"text": message, "event_id": str(event_id), "speaker": str(user or "user")})
        if response.strip():
            out.append({"text": response, "event_id": str(event_id), "speaker": agent})
    return out


def stand_ins(
    conn: sqlite3.Connection, who: Principal, participant: str | None = None, turns: int | None = None
) -> tuple[list[tuple[Any, ...]], list[Prepared]]:
    """Candidate rows (the quote search's columns) and prepared entries for the newest `turns`
    (default TURNS) unfolded turns `who` may see: one stand-in episode per ten minutes of turns,
    oldest first."""
    turns = TURNS if turns is None else turns
    if turns <= 0:
        return [], []
    where, params = item_clause(who, "w")
    if participant:
        where += " AND lower(w.user) = lower(?)"
        params.append(participant)
    newest = newest_unfolded(conn, where, params, turns)
    if not newest:
        return [], []
    spans: dict[str, list[tuple[Any, ...]]] = {}
    for row in reversed(newest):  # oldest first: the order the turns were said
        spans.setdefault(str(row[1])[:SPAN], []).append(row)
    db = database_key(conn)
    # Under the preparers' lock to the end: another thread's preparing may clear the texts (a bound
    # passed, an erasure in another store) or drop stand-ins this search has just looked up.
    with TEXTS.lock:
        TEXTS.prepared(conn, db, [])  # the prepared texts' bounds and erasure mark checked first
        # The name is part of what a stand-in says: readers who see the agent under different names
        # (from the episodes each may see) never share one. The erasure mark is the one just read.
        agent = agent_name(conn, who, db, TEXTS.erased[db])
        rows: list[tuple[Any, ...]] = []
        entries: list[Prepared] = []
        missing: dict[str, list[tuple[Any, ...]]] = {}
        keys: list[tuple[str, list[tuple[Any, ...]]]] = []
        for day_rows in spans.values():
            said = "\n".join([agent, *(str(r[0]) for r in day_rows)])
            digest = hashlib.blake2b(said.encode(), digest_size=12).hexdigest()
            episode_id = PREFIX + digest
            keys.append((episode_id, day_rows))
            if (db, episode_id) not in TEXTS.entries:
                missing[episode_id] = day_rows
        if missing:
            texts = turn_texts(conn, [str(r[3]) for day_rows in missing.values() for r in day_rows])
            added = 0
            for episode_id, day_rows in missing.items():
                raw = orjson.dumps(_quotes(day_rows, texts, agent)).decode()
                added += _prepare(db, episode_id, raw, str(day_rows[0][1])).passages.n
            settle(added)
        _forget_replaced(db, (who.agent_id, where, *params), {e for e, _ in keys})
        for episode_id, day_rows in keys:
            entry = TEXTS.entries.get((db, episode_id))
            if entry is None or not entry.passages.n:
                continue
            rows.append((episode_id, "", "", None, str(day_rows[0][1]), str(day_rows[-1][1]), 0))
            entries.append(entry)
        return rows, entries


def _forget_replaced(db: str, reader: tuple[Any, ...], now: set[str]) -> None:
    """Drop the stand-ins this reader's last search used and this one does not (replaced by a new
    turn or a fold), unless another reader's last search still uses them."""
    key = (db, *reader)
    before = _LIVE.get(key, set())
    if len(_LIVE) >= _MAX_READERS:
        _LIVE.clear()  # readers past the bound: their stand-ins go with the texts' own bounds
    _LIVE[key] = now
    gone = before - now
    if gone:
        for other_key, used in _LIVE.items():
            if other_key[0] == db and other_key != key:
                gone -= used
        for episode_id in gone:
            TEXTS.entries.pop((db, episode_id), None)
