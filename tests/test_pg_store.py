"""The PostgreSQL hot store beyond the shared contract: row-level security with a real role per
agent, the projector's lease across processes, and the whole runtime on `hot_url`."""

from __future__ import annotations

import dataclasses
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import numpy as np
import psycopg
import pytest
from helpers_pg import PgServer
from helpers_runtime import append, episode, interaction
from test_hotstore_contract import WORD, World, _load
from tiermem.runtime import pg_hotstore
from tiermem.runtime.episode_text import TEXTS
from tiermem.runtime.hotstore import database_key
from tiermem.runtime.memory import open_memory, record_turn
from tiermem.runtime.pg_store import PostgresHotStore
from tiermem.runtime.projector import project, rebuild
from tiermem.runtime.tools import call_tool
from tiermem.runtime.visibility import Principal

from tiermem.embeddings import Vectors, normalise
from tiermem.events import validate
from tiermem.settings import Settings


def _agent_url(server: PgServer, url: str, role: str) -> str:
    return server.url(url.split("/")[3].split("?")[0], user=role)


def test_a_connection_for_one_agent_reads_and_writes_only_that_agents_rows(
    pg_server: PgServer, pg_url: str
) -> None:
    world = World(3)
    with PostgresHotStore.connect(pg_url) as owner:
        _load(owner, world)
        for agent in ("a1", "a2"):
            pg_server.role(f"tm_agent_{agent}")
            pg_hotstore.grant_agent(owner.conn, f"tm_agent_{agent}", [agent])
        every = {r[0] for r in owner.conn.execute("SELECT DISTINCT agent_id FROM wm_items")}
        assert every == {"a1", "a2", "a3"}
    with PostgresHotStore.connect(_agent_url(pg_server, pg_url, "tm_agent_a1"), create=False) as a1:
        # Raw SQL, no filter at all: the server returns a1's rows only.
        for table in ("wm_items", "episodes", "relationships", "proposals"):
            agents = {r[0] for r in a1.conn.execute(f"SELECT DISTINCT agent_id FROM {table}")}
            assert agents <= {"a1"}, table
        facts = a1.conn.execute("SELECT agent_id, owner, scope FROM facts").fetchall()
        assert facts and all(r[0] == "a1" or (r[1] is None and r[2] != "agent") for r in facts)
        assert {r[0] for r in a1.conn.execute("SELECT DISTINCT agent_id FROM wm_items")} == {"a1"}
        # Asking as another agent through the store's reads finds nothing of theirs.
        other = Principal("a2", "alice", "support", "p1")
        assert a1.history(other) == []
        assert a1.search_episodes(other, WORD, limit=100) == []
        # Only what the scopes share crosses agents: a2's facts without an owner in a shared scope.
        for row in a1.list_facts(other, limit=1000):
            assert row["agent_id"] == "a1" or (row["owner"] is None and row["scope"] != "agent"), row
        assert a1.relationship(Principal("a1", "alice")) is not None
        # Writing its own rows works (the runtime applies its own turns); another agent's are refused.
        a1.apply_now(
            [
                validate(
                    {"type": "interaction", "agent_id": "a1", "user_message": "hi", "agent_response": "ok"}
                )
            ]
        )
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            a1.apply_now(
                [
                    validate(
                        {"type": "interaction", "agent_id": "a2", "user_message": "hi", "agent_response": "x"}
                    )
                ]
            )
        # Nor can it change the store's layout or read whose role maps to which agent.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            a1.conn.execute("ALTER TABLE wm_items DISABLE ROW LEVEL SECURITY")
        assert [r[0] for r in a1.conn.execute("SELECT agent_id FROM tm_agent_roles")] == ["a1"]
        # Its scrub cannot rewrite tables it does not own, and says so.
        assert a1.scrub() is False


def _populate(settings: Settings) -> int:
    ids = append(
        settings,
        *(
            interaction("bot", f"question {i} about the refund", f"answer {i}", user="alice")
            for i in range(30)
        ),
        episode("bot", "The refund saga", "Alice fought for her refund", participants=["alice"]),
    )
    return len(ids)


