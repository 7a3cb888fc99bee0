"""The static model distilled from the installed MiniLM weights: its build, its cache, its
vectors in hybrid retrieval, and the hot store re-embedding when the model changes.

Distilling the whole vocabulary takes about half a minute of one core, so these tests
distil a subset: the build-path test a few hundred tokens through `StaticEmbedder.load`
itself, the others a table of the fixture's tokens plus the most frequent words, built
once per session and placed in a temporary cache directory as the build would place it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from test_retrieval_dense import DOG, FIXTURE, QUESTION
from tiermem.runtime.quote_search import search_quotes
from tiermem.runtime.sqlite_store import SQLiteHotStore
from tiermem.runtime.store import ProjectionInfo
from tiermem.runtime.vectors import MODEL_KEY

from tiermem import static_embeddings as se
from tiermem.app.locomo import TiermemContext, load_locomo, prepare
from tiermem.embeddings import MINILM_PACKAGE, MiniLMEmbedder, WordPieceTokenizer, load_embedder, package_dir
from tiermem.settings import RetrievalMode, Settings, resolve_settings
from tiermem.text import words

MODEL_DIR = package_dir(MINILM_PACKAGE, "") / "model"
# No word in common with DOG. (The shared fixture's "What kind of dog does Ben own?" ranks Ben's
# shortest turn first at the static model's measured fusion weight, 0.2: at that weight the
# dense side reorders turns BM25 finds alike, it does not overrule a clear lexical winner.)
PETS = "Does Ben have any pets?"
FREQUENT = 1500  # the most frequent whole words, beside the fixture's own tokens


def _fixture_texts() -> list[str]:
    conv = FIXTURE[0]["conversation"]
    assert isinstance(conv, dict)
    texts = [QUESTION, PETS, "Ben", "Ava", "May", "June", "July", "2023"]
    for key, turns in conv.items():
        if key.startswith("session_") and isinstance(turns, list):
            texts += [str(t["text"]) for t in turns]
    return texts


@pytest.fixture(scope="session")
def static_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory holding a table distilled from the fixture's tokens and frequent words."""
    encoder = MiniLMEmbedder(model_dir=MODEL_DIR)
    tok = encoder.tokenizer
    kept = se.kept_tokens(tok)
    start = kept.index(tok.vocab["the"])
    ids = set(kept[start : start + FREQUENT])
    for text in _fixture_texts():
        ids.update(tok.piece_ids(text))
    table = se.distill(encoder, sorted(ids))
    directory = tmp_path_factory.mktemp("models")
    se.TableCache(directory, se.source_digest(MODEL_DIR)).write(table)
    return directory


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OSError("network access attempted")

    for name in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    yield


# ------------------------------------------------------------------ the build


