"""`forget` reaches every copy: every read path at once, every file under the data root after `seal`.

The world of helpers_isolation: alice's words are in turns, episodes, derived notes, ideas
and key-value facts saved during her sessions (with no participant on the
idea), gap-fill and compressor proposals and their decisions, relationship
summaries, retrievals, saved exports, reports, a rejected record, the hot
store, sealed Parquet and open JSONL days. Bob's words must survive, or the
byte search would prove nothing.
"""

from __future__ import annotations

import json
import shutil

import orjson
from helpers_isolation import (
    ALICE,
    BOB,
    CODER_ALICE,
    build,
    cli,
    cli_reads,
    files_with,
    found,
    python_reads,
    saved_exports,
)

from tiermem.eventlog import EventLog
from tiermem.settings import Settings

GONE = ALICE + CODER_ALICE  # everything alice said, to either agent


def _sql_text(settings: Settings) -> str:
    """Every analyst view, and a raw read of every open JSONL file, through `tiermem sql`."""
    texts = []
    for view in ("interactions", "events", "episodes", "knowledge", "proposals", "retrievals", "notes"):
        code, out = cli(settings, "sql", "--json", f"SELECT * FROM {view}")
        assert code == 0, out
        texts.append(out)
    for stream in ("interactions", "knowledge", "episodes", "notes", "retrievals", "relationships"):
        files = sorted(str(p) for p in (settings.log_dir / stream).rglob("*.jsonl"))
        if files:
            code, out = cli(settings, "sql", "--json", f"SELECT * FROM read_json_auto({files!r})")
            assert code == 0, out
            texts.append(out)
    return "\n".join(texts)


def _every_read(settings: Settings) -> str:
    """Every read path, with alice's words as the query, on a copy of the data root.

    On a copy because reads leave traces of their own: a probe's query (alice's
    words, typed here by bob or by the agent) is in that reader's retrieval log,
    which the byte search of the original data root must not find.
    """
    copy = settings.data_dir.parent / f"probe-{len(list(settings.data_dir.parent.iterdir()))}"
    shutil.copytree(settings.data_dir, copy)
    try:
        return _reads(settings.with_data_dir(copy))
    finally:
        shutil.rmtree(copy)


def _reads(settings: Settings) -> str:
    # What records nothing first (views, exports, reports), then the paths that record retrievals.
    texts = [_sql_text(settings)]
    for target in (("--user", "alice"), ("--agent", "helpdesk"), ("--agent", "coder")):
        code, out = cli(settings, "export", *target)
        assert code == 0, out
        texts.append(out)
    texts += [p.read_text() for p in saved_exports(settings)]
    texts += [p.read_text() for p in settings.reports_dir.rglob("*") if p.suffix in (".md", ".json")]
    query = " ".join(GONE)
    for agent, user in (("helpdesk", "alice"), ("helpdesk", None), ("coder", "alice"), ("helpdesk", "bob")):
        reads = {**python_reads(settings, agent, user, query), **cli_reads(settings, agent, user, query)}
        texts += [t.replace(query, "<query>") for t in reads.values()]  # the caller's own text echoed back
    return "\n".join(texts)


def test_forget_user_then_seal_and_rebuild_leaves_no_copy(settings: Settings) -> None:
    build(settings)
    assert cli(settings, "seal")[0] == 0  # the closed day is Parquet now; today's writes stay JSONL
    before = files_with(settings.data_dir, GONE)
    assert any(f.endswith("(decoded)") for f in before) and any(f.endswith(".jsonl") for f in before)
    assert "hot/hot.sqlite" in before and any(f.startswith("exports/") for f in before)
    assert any(f.startswith("log/_rejects/") for f in before)
    assert found(_every_read(settings), GONE)  # the reads find her words before
    code, notes = cli(settings, "sql", "--json", "SELECT text FROM notes WHERE kind = 'who_did_what'")
    assert code == 0 and ALICE[2] in notes  # a derived note restates her turn

    code, out = cli(settings, "forget", "--user", "alice", "--json")
    assert code == 0, out
    info = json.loads(out)
    removed = info["removed"]
    assert {"wm_items", "facts", "episodes", "notes", "proposals", "retrievals", "relationships"} <= set(
        removed["hot_store_rows"]
    )
    assert removed["log_files_rewritten"] and removed["log_files_pending_seal"]
    assert info["cold_files_pending"] == len(removed["log_files_pending_seal"])
    assert removed["exports"]["removed"] >= 2 and removed["exports"]["regenerated"] >= 2
    assert not found(out, GONE)  # the report of what was removed quotes none of it
    with EventLog(settings) as log:
        (erasure,) = [ev for _s, _l, ev in log.read("erasures")]
    assert not found(orjson.dumps(erasure).decode(), GONE)

    # At once: no view (open JSONL days included, even read raw), context, recall, tool, export, report.
    text = _every_read(settings)
    assert found(text, GONE) == []
    assert found(text, BOB)  # bob is untouched
    left = files_with(settings.data_dir, GONE)
    assert not [f for f in left if f.endswith(".jsonl") or f.startswith(("exports/", "reports/", "hot/"))], (
        left
    )

    # At the next seal every file goes, and a rebuild from the log brings nothing back.
    assert cli(settings, "seal")[0] == 0
    assert cli(settings, "rebuild")[0] == 0
    assert files_with(settings.data_dir, GONE) == {}
    survivors = files_with(settings.data_dir, BOB)
    assert any(f.endswith("(decoded)") for f in survivors) and "hot/hot.sqlite" in survivors
    assert found(_every_read(settings), GONE) == []


def test_forget_now_rewrites_every_file_at_once(settings: Settings) -> None:
    build(settings)
    assert cli(settings, "seal")[0] == 0
    code, out = cli(settings, "forget", "--user", "alice", "--now", "--json")
    assert code == 0, out
    info = json.loads(out)
    assert info["cold_files_pending"] == 0 and info["removed"]["log_files_pending_seal"] == []
    assert info["removed"]["side_records_scrubbed"] >= 1
    # No seal, no rebuild: the hot store's free pages are gone too.
    assert files_with(settings.data_dir, GONE) == {}
    assert files_with(settings.data_dir, BOB)


def test_forget_event_takes_the_knowledge_derived_from_it(settings: Settings) -> None:
    from tiermem.runtime.memory import open_memory, record_turn

    from tiermem.app.forget import forget

    with open_memory(settings, "helpdesk", user="alice", session_id="s1") as m:
        turn = record_turn(m, f"I prefer green tea with {ALICE[1]} honey.", "Noted.")
        record_turn(m, "Thanks!", "Any time.")
    from tiermem.evolver.gapfill import process_session_end
    from tiermem.evolver.job import run_evolve
    from tiermem.runtime.projector import project

    process_session_end(settings, "helpdesk", "s1")
    run_evolve(settings)
    project(settings)
    assert found(python_reads(settings, "helpdesk", "alice", "green tea honey")["context/knowledge"], ALICE)
    info = forget(settings, event=turn.event_id)
    assert len(info.erased_event_ids) > 1  # the turn and what was derived from it
    assert found(_sql_text(settings), [ALICE[1]]) == []
    # (After the views: this probe's own query, alice asking again, is a new retrieval of hers.)
    query = f"green tea {ALICE[1]} honey"
    reads = python_reads(settings, "helpdesk", "alice", query)
    assert {k: t for k, t in reads.items() if found(t.replace(query, ""), [ALICE[1]])} == {}
