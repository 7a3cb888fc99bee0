"""What can enter the recalled shortlist: the question's word forms, and every turn of an episode.

Two ways a gold turn used to stay out of the recall whatever the ranking did:
a question's stem cut below four letters ("hiking" -> "hik") matched no word
at all, and a short answer the compressor scored as small talk ("They were
awestruck and humbled.") was never quoted by its episode, so no search could
return it; it is now quoted because it answers the question before it. Fixtures where the answer is found only because of each rule.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import orjson
import pytest
from helpers_runtime import append, episode, interaction, quotes, small_talk_days
from tiermem.compressor.job import run_compress
from tiermem.compressor.offline_scorer import OfflineScorer
from tiermem.compressor.scoring import Interaction
from tiermem.runtime import query_terms, unfolded_passages
from tiermem.runtime import quote_search as qs
from tiermem.runtime.episode_text import TEXTS, TermMatcher
from tiermem.runtime.hotstore import database_key
from tiermem.runtime.memory import AgentMemory, open_memory
from tiermem.runtime.projector import project
from tiermem.runtime.query_expansion import QueryExpansion

from tiermem import Memory
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


# ------------------------------------------------- turns no episode covers yet (working memory)

NEWS = [
    ("James", "What did you get up to this weekend?"),
    ("John", "Yesterday I adopted a tortoise, we named her Shelly."),
    ("James", "What a lovely name for a tortoise."),
]


def _two_days(agent: str, user: str, later: list[tuple[str, str]], prefix: str) -> list[dict[str, object]]:
    """A first day that gets folded into an episode, then a day that stays in working memory."""
    out = []
    for k, (who, text) in enumerate(TALK + LATER + later):
        day = 0 if k < len(TALK) else 1 if k < len(TALK) + len(LATER) else 2
        mine = who == "John"
        out.append(
            interaction(
                agent,
                "" if mine else text.replace("James", user),
                text if mine else "",
                user=user,
                session_id=f"{prefix}{day}",
                ts=(START + timedelta(days=day, seconds=k)).isoformat(),
                event_id=f"{prefix}{k}",
                metadata={"agent_name": "John"},
            )
        )
    return out


def _unfolded(m: AgentMemory) -> set[str]:
    return {
        str(r[0])
        for r in m.conn.execute(
            "SELECT event_id FROM wm_items w WHERE NOT EXISTS"
            " (SELECT 1 FROM folded_turns t WHERE t.event_id = w.event_id)"
        )
    }


def test_a_turn_in_working_memory_is_recalled_dated_under_its_speaker(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    append(settings, *_two_days("friend", "James", NEWS, "n"))
    run_compress(settings, progress=False)
    project(settings)
    adopted = f"n{len(TALK) + len(LATER) + 1}"
    with open_memory(settings, "friend", user="James") as m:
        assert adopted in _unfolded(m)  # no episode covers it: episode search cannot return it
        question = "What did John adopt last weekend?"
        lines = qs.recall_lines(m.conn, m.principal, question, budget=60)
        said = [text for text, ids in lines if adopted in ids]
        # Quoted as the compressor quotes the agent (its display name, taken from its episodes),
        # under its own day, its relative date resolved.
        assert said == [
            "John: Yesterday I adopted a tortoise, we named her Shelly. (Yesterday = 15 August 2023)"
        ]
        assert ("16 August 2023:", ()) in lines
        # Without the stand-ins the turn is out of the recall's reach.
        monkeypatch.setattr(unfolded_passages, "TURNS", 0)
        assert all(adopted not in ids for _, ids in qs.recall_lines(m.conn, m.principal, question, budget=60))


def test_another_users_turns_in_working_memory_stay_theirs(settings: Settings) -> None:
    canary = [("James", "My locker code is CANARYZEBRA, keep it safe."), ("John", "Kept, safely.")]
    append(
        settings,
        *_two_days("friend", "James", canary, "j"),
        *_two_days("friend", "Ada", [("Ada", "My locker has a broken hinge."), ("John", "Oh no.")], "a"),
    )
    run_compress(settings, progress=False)
    project(settings)
    question = "What is the code of the locker CANARYZEBRA?"
    with open_memory(settings, "friend", user="Ada") as m:
        assert any(i.startswith("j") for i in _unfolded(m))  # James's newest turns are unfolded too
        rows, entries = unfolded_passages.stand_ins(m.conn, m.principal)
        assert rows and all("CANARYZEBRA" not in t for e in entries for t in e.passages.texts)
        lines = qs.recall_lines(m.conn, m.principal, question, budget=500)
        assert lines and all("CANARYZEBRA" not in text for text, _ in lines)
        assert all(not i.startswith("j") for _, ids in lines for i in ids)
    with open_memory(settings, "friend", user="James") as m:
        lines = qs.recall_lines(m.conn, m.principal, question, budget=500)
        assert any("CANARYZEBRA" in text for text, _ in lines)
    with open_memory(settings, "friend") as m:  # no user: agent-level memory only
        lines = qs.recall_lines(m.conn, m.principal, question, budget=500)
        assert all("CANARYZEBRA" not in text for text, _ in lines)


def test_recall_memory_lists_an_unfolded_turn_once_and_forgets_it_when_erased(tmp_path: Path) -> None:
    mem = Memory.open(tmp_path / "data", env={}, compressor={"min_unprocessed": 1, "keep_recent": 0})
    try:
        bot = mem.agent("a1")
        for i in range(3):
            bot.record_turn(
                "alice", f"We talked about the garden, part {i}.", "Nice.", ts=f"2024-03-01T1{i}:00:00Z"
            )
        mem.compress()
        mem.refresh()
        loose = bot.record_turn(
            "alice", "The spare LOOSECANARY key is under the red pot.", "Noted.", ts="2024-03-02T10:00:00Z"
        ).event_id
        mem.refresh()

        def recall() -> dict[str, object]:
            return bot.call_tool("recall_memory", {"query": "where is the spare key"}, user="alice")

        out = recall()
        cited = [i for t in out["turns"] for i in t["event_ids"]]  # type: ignore[attr-defined]
        assert cited.count(loose) == 1  # found by both stages, listed once
        mem.forget(event=loose, reason="test")
        mem.refresh()
        assert "LOOSECANARY" not in str(recall())
        assert not any("LOOSECANARY" in t for e in TEXTS.entries.values() for t in e.passages.texts)
    finally:
        mem.close()


def test_the_agent_s_name_read_from_one_user_s_turns_never_reaches_another_user_s_recall(
    tmp_path: Path,
) -> None:
    mem = Memory.open(tmp_path / "data", env={}, compressor={"min_unprocessed": 1, "keep_recent": 0})
    try:
        bot = mem.agent("a1")
        for i in range(3):
            bot.record_turn(
                "alice",
                f"We talked about the garden roses, part {i}.",
                f"Roses need sun, part {i}.",
                ts=f"2024-03-01T1{i}:00:00Z",
                metadata={"agent_name": "ALICECANARYNAME"},
            )
            bot.record_turn(
                "bob",
                f"We talked about chess openings, part {i}.",
                "Openings need study.",
                ts=f"2024-03-02T1{i}:00:00Z",
            )
        mem.compress()
        mem.refresh()
        bot.record_turn(
            "alice",
            "Do tulips need sun?",
            "Tulips like sun too.",
            ts="2024-03-05T09:00:00Z",
            metadata={"agent_name": "ALICECANARYNAME"},
        )
        mem.refresh()
        alice = bot.call_tool("recall_memory", {"query": "do tulips need sun"}, user="alice")
        assert "ALICECANARYNAME" in str(alice)  # her own agent's name, read from her episodes
        for i in range(4):  # bob's newest turns, after alice's recall kept the name
            bot.record_turn(
                "bob",
                f"Any advice, number {i}?",
                f"The bicycle shop on Elm fixes chains, number {i}.",
                ts=f"2024-03-06T10:0{i}:00Z",
            )
        mem.refresh()

        def bob() -> str:
            return str(
                bot.call_tool("recall_memory", {"query": "where can I fix my bicycle chain"}, user="bob")
            )

        assert "bicycle shop" in bob() and "ALICECANARYNAME" not in bob()
        mem.forget(user="alice", reason="test")
        mem.refresh()
        assert "ALICECANARYNAME" not in bob()
        assert not any("ALICECANARYNAME" in str(v) for v in unfolded_passages._NAMES.values())
    finally:
        mem.close()


def test_a_stand_in_replaced_by_a_new_turn_is_not_kept(tmp_path: Path) -> None:
    mem = Memory.open(tmp_path / "data", env={})
    try:
        bot = mem.agent("a1")
        for i in range(5):
            bot.record_turn("alice", f"Note {i}: the boat is blue.", "Noted.", ts=f"2024-03-01T10:0{i}:00Z")
            mem.refresh()
            bot.call_tool("recall_memory", {"query": "what colour is the boat"}, user="alice")
        db = database_key(bot._runtime().store.conn)
        standing = [k for k in TEXTS.entries if k[0] == db and k[1].startswith(unfolded_passages.PREFIX)]
        assert len(standing) == 1  # the same ten minutes each time: only the newest version stays
    finally:
        mem.close()


# ------------------------------------------------- query expansion (retrieval.expand, opt-in)


class _TokenTable:
    """A static model's shape (a token table and its vocabulary) with hand-set vectors."""

    name = "table"

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.tokenizer = SimpleNamespace(vocab={w: i for i, w in enumerate(vectors)})
        self.table = np.array(list(vectors.values()), dtype=np.float32)


