"""The shortlist reranker (runtime.rerank): its fit, its features, the recall hook and the setting."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pytest
from tiermem.runtime import rerank, turn_window
from tiermem.runtime.quote_search import search_quotes
from tiermem.runtime.rerank import (
    FEATURES,
    FIRST_FEATURES,
    MODELS,
    Reranker,
    features,
    fit_linear,
    reranker_for,
)

from tiermem.app.locomo import TiermemContext, load_locomo, prepare
from tiermem.embeddings import MiniLMEmbedder
from tiermem.errors import ConfigError
from tiermem.settings import RERANK_MODES, RetrievalSettings, Settings, resolve_settings

FILLER = [
    "The weather was grey all morning, Ben.",
    "Work kept me busy until late again, Ben.",
    "I finally finished that crossword, Ava.",
    "Traffic on the bridge was terrible, Ava.",
]
STYLE = "Contemporary is so expressive and graceful, it really speaks to me."
QUESTION = "What is Ben's favorite style of dance?"
FIXTURE = [
    {
        "sample_id": "rerank",
        "conversation": {
            "speaker_a": "Ava",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                # Words alone rank turns that name Ben and "favorite" or "style" in passing above the
                # answer, which shares no word with the question (only the question before it does).
                {"speaker": "Ava", "dia_id": "D1:1", "text": "Ben, your favorite coffee mug broke, Ben."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Ben here: that car has a terrible style, Ben."},
                {"speaker": "Ava", "dia_id": "D1:3", "text": "Ben, my favorite bakery closed early again."},
                {"speaker": "Ben", "dia_id": "D1:4", "text": "I am Ben and the traffic was awful, Ben."},
                {
                    "speaker": "Ava",
                    "dia_id": "D1:5",
                    "text": "Do you dance, Ben? Which style do you love the most?",
                },
                {"speaker": "Ben", "dia_id": "D1:6", "text": STYLE},
            ]
            + [
                {"speaker": s, "dia_id": f"D1:{k}", "text": FILLER[k % len(FILLER)]}
                for k, s in zip(range(7, 15), ["Ava", "Ben"] * 4, strict=True)
            ],
            # The newest turns stay verbatim in working memory: these keep the ones above compressed.
            "session_2_date_time": "9:00 am on 9 July, 2023",
            "session_2": [
                {"speaker": s, "dia_id": f"D2:{k}", "text": f"{FILLER[k % len(FILLER)]} ({k})"}
                for k, s in zip(range(1, 13), ["Ava", "Ben"] * 6, strict=True)
            ],
        },
        "qa": [],
    }
]


def _prepared(tmp_path: Path) -> tuple[Settings, TiermemContext]:
    data = tmp_path / "fixture.json"
    data.write_bytes(orjson.dumps(FIXTURE))
    (conv,) = load_locomo(data)
    settings = replace(
        resolve_settings(data_dir=tmp_path / "data", env={}), anthropic_api_key=None, fsync="none"
    )
    prepare(settings, [conv])
    return settings, TiermemContext(settings, conv)


def test_fit_ranks_the_positive_passages_first_and_is_deterministic() -> None:
    rng = np.random.default_rng(7)
    xs, ys = [], []
    for _ in range(40):
        x = rng.normal(size=(10, len(FIRST_FEATURES)))
        y = np.zeros(10)
        y[int(rng.integers(10))] = 1.0
        x[y == 1, 4] += 3.0  # the cosine feature carries the label
        xs.append(x)
        ys.append(y)
    model = fit_linear(xs, ys)
    assert model == fit_linear(xs, ys)
    assert max(range(len(FIRST_FEATURES)), key=lambda k: model.weights[k]) == 4
    firsts = [int(np.argmax(model.score(x))) for x in xs]
    assert sum(f == int(np.argmax(y)) for f, y in zip(firsts, ys, strict=True)) >= 36
    with pytest.raises(ValueError):
        fit_linear([np.zeros((3, len(FIRST_FEATURES)))], [np.zeros(3)])


def test_every_mode_has_a_fitted_model() -> None:
    for mode in RERANK_MODES[1:]:
        m = MODELS[mode]
        assert len(m.weights) == len(m.mean) == len(m.scale) == len(m.columns)
        assert set(m.columns) <= set(FEATURES)
        assert m.embeds == (mode in ("static", "minilm"))


def test_the_reranker_lifts_an_answer_the_words_rank_low(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fixture's answer is found by words through the turns around it only: the share of a
    # speaker's turn two places away (runtime.turn_window) would lift it halfway on its own.
    monkeypatch.setattr(turn_window, "FAR_WEIGHT", 0.0)
    settings, ctx = _prepared(tmp_path)
    try:
        store, who = ctx.memory.store, ctx.memory.principal
        conn = store.conn  # type: ignore[attr-defined]
        found = search_quotes(conn, who, QUESTION, limit=60)
        texts = [f["text"] for f in found]
        lexical_rank = texts.index(STYLE)
        assert lexical_rank >= 8  # words alone: below every turn that names Ben with a word of the question

        x = features(conn, MiniLMEmbedder(), QUESTION, found[:30])
        # The context pair differs from the passage alone exactly when the episode has a turn before it.
        before = rerank._previous(conn, found[:30])
        differs = np.abs(x[:, FEATURES.index("context")] - x[:, FEATURES.index("cosine")]) > 1e-6
        assert differs.tolist() == [b is not None for b in before]
        assert any(before) and not all(before)
        assert x[:, FEATURES.index("asks")].tolist() == [float(t.endswith("?")) for t in texts[:30]]
        assert x[2, FEATURES.index("rank")] == pytest.approx(np.log(3.0))

        reranked = Reranker(MiniLMEmbedder(), MODELS["minilm"], 30).reorder(conn, QUESTION, found)
        assert [f["text"] for f in reranked].index(STYLE) <= lexical_rank - 4
        assert sorted(f["text"] for f in reranked) == sorted(texts)  # reordered, nothing added or lost

        # The recall hook, same store and budget: the answer is delivered with the reranker only.
        store.rerank = None  # type: ignore[attr-defined]
        off = store.recall_lines(who, QUESTION, budget=100)
        store.rerank = reranker_for(replace(settings, retrieval=replace(settings.retrieval, rerank="minilm")))  # type: ignore[attr-defined]
        on = store.recall_lines(who, QUESTION, budget=100)
        assert not any(STYLE in line for line, _ in off)
        assert any(STYLE in line for line, _ in on)
    finally:
        ctx.close()


def test_the_setting_is_words_by_default_and_validated(tmp_path: Path) -> None:
    settings = resolve_settings(data_dir=tmp_path, env={})
    assert settings.retrieval.rerank == "words"
    default = reranker_for(settings)
    assert default is not None and default.embedder is None and default.model is MODELS["words"]
    off = resolve_settings(data_dir=tmp_path, env={"TIERMEM_RETRIEVAL__RERANK": "off"})
    assert reranker_for(off) is None
    env = {"TIERMEM_RETRIEVAL__RERANK": "minilm", "TIERMEM_RETRIEVAL__RERANK_DEPTH": "20"}
    chosen = resolve_settings(data_dir=tmp_path, env=env).retrieval
    assert (chosen.rerank, chosen.rerank_depth) == ("minilm", 20)
    with pytest.raises(ConfigError, match=r"retrieval\.rerank="):
        RetrievalSettings(rerank="cross-encoder")
    for depth in (1, 61):
        with pytest.raises(ConfigError, match=r"retrieval\.rerank_depth"):
            RetrievalSettings(rerank="static", rerank_depth=depth)


def test_a_short_shortlist_is_left_alone() -> None:
    class Refuses:
        name = identity = "refuses"
        dim = 3

        def embed(self, texts: object) -> np.ndarray:
            raise AssertionError("nothing to rerank: no embedding either")

    one = [{"text": "x", "score": 1.0}]
    assert Reranker(Refuses(), MODELS["static"], 30).reorder(None, "q", one) == one  # type: ignore[arg-type]
