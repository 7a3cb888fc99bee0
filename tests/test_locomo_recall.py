"""Quote-level recall behind recall_memory: term forms, the dated block, and search on a real hot store."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
from tiermem.runtime.quote_search import (
    query_term_groups,
    recall_lines,
    render_quote_block,
    search_quotes,
)

from tiermem.app.locomo import TiermemContext, load_locomo, prepare
from tiermem.settings import Settings, resolve_settings

FILLER = ["Nice weather today, the sky is clear.", "Yes, quite sunny and warm outside."]
GARDEN = "My tomato garden finally has ripe tomatoes, come and taste them!"
FIXTURE = [
    {
        "sample_id": "recall",
        "conversation": {
            "speaker_a": "Ava",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {
                    "speaker": "Ava",
                    "dia_id": "D1:1",
                    "text": "I made a patchwork quilt for my sister yesterday.",
                },
                {"speaker": "Ben", "dia_id": "D1:2", "text": "A quilt! What colours did you pick for it?"},
                {"speaker": "Ava", "dia_id": "D1:3", "text": "Mostly teal and mustard, her favourites."},
                {"speaker": "Ben", "dia_id": "D1:4", "text": "I went hiking on Mount Tam with my dog."},
            ]
            + [
                {"speaker": s, "dia_id": f"D1:{k}", "text": f"{FILLER[k % 2]} Small talk {k}."}
                for k, s in zip(range(5, 12), ["Ava", "Ben"] * 4, strict=False)
            ],
            "session_2_date_time": "10:00 am on 20 June, 2023",
            "session_2": [
                {
                    "speaker": s,
                    # The same line said twice: recall shows it once.
                    "text": GARDEN if k in (1, 3) else f"{FILLER[k % 2]} Chat number {k}.",
                    "dia_id": f"D2:{k}",
                }
                for k, s in zip(range(1, 15), ["Ben", "Ava"] * 7, strict=True)
            ],
        },
        "qa": [],
    }
]


def _settings(tmp_path: Path) -> Settings:
    return replace(resolve_settings(data_dir=tmp_path / "data", env={}), anthropic_api_key=None, fsync="none")


def _quote(text: str, date: str, ts: str, score: float, eid: str, speaker: str = "Ava") -> dict[str, Any]:
    return {
        "text": text,
        "speaker": speaker,
        "event_id": eid,
        "date": date,
        "ts": ts,
        "anchors": [],
        "score": score,
    }


def test_term_groups_normalise_morphology() -> None:
    groups = query_term_groups("What kind of activities did Caroline make, and her relationship status?")
    firsts = [g[0] for g in groups]
    assert "activit" in firsts  # prefix of activity / activities
    assert "status" in firsts  # not cut to "statu"
    make = next(g for g in groups if g[0] == "make")
    assert "made" in make and "making" in make
    assert ("caroline",) in groups  # a name gets no "-ing" form
    assert query_term_groups("Who shopped there?")[0] == ("shop",)


def test_block_packs_best_first_then_shows_days_in_order() -> None:
    quotes = [
        _quote("best match, said later", "20 June 2023", "2023-06-20T10:00:00.000Z", 9.0, "e2"),
        _quote("x" * 400, "8 May 2023", "2023-05-08T13:56:00.000Z", 8.0, "e-long"),
        _quote("second match, said first", "8 May 2023", "2023-05-08T13:56:01.000Z", 7.0, "e1"),
    ]
    lines = render_quote_block(quotes, budget=30)  # 120 characters: the 400-character quote is skipped
    texts = [t for t, _ in lines]
    assert texts == [
        "8 May 2023:",
        "Ava: second match, said first",
        "20 June 2023:",
        "Ava: best match, said later",
    ]
    assert [ids for _, ids in lines] == [(), ("e1",), (), ("e2",)]
    assert len("\n".join(texts)) <= 120
    assert len(render_quote_block(quotes)) == 5  # no budget: everything, one header per day


def test_search_on_a_compressed_conversation(tmp_path: Path) -> None:
    data = tmp_path / "fixture.json"
    data.write_bytes(orjson.dumps(FIXTURE))
    (conv,) = load_locomo(data)
    settings = _settings(tmp_path)
    prepare(settings, [conv])
    ctx = TiermemContext(settings, conv)
    try:
        conn, agent = ctx.memory.conn, ctx.memory.principal
        found = search_quotes(conn, agent, "What did Ava make for her sister?")
        assert found[0]["text"] == "I made a patchwork quilt for my sister yesterday."  # "make" meets "made"
        # The compressor's date note says what "yesterday" meant; nothing is left to resolve at read time.
        assert found[0]["notes"] == ["yesterday = 7 May 2023"] and found[0]["anchors"] == []
        # The answer to a question sits next to it: "colours" pulls in the reply about teal and mustard.
        top = [q["text"] for q in search_quotes(conn, agent, "Which colours did Ava pick?")[:2]]
        assert "Mostly teal and mustard, her favourites." in top
        texts = [q["text"] for q in search_quotes(conn, agent, "tomato garden", limit=50)]
        assert texts.count(GARDEN) == 1
        block = recall_lines(conn, agent, "What did Ava make for her sister?", budget=40)
        assert block[0] == ("8 May 2023:", ())
        assert "Ava: I made a patchwork quilt for my sister yesterday. (yesterday = 7 May 2023)" in [
            t for t, _ in block
        ]
        assert len("\n".join(t for t, _ in block)) <= 160
        delivered = ctx.deliver("Where did Ben go hiking?", 60)
        assert any("Mount Tam" in item.text for item in delivered)
        assert len("\n".join(i.text for i in delivered)) <= 240
    finally:
        ctx.close()