WORDS = _TokenTable(
    {
        "kids": [1.0, 0.0, 0.0],
        "kid": [0.99, 0.05, 0.0],  # a form of "kids": the group has it already
        "children": [0.95, 0.2, 0.0],
        "teenagers": [0.6, 0.8, 0.0],  # below MIN_COSINE
        "garden": [0.0, 0.0, 1.0],
        "melanie": [0.9, 0.0, 0.1],  # near "kids", but a name is never expanded
    }
)


def test_a_word_brings_its_near_words_but_not_its_forms_nor_the_far_ones() -> None:
    expansion = QueryExpansion(WORDS)  # type: ignore[arg-type]
    assert expansion.neighbours("kids") == ("melanie", "children")  # nearest first
    assert expansion.neighbours("garden") == ()
    assert expansion.neighbours("unknown") == ()
    question = "What do Melanie's kids like?"
    plain = query_terms.query_term_groups(question)
    groups = dict(zip([g[0] for g in plain], expansion.expand(question, plain), strict=True))
    assert groups["melanie"] == ("melanie",)
    assert {"children", "melanie"} <= set(groups["kids"])


def test_an_answer_sharing_no_word_with_the_question_is_found_through_a_near_word(
    settings: Settings,
) -> None:
    events = [
        episode(
            "mum",
            "family",
            "A talk about family.",
            key_quotes=quotes(("c1", "Ann", "My children painted the fence blue.")),
            participants=["bea"],
            start_ts="2023-05-01T10:00:00Z",
            end_ts="2023-05-01T11:00:00Z",
        ),
        episode(
            "mum",
            "errands",
            "A talk about errands.",
            key_quotes=quotes(("e1", "Ann", "We painted it.")),
            participants=["bea"],
            start_ts="2023-05-02T10:00:00Z",
            end_ts="2023-05-02T11:00:00Z",
        ),
    ]
    append(settings, *events)
    project(settings)
    question = "What did the kids paint?"
    with open_memory(settings, "mum", user="bea") as m:
        plain = qs.search_quotes(m.conn, m.principal, question, limit=5)
        assert [f["event_id"] for f in plain][:1] == ["e1"]  # "kids" is not said: the shorter turn wins
        found = qs.search_quotes(m.conn, m.principal, question, limit=5, expand=QueryExpansion(WORDS))  # type: ignore[arg-type]
        assert [f["event_id"] for f in found][:1] == ["c1"]


