"""Captions and derived notes: part of their turn when searched and shown, gone when the turn is forgotten."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from helpers_isolation import cli
from tiermem.compressor.job import run_compress
from tiermem.compressor.notes import third_person, turn_notes
from tiermem.compressor.scoring import Interaction
from tiermem.runtime.context import assemble_context
from tiermem.runtime.memory import open_memory, record_turn
from tiermem.runtime.projector import project

from tiermem.app.forget import forget
from tiermem.errors import ValidationError
from tiermem.events import validate
from tiermem.ids import format_ts
from tiermem.settings import Settings

DAY = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # a Monday, a closed day (seal makes it Parquet)
BOWL = {
    "kind": "image",
    "caption": "a photo of a ceramic bowl with cobalt glaze",
    "url": "https://x.org/b.jpg",
}
FILLER = [(f"Question {i} about the garden shed.", f"Shed answer {i}.") for i in range(6)]


def _eager(settings: Settings) -> Settings:
    # Compress every turn now: the tests look at what compression derives, not at when it runs.
    return replace(settings, compressor=replace(settings.compressor, min_unprocessed=0, keep_recent=0))


def _conversation(settings: Settings) -> dict[str, str]:
    """A few turns for agent `potter` with user `ana`; returns the ids of the interesting ones."""
    ids = {}
    with open_memory(settings, "potter", user="ana", session_id="s1") as m:
        turns = [
            ("Look at what I made this weekend!", "Beautiful work!", {"attachments": [BOWL]}),
            ("I have been doing pottery for 3 years now.", "That shows.", {}),
            ("We went to the glaze fair last Friday.", "Sounds fun.", {}),
            *((u, a, {}) for u, a in FILLER),
        ]
        for i, (said, reply, extra) in enumerate(turns):
            ids[said] = record_turn(
                m, said, reply, ts=format_ts(DAY + timedelta(minutes=i)), **extra
            ).event_id
    return ids


def _recall(settings: Settings, query: str) -> list[tuple[str, tuple[str, ...]]]:
    with open_memory(settings, "potter", user="ana") as m:
        return m.store.recall_lines(m.principal, query, budget=400)


def test_attachments_are_checked_and_normalised() -> None:
    rec = {"type": "interaction", "agent_id": "a", "user_message": "hi", "agent_response": "ok"}
    stored = validate({**rec, "attachments": [{"caption": "  a cat  ", "mime": "image/png"}]})
    assert stored["attachments"] == [{"kind": "image", "caption": "a cat", "mime": "image/png"}]
    with pytest.raises(ValidationError) as err:
        validate({**rec, "attachments": [{"caption": "ok"}, {"kind": "image", "caption": "x" * 2001}]})
    assert err.value.field == "attachments[1].caption"


def test_caption_is_shown_in_context_searched_and_kept_in_both_log_formats(settings: Settings) -> None:
    settings = _eager(settings)
    ids = _conversation(settings)
    # Before compression: the turn is in working memory with its caption.
    with open_memory(settings, "potter", user="ana") as m:
        text = "\n".join(s.text for s in assemble_context(m, query="bowl", budget=2000).sections)
    assert "Look at what I made this weekend! [image: a ceramic bowl with cobalt glaze]" in text

    run_compress(settings)
    project(settings)
    lines = _recall(settings, "What did Ana make with cobalt glaze?")
    hits = [(line, cited) for line, cited in lines if "cobalt" in line]
    assert hits and hits[0][1] == (ids["Look at what I made this weekend!"],)
    assert "Look at what I made this weekend!" in hits[0][0]  # the caption is read with its turn

    query = "SELECT attachments FROM interactions WHERE attachments IS NOT NULL"
    for step in ("jsonl", "parquet"):
        if step == "parquet":
            assert cli(settings, "seal")[0] == 0
            assert list(settings.log_dir.rglob("*.parquet"))
        code, out = cli(settings, "sql", "--json", query)
        assert code == 0, out
        assert "ceramic bowl with cobalt glaze" in out and "https://x.org/b.jpg" in out, step


def test_notes_state_absolute_dates_beside_their_turn(settings: Settings) -> None:
    settings = _eager(settings)
    ids = _conversation(settings)
    info = run_compress(settings)
    project(settings)
    assert info.notes >= 3  # dates and who-did-what for the pottery turn and the fair turn
    code, out = cli(settings, "sql", "--json", "SELECT kind, text, source_event_id FROM notes ORDER BY text")
    assert code == 0, out
    notes = json.loads(out)
    pottery = ids["I have been doing pottery for 3 years now."]
    assert {
        "kind": "dates",
        "text": "for 3 years now = since about 2023",
        "source_event_id": pottery,
    } in notes
    assert {
        "kind": "who_did_what",
        "text": "ana has been doing pottery since about 2023.",
        "source_event_id": pottery,
    } in notes

    # A question naming only the absolute year finds the turn through its note, and shows the date.
    lines = _recall(settings, "What has ana been doing since 2023?")
    line = next(line for line, c in lines if pottery in c)
    # The block names a speaker once per run of their lines, so the name may sit on an earlier line.
    assert line.removeprefix("ana: ").startswith("I have been doing pottery for 3 years now.")
    assert "since about 2023" in line
    fair = next(
        line
        for line, c in _recall(settings, "When was the glaze fair?")
        if ids["We went to the glaze fair last Friday."] in c
    )
    assert "last Friday = the Friday before 2 March 2026 (27 February 2026)" in fair


def test_a_note_is_erased_with_its_turn(settings: Settings) -> None:
    settings = _eager(settings)
    ids = _conversation(settings)
    run_compress(settings)
    project(settings)
    pottery = ids["I have been doing pottery for 3 years now."]
    fair = ids["We went to the glaze fair last Friday."]
    forget(settings, event=pottery)
    code, out = cli(settings, "sql", "--json", "SELECT text, source_event_id FROM notes")
    assert code == 0, out
    left = json.loads(out)
    assert fair in {n["source_event_id"] for n in left}  # the other turns' notes stay
    assert pottery not in {n["source_event_id"] for n in left}
    assert "pottery" not in out and "2023" not in out
    with open_memory(settings, "potter", user="ana") as m:
        rows = m.store.conn.execute("SELECT source_event_id, text FROM notes").fetchall()
    assert fair in {r[0] for r in rows} and pottery not in {r[0] for r in rows}
    assert not any("2023" in line for line, _ in _recall(settings, "What has ana been doing since 2023?"))


def test_notes_are_deterministic_and_only_for_turns_that_say_when() -> None:
    it = Interaction("e1", "a", DAY, "ana", "s", "", "global", "I've had my cat for two years now.", "Nice.")
    notes = turn_notes("a", it)
    assert [n["kind"] for n in notes] == ["dates", "who_did_what"]
    assert notes[1]["text"] == "ana has had ana's cat since about 2024."
    assert notes == turn_notes("a", it)  # same turn, same ids and texts: a re-run appends nothing
    assert all(n["source_event_ids"] == ["e1"] for n in notes)
    quiet = Interaction("e2", "a", DAY, "ana", "s", "", "global", "I like cats.", "Me too.")
    assert turn_notes("a", quiet) == []
    assert third_person("I'm sure my dog likes me", "Bo") == "Bo is sure Bo's dog likes Bo"


def test_notes_add_only_new_words_to_their_turn_and_captions_drop_boilerplate() -> None:
    from tiermem.runtime.notes import note_words

    from tiermem.attachments import describe, with_attachments

    ts = "2023-05-08T13:00:00.000Z"
    notes = [
        ("dates", "for 3 years = since about 2020; yesterday = 7 May 2023", ts),
        ("who_did_what", "Ana has run since about 2020.", ts),
    ]
    # The turn's own year and month are not news; the start of the duration and the day are.
    assert note_words(notes, "I have run for 3 years, yesterday too") == "since about 2020 7"
    assert note_words([], "anything") == ""
    assert (
        describe([{"kind": "image", "caption": "a photo of a dog on a beach"}]) == "[image: a dog on a beach]"
    )
    assert describe([{"kind": "link", "url": "https://x.org"}]) == "[link]"  # an address is not memory
    assert with_attachments("", [{"kind": "audio", "caption": "a lullaby"}]) == "[audio: a lullaby]"
    assert with_attachments("hi", None) == "hi"