def _run_projector(settings: Settings, wait: bool) -> subprocess.Popen[str]:
    code = (
        "import sys, orjson; from pathlib import Path;"
        "from tiermem.settings import resolve_settings; from tiermem.runtime.projector import project;"
        "s = resolve_settings(data_dir=Path(sys.argv[1]), env={}, hot_url=sys.argv[2]);"
        "i = project(s, wait=sys.argv[3] == '1'); print(orjson.dumps({'applied': i.applied, 'path': i.path}).decode())"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, str(settings.data_dir), str(settings.hot_url), "1" if wait else "0"],
        stdout=subprocess.PIPE,
        text=True,
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, object]:
    import orjson

    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    result: dict[str, object] = orjson.loads(out.strip().splitlines()[-1])
    return result


def test_the_projector_runs_once_per_store_across_processes(
    settings: Settings, pg_url: str, tmp_path: Path
) -> None:
    settings = dataclasses.replace(settings, hot_url=pg_url)
    total = _populate(settings)
    # A second machine: its own data root with the same log, the same server store.
    other = dataclasses.replace(settings, data_dir=tmp_path / "machine2")
    shutil.copytree(settings.data_dir / "log", other.log_dir)
    holder = PostgresHotStore.connect(pg_url)
    try:
        with holder.projector_lease() as held:
            assert held
            # Another process does not project while the lease is held: asked not to wait, it says so.
            assert _result(_run_projector(settings, wait=False)) == {"applied": 0, "path": "leased"}
            # Two processes that wait: both block on the lease (seen in the server's lock table).
            procs = [_run_projector(settings, wait=True), _run_projector(other, wait=True)]
            while (
                holder.conn.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                ).fetchone()[0]
                < 2
            ):
                assert all(p.poll() is None for p in procs)
        results = [_result(p) for p in procs]
        # Released: one of them applied every event, the other found the store up to date.
        assert sorted(int(str(r["applied"])) for r in results) == [0, total]
        counts = holder.counts()
        assert counts["wm_items"] == total - 1 and counts["episodes"] == 1
    finally:
        holder.close()


def test_the_runtime_and_rebuild_on_hot_url(settings: Settings, pg_url: str) -> None:
    settings = dataclasses.replace(settings, hot_url=pg_url)
    with open_memory(settings, "bot", agent_type="support", project_id="web", user="alice") as m:
        for i in range(4):
            record_turn(m, f"alice asks about the parcel {i}", f"answer {i}")
        call_tool(m, "memory_fact_store", {"key": "tz", "value": "Europe/Paris"})
        found = call_tool(m, "memory_fact_recall", {"key": "tz"})
        assert "Europe/Paris" in str(found)
        call_tool(m, "memory_idea_save", {"content": "Alice wants the parcel sent to Lyon"})
        recalled = call_tool(m, "memory_recall", {"query": "where does the parcel go"})
        assert "Lyon" in str(recalled)
    project(settings)
    with PostgresHotStore.connect(pg_url) as store:
        live = store.digest()
        # The panel's cross-agent views read the same store.
        from tiermem.app.server import panel_data

        hot = cast(sqlite3.Connection, store.conn)
        assert [a["agent_id"] for a in panel_data.agents(hot)] == ["bot"]
        assert panel_data.agents(hot)[0]["turns"] == 4
        assert panel_data.users_of(hot, "bot") == ["alice"]
    info = rebuild(settings)
    assert info.digest == live and not (settings.hot_dir / "hot.sqlite").exists()


