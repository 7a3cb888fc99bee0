"""Vectors at projection and hybrid retrieval, on a real hot store with the installed MiniLM model."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import orjson
import pytest
from tiermem.runtime import vectors
from tiermem.runtime.passages import episode_passages
from tiermem.runtime.quote_search import search_quotes
from tiermem.runtime.vectors import VectorIndex, sign_bits

from tiermem.app.locomo import TiermemContext, load_locomo, prepare
from tiermem.embeddings import Vectors, normalise
from tiermem.ids import parse_ts
from tiermem.settings import RetrievalMode, Settings, resolve_settings

FILLER = [
    "The weather was grey all morning.",
    "Work kept me busy until late again.",
    "I finally finished that crossword.",
    "Traffic on the bridge was terrible.",
    "We should watch that new series sometime.",
    "My sister called about the holidays.",
]
DOG = "I adopted a golden retriever puppy last week, he sleeps on my feet."
QUESTION = "What kind of dog does Ben own?"  # no word in common with DOG
FIXTURE = [
    {
        "sample_id": "dense",
        "conversation": {
            "speaker_a": "Ava",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ben", "dia_id": "D1:1", "text": DOG},
                {
                    "speaker": "Ava",
                    "dia_id": "D1:2",
                    "text": "Lovely! Mine is a tabby that ignores everyone.",
                },
            ]
            + [
                {"speaker": s, "dia_id": f"D1:{k}", "text": FILLER[k % len(FILLER)]}
                for k, s in zip(range(3, 12), ["Ava", "Ben"] * 5, strict=False)
            ],
            "session_2_date_time": "10:00 am on 20 June, 2023",
            "session_2": [
                {"speaker": "Ben", "dia_id": "D2:1", "text": "My budget for the Lisbon trip is 2000 euros."},
                {"speaker": "Ava", "dia_id": "D2:2", "text": "That sounds reasonable for a week."},
                {"speaker": "Ben", "dia_id": "D2:3", "text": "I hiked the cliffs near the coast of Porto."},
            ],
            "session_3_date_time": "9:00 am on 2 July, 2023",
            "session_3": [
                {
                    "speaker": "Ben",
                    "dia_id": "D3:1",
                    "text": "My budget for the Lisbon trip is now 2600 euros.",
                },
                {"speaker": "Ava", "dia_id": "D3:2", "text": "Prices went up, then."},
            ],
            # The newest turns stay verbatim in working memory: these keep the ones above compressed.
            "session_4_date_time": "9:00 am on 9 July, 2023",
            "session_4": [
                {"speaker": s, "dia_id": f"D4:{k}", "text": f"{FILLER[k % len(FILLER)]} ({k})"}
                for k, s in zip(range(1, 13), ["Ava", "Ben"] * 6, strict=True)
            ],
        },
        "qa": [],
    }
]


def _prepared(tmp_path: Path, mode: RetrievalMode) -> tuple[Settings, TiermemContext]:
    data = tmp_path / "fixture.json"
    data.write_bytes(orjson.dumps(FIXTURE))
    (conv,) = load_locomo(data)
    base = replace(resolve_settings(data_dir=tmp_path / "data", env={}), anthropic_api_key=None, fsync="none")
    settings = replace(base, retrieval=replace(base.retrieval, mode=mode, embedding_model="all-minilm-l6-v2"))
    prepare(settings, [conv])
    return settings, TiermemContext(settings, conv)


def test_hybrid_finds_an_answer_that_shares_no_word_with_the_question(tmp_path: Path) -> None:
    _, ctx = _prepared(tmp_path, "hybrid")
    try:
        store = ctx.memory.store
        conn = ctx.memory.conn
        # Vectors were written at projection, one per passage of every episode.
        n_vectors = conn.execute("SELECT count(*) FROM quote_vectors").fetchone()[0]
        assert n_vectors > 0
        dense = store.dense  # type: ignore[attr-defined]
        hybrid = [q["text"] for q in search_quotes(conn, ctx.memory.principal, QUESTION, dense=dense)]
        lexical = [q["text"] for q in search_quotes(conn, ctx.memory.principal, QUESTION)]
        assert hybrid[0] == DOG
        assert lexical[0] != DOG  # words alone rank it below turns that share a name
        lines = [t for t, _ in store.recall_lines(ctx.memory.principal, QUESTION, budget=60)]
        assert any(DOG in t for t in lines)
    finally:
        ctx.close()


def test_newest_restatement_ranks_first(tmp_path: Path) -> None:
    _, ctx = _prepared(tmp_path, "lexical")
    try:
        found = search_quotes(
            ctx.memory.conn, ctx.memory.principal, "What is Ben's budget for the Lisbon trip?"
        )
        texts = [q["text"] for q in found]
        assert texts.index("My budget for the Lisbon trip is now 2600 euros.") < texts.index(
            "My budget for the Lisbon trip is 2000 euros."
        )
    finally:
        ctx.close()


def test_vectors_go_with_their_episode(tmp_path: Path) -> None:
    _, ctx = _prepared(tmp_path, "hybrid")
    try:
        conn = ctx.memory.conn
        (episode_id,) = conn.execute("SELECT episode_id FROM quote_vectors LIMIT 1").fetchone()
        before = conn.execute("SELECT count(*) FROM quote_vectors").fetchone()[0]
        mine = conn.execute("SELECT count(*) FROM quote_vectors WHERE episode_id=?", [episode_id]).fetchone()[
            0
        ]
        conn.execute("DELETE FROM episodes WHERE episode_id=?", [episode_id])
        assert conn.execute("SELECT count(*) FROM quote_vectors").fetchone()[0] == before - mine
        # The next projection batch re-checks every episode; the deleted one has nothing left to embed.
        assert ctx.memory.store.dense.index.index_pending(conn) == 0  # type: ignore[attr-defined]
    finally:
        ctx.close()


class _Hashing:
    """Deterministic stand-in vectors for exercising the index's search paths (not a model)."""

    name = "hashing-test"
    identity = "hashing-test"
    dim = 64

    def embed(self, texts: Sequence[str]) -> Vectors:
        rows = [np.random.default_rng(abs(hash(t)) % 2**32).standard_normal(self.dim) for t in texts]
        return normalise(np.array(rows))


