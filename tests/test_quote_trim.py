"""Filler sentences left out of recalled turns (runtime.quote_trim) and what the packed block shows."""

from __future__ import annotations

from typing import Any

from tiermem.runtime.packing import render_quote_block
from tiermem.runtime.quote_trim import filler_words, name_words, trim_filler, trimmed

from tiermem.app.locomo import answer_tokens, tokens

FILLER = filler_words(name_words(["Tim", "John"]))


def quote(i: int, text: str, speaker: str = "John", date: str = "8 May 2023") -> dict[str, Any]:
    return {
        "event_id": f"e{i}",
        "episode_id": "ep",
        "part": 0,
        "ts": f"2023-05-08T10:00:{i:02d}+00:00",
        "date": date,
        "speaker": speaker,
        "text": text,
        "score": 10.0 - i,
        "notes": [],
        "anchors": [],
    }


def test_greetings_and_thanks_are_left_out_and_every_content_sentence_stays() -> None:
    said = "Hey Tim! Great to hear from you. My week's been busy - I started doing seminars. Thanks!"
    assert trimmed(said, frozenset({"seminars"}), FILLER) == "My week's been busy - I started doing seminars."


def test_a_filler_sentence_that_meets_the_question_stays() -> None:
    said = "Dance is my passion. I'm so happy! Thanks, Tim."
    assert trimmed(said, frozenset({"happy"}), FILLER) == "Dance is my passion. I'm so happy!"
    assert trimmed(said, frozenset({"dance"}), FILLER) == "Dance is my passion."


def test_a_turn_of_filler_only_or_of_one_sentence_is_shown_whole() -> None:
    assert trimmed("Thanks, Tim! Sounds great.", frozenset(), FILLER) == "Thanks, Tim! Sounds great."
    assert trimmed("Wow thanks so much", frozenset(), FILLER) == "Wow thanks so much"


def test_the_speakers_names_are_filler_but_no_word_that_begins_like_one() -> None:
    words = filler_words(name_words(["Melanie", "Caroline"]))
    assert {"melanie", "caroline"} <= words and not {"mel", "car"} & words
    assert trimmed("Thanks, Melanie! I painted a lake.", frozenset(), words) == "I painted a lake."
    out = trim_filler([quote(1, "Guess what I bought last week! A car.", speaker="Caroline")], "Which car?")
    assert out[0]["text"] == "Guess what I bought last week! A car."


def test_a_small_talk_word_the_question_asks_about_keeps_its_sentence() -> None:
    said = "I'm so happy! We painted the fence on Sunday."
    out = trim_filler([quote(1, said, speaker="Melanie")], "What makes Melanie happy?")
    assert out[0]["text"] == said
    out = trim_filler([quote(1, said, speaker="Melanie")], "What did Melanie paint?")
    assert out[0]["text"] == "We painted the fence on Sunday."
    # The question's words are matched whatever their case.
    out = trim_filler([quote(1, said, speaker="Melanie")], "Happy days for Melanie?")
    assert out[0]["text"] == said


def test_a_trimmed_quote_keeps_its_picture_and_the_rest_is_the_same_object() -> None:
    kept = quote(1, "I took a pottery class yesterday.")
    pictured = quote(2, "Hey Tim! Look at my new bowl. [image: a photo of a clay bowl]")
    tims = quote(3, "Nice!", speaker="Tim")  # the other speaker is among the shortlist's speakers
    out = trim_filler([kept, pictured, tims], "What did John make in his pottery class?")
    assert out[0] is kept
    assert out[1]["text"] == "Look at my new bowl. [image: a photo of a clay bowl]"
    assert pictured["text"].startswith("Hey Tim!")  # the caller's quote is not changed


def test_the_question_asker_name_does_not_keep_a_greeting() -> None:
    quotes = [quote(1, "Hey Tim! I joined a book club.", speaker="John"), quote(2, "Cool!", speaker="Tim")]
    out = trim_filler(quotes, "What club did Tim join?")
    assert out[0]["text"] == "I joined a book club."


def test_the_block_fits_more_turns_and_each_line_still_states_its_turn() -> None:
    filler = "Hey Tim, thanks so much! That sounds awesome, really glad to hear it. "
    quotes = [
        quote(i, f"{filler}I visited the {place} museum last week.")
        for i, place in enumerate(("art", "war", "toy"))
    ]
    budget = 50  # tokens: the whole turns do not all fit, their content sentences do
    whole = render_quote_block(quotes, budget, "Which museums did John visit?", trim=False)
    short = render_quote_block(quotes, budget, "Which museums did John visit?")
    cited = lambda lines: [i for _, ids in lines for i in ids]  # noqa: E731
    assert len(cited(short)) == 3 > len(cited(whole))
    for q in quotes:
        line = next(t for t, ids in short if q["event_id"] in ids)
        content = set(answer_tokens(q["text"]))
        # The protocol's citing rule: a line citing the turn states at least half its content words.
        assert len(content & set(tokens(line))) >= 0.5 * len(content)


def test_more_tokens_never_deliver_less_with_trimmed_turns() -> None:
    quotes = [
        quote(
            i,
            f"Thanks Tim! Great. Fact number {i} is about {'x' * (i * 7 % 40)} gardens.",
            date=f"{i % 4 + 1} May 2023",
        )
        for i in range(30)
    ]
    shown = [
        {i for _, ids in render_quote_block(quotes, b, "Which gardens?") for i in ids}
        for b in (64, 128, 256, 512)
    ]
    assert shown[0] <= shown[1] <= shown[2] <= shown[3]
    assert shown[0] < shown[3]
