"""The LoCoMo harness on a tiny LoCoMo-shaped fixture: metrics checked against hand computation."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
import tiermem.runtime.context as context

from tiermem.app.locomo import (
    BM25,
    Item,
    Question,
    TiermemContext,
    aggregate,
    answer_tokens,
    format_report,
    interaction_events,
    load_locomo,
    normalize_answer,
    normalize_evidence,
    pack,
    parse_session_date,
    run_locomo,
    score_question,
)
from tiermem.settings import resolve_settings

FIXTURE = [
    {
        "sample_id": "tiny",
        "conversation": {
            "speaker_a": "Ava",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {
                    "speaker": "Ava",
                    "dia_id": "D1:1",
                    "text": "Hi Ben! I adopted a cat named Pixel yesterday.",
                },
                {
                    "speaker": "Ben",
                    "dia_id": "D1:2",
                    "text": "Congrats! I ran a marathon in Boston last week.",
                },
                {"speaker": "Ava", "dia_id": "D1:3", "text": "Wow, great job."},
            ]
            + [
                {"speaker": s, "dia_id": f"D1:{k}", "text": f"Small talk number {k} about the weather."}
                for k, s in zip(range(4, 24), ["Ben", "Ava"] * 10, strict=True)
            ],
        },
        "qa": [
            {
                "question": "What is the name of Ava's cat?",
                "answer": "Pixel",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {
                "question": "When did Ben run a marathon?",
                "answer": "The week before 8 May 2023",
                "evidence": ["D01:02"],
                "category": 2,
            },
            {
                "question": "Trick?",
                "answer": "x",
                "evidence": ["D1:1"],
                "category": 5,
                "adversarial_answer": "y",
            },
            {"question": "No evidence", "answer": "x", "evidence": [], "category": 1},
        ],
    }
]


def _write(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_bytes(orjson.dumps(FIXTURE))
    return path


def test_loader_skips_adversarial_and_unevidenced_and_fixes_ids(tmp_path: Path) -> None:
    (conv,) = load_locomo(_write(tmp_path))
    assert [q.category for q in conv.questions] == ["4", "2"]
    assert conv.questions[1].evidence == ["D1:2"]
    assert normalize_evidence(["D8:6; D9:17", "D:11:26", "D30:05"]) == ["D8:6", "D9:17", "D11:26", "D30:5"]
    assert parse_session_date("1:56 pm on 8 May, 2023").isoformat() == "2023-05-08T13:56:00+00:00"
    assert conv.turns[1].ts.isoformat() == "2023-05-08T13:56:01+00:00"


def test_answers_with_the_day_glued_to_the_month_are_read_as_a_date() -> None:
    assert normalize_answer("The weekend after 3June, 2022.") == "The weekend after 3 June, 2022."
    assert answer_tokens(normalize_answer("The Friday before 23January, 2022")) == [
        "friday",
        "23",
        "january",
        "2022",
    ]
    # Nothing else is split: ordinals, sizes and a misspelt month stay as written.
    for kept in ("a 5K charity run", "Aug 15th", "2D adventure", "the week before 21Janury, 2022"):
        assert normalize_answer(kept) == kept


def test_metrics_by_hand(tmp_path: Path) -> None:
    (conv,) = load_locomo(_write(tmp_path))
    turns = {t.dia_id: t for t in conv.turns}
    q = Question("When did Ben run a marathon?", "The week before 8 May 2023", ["D1:2"], "2")
    # content tokens of the answer: week, 8, may, 2023 ("the", "before" are stop words)
    assert answer_tokens(q.answer) == ["week", "8", "may", "2023"]
    verbatim = [Item("[8 May 2023] Ben: Congrats! I ran a marathon in Boston last week.")]
    s = score_question(verbatim, q, turns)
    assert s["evidence_recall_verbatim"] == 1.0 and s["evidence_recall"] == 1.0
    assert s["answer_recall"] == 1.0 and s["answer_full"] == 1.0  # week, 8, may, 2023 all there
    assert s["tokens"] == 17  # ceil(66 / 4)
    # Cited: names the turn's id and states most of its content, without being verbatim.
    cited = [Item("Ben ran a marathon in Boston (congrats) last week, in May.", (turns["D1:2"].event_id,))]
    s = score_question(cited, q, turns)
    assert (s["evidence_recall_verbatim"], s["evidence_recall_cited"], s["evidence_recall"]) == (0, 1, 1)
    assert s["answer_recall"] == 0.5 and s["answer_full"] == 0.0  # week, may of 4
    # Citing the id without the content does not count.
    s = score_question([Item("something else", (turns["D1:2"].event_id,))], q, turns)
    assert s["evidence_recall"] == 0.0 and s["answer_recall"] == 0.0


def test_pack_and_aggregate() -> None:
    items = [Item("a" * 40), Item("b" * 30), Item("c" * 3)]
    assert [i.text[0] for i in pack(items, 11)] == ["a", "c"]  # 44 chars: a(40) + \n + c(3)
    rows = [
        (
            "1",
            {
                "evidence_recall": 1.0,
                "evidence_recall_verbatim": 1.0,
                "evidence_recall_cited": 0.0,
                "answer_recall": 0.5,
                "answer_full": 0.0,
                "tokens": 10.0,
            },
            2.0,
        ),
        (
            "2",
            {
                "evidence_recall": 0.0,
                "evidence_recall_verbatim": 0.0,
                "evidence_recall_cited": 0.0,
                "answer_recall": 1.0,
                "answer_full": 1.0,
                "tokens": 20.0,
            },
            4.0,
        ),
    ]
    m = aggregate(rows)
    assert m["all"]["evidence_recall"] == 0.5 and m["all"]["answer_recall"] == 0.75
    assert m["all"]["answer_full"] == 0.5 and m["all"]["mean_tokens"] == 15.0 and m["all"]["n"] == 2
    assert m["1"]["n"] == 1 and m["3"]["n"] == 0


def test_bm25_prefers_the_rare_matching_turn() -> None:
    bm = BM25(["the cat sat", "a dog ran far", "cat cat cat dog"])
    ranked = [i for i, _ in bm.rank("dog ran")]
    assert ranked[0] == 1


def test_end_to_end_on_the_fixture(tmp_path: Path) -> None:
    result = run_locomo(_write(tmp_path), 120, work_dir=tmp_path)
    for system in ("tiermem", "baseline"):
        m = result[system]
        assert set(m) == {"all", "1", "2", "3", "4"}
        assert m["all"]["n"] == 2
        assert m["all"]["mean_tokens"] <= 120
        assert {
            "evidence_recall",
            "evidence_recall_verbatim",
            "evidence_recall_cited",
            "answer_recall",
            "answer_full",
            "mean_tokens",
            "n",
            "latency_p50_ms",
            "latency_p99_ms",
        } <= set(m["all"])
    assert result["pipeline"]["compress"]["scorer"] == "offline"
    assert result["pipeline"]["compress"]["episodes"] > 0
    # Both questions' evidence is in the compressed part and named in the question: found by both.
    assert result["tiermem"]["all"]["evidence_recall"] == 1.0
    assert result["baseline"]["4"]["answer_full"] == 1.0
    assert not list(tmp_path.glob("tiermem-locomo-*"))  # the temporary data root is gone


def test_evidence_ids_written_with_spaces_are_read() -> None:
    assert normalize_evidence(["D1:3 D1:4"]) == ["D1:3", "D1:4"]
    assert normalize_evidence(["D1: 3", "D 2:5", "D8:6; D9:17", "D:11:26", "D30:05"]) == [
        "D1:3",
        "D2:5",
        "D8:6",
        "D9:17",
        "D11:26",
        "D30:5",
    ]
    assert normalize_evidence(["D", "", "1:2"]) == []


IMAGE_FIXTURE = [
    {
        **FIXTURE[0],
        "sample_id": "img",
        "conversation": {
            **FIXTURE[0]["conversation"],
            "session_1": [
                {
                    "speaker": "Ava",
                    "dia_id": "D1:1",
                    "text": "Look what I finished this morning!",
                    "img_url": ["https://example.org/p.jpg"],
                    "blip_caption": "a photo of a watercolor painting of a lighthouse",
                    "query": "lighthouse watercolor",
                },
                *FIXTURE[0]["conversation"]["session_1"][1:],
            ],
        },
        "qa": [
            {
                "question": "What did Ava paint?",
                "answer": "a lighthouse",
                "evidence": ["D1:1 D1:3"],
                "category": 1,
            }
        ],
    }
]


def test_captions_are_attachments_and_count_as_part_of_their_turn(tmp_path: Path) -> None:
    path = tmp_path / "img.json"
    path.write_bytes(orjson.dumps(IMAGE_FIXTURE))
    (conv,) = load_locomo(path)
    assert conv.questions[0].evidence == ["D1:1", "D1:3"]
    first = conv.turns[0]
    assert first.attachments == (
        {
            "kind": "image",
            "caption": "a photo of a watercolor painting of a lighthouse",
            "url": "https://example.org/p.jpg",
            "query": "lighthouse watercolor",
        },
    )
    events = interaction_events(conv)
    assert events[0]["attachments"] == [dict(first.attachments[0])]
    assert "attachments" not in events[1]
    assert "attachments" not in interaction_events(conv, captions=False)[0]

    turns = {t.dia_id: t for t in conv.turns}
    only_caption = [Item("[image: a watercolor painting of a lighthouse]", (first.event_id,))]
    # An item stating the caption cites the turn: the caption is part of it.
    assert score_question(only_caption, conv.questions[0], turns)["evidence_recall_cited"] == 1.0

    result = run_locomo(path, 200, work_dir=tmp_path)
    assert result["tiermem"]["all"]["answer_full"] == 1.0  # "lighthouse" is only in the caption
    assert result["per_category"]["1"]["name"] == "multi-hop"
    assert result["per_category"]["1"]["tiermem"]["answer_full"] == 1.0
    without = run_locomo(path, 200, work_dir=tmp_path, captions=False)
    assert without["tiermem"]["all"]["answer_full"] == 0.0 and without["captions"] is False
    assert "multi-hop" in format_report(result)


def test_each_delivered_section_is_attributed_its_tokens_and_evidence(tmp_path: Path) -> None:
    whole = run_locomo(_write(tmp_path), 120, work_dir=tmp_path, recall_share=1.0)
    shares = whole["sections"]
    assert whole["recall_share"] == 1.0 and set(shares) == {"recall"}
    assert shares["recall"]["evidence_questions"] == 2 and shares["recall"]["evidence_share"] == 1.0
    assert abs(sum(m["token_share"] for m in shares.values()) - 1.0) < 0.01
    split = run_locomo(_write(tmp_path), 120, work_dir=tmp_path, recall_share=0.5)
    others = {n: m for n, m in split["sections"].items() if n != "recall"}
    # Half the budget is the context's first: some other section is delivered and measured.
    assert sum(m["token_share"] for m in others.values()) > 0
    assert split["tiermem"]["all"]["mean_tokens"] <= 120


def test_attribution_names_the_section_holding_the_evidence() -> None:
    from tiermem.app.locomo import Turn, attribute, section_shares

    turn = Turn(
        "D1:1",
        "Ava",
        "I adopted a cat named Pixel.",
        1,
        "",
        parse_session_date("1:56 pm on 8 May, 2023"),
        "ev1",
    )
    q = Question("Cat's name?", "Pixel", ["D1:1"], "4")
    items = [
        Item("Ava: I adopted a cat named Pixel.", ("ev1",), "recall"),
        Item("- [fact:1] (user) Ava has a cat named Pixel", ("fact:1",), "knowledge"),
        Item("[ep] unrelated", ("ep",), "memory_context:episode"),
    ]
    att = attribute(items, q, {"D1:1": turn})
    assert att["recall"] == (True, {"pixel"}) and att["knowledge"] == (False, {"pixel"})
    assert att["memory_context:episode"] == (False, set())
    shares = section_shares([(items, att)])
    assert shares["recall"]["evidence_alone"] == 1 and shares["knowledge"]["evidence_questions"] == 0
    assert shares["knowledge"]["answer_token_share"] == 1.0


def test_the_context_part_ranks_facts_at_the_conversations_own_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (conv,) = load_locomo(_write(tmp_path))
    settings = replace(resolve_settings(data_dir=tmp_path / "data", env={}), anthropic_api_key=None)
    seen: list[Any] = []
    real = context.assemble_context

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("now"))
        return real(*args, **kwargs)

    monkeypatch.setattr(context, "assemble_context", spy)
    system = TiermemContext(settings, conv)
    try:
        system.assembled("Where did Ava go?", 100)
    finally:
        system.close()
    # The last turn's time, not the clock's: the figures cannot drift with the day of the run.
    assert seen == [max(t.ts for t in conv.turns)]
