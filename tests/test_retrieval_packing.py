"""Passages of long turns, the compact block, budget monotonicity, time windows of questions."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

from tiermem.runtime.packing import diversify, is_list_like, render_quote_block, select
from tiermem.runtime.passages import PASSAGE_CHARS, episode_passages, split_text
from tiermem.runtime.time_query import event_phrase, mentions_time, relative_to_event, time_window

REF = datetime(2023, 7, 12, 15, 0, tzinfo=UTC)


def _q(text: str, day: int, score: float, eid: str, speaker: str = "Ava", part: int = 0) -> dict[str, Any]:
    return {
        "text": text,
        "speaker": speaker,
        "event_id": eid,
        "part": part,
        "date": f"{day} May 2023",
        "ts": f"2023-05-{day:02d}T10:00:{int(eid[1:]) % 60:02d}.000Z",
        "anchors": [],
        "score": score,
    }


# ------------------------------------------------------------------ passages


def test_long_turn_is_split_into_bounded_passages_at_sentence_boundaries() -> None:
    sentences = [f"Step {k} of the plan is to check the component number {k} carefully." for k in range(40)]
    text = " ".join(sentences)
    parts = split_text(text)
    assert len(parts) > 3
    assert all(len(p) <= PASSAGE_CHARS for p in parts)
    assert all(p.endswith(".") for p in parts)  # cut between sentences, not inside one
    assert " ".join(parts) == text  # nothing lost, nothing repeated
    assert split_text("short turn") == ["short turn"]


def test_episode_passages_keep_turn_identity_and_order() -> None:
    long = "\n\n".join(f"Paragraph {k}. " + "word " * 80 for k in range(3))
    quotes = [
        {"text": "My budget is 500 dollars.", "event_id": "e1", "speaker": "Ben"},
        {"text": long, "event_id": "e2", "speaker": "Ava"},
        {"text": "", "event_id": "e3"},
    ]
    ps = episode_passages(quotes)
    assert [p.idx for p in ps] == list(range(len(ps)))
    assert ps[0].event_id == "e1" and ps[0].parts == 1
    rest = [p for p in ps if p.event_id == "e2"]
    assert len(rest) == 3 and [p.part for p in rest] == [0, 1, 2]
    assert all(p.speaker == "Ava" and p.quote == 1 for p in rest)


# ------------------------------------------------------------------ the block


def test_compact_block_names_a_speaker_once_per_run_and_joins_passages() -> None:
    quotes = [
        _q("first thing", 8, 3.0, "e1"),
        _q("second thing", 8, 2.0, "e2"),
        _q("a reply", 8, 1.0, "e3", speaker="Ben"),
        _q("part one.", 9, 5.0, "e4", part=0),
        _q("part two.", 9, 4.0, "e4", part=1),
    ]
    texts = [t for t, _ in render_quote_block(quotes)]
    assert texts == [
        "8 May 2023:",
        "Ava: first thing",
        "second thing",
        "Ben: a reply",
        "9 May 2023:",
        "Ava: part one. part two.",
    ]


def test_more_tokens_never_deliver_less() -> None:
    rng = random.Random(7)
    for trial in range(30):
        quotes = [
            _q("x" * rng.choice([30, 60, 120, 400, 480]), rng.randint(1, 20), rng.random(), f"e{k}")
            for k in range(50)
        ]
        quotes.sort(key=lambda q: -q["score"])
        for start in (100, 125, 150, 300):
            previous: set[int] = set()
            for budget in (start, 2 * start, 4 * start, 8 * start):  # each budget twice the one before
                chosen = set(select(quotes, budget))
                assert previous <= chosen, (trial, budget)
                lines = render_quote_block(quotes, budget)
                assert len("\n".join(t for t, _ in lines)) <= budget * 4
                previous = chosen


def test_list_like_questions_spread_over_days() -> None:
    assert is_list_like("What activities does Ava do?")
    assert is_list_like("Which places did Ben visit?")
    assert not is_list_like("What is Ava's job?")
    quotes = [_q(f"turn {k} " + "x" * 30, 8, 10 - k, f"e{k}") for k in range(4)]
    quotes.append(_q("other day " + "x" * 30, 9, 6.5, "e9"))
    order = [q["event_id"] for q in diversify(quotes)]
    assert order.index("e9") < order.index("e2")  # a second day before the third turn of the first
    question = "What activities does Ava do?"
    spread = [ids for _, ids in render_quote_block(quotes, 40, question, spread=True) if ids]
    plain = [ids for _, ids in render_quote_block(quotes, 40, question) if ids]  # room for three turns
    assert spread == [("e0",), ("e1",), ("e9",)]
    assert plain == [("e0",), ("e1",), ("e2",)]


# ------------------------------------------------------------------ time windows


def test_time_expressions_become_windows() -> None:
    w = time_window("What did I cook last year?", REF)
    assert w is not None and (w.start.year, w.end.year) == (2022, 2023)
    w = time_window("What did we do in May?", REF)
    assert w is not None and (w.start.month, w.start.year, w.end.month) == (5, 2023, 6)
    w = time_window("What happened in September?", REF)  # not yet this year: last September
    assert w is not None and (w.start.year, w.start.month) == (2022, 9)
    w = time_window("Where did I go in March 2021?", REF)
    assert w is not None and (w.start.year, w.start.month) == (2021, 3)
    w = time_window("What did I buy last month?", REF)
    assert w is not None and (w.start.month, w.end.month) == (6, 7)
    w = time_window("Who called yesterday?", REF)
    assert w is not None and w.start.day == 11 and w.end.day == 12
    w = time_window("What did I read two weeks ago?", REF)
    assert w is not None and w.contains(datetime(2023, 6, 28, tzinfo=UTC))
    assert time_window("What is my favourite colour?", REF) is None
    assert not mentions_time("What is my favourite colour?")
    assert mentions_time("What did we plan before the trip?") and mentions_time("in May")


def test_before_and_after_an_event() -> None:
    assert event_phrase("What did we plan before the trip?") == ("before", "trip")
    assert event_phrase("What did Ava buy after her move to Paris?") == ("after", "move to paris")
    assert event_phrase("What is your name?") is None
    trip = datetime(2023, 6, 1, 9, 0, tzinfo=UTC)
    before = relative_to_event("before", trip, "before trip")
    assert before.contains(datetime(2023, 5, 31, tzinfo=UTC)) and not before.contains(trip)
    after = relative_to_event("after", trip, "after trip")
    assert after.contains(datetime(2023, 6, 2, tzinfo=UTC)) and not after.contains(trip)


# ------------------------------------------------------------------ media descriptions


def test_descriptions_split_from_what_was_said_and_compacted() -> None:
    from tiermem.attachments import compact_described, split_described, with_attachments
    from tiermem.text import STOP_WORDS

    stored = with_attachments(
        "Look at my new painting!", [{"kind": "image", "caption": "a painting of a sunset over a lake"}]
    )
    said, described = split_described(stored)
    assert (said, described) == ("Look at my new painting!", "[image: a painting of a sunset over a lake]")
    assert split_described("a note [sic] with brackets") == ("a note [sic] with brackets", "")
    # Content words only, none the turn already says.
    assert compact_described(said, described, STOP_WORDS) == "[image: sunset lake]"
    assert compact_described("", "[file]", STOP_WORDS) == "[file]"


def test_block_shows_compact_captions_for_the_best_ranked_turns_only() -> None:
    pic = " [image: a man holding a surfboard on a beach]"
    quotes = [
        _q("We went surfing." + pic, 1, 9.0, "e1"),
        _q("Lovely day out." + pic, 2, 5.0, "e2", speaker="Ben"),
        _q(pic.strip(), 3, 4.0, "e3"),
    ]
    text = "\n".join(t for t, _ in render_quote_block(quotes, None, captions=1))
    assert "We went surfing. [image: man holding surfboard beach]" in text  # best ranked: compact
    assert "Lovely day out." in text and text.count("[image") == 2
    assert "[image: man holding surfboard beach]" in text.splitlines()[-1]  # a picture alone keeps it
    shown = "\n".join(t for t, _ in render_quote_block(quotes, None, captions=3))
    assert shown.count("[image:") == 3
