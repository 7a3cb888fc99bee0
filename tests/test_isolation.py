"""Each user's memory stays theirs: every read path, for every principal, against the others' canaries.

Two users (alice, bob) of one agent (helpdesk) and two agents (helpdesk,
coder) sharing a project, each with distinct canary words (helpers_isolation).
For each principal (agent, user or none), every read path — context (every
section and the per-turn <memory-context>), the memory tools, the CLI
`context`/`recall`/`facts`/`export` — is queried with the words of the
canaries it must not see, and must not return one. Each check is paired with
one that must find the principal's own canaries, so the test can fail.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers_isolation import (
    ALICE,
    ALL,
    BOB,
    HELPDESK_SCOPE,
    build,
    cli,
    cli_reads,
    export_text,
    forbidden_for,
    found,
    python_reads,
    scope_flags,
    visible_to,
)
from tiermem.runtime.context import assemble_context
from tiermem.runtime.memory import open_memory, record_turn

from tiermem.settings import Settings, resolve_settings

PRINCIPALS = [
    ("helpdesk", "alice"),
    ("helpdesk", "bob"),
    ("helpdesk", None),
    ("coder", None),
    ("coder", "alice"),
]


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def world(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Settings]:
    """The same world on each hot-store backend (PostgreSQL: a database on the session's server)."""
    settings = resolve_settings(data_dir=tmp_path_factory.mktemp("iso") / "data", env={}, fsync="none")
    url = None
    if request.param == "postgres":
        server = request.getfixturevalue("pg_server")
        url = server.database()
        settings = dataclasses.replace(settings, hot_url=url)
    build(settings)
    yield settings
    if url is not None:
        server.drop(url)


@pytest.mark.parametrize(("agent", "user"), PRINCIPALS)
def test_no_read_path_returns_another_principals_canaries(
    world: Settings, agent: str, user: str | None
) -> None:
    forbidden = forbidden_for(agent, user)
    # Queries made of the forbidden words themselves, and of words they share with the own data.
    queries = [" ".join(forbidden), "locker code word tea honey cat invoice printer manual roadmap branch"]
    reads: dict[str, str] = {}
    for query in queries:
        for name, text in {
            **python_reads(world, agent, user, query),
            **cli_reads(world, agent, user, query),
        }.items():
            # The query is echoed back (the message, the JSON's "query"): that is the caller's own text.
            reads[f"{name} / {query[:30]}"] = text.replace(query, "<query>")
    leaks = {name: found(text, forbidden) for name, text in reads.items() if found(text, forbidden)}
    assert leaks == {}
    # The same paths do return what this principal may see (the check can fail).
    own = [w for group in visible_to(agent, user) for w in ALL[group]]
    seen = {w for text in reads.values() for w in found(text, own)}
    assert seen == set(own), sorted(set(own) - seen)


def test_user_exports_hold_only_that_user(tmp_path: Path) -> None:
    # A world of its own: the probes above leave each principal's queries (the others' words)
    # in that principal's own retrieval log, which its export rightly contains.
    world = resolve_settings(data_dir=tmp_path / "data", env={}, fsync="none")
    build(world)
    alice = export_text(world, user="alice")
    bob = export_text(world, user="bob")
    assert found(alice, ALICE) and not found(alice, BOB)
    assert found(bob, BOB) and not found(bob, ALICE)
    coder = export_text(world, agent="coder")
    assert not found(coder, ALICE + BOB + ALL["helpdesk"])
    # The CLI shows the same.
    code, out = cli(world, "export", "--user", "bob", "--format", "md")
    assert code == 0 and found(out, BOB) and not found(out, ALICE)


def test_tool_results_over_the_real_mcp_server_are_isolated(world: Settings, tmp_path: Path) -> None:
    """`tiermem mcp --agent helpdesk --user bob`: alice's words find nothing of hers."""
    from test_mcp_server import _session, _text

    async def body(session: object) -> list[str]:
        texts = []
        probes = [
            ("recall_memory", {"query": " ".join(ALICE)}),
            ("recall_memory", {"query": " ".join(ALICE), "participant": "alice"}),
            ("memory_recall", {"query": " ".join(ALICE)}),
            ("memory_fact_recall", {"key": "locker_word"}),
            ("memory_fact_list", {}),
            ("memory_idea_recall", {"query": " ".join(ALICE)}),
            ("memory_idea_list", {}),
            ("recall_memory", {"query": " ".join(BOB)}),
        ]
        for name, args in probes:
            result = await session.call_tool(name, args)  # type: ignore[attr-defined]
            assert not result.is_error, _text(result)
            texts.append(_text(result))
        return texts

    env = {"TIERMEM_HOT_URL": world.hot_url} if world.hot_url else None
    texts = _session(world.data_dir, "helpdesk", body, "--user", "bob", *scope_flags("helpdesk"), env=env)
    # The server read the store the world was built in, not a store of its own.
    assert not world.hot_url or not world.hot_db.exists()
    assert not found("\n".join(texts), ALICE + ALL["coder"])
    assert found("\n".join(texts), BOB)  # bob's own memory is there


def test_a_read_without_a_user_sees_agent_level_memory_only(world: Settings) -> None:
    with open_memory(world, "helpdesk", **HELPDESK_SCOPE) as m:
        ctx = assemble_context(m, query=" ".join(ALICE + BOB))
        text = "\n".join(s.text for s in ctx.sections)
        assert not found(text, ALICE + BOB)
        assert found(text, ALL["helpdesk"] + ALL["project"]) or "Acme helpdesk" in text
        assert ctx.section("recent") is None and ctx.section("relationship") is None


def test_a_task_summary_written_in_a_users_session_is_theirs(tmp_path: Path) -> None:
    settings = resolve_settings(data_dir=tmp_path / "data", env={}, fsync="none")
    with open_memory(settings, "helpdesk", user="alice", session_id="sa", level="task") as m:
        record_turn(m, "Please refund order 7", "Refunding.")
        m.finish_task(f"Refunded order 7 for alice ({ALICE[0]}).")
        own = assemble_context(m, level="global").section("recent")  # a solo task returns to global
        assert own is not None and ALICE[0] in own.text
    for user in ("bob", None):
        with open_memory(settings, "helpdesk", user=user) as other:
            for level in ("global", "project", "task"):
                ctx = assemble_context(other, level=level, query=ALICE[0])
                assert not found("\n".join(s.text for s in ctx.sections), ALICE), (user, level)
    # Work finished without a user is agent-level: every user of the agent sees it.
    with open_memory(settings, "helpdesk", level="task") as ops:
        ops.finish_task("Rotated the printer toner.")
    with open_memory(settings, "helpdesk", user="bob") as bob:
        recent = assemble_context(bob, level="global").section("recent")
        assert recent is not None and "printer toner" in recent.text
