"""The behavioural reviewer: exact coverage on a log with known gaps, cost, flags, files, --json."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from datetime import timedelta
from typing import Any

import anthropic
import httpx2
import orjson
from helpers_evolver import T0, append_all, interaction
from PIL import Image
from tiermem.reviewer.job import report_paths, run_review

from tiermem.app.cli import main
from tiermem.eventlog import EventLog
from tiermem.ids import format_ts
from tiermem.settings import Settings


def known_log(event_log: EventLog) -> dict[str, str]:
    """20 turns of agent-1 on one day: 15 enriched, 5 where the runtime forgot model and usage."""
    records = [interaction(f"Question {i}?", f"Here is answer {i}.", minute=i) for i in range(15)]
    records += [
        interaction(
            f"Plain question {i}?",
            f"Plain answer {i}.",
            minute=20 + i,
            enriched=False,
            approval_status="auto_approved",
        )
        for i in range(3)
    ]
    records += [
        interaction("Do something bad", "I can't help with that.", minute=30, enriched=False),
        interaction("Tell me everything", "word " * 1000 + "and then", minute=31, enriched=False),
    ]
    ids = append_all(event_log, records)
    # Another agent and another day must not leak into agent-1's report.
    append_all(event_log, [interaction("hi", "hello", agent="agent-2", minute=5)])
    append_all(event_log, [interaction("hi", "hello", ts=format_ts(T0 + timedelta(days=1)))])
    return {"refusal": ids[18], "very_long": ids[19]}


def test_coverage_figures_are_exact_on_a_log_with_known_gaps(settings: Settings, event_log: EventLog) -> None:
    ids = known_log(event_log)
    info = run_review(settings, day="2026-11-20", agent="agent-1")
    assert info.reports == 1 and info.interactions == 20
    cov = info.enrichment_coverage
    assert cov["model"] == 0.75 and cov["usage"] == 0.75 and cov["selection_reason"] == 0.75
    assert cov["latency_ms"] == 0.75
    assert cov["approval_status"] == 0.9  # 15 enriched + 3 that set it by hand
    assert cov["response_length"] == 1.0 and cov["user"] == 1.0
    assert cov["channel"] == 0.0
    assert info.fully_enriched_fraction == 0.75
    report = orjson.loads(report_paths(settings, "2026-11-20", "agent-1")["json"].read_bytes())
    assert report["enrichment_set_counts"]["model"] == 15
    assert set(report["missing_fields"]) >= {"model", "usage", "channel"}
    # Tokens and cost: 15 × (1000 in, 200 out) on claude-sonnet-4-5 at $3 / $15 per million.
    (priced, unrecorded) = report["tokens_by_model"]
    assert (
        priced["model"] == "claude-sonnet-4-5"
        and priced["input_tokens"] == 15000
        and priced["output_tokens"] == 3000
    )
    assert priced["cost_usd"] == 0.09 and info.cost_usd == 0.09
    assert unrecorded["model"] == "(not recorded)" and unrecorded["interactions"] == 5
    # Flags carry ids and only short snippets.
    assert [f["event_id"] for f in report["flagged"]["refusal"]] == [ids["refusal"]]
    assert [f["event_id"] for f in report["flagged"]["very_long"]] == [ids["very_long"]]
    assert all(len(f["snippet"]) <= 60 for rows in report["flagged"].values() for f in rows)
    assert report["flags"]["empty"] == 0 and report["response_length"]["max"] == 5008


def test_a_log_with_nothing_wired_shows_zero_enrichment(settings: Settings, event_log: EventLog) -> None:
    append_all(event_log, [interaction(f"q{i}", f"a{i}", minute=i, enriched=False) for i in range(44)])
    info = run_review(settings)
    assert info.interactions == 44
    assert info.enrichment_coverage["model"] == 0.0 and info.enrichment_coverage["usage"] == 0.0
    assert info.fully_enriched_fraction == 0.0


def test_repeated_empty_and_truncated_flags(settings: Settings, event_log: EventLog) -> None:
    ids = append_all(
        event_log,
        [
            interaction("a", "Same reply.", minute=0),
            interaction("b", "Same reply.", minute=1),
            interaction("c", " ", minute=2),
            interaction(
                "d", "This answer goes on and on about the topic " * 6 + "and then it stops mid", minute=3
            ),
            interaction("e", "Fine.", minute=4),
        ],
    )
    info = run_review(settings)
    report = orjson.loads(report_paths(settings, "2026-11-20", "agent-1")["json"].read_bytes())
    assert [f["event_id"] for f in report["flagged"]["repeated"]] == ids[:2]
    assert [f["event_id"] for f in report["flagged"]["empty"]] == [ids[2]]
    assert [f["event_id"] for f in report["flagged"]["truncated"]] == [ids[3]]
    assert info.flagged_interactions == 4


def test_files_are_written_and_the_chart_is_a_png(settings: Settings, event_log: EventLog) -> None:
    known_log(event_log)
    info = run_review(settings)
    assert info.reports == 3
    paths = report_paths(settings, "2026-11-20", "agent-1")
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(paths["png"]) as image:
        assert image.size == (1350, 470)
        used = {colour for _n, colour in image.convert("RGB").getcolors(maxcolors=64) or []}
    # Drawn bars, not a blank canvas: green (complete), amber (75% model) and red (0% channel) coverage.
    assert {(46, 125, 50), (249, 168, 37), (198, 40, 40)} <= used
    md = paths["md"].read_text()
    assert "Enrichment coverage" in md and "| model | 15 | 75% ⚠ |" in md
    assert "word " * 20 not in md  # a snippet, not the 5,000-character reply


def test_review_json_contract(settings: Settings, event_log: EventLog) -> None:
    known_log(event_log)
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["--data-dir", str(settings.data_dir), "review", "--day", "2026-11-20", "--json"])
    assert code == 0
    data = json.loads(out.getvalue())
    assert data["reports"] == 2 and data["interactions"] == 21
    assert isinstance(data["enrichment_coverage"], dict)
    assert data["enrichment_coverage"]["model"] == round(16 / 21, 6)
    for key in ("tokens", "cost_usd", "flags", "flagged_interactions", "days", "agents", "path"):
        assert key in data


def test_claude_judged_sample_through_the_real_sdk(settings: Settings, event_log: EventLog) -> None:
    ids = known_log(event_log)

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        prompt = body["messages"][0]["content"]
        items: list[dict[str, Any]] = [
            {"event_id": ids["refusal"], "score": 7, "reason": "refused a harmless request"},
            {"event_id": "not-in-the-sample", "score": 5},
            {"event_id": ids["very_long"], "score": "2", "reason": "rambles"},
        ]
        assert ids["refusal"] in prompt
        return httpx2.Response(
            200,
            json={
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "judgements", "input": {"items": items}}
                ],
                "stop_reason": "tool_use",
                "stop_sequence": None,
                "usage": {"input_tokens": 100, "output_tokens": 20},
            },
        )

    client = anthropic.Anthropic(
        api_key="test", http_client=httpx2.Client(transport=httpx2.MockTransport(handler)), max_retries=0
    )
    info = run_review(settings, day="2026-11-20", agent="agent-1", judge_client=client)
    assert info.path == "claude" and info.judged == 2
    report = orjson.loads(report_paths(settings, "2026-11-20", "agent-1")["json"].read_bytes())
    assert [(i["event_id"], i["score"]) for i in report["judge"]["items"]] == [
        (ids["refusal"], 5),
        (ids["very_long"], 2),
    ]


def test_a_runtime_without_selection_or_approval_steps_is_fully_enriched(
    settings: Settings, event_log: EventLog
) -> None:
    """Turns recorded with model and usage only (what `record_turn(model=..., usage=...)` writes):
    no selection or approval step exists, so their absence is no gap; a field wired on some turns
    and forgotten on others is one."""
    plain = [
        interaction(
            f"q{i}",
            f"a{i}",
            minute=i,
            enriched=False,
            model="claude-sonnet-4-5",
            usage={"input_tokens": 900, "output_tokens": 90},
        )
        for i in range(4)
    ]
    append_all(event_log, plain)
    info = run_review(settings, day="2026-11-20", agent="agent-1")
    assert info.fully_enriched_fraction == 1.0
    assert info.enrichment_coverage["selection_reason"] == 0.0  # still shown per field
    report = orjson.loads(report_paths(settings, "2026-11-20", "agent-1")["json"].read_bytes())
    assert report["fully_enriched_fields"] == ["model", "usage"]
    # One more turn that sets selection_reason: now the runtime wires it, and the four that lack it are gaps.
    append_all(
        event_log,
        [
            interaction(
                "q9",
                "a9",
                minute=9,
                enriched=False,
                model="claude-sonnet-4-5",
                usage={"input_tokens": 900, "output_tokens": 90},
                selection_reason="direct_mention",
            )
        ],
    )
    info = run_review(settings, day="2026-11-20", agent="agent-1")
    assert info.fully_enriched_fraction == 0.2


def test_tools_used_coverage_ignores_the_empty_default(settings: Settings, event_log: EventLog) -> None:
    append_all(
        event_log,
        [
            interaction("a", "b", minute=0, enriched=False),  # the log fills tools_used = []
            interaction("c", "d", minute=1, enriched=False, tools_used=["recall_memory"]),
            interaction("e", "f", minute=2, enriched=False, usage={"input_tokens": 1, "tool_calls": 0}),
        ],
    )
    info = run_review(settings, day="2026-11-20", agent="agent-1")
    assert round(info.enrichment_coverage["tools_used"], 4) == round(2 / 3, 4)
