"""What can enter the recalled shortlist: the question's word forms, and every turn of an episode.

Two ways a gold turn used to stay out of the recall whatever the ranking did:
a question's stem cut below four letters ("hiking" -> "hik") matched no word
at all, and a short answer the compressor scored as small talk ("They were
awestruck and humbled.") was never quoted by its episode, so no search could
return it; it is now quoted because it answers the question before it. Fixtures where the answer is found only because of each rule.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from helpers_runtime import append, episode, interaction, quotes, small_talk_days
from tiermem.compressor.job import run_compress
from tiermem.compressor.offline_scorer import OfflineScorer
from tiermem.compressor.scoring import Interaction
from tiermem.runtime import query_terms
from tiermem.runtime import quote_search as qs
from tiermem.runtime.episode_text import TermMatcher
from tiermem.runtime.memory import AgentMemory, open_memory
from tiermem.runtime.projector import project

from tiermem.settings import Settings


def _matches(query_word: str, text: str) -> int:
    """How many words of `text` count as `query_word` (the search's own matcher)."""
    return sum(TermMatcher(query_terms.query_term_groups(query_word)).counts(text.lower()))


@pytest.mark.parametrize(
    ("word", "text", "found"),
    [
        ("hiking", "a hike, two hikes, we hiked, hiking", 4),  # stem "hik" alone matched none
        ("movies", "a movie and more movies", 2),  # stem "mov" alone matched none
        ("cities", "one city, many cities", 2),
        ("pets", "a pet, two pets", 2),  # a four-letter plural and its singular
        ("drawing", "I drew it, the drawing", 2),  # an irregular verb by its stem
        ("news", "new shoes", 0),  # no plural of "new"
        ("boxing", "box", 1),  # a short stem that is a word keeps matching itself
    ],
)
def test_a_short_stem_brings_the_forms_it_stands_for(word: str, text: str, found: int) -> None:
    assert _matches(word, text) == found


def test_hiking_is_its_stem_with_the_forms_it_stands_for() -> None:
    groups = query_terms.query_term_groups("When did Andrew go hiking?")
    assert ("hik", "hike", "hiking") in groups


@pytest.fixture
def hiking_memory(settings: Settings) -> Iterator[AgentMemory]:
    events = [
        episode(
            "walker",
            "trail plans",
            "Andrew and Audrey plan a day out.",
            key_quotes=quotes(("h1", "Andrew", "Let us do the hike by the lake next month with the dogs!")),
            participants=["audrey"],
            start_ts="2023-05-01T10:00:00Z",
            end_ts="2023-05-01T11:00:00Z",
        ),
        episode(
            "walker",
            "work talk",
            "Andrew and Audrey talk about work.",
            key_quotes=quotes(
                ("r1", "Andrew", "I am going to the office early, the train is going to be packed.")
            ),
            participants=["audrey"],
            start_ts="2023-05-02T10:00:00Z",
            end_ts="2023-05-02T11:00:00Z",
        ),
    ]
    events += small_talk_days("walker", ("Audrey", "Andrew"), "walked the dog in the park", "audrey")
    append(settings, *events)
    project(settings)
    with open_memory(settings, "walker", user="audrey") as m:
        yield m


def _order(memory: AgentMemory, question: str) -> list[str]:
    return [f["event_id"] for f in qs.search_quotes(memory.conn, memory.principal, question, limit=5)]


def test_a_question_about_hiking_finds_the_turn_about_a_hike(
    hiking_memory: AgentMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    question = "When is Andrew going hiking?"
    assert _order(hiking_memory, question)[0] == "h1"
    # The stem alone (the forms before this rule) matches no word of the hike turn, and the
    # turn that only repeats "going" comes first.
    monkeypatch.setattr(query_terms, "_short_stem_forms", lambda word, term: [])
    assert _order(hiking_memory, question)[0] == "r1"


START = datetime(2023, 8, 14, 18, 0, tzinfo=UTC)
TALK = [
    ("James", "We took the kids to the military memorial on Sunday."),
    ("John", "How did the kids react to the memorial?"),
    ("James", "They were awestruck and humbled."),
    ("John", "I have been painting the fence all week, it is nearly done."),
    ("James", "Sounds good."),
]


# The next day's chat: the compressor leaves the newest ten turns in working memory and runs
# once more than fifteen are pending, so the first session is folded into an episode.
LATER = [("James" if k % 2 else "John", f"Round {k} of the card game went to me, again.") for k in range(14)]


def _talk(agent: str) -> list[dict[str, object]]:
    """Two sessions of alternating turns (James the user, John the agent)."""
    out = []
    for k, (who, text) in enumerate(TALK + LATER):
        session, at = ("s1", START) if k < len(TALK) else ("s2", START + timedelta(days=1))
        mine = who == "John"
        out.append(
            interaction(
                agent,
                "" if mine else text,
                text if mine else "",
                user="James",
                session_id=session,
                ts=(at + timedelta(seconds=k)).isoformat(),
                event_id=f"t{k}",
                metadata={"agent_name": "John"},
            )
        )
    return out


def test_a_short_answer_scored_as_small_talk_is_quoted_and_recalled(settings: Settings) -> None:
    scorer = OfflineScorer()
    answer = Interaction("t2", "a", START, "James", "s1", "", "agent", TALK[2][1], "")
    asked = Interaction("t1", "a", START, "James", "s1", "", "agent", "", TALK[1][1])
    # The answer has the lowest importance there is: what the compressor used to drop.
    assert scorer.score_interaction(answer, asked, set()) == 1

    append(settings, *_talk("friend"))
    run_compress(settings, progress=False)
    project(settings)
    with open_memory(settings, "friend", user="James") as m:
        quoted = [
            q["event_id"]
            for (raw,) in m.conn.execute("SELECT key_quotes FROM episodes WHERE agent_id = 'friend'")
            for q in orjson.loads(raw)
        ]
        assert "t2" in quoted
        assert "t4" not in quoted  # small talk that answers no question is still left out
        question = "How did James describe his kids' reaction at the military memorial?"
        found = qs.search_quotes(m.conn, m.principal, question, limit=3)
        assert "t2" in [f["event_id"] for f in found]
        lines = qs.recall_lines(m.conn, m.principal, question, budget=60)
        assert any("awestruck" in text for text, _ in lines)


def test_an_answer_after_a_question_shared_with_an_image_is_quoted() -> None:
    scorer = OfflineScorer()
    photo = ({"type": "image", "caption": "a photo of a dog on a couch"},)
    asked = Interaction("q", "a", START, "James", "s1", "", "agent", "Guess his name?", "", {}, photo)
    answer = Interaction(
        "r", "a", START + timedelta(seconds=1), "James", "s1", "", "agent", "", "Luna, I think."
    )
    told = Interaction("s", "a", START + timedelta(seconds=2), "James", "s1", "", "agent", "Nice.", "")
    group = [asked, answer, told]
    assert asked.text.endswith("]")  # what was said is followed by the image's description
    scores = {it.event_id: scorer.score_interaction(it, None, set()) for it in group}
    assert scores["r"] == scores["s"] == 1
    quoted = {q.event_id for q in scorer.episode(group, scores).key_quotes}
    assert "r" in quoted and "s" not in quoted
