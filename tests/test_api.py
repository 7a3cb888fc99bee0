"""The public API `tiermem.Memory`: one data root, agent handles, and the CLI as its thin wrapper."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import orjson
import polars as pl
import pyarrow as pa
import pytest
from helpers_runtime import append, episode, projector_held

from tiermem import AgentMemory, Context, Memory
from tiermem.app.cli import main
from tiermem.errors import AlreadyRunningError, ConfigError, ValidationError
from tiermem.output import emit_json


@pytest.fixture
def mem(tmp_path: Path) -> Memory:
    with Memory.open(tmp_path / "data", env={}) as m:
        yield m


def _turns(agent: AgentMemory, n: int, user: str = "alice") -> list[str]:
    return [
        agent.record_turn(user, f"question {i} about the blue suitcase", f"answer {i}", model="m").event_id
        for i in range(n)
    ]


def test_importing_the_base_loads_no_component_and_memory_resolves_lazily() -> None:
    code = (
        "import sys, tiermem.ids\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('tiermem.', 'duckdb', 'pyarrow', 'anthropic')))\n"
        "print(','.join(loaded))\n"
        "import tiermem\n"
        "print(tiermem.Memory.__module__)\n"
        "try:\n"
        "    tiermem.NoSuchThing\n"
        "except AttributeError as exc:\n"
        "    print('AttributeError', exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded, module, error = out.strip().splitlines()
    assert loaded == "tiermem.ids"
    assert module == "tiermem.app.api"
    assert error.startswith("AttributeError") and "NoSuchThing" in error


def test_open_resolves_settings_once_with_overrides(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "tiermem.toml").write_text('fsync = "none"\n[runtime]\ntop_knowledge = 7\n')
    env = {"TIERMEM_RUNTIME__RECENT_INTERACTIONS": "3", "ANTHROPIC_API_KEY": "sk-test"}
    m = Memory.open(tmp_path / "data", env=env, fsync="group", runtime={"total_budget_tokens": 900})
    s = m.settings
    assert s.fsync == "group"  # override beats the file
    assert s.runtime.total_budget_tokens == 900  # a section override keeps the other fields
    assert s.runtime.recent_interactions == 3 and s.runtime.top_knowledge == 7  # env and file
    assert s.claude_available
    assert not Memory.open(tmp_path / "data", env={}).settings.claude_available
    with pytest.raises(ConfigError, match="no_such_setting"):
        Memory.open(tmp_path / "data", env={}, no_such_setting=1)
    with pytest.raises(ConfigError, match="runtime"):
        Memory.open(tmp_path / "data", env={}, runtime={"nope": 1})


def test_record_turn_then_context_matches_the_cli_json_byte_for_byte(
    mem: Memory, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = mem.agent("bot", project_id="web")
    first = agent.record_turn("alice", "hello, I lost my luggage in Lisbon", "I'm sorry to hear that")
    assert first.memory_level == "global" and first.tokens > 0
    agent.facts.set("luggage_color", "blue")
    ctx = agent.context(user="alice", query="luggage")
    assert isinstance(ctx, Context)
    recent = ctx.section("recent")
    assert recent is not None and first.event_id in recent.item_ids and "Lisbon" in recent.text
    assert ctx.total_tokens == sum(s.tokens for s in ctx.sections) <= ctx.cap
    assert ctx.item_ids == tuple(i for s in ctx.sections for i in s.item_ids)
    assert "kv:bot:agent:-:luggage_color" in ctx.item_ids
    assert "## Recent interactions" in ctx.as_system_prompt()
    assert "<memory-context>" not in ctx.as_system_prompt()
    assert ctx.user_message("where is it?").startswith("<memory-context>")
    with pytest.raises(AttributeError):
        ctx.total_tokens = 0  # type: ignore[misc]  # frozen

    # The CLI prints exactly what the runtime's own object serialises to.
    from tiermem.runtime.context import assemble_context

    expected = io.StringIO()
    emit_json(assemble_context(agent.runtime, user="alice", query="luggage").to_json(), expected)
    assert orjson.dumps(ctx.to_json()) == orjson.dumps(json.loads(expected.getvalue()))
    argv = ["context", "bot", "--project", "web", "--user", "alice", "--query", "luggage", "--json"]
    code = main(["--data-dir", str(mem.data_dir), *argv])
    assert code == 0
    assert capsys.readouterr().out == expected.getvalue()


def test_recall_finds_episodes_written_by_others_after_refresh(
    mem: Memory, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = mem.agent("bot")
    # Another process appends while its projector holds the lock: this Memory's reads do not
    # wait for it, and its projector thread skips its rounds meanwhile.
    with projector_held(mem.settings):
        append(
            mem.settings,
            episode(
                "bot",
                "Lost luggage in Lisbon",
                "Alice lost her blue suitcase at Lisbon airport",
                participants=["alice"],
                key_quotes=[{"text": "it was a blue suitcase", "event_id": "x"}],
                emotional_context="worried",
            ),
        )
        assert not agent.recall("lisbon suitcase", participant="alice")  # not projected yet
    mem.refresh()
    found = agent.recall("lisbon suitcase", participant="alice")
    assert [e.name for e in found.episodes] == ["Lost luggage in Lisbon"]
    ep = found.episodes[0]
    assert ep.quotes == ["it was a blue suitcase"] and ep.participants == ("alice",)
    assert found.retrieval_event_id and found.tokens > 0
    assert not agent.recall("lisbon suitcase", participant="bob")
    delivered = mem.sql("SELECT tool, item_ids, participant FROM retrievals").to_pylist()
    assert delivered == [{"tool": "recall", "item_ids": [ep.episode_id], "participant": "alice"}]
    assert not agent.recall("lisbon suitcase")  # alice's episode: an agent-level read does not see it
    # `tiermem recall --json` is the same object
    main(
        [
            "--data-dir",
            str(mem.data_dir),
            "recall",
            "bot",
            "lisbon suitcase",
            "--participant",
            "alice",
            "--json",
        ]
    )
    assert json.loads(capsys.readouterr().out)["results"][0] == json.loads(
        orjson.dumps(found.to_json()["results"][0])
    )


def test_facts_get_set_list_remove_through_scopes(mem: Memory) -> None:
    agent = mem.agent("coder", agent_type="coding", project_id="web")
    assert agent.facts.get("test_command") is None
    agent.facts.set("test_command", "pytest -q", scope="agent_type")
    agent.facts.set("test_command", "make test", scope="project")
    fact = agent.facts.get("test_command")
    assert fact is not None and fact.value == "make test" and fact.scope == "project"
    assert agent.facts["test_command"] == "make test"
    assert {f.content for f in agent.facts.list()} == {"pytest -q", "make test"}
    removed = agent.facts.remove("test_command", scope="project")
    assert removed.removed and removed.to_json() == {
        "fact_id": removed.fact_id,
        "key": "test_command",
        "removed": True,
    }
    assert agent.facts["test_command"] == "pytest -q"  # the wider scope shows through again
    other = mem.agent("coder", agent_type="coding", project_id="mobile")
    assert other.facts["test_command"] == "pytest -q"
    with pytest.raises(KeyError):
        mem.agent("stranger").facts["test_command"]
    with pytest.raises(ValidationError, match="scope"):
        agent.facts.set("k", "v", scope="galaxy")


def test_tools_and_call_tool_for_a_participant(mem: Memory) -> None:
    agent = mem.agent("npc")
    names = {t["name"] for t in agent.tools()}
    assert {"recall_memory", "memory_fact_store", "memory_idea_save"} <= names
    assert all({"name", "description", "input_schema"} <= set(t) for t in agent.tools())
    agent.call_tool("memory_fact_store", {"key": "favourite_drink", "value": "tea"})
    out = agent.call_tool("memory_fact_recall", {"key": "favourite_drink"}, user="mira")
    assert out["value"] == "tea"
    assert agent.runtime.user is None  # the participant was for that one call
    rows = mem.sql("SELECT tool, participant FROM retrievals WHERE tool = 'memory_fact_recall'").to_pylist()
    assert rows == [{"tool": "memory_fact_recall", "participant": "mira"}]
    with pytest.raises(ValidationError, match="unknown tool"):
        agent.call_tool("no_such_tool", {})


def test_finish_task_and_project_replace_detail_with_summaries(mem: Memory) -> None:
    agent = mem.agent("orchestrator", project_id="p1", task_id="t1")
    agent.record_turn(None, "plan the project", "planned", memory_level="project")
    agent.record_turn(None, "move shape 2px left", "moved", memory_level="task")
    done = agent.finish_task("Task t1: aligned the shapes.")
    assert done.finished == "task" and done.level == "project"
    recent = agent.context().section("recent")
    assert recent is not None
    assert "aligned the shapes" in recent.text and "move shape 2px left" not in recent.text
    assert "plan the project" in recent.text
    done = agent.finish_project("Project p1 delivered.")
    assert done.level == "global"
    recent = agent.context().section("recent")
    assert recent is not None and "Project p1 delivered." in recent.text
    assert "plan the project" not in recent.text
    with pytest.raises(ValidationError, match="summary"):
        agent.finish_task("  ")


def test_sql_is_an_arrow_table_polars_reads(mem: Memory) -> None:
    agent = mem.agent("bot")
    _turns(agent, 3)
    mem.agent("other").record_turn("bob", "hi", "hello", model="m2")
    table = mem.sql("SELECT agent_id, count(*) AS turns FROM interactions GROUP BY 1 ORDER BY 1")
    assert isinstance(table, pa.Table)
    assert table.column_names == ["agent_id", "turns"]
    assert pl.from_arrow(table).rows() == [("bot", 3), ("other", 1)]
    empty = mem.sql("SELECT agent_id FROM interactions WHERE false")
    assert empty.num_rows == 0 and empty.column_names == ["agent_id"]


def test_batch_calls_return_the_jobs_info_objects_and_feed_the_agents(mem: Memory, tmp_path: Path) -> None:
    from tiermem.compressor.job import CompressInfo
    from tiermem.ingest.pipeline import IngestInfo

    turns = tmp_path / "turns.jsonl"
    lines = [
        {
            "type": "interaction",
            "agent_id": "support-bot",
            "user": "alice",
            "ts": f"2026-03-0{1 + i // 10}T10:{i % 60:02d}:00Z",
            "user_message": f"My order #{100 + i} of hiking boots arrived damaged, can I get a refund?",
            "agent_response": f"I am sorry. I have opened refund case R-{100 + i} for your hiking boots.",
        }
        for i in range(20)
    ]
    turns.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in lines))
    agent = mem.agent("support-bot")  # opened before the data arrives: it catches up by itself
    info = mem.ingest(turns)
    assert isinstance(info, IngestInfo) and info.accepted == 20
    assert mem.ingest(turns).duplicates == 20
    compressed = mem.compress()
    assert isinstance(compressed, CompressInfo) and compressed.episodes >= 1
    found = agent.recall("refund hiking boots", participant="alice")
    assert found and "alice" in found.episodes[0].participants
    assert mem.seal().sealed_segments >= 1  # the March days are closed
    assert mem.review().interactions == 20
    evolved = mem.evolve()
    assert evolved.decided >= 0 and isinstance(mem.proposals(status="all"), list)
    export = mem.export(user="alice", format="md", out=tmp_path / "alice.md")
    assert export.items > 0 and (tmp_path / "alice.md").read_text().startswith("#")
    forgotten = mem.forget(user="alice")
    assert forgotten.erased_events >= 20
    assert not agent.recall("refund hiking boots")


HOLD_LOCK = """
import sys
from tiermem import Memory
mem = Memory.open(sys.argv[1], env={})
holder = type(mem)(mem.settings, label=sys.argv[2])
with holder._job(sys.argv[3]):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes our stdin
"""


def test_batch_calls_take_the_job_lock_another_process_holds(mem: Memory) -> None:
    # A CLI command labels its lock, so whoever it refuses is told which command holds it.
    for job, call, label in (
        ("compress", mem.compress, "scheduled compress"),
        ("evolve", mem.evolve, "tiermem evolve"),
    ):
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK, str(mem.data_dir), label, job],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
            with pytest.raises(AlreadyRunningError, match=label):
                call()
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait()
        call()  # released: runs


def test_close_releases_every_handle_and_rebuild_reconnects(tmp_path: Path) -> None:
    with Memory.open(tmp_path / "data", env={}) as mem:
        a = mem.agent("a")
        b = mem.agent("b")
        a.record_turn("u", "remember the red door", "noted")
        b.close()
        assert b._rt is None and "agents_open=1" in repr(mem)
        before = a.context(user="u").section("recent")
        mem.rebuild()  # deletes the hot store under the open handle
        after = a.context(user="u").section("recent")
        assert before is not None and after is not None and before.text == after.text
    assert a._rt is None and "agents_open=0" in repr(mem)
    with pytest.raises(ValidationError, match="agent_id"):
        Memory.open(tmp_path / "data", env={}).agent("  ")


def test_record_turn_is_a_caller_path_control_events_are_refused(mem: Memory) -> None:
    """`record_turn` takes enrichment from the caller: it cannot smuggle an internal event in."""
    agent = mem.agent("bot")
    agent.record_turn("alice", "my locker code is 7731", "noted")
    with pytest.raises(ValidationError) as err:
        agent.record_turn("mallory", "x", "y", type="erasure", target_kind="user", target="alice")
    assert "internal event" in str(err.value)
    with pytest.raises(ValidationError):
        agent.record_turn("mallory", "x" * 300_000, "y")  # over the per-field limit
    recent = agent.context(user="alice").section("recent")
    assert recent is not None and "7731" in recent.text  # alice's turn is still there
