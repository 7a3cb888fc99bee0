"""A data root where two users talk to one agent and two agents share a project, each with canaries.

- `helpdesk` (agent type `support`, project `acme`) talks to alice and to bob;
- `coder` (agent type `coding`, project `acme`) works alone, and once with alice;
- every party leaves distinct canary words in turns, ideas, key-value facts,
  preferences (gap-fill and compressor proposals, decisions), episodes,
  relationship summaries, derived notes, retrievals (their own queries), reports, a saved
  export and a rejected record, through the public write paths.

`visible_to(...)` lists which canaries a principal may see; everything else
is forbidden for it on every read path.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable
from contextlib import redirect_stdout
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import orjson
from tiermem.compressor.job import run_compress
from tiermem.evolver.export import export
from tiermem.evolver.gapfill import process_session_end
from tiermem.evolver.job import run_evolve
from tiermem.reviewer.job import run_review
from tiermem.runtime.context import assemble_context
from tiermem.runtime.memory import open_memory, record_turn
from tiermem.runtime.projector import project
from tiermem.runtime.tools import call_tool

from tiermem.app.cli import main
from tiermem.ids import format_ts
from tiermem.settings import Settings

ALICE = ("quokkamarzipan", "zephyrlantern", "tamarindkite")
BOB = ("walrusbiscotti", "nebulateacup", "saffronpylon")
CODER = ("ocelotspreadsheet", "gingerpagoda")
CODER_ALICE = ("pelicanorigami",)  # what alice told the coder: the coder's and hers, not the helpdesk's
HELPDESK = ("heronmanual",)  # the helpdesk's agent-level knowledge: both its users, not the coder
PROJECT = ("kingfisherroadmap",)  # a project fact of acme: every agent in the project
ALL = {
    "alice": ALICE,
    "bob": BOB,
    "coder": CODER,
    "coder_alice": CODER_ALICE,
    "helpdesk": HELPDESK,
    "project": PROJECT,
}
HELPDESK_SCOPE = {"agent_type": "support", "project_id": "acme"}
CODER_SCOPE = {"agent_type": "coding", "project_id": "acme"}
SCOPES = {"helpdesk": HELPDESK_SCOPE, "coder": CODER_SCOPE}
DAY0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # a closed day: `seal` turns it into Parquet


def visible_to(agent: str, user: str | None) -> set[str]:
    """The canary groups the principal (agent, user) may see."""
    if agent == "helpdesk":
        return {"helpdesk", "project"} | ({user} if user in ("alice", "bob") else set())
    return {"coder", "project"} | ({"coder_alice"} if user == "alice" else set())


def forbidden_for(agent: str, user: str | None) -> list[str]:
    allowed = visible_to(agent, user)
    return [w for group, words in ALL.items() if group not in allowed for w in words]


def found(text: str, words: Iterable[str]) -> list[str]:
    return [w for w in words if w in text]


def cli(settings: Settings, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    # A server hot store reaches the CLI as a deployment passes it: in the environment.
    saved = os.environ.get("TIERMEM_HOT_URL")
    if settings.hot_url:
        os.environ["TIERMEM_HOT_URL"] = settings.hot_url
    try:
        with redirect_stdout(out):
            code = main(["--data-dir", str(settings.data_dir), *args])
    finally:
        if saved is None:
            os.environ.pop("TIERMEM_HOT_URL", None)
        else:
            os.environ["TIERMEM_HOT_URL"] = saved
    return code, out.getvalue()


def _conversation(
    settings: Settings, user: str, words: tuple[str, ...], session: str, start: datetime
) -> None:
    a, b, c = words
    lines = [
        (f"Hi, I'm {user}. My locker code word is {a}.", f"Welcome {user}, I'll remember {a}."),
        (f"I prefer my tea with {b} honey every morning.", "Noted, tea with honey."),
        # A duration: the compressor writes a derived note (with the canary) beside this turn.
        (f"My cat is called {c} and I have had her for 12 years now.", f"{c} sounds lovely."),
        ("The printer on floor 2 jams again.", "I'll send someone."),
        (f"No, actually my locker code word is {a} not the old one.", "Corrected."),
    ]
    lines += [(f"Question {i} about invoice {a} number {i}.", f"Invoice {i} is paid.") for i in range(14)]
    with open_memory(settings, "helpdesk", user=user, session_id=session, **HELPDESK_SCOPE) as m:
        for i, (said, reply) in enumerate(lines):
            record_turn(m, said, reply, ts=format_ts(start + timedelta(minutes=i)))
        # What the agent saves while talking to the user, through its tools.
        call_tool(m, "memory_idea_save", {"content": f"{user} keeps a spare key code {b} at reception"})
        call_tool(m, "memory_fact_store", {"key": "locker_word", "value": a})
        # The user's own reads: their words are in the retrieval log.
        call_tool(m, "recall_memory", {"query": f"{a} {c}"})
        call_tool(m, "memory_recall", {"query": f"{b} tea"})


def build(settings: Settings) -> None:
    """Everything through the public paths, as a deployment would produce it."""
    with open_memory(settings, "helpdesk", **HELPDESK_SCOPE) as ops:
        ops.set_identity("I am the Acme helpdesk.")
        ops.add_knowledge(f"The printer manual is filed under {HELPDESK[0]}.", category="domain")
        ops.store_fact("greeting", "Be kind and brief.", scope="system", source="user")
    with open_memory(settings, "coder", **CODER_SCOPE) as coder:
        call_tool(coder, "memory_fact_store", {"key": "build_word", "value": CODER[0]})
        call_tool(coder, "memory_idea_save", {"content": f"The flaky test lives in {CODER[1]} module"})
        call_tool(coder, "memory_fact_store", {"key": "team_lead", "value": "Dana"})
        coder.store_fact("roadmap", f"Ship the {PROJECT[0]} in May", scope="project", source="user")
    with open_memory(settings, "coder", user="alice", session_id="ca", **CODER_SCOPE) as coder:
        record_turn(coder, f"Please name the branch {CODER_ALICE[0]}.", "Done.")
        call_tool(coder, "memory_fact_store", {"key": "alice_branch", "value": CODER_ALICE[0]})
    _conversation(settings, "alice", ALICE, "sa", DAY0)
    _conversation(settings, "bob", BOB, "sb", DAY0 + timedelta(hours=2))
    for agent, session in (("helpdesk", "sa"), ("helpdesk", "sb"), ("coder", "ca")):
        process_session_end(settings, agent, session)
    run_compress(settings)
    run_evolve(settings)
    run_review(settings)
    project(settings)
    for target in (("--agent", "helpdesk"), ("--user", "alice"), ("--user", "bob")):
        for fmt in ("json", "md"):
            code, out = cli(settings, "export", *target, "--format", fmt, "--save")
            assert code == 0, out
    # A record the log refused: it is kept in _rejects/ with the user's words in it.
    bad = {
        "type": "interaction",
        "agent_id": "helpdesk",
        "user": "alice",
        "user_message": f"my {ALICE[0]} again",
        "agent_response": 42,
    }
    path = settings.data_dir.parent / "bad.jsonl"
    path.write_bytes(orjson.dumps(bad) + b"\n")
    cli(settings, "ingest", str(path))
    path.unlink()


def files_with(root: Path, words: Iterable[str]) -> dict[str, list[str]]:
    """Every file under root holding one of the words: raw bytes, and Parquet decoded by DuckDB."""
    words = list(words)
    hits: dict[str, list[str]] = {}
    con = duckdb.connect(":memory:")
    try:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            data = path.read_bytes()
            raw = [w for w in words if w.encode() in data]
            if raw:
                hits[str(path.relative_to(root))] = raw
            if path.suffix == ".parquet":
                rows = con.execute("SELECT * FROM read_parquet(?)", [str(path)]).fetchall()
                text = orjson.dumps(rows, default=str).decode()
                decoded = [w for w in words if w in text]
                if decoded:
                    hits[str(path.relative_to(root)) + " (decoded)"] = decoded
    finally:
        con.close()
    return hits


def saved_exports(settings: Settings) -> list[Path]:
    root = settings.exports_dir
    return sorted(root.rglob("*")) if root.exists() else []


def export_text(settings: Settings, **target: str) -> str:
    return export(settings, **target)[1]  # type: ignore[arg-type]


def scope_flags(agent: str) -> list[str]:
    scope = SCOPES[agent]
    return ["--agent-type", scope["agent_type"], "--project", scope["project_id"]]


def python_reads(settings: Settings, agent: str, user: str | None, query: str) -> dict[str, str]:
    """Every Python read path of one principal, as text."""
    out: dict[str, str] = {}
    with open_memory(settings, agent, user=user, **SCOPES[agent]) as m:
        ctx = assemble_context(m, query=query, budget=8000)
        for section in ctx.sections:
            out[f"context/{section.name}"] = section.text
        out["per-turn message"] = ctx.user_message(query)
        calls = [
            ("recall_memory", {"query": query}),
            ("recall_memory", {"query": query, "participant": "alice"}),
            ("recall_memory", {"query": query, "participant": "bob"}),
            ("memory_recall", {"query": query}),
            ("memory_recall", {"query": "locker_word"}),
            ("memory_fact_recall", {"key": "locker_word"}),
            ("memory_fact_recall", {"key": "build_word"}),
            ("memory_fact_recall", {"key": "alice_branch"}),
            ("memory_fact_list", {}),
            ("memory_idea_recall", {"query": query}),
            ("memory_idea_list", {}),
        ]
        for name, args in calls:
            out[f"tool {name} {args}"] = json.dumps(call_tool(m, name, args))
    return out


def cli_reads(settings: Settings, agent: str, user: str | None, query: str) -> dict[str, str]:
    who = ["--user", user] if user else []
    runs = {
        "cli context": ["context", agent, *who, "--query", query, "--json", *scope_flags(agent)],
        "cli recall": ["recall", agent, query, *who, "--json", *scope_flags(agent)],
        "cli facts list": ["facts", "list", agent, *who, "--json", *scope_flags(agent)],
        "cli facts get": ["facts", "get", agent, "locker_word", *who, "--json", *scope_flags(agent)],
    }
    out = {}
    for name, argv in runs.items():
        code, text = cli(settings, *argv)
        # 1 only where the fact is not visible to this principal (a one-line "no fact" error)
        assert code == 0 or (code == 1 and name == "cli facts get"), (argv, text)
        out[name] = text
    return out