def test_agent_roles_keep_their_rows_and_only_theirs_across_a_rebuild(
    settings: Settings, pg_server: PgServer, pg_url: str
) -> None:
    settings = dataclasses.replace(settings, hot_url=pg_url)
    for agent, canary in (("a1", "CANARY-A1-quince"), ("a2", "CANARY-A2-medlar")):
        with open_memory(settings, agent, agent_type="support", project_id="web", user="alice") as m:
            record_turn(m, f"remember {canary}", "noted")
    project(settings)
    with PostgresHotStore.connect(pg_url) as owner:
        for agent in ("a1", "a2"):
            pg_server.role(f"tm_agent_{agent}")
            pg_hotstore.grant_agent(owner.conn, f"tm_agent_{agent}", [agent])
    rebuild(settings)
    with PostgresHotStore.connect(_agent_url(pg_server, pg_url, "tm_agent_a1"), create=False) as a1:
        # Raw SQL, no filter: the rights and the role map came back with the rebuilt tables.
        texts = " ".join(str(r[0]) for r in a1.conn.execute("SELECT user_message FROM wm_items"))
        assert "CANARY-A1-quince" in texts and "CANARY-A2-medlar" not in texts
        mapped = {tuple(r) for r in a1.conn.execute("SELECT role_name, agent_id FROM tm_agent_roles")}
        assert mapped == {("tm_agent_a1", "a1")}
    # A store of another schema version is dropped and created anew: the map and the rights survive.
    with PostgresHotStore.connect(pg_url) as owner:
        pg_hotstore.set_meta(owner.conn, "schema_version", "pg-older")
    with PostgresHotStore.connect(pg_url) as owner:
        assert owner.conn.execute("SELECT count(*) FROM wm_items").fetchone()[0] == 0
    project(settings)
    with PostgresHotStore.connect(_agent_url(pg_server, pg_url, "tm_agent_a2"), create=False) as a2:
        texts = " ".join(str(r[0]) for r in a2.conn.execute("SELECT user_message FROM wm_items"))
        assert "CANARY-A2-medlar" in texts and "CANARY-A1-quince" not in texts


def test_an_erasure_leaves_no_copy_in_the_databases_files(pg_server: PgServer, pg_url: str) -> None:
    world = World(5)
    with PostgresHotStore.connect(pg_url) as store:
        _load(store, world)
        secret = {"type": "interaction", "agent_id": "a1", "user": "alice", "agent_response": "noted"}
        store.apply_now([validate({**secret, "user_message": "my plumquartz code"})])
        store.apply_now(
            [
                validate(
                    {
                        "type": "knowledge_decided",
                        "agent_id": "a1",
                        "decision": "created",
                        "fact_id": "fq",
                        "content": "alice keeps plumquartz",
                        "status": "active",
                        "participant": "alice",
                    }
                )
            ]
        )
        data_dir = Path(store.conn.execute("SHOW data_directory").fetchone()[0])
        oid = store.conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[
            0
        ]
        store.conn.execute("CHECKPOINT")  # the rows are in the table files now

        def holders() -> list[str]:
            return [
                p.name for p in (data_dir / "base" / str(oid)).iterdir() if b"plumquartz" in p.read_bytes()
            ]

        assert holders()  # the check can fail: the text is there before the erasure
        info = store.apply_now([validate({"type": "erasure", "target_kind": "user", "target": "alice"})])
        assert info.erasures == 1 and store.scrub() is True
        assert holders() == []
        assert store.conn.execute("SELECT count(*) FROM wm_items WHERE owner = 'alice'").fetchone()[0] == 0


def test_an_erasure_on_postgres_tells_this_process_caches_at_once(pg_url: str) -> None:
    """As on SQLite: the erasure's commit drops this process's kept text of that store (prepared
    episodes, statistics, kept rows), not only the next read of it."""
    told: list[str] = []
    TEXTS.erasure_drops.append(told.append)
    try:
        with PostgresHotStore.connect(pg_url) as store:
            secret = {"type": "interaction", "agent_id": "a1", "user": "alice", "agent_response": "noted"}
            store.apply_now([validate({**secret, "user_message": "my plumquartz code"})])
            assert told == []
            store.apply_now([validate({"type": "erasure", "target_kind": "user", "target": "alice"})])
            assert told and set(told) == {database_key(store.conn)}
    finally:
        TEXTS.erasure_drops.remove(told.append)