def test_sign_bit_prefilter_keeps_the_exact_nearest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE TABLE quote_vectors (episode_id TEXT, idx INTEGER, vec BLOB, PRIMARY KEY (episode_id, idx))"
    )
    index = VectorIndex(_Hashing())
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO meta VALUES (?, ?)", (vectors.MODEL_KEY, index.embedder.identity))
    rng = np.random.default_rng(1)
    base = normalise(rng.standard_normal((3000, 64)))
    query = "the query"
    q = index.embedder.embed([query])[0]
    base[17] = normalise((q + 0.05 * rng.standard_normal(64))[None, :])[0]  # a close neighbour
    conn.executemany(
        "INSERT INTO quote_vectors VALUES (?, ?, ?)",
        [(f"ep{k}", 0, vectors.to_blob(v)) for k, v in enumerate(base)],
    )
    exact = index.nearest(conn, query, 5)
    monkeypatch.setattr(vectors, "EXACT_LIMIT", 100)
    monkeypatch.setattr(vectors, "PREFILTER", 500)
    index._matrix.clear()
    filtered = index.nearest(conn, query, 5)
    assert max(exact, key=lambda k: exact[k]) == ("ep17", 0) == max(filtered, key=lambda k: filtered[k])
    assert sign_bits(base[:2]).shape == (2, 1)  # 64 signs in one word


# ------------------------------------------------------------ the same on PostgreSQL (pgvector)