def test_the_build_is_deterministic_cached_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: None
) -> None:
    tok = WordPieceTokenizer(MODEL_DIR / "vocab.txt")
    full = se.kept_tokens(tok)
    assert tok.vocab["[unused0]"] not in full and tok.vocab["the"] in full
    subset = full[full.index(tok.vocab["the"]) :][:300]
    monkeypatch.setattr(se, "kept_tokens", lambda _tok: subset)
    seen: list[tuple[int, int]] = []

    a = se.StaticEmbedder.load(tmp_path / "a", progress=lambda d, t: seen.append((d, t)))
    b = se.StaticEmbedder.load(tmp_path / "b", progress=lambda d, t: None)
    assert seen[-1] == (300, 300)
    (file_a,) = (tmp_path / "a").iterdir()
    (file_b,) = (tmp_path / "b").iterdir()
    assert file_a.name == file_b.name and file_a.read_bytes() == file_b.read_bytes()
    assert np.array_equal(a.table, b.table) and a.identity == b.identity
    assert a.dim == se.PCA_DIMS and a.table.shape[0] == len(tok.vocab)
    assert not np.any(a.table[tok.vocab["[unused0]"]])
    assert a.identity.startswith(f"{se.STATIC_NAME}/r{se.RECIPE}/")
    assert [p.name for p in (tmp_path / "a").iterdir()] == [file_a.name]  # no temporary left

    # A second load reads the cache: nothing is distilled again.
    def no_distill(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("distilled again")

    monkeypatch.setattr(se, "distill", no_distill)
    assert np.array_equal(se.StaticEmbedder.load(tmp_path / "a").table, a.table)

    # A damaged file, or one made from other weights, is never used.
    blob = bytearray(file_a.read_bytes())
    blob[-3] ^= 0xFF
    file_a.write_bytes(bytes(blob))
    assert se.read_table(file_a, se.TableCache(tmp_path, se.source_digest(MODEL_DIR)).meta) is None
    other = se.TableCache(tmp_path / "c", "0" * 64)
    other.path = se.TableCache(tmp_path / "c", se.source_digest(MODEL_DIR)).path
    other.write(a.table)
    with pytest.raises(AssertionError, match="distilled again"):
        se.StaticEmbedder.load(tmp_path / "c")
    with pytest.raises(AssertionError, match="distilled again"):
        se.StaticEmbedder.load(tmp_path / "a")


def test_sif_weights_rare_tokens_more() -> None:
    w = se.sif_weights(1000)
    assert w.shape == (1000,) and np.all(np.diff(w) > 0) and 0 < w[0] < w[-1] < 1


def test_embedding_is_the_normalised_mean_of_token_rows(static_cache: Path) -> None:
    model = load_embedder(se.STATIC_NAME, static_cache)
    assert isinstance(model, se.StaticEmbedder)
    texts = ["I adopted a golden retriever puppy", "", "!!", "Prices went up, then."]
    out = model.embed(texts)
    assert out.dtype == np.float32 and out.shape == (4, model.dim)
    ids = model.tokenizer.piece_ids(texts[0])
    mean = model.table[ids].mean(axis=0)
    np.testing.assert_allclose(out[0], mean / np.linalg.norm(mean), atol=1e-6)
    assert not np.any(out[1])  # no token, zero vector
    np.testing.assert_allclose(np.linalg.norm(out[[0, 2, 3]], axis=1), 1.0, atol=1e-5)
    one_by_one = np.concatenate([model.embed([t]) for t in texts])
    np.testing.assert_array_equal(out, one_by_one)


# ------------------------------------------------------------------ in the hot store


def _settings(tmp_path: Path, mode: RetrievalMode, model: str, cache: Path) -> Settings:
    base = replace(resolve_settings(data_dir=tmp_path / "data", env={}), anthropic_api_key=None, fsync="none")
    retrieval = replace(base.retrieval, mode=mode, embedding_model=model, model_cache=str(cache))
    return replace(base, retrieval=retrieval)


def _prepared(tmp_path: Path, settings: Settings) -> TiermemContext:
    data = tmp_path / "fixture.json"
    data.write_bytes(orjson.dumps(FIXTURE))
    (conv,) = load_locomo(data)
    prepare(settings, [conv])
    return TiermemContext(settings, conv)


def test_hybrid_with_the_static_model_finds_the_paraphrase(tmp_path: Path, static_cache: Path) -> None:
    assert not set(words(PETS)) & set(words(DOG))
    ctx = _prepared(tmp_path, _settings(tmp_path, "hybrid", se.STATIC_NAME, static_cache))
    try:
        conn, store = ctx.memory.conn, ctx.memory.store
        assert (
            conn.execute("SELECT value FROM meta WHERE key = ?", (MODEL_KEY,))
            .fetchone()[0]
            .startswith(se.STATIC_NAME + "/")
        )
        dense = store.dense  # type: ignore[attr-defined]
        assert dense.weight == 0.2  # the model's measured weight, the default
        hybrid = [q["text"] for q in search_quotes(conn, ctx.memory.principal, PETS, dense=dense)]
        lexical = [q["text"] for q in search_quotes(conn, ctx.memory.principal, PETS)]
        assert hybrid[0] == DOG
        assert lexical[0] != DOG
    finally:
        ctx.close()


def _stored(store: SQLiteHotStore) -> tuple[str, int, set[int]]:
    conn = store.conn
    model = conn.execute("SELECT value FROM meta WHERE key = ?", (MODEL_KEY,)).fetchone()[0]
    rows = conn.execute("SELECT length(vec) FROM quote_vectors").fetchall()
    return str(model), len(rows), {int(r[0]) // 4 for r in rows}


def test_switching_the_model_re_embeds_every_vector(tmp_path: Path, static_cache: Path) -> None:
    static = _settings(tmp_path, "hybrid", se.STATIC_NAME, static_cache)
    _prepared(tmp_path, static).close()
    with SQLiteHotStore.open(static) as store:
        model, count, dims = _stored(store)
        assert model.startswith(se.STATIC_NAME + "/") and count > 0 and dims == {se.PCA_DIMS}

    minilm = replace(static, retrieval=replace(static.retrieval, embedding_model="all-minilm-l6-v2"))
    with SQLiteHotStore.open(minilm) as store:
        assert store.dense is not None
        # Before any projection the other model's vectors are not compared with this query.
        assert store.dense.index.nearest(store.conn, QUESTION, 10) == {}
        store.apply_batch([], {}, ProjectionInfo())
        assert _stored(store) == ("all-minilm-l6-v2", count, {384})
        assert store.dense.index.nearest(store.conn, QUESTION, 10)

    # Vectors from before the record was kept were MiniLM's: switching back re-embeds them too.
    with SQLiteHotStore.open(static) as store:
        store.conn.execute("DELETE FROM meta WHERE key = ?", (MODEL_KEY,))
        store.conn.commit()
        assert store.dense is not None
        assert store.dense.index.stored_model(store.conn) == "all-minilm-l6-v2"
        store.apply_batch([], {}, ProjectionInfo())
        assert _stored(store) == (model, count, {se.PCA_DIMS})


OFFLINE = r"""
import socket, sys
def refuse(*args, **kwargs):
    raise OSError("network access attempted")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
from pathlib import Path
from tiermem.embeddings import load_embedder
e = load_embedder("all-minilm-l6-v2-static", Path(sys.argv[1])).embed(["offline and fine"])
print(e.shape[1], round(float((e * e).sum()), 4))
"""


def test_loads_offline_from_its_cache(tmp_path: Path, static_cache: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HOME": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, "-c", OFFLINE, str(static_cache)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(se.PCA_DIMS), "1.0"]
    assert not any(tmp_path.iterdir())


def test_switching_the_model_on_postgres_drops_the_old_vectors_and_index(
    tmp_path: Path, pg_url: str, static_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tiermem.runtime import pg_vectors
    from tiermem.runtime.store import open_store

    monkeypatch.setattr(pg_vectors, "EXACT_LIMIT", 5)  # so the first model's HNSW index exists
    static = replace(_settings(tmp_path, "hybrid", se.STATIC_NAME, static_cache), hot_url=pg_url)
    _prepared(tmp_path, static).close()

    def state(conn: Any) -> tuple[str, int, list[str]]:
        model = conn.execute("SELECT value FROM meta WHERE key = ?", (MODEL_KEY,)).fetchone()[0]
        count = conn.execute("SELECT count(*) FROM quote_vectors").fetchone()[0]
        names = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'quote_vectors'"
            " AND indexname LIKE 'quote_vectors_hnsw_%'"
        ).fetchall()
        return str(model), int(count), sorted(n for (n,) in names)

    store = open_store(static)
    try:
        model, count, names = state(store.conn)  # type: ignore[attr-defined]
        assert model.startswith(se.STATIC_NAME + "/") and names == [f"quote_vectors_hnsw_{se.PCA_DIMS}"]
    finally:
        store.close()
    minilm = replace(static, retrieval=replace(static.retrieval, embedding_model="all-minilm-l6-v2"))
    store = open_store(minilm)
    try:
        dense = store.dense  # type: ignore[attr-defined]
        assert dense.index.nearest(store.conn, QUESTION, 10) == {}  # type: ignore[attr-defined]
        store.apply_batch([], {}, ProjectionInfo())
        assert state(store.conn) == ("all-minilm-l6-v2", count, ["quote_vectors_hnsw_384"])  # type: ignore[attr-defined]
        assert dense.index.nearest(store.conn, QUESTION, 10)  # type: ignore[attr-defined]
    finally:
        store.close()


def test_search_sees_deleted_vectors_without_counting_rows(tmp_path: Path, static_cache: Path) -> None:
    ctx = _prepared(tmp_path, _settings(tmp_path, "hybrid", se.STATIC_NAME, static_cache))
    try:
        conn, index = ctx.memory.conn, ctx.memory.store.dense.index  # type: ignore[attr-defined]
        found = index.nearest(conn, QUESTION, 100)
        (episode_id, _), _ = max(found.items(), key=lambda kv: kv[1])
        conn.execute("DELETE FROM episodes WHERE episode_id = ?", (episode_id,))
        conn.commit()
        # The in-memory matrix is reloaded: no key of the deleted episode comes back.
        assert all(e != episode_id for e, _ in index.nearest(conn, QUESTION, 100))
        assert conn.execute("SELECT value FROM meta WHERE key = 'vectors_deleted'").fetchone()[0] != "0"
    finally:
        ctx.close()


def test_the_fusion_weight_is_the_models_measured_one_unless_set(tmp_path: Path) -> None:
    from tiermem.errors import ConfigError

    r = resolve_settings(data_dir=tmp_path, env={}).retrieval
    assert (r.embedding_model, r.fusion_weight) == (se.STATIC_NAME, 0.2)
    assert replace(r, embedding_model="all-minilm-l6-v2").fusion_weight == 0.4
    env = {"TIERMEM_RETRIEVAL__DENSE_WEIGHT": "0.5"}
    assert resolve_settings(data_dir=tmp_path, env=env).retrieval.fusion_weight == 0.5
    with pytest.raises(ConfigError, match="dense_weight"):
        replace(r, dense_weight=-0.5)


def test_the_prefilter_keeps_every_row_within_the_bound() -> None:
    from tiermem.runtime.vectors import closest

    distance = np.array([5, 1, 9, 3, 3, 7, 1, 3], dtype=np.uint16)
    assert closest(distance, 2).tolist() == [1, 6]
    assert closest(distance, 3).tolist() == [1, 3, 4, 6, 7]  # the ties at distance 3 all stay
    assert closest(distance, 8).tolist() == list(range(8))
