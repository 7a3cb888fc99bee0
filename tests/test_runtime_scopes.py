"""Scopes: KV first-match-wins, weighted merged search, topic fallback, trust, isolation."""

from __future__ import annotations

from datetime import UTC, datetime

from helpers_runtime import append
from tiermem.runtime.context import assemble_context
from tiermem.runtime.hotstore import fact_clause
from tiermem.runtime.memory import open_memory
from tiermem.runtime.projector import project
from tiermem.runtime.scopes import search_facts, source_trust, time_decay
from tiermem.runtime.tools import call_tool
from tiermem.runtime.visibility import Principal

from tiermem.settings import Settings

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def test_kv_lookup_most_specific_scope_wins(settings: Settings) -> None:
    with open_memory(settings, "coder1", agent_type="coding", project_id="mech") as m:
        m.store_fact("test_command", "make test", "system")
        assert m.get_fact("test_command")["content"] == "make test"  # type: ignore[index]
        m.store_fact("test_command", "pytest", "agent_type")
        assert m.get_fact("test_command")["content"] == "pytest"  # type: ignore[index]
        m.store_fact("test_command", "pytest -x", "agent")
        assert m.get_fact("test_command")["content"] == "pytest -x"  # type: ignore[index]
        m.store_fact("test_command", "pytest tests/ -v", "project")
        assert m.get_fact("test_command")["content"] == "pytest tests/ -v"  # type: ignore[index]
        m.store_fact("test_command", "pytest -k game", "override")
        assert m.get_fact("test_command")["content"] == "pytest -k game"  # type: ignore[index]
        m.remove_fact("test_command", "override")
        assert m.get_fact("test_command")["content"] == "pytest tests/ -v"  # type: ignore[index]


def _decided(agent: str, fact_id: str, content: str, **extra: object) -> dict[str, object]:
    return {
        "type": "knowledge_decided",
        "agent_id": agent,
        "decision": "created",
        "fact_id": fact_id,
        "content": content,
        "status": "active",
        "ts": "2026-05-31T00:00:00Z",
        **extra,
    }


def test_search_merges_scopes_with_weights(settings: Settings) -> None:
    same = "combat systems need None checks on every entity"
    append(
        settings,
        _decided("coder1", "proj", same, scope="project", project_id="mech"),
        _decided("coder1", "type", same, scope="agent_type", agent_type="coding"),
        _decided("coder1", "sys", same, scope="system"),
        *[_decided("coder1", f"other{i}", f"unrelated note {i}", scope="system") for i in range(5)],
    )
    project(settings)
    with open_memory(settings, "coder2", agent_type="coding", project_id="mech") as m:
        found = search_facts(m.conn, m.scope, "combat None checks", now=NOW)
        assert [f.fact_id for f in found] == ["proj", "type", "sys"]
        ratios = [f.score / found[0].score for f in found]
        assert abs(ratios[1] - 0.7) < 1e-3 and abs(ratios[2] - 0.4) < 1e-3


def test_topic_prefilter_falls_back_below_three_results(settings: Settings) -> None:
    append(
        settings,
        _decided("a", "t1", "token refresh needs scope re-request", topic="auth"),
        _decided("a", "t2", "token cache lives in redis", topic="infra"),
        _decided("a", "t3", "token expiry is one hour", topic="infra"),
    )
    project(settings)
    with open_memory(settings, "a") as m:
        only_auth = search_facts(m.conn, m.scope, "token", topic="auth", now=NOW)
        assert {f.fact_id for f in only_auth} == {"t1", "t2", "t3"}  # fewer than 3 with the topic: fallback
        append(settings, *[_decided("a", f"x{i}", f"token rule {i}", topic="auth") for i in range(3)])
        project(settings, m.store)
        filtered = search_facts(m.conn, m.scope, "token", topic="auth", now=NOW)
        assert all(f.topic == "auth" for f in filtered) and len(filtered) == 4


def test_source_trust_and_time_decay_order() -> None:
    assert source_trust("user") > source_trust("agent") > source_trust("compressor") == source_trust("system")
    assert source_trust("agent", is_correction=True) == 1.0
    assert time_decay("2026-06-01T00:00:00Z", NOW) > time_decay("2025-06-01T00:00:00Z", NOW) >= 0.8


def test_user_correction_outranks_system_fact(settings: Settings) -> None:
    append(
        settings,
        {
            "type": "knowledge_proposed",
            "agent_id": "a",
            "event_id": "p-user",
            "content": "x",
            "origin": "user",
            "is_correction": True,
            "ts": "2026-05-30T00:00:00Z",
        },
        _decided("a", "by-user", "deploy window is friday evening", proposal_id="p-user"),
        _decided("a", "by-system", "deploy window is friday evening", decided_by="auto"),
    )
    project(settings)
    with open_memory(settings, "a") as m:
        found = search_facts(m.conn, m.scope, "deploy window friday", now=NOW)
        assert [f.fact_id for f in found] == ["by-user", "by-system"]


def test_two_agents_are_isolated_unless_a_shared_scope_says_so(settings: Settings) -> None:
    a = open_memory(settings, "alpha", agent_type="coding", project_id="p1")
    b = open_memory(settings, "beta", agent_type="support", project_id="p2")
    try:
        call_tool(a, "memory_fact_store", {"key": "secret", "value": "alpha-only"})
        call_tool(a, "memory_idea_save", {"content": "alpha private insight about caching"})
        a.set_identity("I am alpha.")
        # Wide scopes are written by an operator (the Python API), never through a tool.
        a.store_fact("shared", "for everyone", "system", source="user")
        a.store_fact("team", "coders only", "agent_type", source="user")
        call_tool(a, "memory_fact_store", {"key": "proj", "value": "p1 only", "scope": "project"})
        project(settings, b.store)
        assert call_tool(b, "memory_fact_recall", {"key": "secret"})["found"] is False
        assert call_tool(b, "memory_fact_recall", {"key": "team"})["found"] is False
        assert call_tool(b, "memory_fact_recall", {"key": "proj"})["found"] is False
        assert call_tool(b, "memory_fact_recall", {"key": "shared"})["value"] == "for everyone"
        assert call_tool(b, "memory_idea_recall", {"query": "caching insight"})["results"] == []
        keys = {f["key"] for f in call_tool(b, "memory_fact_list", {})["facts"]}
        assert keys == {"shared"}
        text = str([s.text for s in assemble_context(b, query="caching alpha secret").sections])
        assert "alpha-only" not in text and "I am alpha." not in text and "caching" not in text
        # A third agent of the same type in the same project shares those scopes.
        c = open_memory(settings, "gamma", agent_type="coding", project_id="p1")
        assert call_tool(c, "memory_fact_recall", {"key": "team"})["value"] == "coders only"
        assert call_tool(c, "memory_fact_recall", {"key": "proj"})["value"] == "p1 only"
        assert call_tool(c, "memory_fact_recall", {"key": "secret"})["found"] is False
        c.close()
    finally:
        a.close()
        b.close()


def test_scope_context_sql_names_only_shared_scopes() -> None:
    where, params = fact_clause(Principal("a"))
    assert "agent_type" not in where and params == ["a"]