def _prepared_pg(tmp_path: Path, pg_url: str, mode: RetrievalMode) -> tuple[Settings, TiermemContext]:
    data = tmp_path / "fixture.json"
    data.write_bytes(orjson.dumps(FIXTURE))
    (conv,) = load_locomo(data)
    base = replace(resolve_settings(data_dir=tmp_path / "data", env={}), anthropic_api_key=None, fsync="none")
    retrieval = replace(base.retrieval, mode=mode, embedding_model="all-minilm-l6-v2")
    settings = replace(base, hot_url=pg_url, retrieval=retrieval)
    prepare(settings, [conv])
    return settings, TiermemContext(settings, conv)


def test_hybrid_on_postgres_finds_an_answer_that_shares_no_word_with_the_question(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tiermem.runtime import pg_vectors
    from tiermem.runtime.pg_vectors import PgVectorIndex

    _, ctx = _prepared_pg(tmp_path, pg_url, "hybrid")
    try:
        store = ctx.memory.store
        conn = ctx.memory.conn
        dense = store.dense  # type: ignore[attr-defined]
        assert isinstance(dense.index, PgVectorIndex)
        # One vector per passage of every episode, written by the projection into pgvector.
        passages = sum(
            len(episode_passages(orjson.loads(raw or "[]")))
            for (raw,) in conn.execute("SELECT key_quotes FROM episodes").fetchall()
        )
        n_vectors = conn.execute("SELECT count(*) FROM quote_vectors").fetchone()[0]
        assert n_vectors == passages > 0
        kind = conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = 'quote_vectors'::regclass AND attname = 'vec'"
        ).fetchone()[0]
        assert kind == "vector"
        # A small store is searched exactly (no HNSW index), as the in-memory index does.
        assert not conn.execute("SELECT to_regclass('quote_vectors_hnsw_384') IS NOT NULL").fetchone()[0]
        hybrid = [q["text"] for q in search_quotes(conn, ctx.memory.principal, QUESTION, dense=dense)]
        lexical = [q["text"] for q in search_quotes(conn, ctx.memory.principal, QUESTION)]
        assert hybrid[0] == DOG
        assert lexical[0] != DOG
        lines = [t for t, _ in store.recall_lines(ctx.memory.principal, QUESTION, budget=60)]
        assert any(DOG in t for t in lines)
        # The cosines pgvector returns are the model's: the same as the in-memory index computes.
        near = dense.index.nearest(conn, QUESTION, 5)
        q = dense.index.embedder.embed([QUESTION])[0]
        (episode_id, idx), cosine = max(near.items(), key=lambda kv: kv[1])
        (raw, start_ts) = conn.execute(
            "SELECT key_quotes, start_ts FROM episodes WHERE episode_id = ?", (episode_id,)
        ).fetchone()
        passage = episode_passages(orjson.loads(raw))[idx]
        assert passage.text == DOG
        text = vectors.embedding_text(passage.text, passage.speaker, parse_ts(start_ts))
        assert cosine == pytest.approx(float(dense.index.embedder.embed([text])[0] @ q), abs=1e-4)
        # Past the exact limit, the owner's next projection builds the HNSW index and the
        # search goes through it, with the same answer first.
        monkeypatch.setattr(pg_vectors, "EXACT_LIMIT", 5)
        conn.execute("UPDATE episodes SET key_quotes = key_quotes || ' ' WHERE episode_id = ?", (episode_id,))
        assert dense.index.index_pending(conn) > 0
        assert conn.execute("SELECT to_regclass('quote_vectors_hnsw_384') IS NOT NULL").fetchone()[0]
        hybrid = [q["text"] for q in search_quotes(conn, ctx.memory.principal, QUESTION, dense=dense)]
        assert hybrid[0] == DOG
        assert max(dense.index.nearest(conn, QUESTION, 5).items(), key=lambda kv: kv[1])[1] == pytest.approx(
            cosine, abs=1e-4
        )
    finally:
        ctx.close()