def test_the_expansion_setting_is_checked() -> None:
    from tiermem.errors import ConfigError
    from tiermem.settings import RetrievalSettings

    assert RetrievalSettings().expand == "off"  # the model is an optional package: off by default
    with pytest.raises(ConfigError, match=r"retrieval\.expand"):
        RetrievalSettings(expand="wordnet")


def test_a_new_turn_prepares_only_its_own_ten_minutes_again(settings: Settings) -> None:
    def turn(k: int, minute: int, text: str) -> dict[str, object]:
        at = START + timedelta(minutes=minute, seconds=k)
        return interaction("notes", text, "Noted.", user="James", ts=at.isoformat(), event_id=f"w{k}")

    append(settings, turn(0, 0, "The boat is moored at pier four."), turn(1, 30, "The boat needs new sails."))
    project(settings)

    def stand_in_ids(m: AgentMemory) -> list[str]:
        return [str(r[0]) for r in unfolded_passages.stand_ins(m.conn, m.principal)[0]]

    with open_memory(settings, "notes", user="James") as m:
        before = stand_in_ids(m)
        assert len(before) == 2  # two ten-minute spans, oldest first
        kept = TEXTS.entries[(database_key(m.conn), before[0])]
    append(settings, turn(2, 31, "The boat's sails arrive on Monday."))
    project(settings)
    with open_memory(settings, "notes", user="James") as m:
        after = stand_in_ids(m)
        assert after[0] == before[0] and after[1] != before[1]  # only the span the turn joined changed
        assert TEXTS.entries[(database_key(m.conn), after[0])] is kept  # not prepared again
        lines = qs.recall_lines(m.conn, m.principal, "When do the sails arrive?", budget=60)
        assert any("Monday" in text for text, _ in lines)


def test_another_threads_preparing_waits_for_a_search_of_the_unfolded_turns(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between checking the prepared texts and reading what that check left (the store's erasure
    mark, the stand-ins just looked up), another thread's preparing may clear everything (here: an
    erasure seen in another store). It is started at that moment and this search goes on only once it
    has come to the preparers' lock or finished: the search must still answer."""
    append(settings, interaction("notes", "The boat is moored at pier four.", "Noted.", user="James"))
    project(settings)
    lock, came = TEXTS.lock, threading.Event()

    class Watched:
        def __enter__(self) -> None:
            if threading.current_thread() is not threading.main_thread():
                came.set()
            lock.acquire()

        def __exit__(self, *exc: object) -> None:
            lock.release()

    other = threading.Thread(target=lambda: TEXTS.prepared(SimpleNamespace(), "another-store", []))
    real = TEXTS.prepared

    def prepared(conn: object, db: str, *args: object) -> object:
        found = real(conn, db, *args)  # type: ignore[arg-type]
        if db != "another-store" and other.ident is None:
            TEXTS.erased["another-store"] = 7  # its next read finds another mark: everything goes
            other.start()
            while not (came.is_set() or not other.is_alive()):
                other.join(0.001)
        return found

    monkeypatch.setattr(TEXTS, "lock", Watched())
    monkeypatch.setattr(TEXTS, "prepared", prepared)
    with open_memory(settings, "notes", user="James") as m:
        rows, entries = unfolded_passages.stand_ins(m.conn, m.principal)
    other.join()
    assert rows and any("pier four" in t for e in entries for t in e.passages.texts)