def test_hot_url_comes_from_the_file_or_the_environment_and_is_checked(tmp_path: Path) -> None:
    from tiermem.errors import ConfigError
    from tiermem.settings import resolve_settings

    assert resolve_settings(data_dir=tmp_path, env={}).hot_url is None  # the embedded default
    (tmp_path / "tiermem.toml").write_text('hot_url = "postgresql://u:secret@db/tm"\n')
    from_file = resolve_settings(data_dir=tmp_path, env={})
    assert from_file.hot_url == "postgresql://u:secret@db/tm" and "secret" not in repr(from_file)
    from_env = resolve_settings(data_dir=tmp_path, env={"TIERMEM_HOT_URL": "postgres://h/x"})
    assert from_env.hot_url == "postgres://h/x"
    with pytest.raises(ConfigError, match="hot_url"):
        resolve_settings(data_dir=tmp_path, env={"TIERMEM_HOT_URL": "mysql://h/x"})


def test_the_schema_keeps_passage_vectors_in_pgvector(pg_url: str) -> None:
    """pgserver's PostgreSQL ships pgvector: the extension is created and `quote_vectors.vec` uses it."""
    with PostgresHotStore.connect(pg_url) as store:
        assert pg_hotstore.has_vector(store.conn)
        kind = store.conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = 'quote_vectors'::regclass AND attname = 'vec'"
        ).fetchone()[0]
        assert kind == "vector"
        store.conn.executemany(
            "INSERT INTO quote_vectors (episode_id, idx, agent_id, vec) VALUES (?, 0, 'a1', ?::vector)",
            [("near", "[1, 0, 0]"), ("far", "[0, 1, 0]")],
        )
        nearest = store.conn.execute(
            "SELECT episode_id FROM quote_vectors ORDER BY vec <=> '[0.9, 0.1, 0]'::vector LIMIT 1"
        ).fetchone()[0]
        assert nearest == "near"


class _ThreeDims:
    """Fixed stand-in vectors (not a model): the error path needs no embedding."""

    name = "three-dims-test"
    dim = 3

    def embed(self, texts: Sequence[str]) -> Vectors:
        return normalise(np.ones((len(texts), 3)))


def test_dense_retrieval_without_pgvector_is_a_configuration_error(pg_url: str) -> None:
    from tiermem.runtime.pg_vectors import PgVectorIndex, VectorExtensionMissingError

    with PostgresHotStore.connect(pg_url) as store:
        store.conn.execute("DROP EXTENSION vector CASCADE")
        index = PgVectorIndex(_ThreeDims())
        with pytest.raises(VectorExtensionMissingError, match="pgvector"):
            index.nearest(cast(sqlite3.Connection, store.conn), "anything", 5)
        with pytest.raises(VectorExtensionMissingError):
            index.index_pending(cast(sqlite3.Connection, store.conn))


class _OneModel:
    """A stand-in embedder: the store's model decision is what is tested, not the vectors."""

    dim = 3

    def __init__(self, identity: str) -> None:
        self.name = self.identity = identity

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return normalise(np.ones((len(texts), 3), dtype=np.float32))


def test_only_the_owner_decides_the_stores_vector_model(pg_server: PgServer, pg_url: str) -> None:
    from tiermem.runtime.pg_vectors import PgVectorIndex
    from tiermem.runtime.vectors import MODEL_KEY

    with PostgresHotStore.connect(pg_url) as owner:
        if not pg_hotstore.has_vector(owner.conn):
            pytest.skip("this PostgreSQL has no pgvector")
        # A store from before the model was recorded: another agent's vectors, no model in meta.
        owner.conn.execute(
            "INSERT INTO quote_vectors (episode_id, idx, agent_id, vec) VALUES ('e-a2', 0, 'a2', '[1,0,0]')"
        )
        pg_server.role("tm_agent_a1")
        pg_hotstore.grant_agent(owner.conn, "tm_agent_a1", ["a1"])
    with PostgresHotStore.connect(_agent_url(pg_server, pg_url, "tm_agent_a1"), create=False) as a1:
        # a1 sees no vector (they are a2's), which must not read as "an empty store".
        assert PgVectorIndex(_OneModel("new-model")).index_pending(a1.conn) == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            pg_hotstore.set_meta(a1.conn, MODEL_KEY, "anything")
    with PostgresHotStore.connect(pg_url) as owner:
        assert pg_hotstore.get_meta(owner.conn, MODEL_KEY) is None
        assert owner.conn.execute("SELECT agent_id FROM quote_vectors").fetchall() == [("a2",)]