def test_postgres_vectors_go_with_their_episode_and_stay_with_their_agent(
    tmp_path: Path, pg_server: Any, pg_url: str
) -> None:
    from tiermem.runtime import pg_hotstore
    from tiermem.runtime.pg_store import PostgresHotStore
    from tiermem.runtime.projector import project

    from tiermem.app.forget import forget

    settings, ctx = _prepared_pg(tmp_path, pg_url, "hybrid")
    try:
        conn = ctx.memory.conn
        agent = ctx.memory.principal.agent_id
        (episode_id,) = conn.execute(
            "SELECT episode_id FROM quote_vectors ORDER BY episode_id LIMIT 1"
        ).fetchone()
        before = conn.execute("SELECT count(*) FROM quote_vectors").fetchone()[0]
        mine = conn.execute(
            "SELECT count(*) FROM quote_vectors WHERE episode_id = ?", (episode_id,)
        ).fetchone()[0]
        # Row-level security: a role mapped to another agent sees none of these vectors, and its
        # nearest-neighbour search finds nothing; the agent's own role sees all of them.
        for role, agents in (("tm_vec_other", ["someone-else"]), ("tm_vec_own", [agent])):
            pg_server.role(role)
            pg_hotstore.grant_agent(conn, role, agents)
        db = pg_url.split("/")[3].split("?")[0]
        with PostgresHotStore.connect(
            pg_server.url(db, user="tm_vec_other"), create=False, dense=ctx.memory.store.dense
        ) as other:
            assert other.conn.execute("SELECT count(*) FROM quote_vectors").fetchone()[0] == 0
            assert (
                other.dense is not None
                and other.dense.index.nearest(cast(sqlite3.Connection, other.conn), QUESTION, 10) == {}
            )
            assert (
                search_quotes(
                    cast(sqlite3.Connection, other.conn), ctx.memory.principal, QUESTION, dense=other.dense
                )
                == []
            )
        with PostgresHotStore.connect(pg_server.url(db, user="tm_vec_own"), create=False) as own:
            assert own.conn.execute("SELECT count(*) FROM quote_vectors").fetchone()[0] == before
        # Erasing the episode (the log's erasure, projected) takes its vectors along.
        forget(settings, event=episode_id, reason="test")
        project(settings)
        assert (
            conn.execute("SELECT count(*) FROM episodes WHERE episode_id = ?", (episode_id,)).fetchone()[0]
            == 0
        )
        assert (
            conn.execute("SELECT count(*) FROM quote_vectors WHERE episode_id = ?", (episode_id,)).fetchone()[
                0
            ]
            == 0
        )
        assert conn.execute("SELECT count(*) FROM quote_vectors").fetchone()[0] == before - mine
        # A change of an episode's quotes drops its vectors; the next projection re-embeds them.
        (other_id,) = conn.execute("SELECT episode_id FROM quote_vectors LIMIT 1").fetchone()
        conn.execute("UPDATE episodes SET key_quotes = key_quotes || ' ' WHERE episode_id = ?", (other_id,))
        assert (
            conn.execute("SELECT count(*) FROM quote_vectors WHERE episode_id = ?", (other_id,)).fetchone()[0]
            == 0
        )
        assert ctx.memory.store.dense.index.index_pending(conn) > 0  # type: ignore[attr-defined]
        assert conn.execute("SELECT count(*) FROM quote_vectors").fetchone()[0] == before - mine
    finally:
        ctx.close()


def test_lexical_mode_on_postgres_writes_no_vectors(tmp_path: Path, pg_url: str) -> None:
    _, ctx = _prepared_pg(tmp_path, pg_url, "lexical")
    try:
        assert ctx.memory.store.dense is None  # type: ignore[attr-defined]
        assert ctx.memory.conn.execute("SELECT count(*) FROM quote_vectors").fetchone()[0] == 0
        assert ctx.memory.conn.execute("SELECT count(*) FROM episodes").fetchone()[0] > 0
    finally:
        ctx.close()
