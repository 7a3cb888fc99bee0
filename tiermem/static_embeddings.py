"""A static embedding model distilled by tiermem itself from the installed MiniLM weights.

A static model is one vector per WordPiece token; a text's vector is the
mean of its tokens' vectors (then unit length). Embedding is a table lookup
and a sum, so a CPU core embeds tens of thousands of turns a second, where
the transformer does tens. The table is made from the MiniLM encoder of
`tiermem.embeddings`, without any training data:

1. every vocabulary token goes through the encoder on its own, framed by the
   separator tokens the encoder was trained with (`[SEP] token [CLS]`: the
   natural `[CLS] token [SEP]` measured within 0.4 points of it on LoCoMo),
   and the mean of the three output positions is the token's vector;
2. the vectors are centred and rotated onto their principal axes (PCA),
   keeping the first `PCA_DIMS`: two thirds of the width for at most a point of
   hit@10 on LoCoMo, so a third less memory and search per stored vector;
3. each token is weighted by smooth inverse frequency, `a / (a + p(token))`,
   with `p` estimated by Zipf's law from the token's rank in the vocabulary
   (WordPiece vocabularies list whole words roughly from the most frequent),
   so "the" and "of" weigh little and rare words a lot.

The `[unusedN]` placeholders are left out (their rows are zero). The recipe
is the model2vec one; this code is tiermem's own, in numpy.

Where the table lives: it is built once from the installed weights and kept
as a file in a cache directory (by default `share/tiermem/models` under the
Python environment's prefix, beside the weights it derives from, so every data
root of that installation shares it and it goes away with the environment;
`retrieval.model_cache` names another directory). The file records the
SHA-256 of the weights and vocabulary it came from, the recipe version and the
SHA-256 of the table itself; a file that does not match the installed weights
or fails its checksum is rebuilt, never used. It is written to a temporary
name and renamed, so a crash or a second process building at the same time
leaves either no file or a whole one. Nothing is downloaded: without the
MiniLM package the model is unavailable, as MiniLM is.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tiermem.embeddings import (
    MINILM_INSTALL,
    MINILM_PACKAGE,
    EmbeddingUnavailableError,
    MiniLMEmbedder,
    Vectors,
    WordPieceTokenizer,
    normalise,
    package_dir,
)

STATIC_NAME = "all-minilm-l6-v2-static"
RECIPE = 1  # bumped whenever the distillation changes: older tables are rebuilt
PCA_DIMS = 256
SIF_A = 1e-4  # the smooth-inverse-frequency constant
FORWARD_BATCH = 1024  # tokens per encoder call while distilling

Progress = Callable[[int, int], None]


def default_cache_dir() -> Path:
    """`<prefix>/share/tiermem/models`: the environment the weights are installed in."""
    return Path(sys.prefix) / "share" / "tiermem" / "models"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def source_digest(model_dir: Path) -> str:
    """One SHA-256 over the weights and the vocabulary the table is distilled from."""
    h = hashlib.sha256()
    for name in ("model.safetensors", "vocab.txt"):
        h.update(f"{name}:{_sha256(model_dir / name)}\n".encode())
    return h.hexdigest()


# ------------------------------------------------------------------ distillation


def kept_tokens(tokenizer: WordPieceTokenizer) -> list[int]:
    """Vocabulary ids that get a vector: all but the `[unusedN]` placeholders, in id order."""
    return sorted(i for w, i in tokenizer.vocab.items() if not (w.startswith("[unused") and w.endswith("]")))


def token_vectors(
    encoder: MiniLMEmbedder, ids: Sequence[int], progress: Progress | None = None
) -> NDArray[np.float32]:
    """Each token's encoder output, alone in its `[SEP] token [CLS]` frame (mean of the three)."""
    tok = encoder.tokenizer
    out = np.empty((len(ids), encoder.dim), dtype=np.float32)
    with encoder.blas_limit():
        for s in range(0, len(ids), FORWARD_BATCH):
            chunk = ids[s : s + FORWARD_BATCH]
            out[s : s + len(chunk)] = encoder.forward([[tok.sep, i, tok.cls] for i in chunk])
            if progress is not None:
                progress(s + len(chunk), len(ids))
    return out


def principal_axes(vectors: NDArray[np.float32], dims: int) -> NDArray[np.float32]:
    """Centre the rows and project them on their first `dims` principal axes.

    The axes are the eigenvectors of the covariance (a 384 x 384 matrix, so
    exact and quick); each axis's sign is fixed so that its largest component is
    positive, which makes the table the same on every build, not only up to sign.
    """
    x = vectors.astype(np.float64)
    x -= x.mean(axis=0)
    values, axes = np.linalg.eigh(x.T @ x)
    axes = axes[:, np.argsort(values)[::-1][:dims]]
    flip = np.sign(axes[np.abs(axes).argmax(axis=0), np.arange(axes.shape[1])])
    axes *= np.where(flip == 0, 1.0, flip)
    return (x @ axes).astype(np.float32)


def sif_weights(n: int, a: float = SIF_A) -> NDArray[np.float32]:
    """`a / (a + p)` for ranks 1..n, with p the Zipf probability of each rank."""
    inv_rank = 1.0 / np.arange(2, n + 2, dtype=np.float64)
    p = inv_rank / inv_rank.sum()
    return (a / (a + p)).astype(np.float32)


def distill(
    encoder: MiniLMEmbedder,
    ids: Sequence[int] | None = None,
    dims: int = PCA_DIMS,
    progress: Progress | None = None,
) -> NDArray[np.float32]:
    """The static table, one row per vocabulary id (zero rows for ids left out).

    `ids` restricts the tokens distilled (all kept tokens by default; a subset
    gives a small table for tests of the build path). A token's frequency rank
    is its place among all kept tokens, so a subset weighs its tokens as the
    whole table does.
    """
    kept = kept_tokens(encoder.tokenizer)
    chosen = sorted(set(ids)) if ids is not None else kept
    rank = {t: r for r, t in enumerate(kept)}
    raw = token_vectors(encoder, chosen, progress)
    reduced = principal_axes(raw, min(dims, raw.shape[1], max(1, len(chosen) - 1)))
    weights = sif_weights(len(kept))
    reduced *= weights[[rank.get(t, len(kept) - 1) for t in chosen]][:, None]
    table = np.zeros((len(encoder.tokenizer.vocab), reduced.shape[1]), dtype=np.float32)
    table[chosen] = reduced
    return table


# ------------------------------------------------------------------ the cache file


def table_digest(table: NDArray[np.float32]) -> str:
    return hashlib.sha256(np.ascontiguousarray(table, dtype="<f4").tobytes()).hexdigest()


def write_table(path: Path, table: NDArray[np.float32], meta: dict[str, str]) -> None:
    """The table as a one-tensor safetensors file, written whole or not at all.

    The metadata carries the source digest, recipe and table digest checked by `read_table`.
    """
    data = np.ascontiguousarray(table, dtype="<f4").tobytes()
    header = {
        "__metadata__": {**meta, "table_sha256": hashlib.sha256(data).hexdigest()},
        "table": {"dtype": "F32", "shape": list(table.shape), "data_offsets": [0, len(data)]},
    }
    raw = json.dumps(header, sort_keys=True).encode()
    raw += b" " * ((-len(raw)) % 8)  # the format aligns the data to 8 bytes
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(struct.pack("<Q", len(raw)) + raw)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        # Readable by every user of the environment, like the weights beside it.
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_table(path: Path, expect: dict[str, str]) -> NDArray[np.float32] | None:
    """The cached table if its metadata matches `expect` and its bytes their digest, else None."""
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        (n,) = struct.unpack("<Q", blob[:8])
        header: dict[str, Any] = json.loads(blob[8 : 8 + n])
        meta = header["__metadata__"]
        spec = header["table"]
        start, end = spec["data_offsets"]
        data = blob[8 + n + start : 8 + n + end]
    except (struct.error, ValueError, KeyError, TypeError):
        return None
    if any(meta.get(k) != v for k, v in expect.items()):
        return None
    if hashlib.sha256(data).hexdigest() != meta.get("table_sha256"):
        return None
    rows, cols = spec["shape"]
    if len(data) != rows * cols * 4:
        return None
    return np.frombuffer(data, dtype="<f4").reshape(rows, cols).astype(np.float32)


def stderr_progress(label: str) -> Progress:
    """Progress lines on stderr, about every tenth of the work."""
    started = time.monotonic()
    step = {"next": 0.0}

    def report(done: int, total: int) -> None:
        if done >= total or done / total >= step["next"]:
            step["next"] = done / total + 0.1
            sys.stderr.write(f"{label}: {done}/{total} tokens, {time.monotonic() - started:.0f} s\n")
            sys.stderr.flush()

    return report


# ------------------------------------------------------------------ the model


class StaticEmbedder:
    """Mean of distilled token vectors (see the module doc); rows of `embed` have norm 1."""

    name = STATIC_NAME

    def __init__(self, table: NDArray[np.float32], tokenizer: WordPieceTokenizer, identity: str) -> None:
        self.table = table
        self.tokenizer = tokenizer
        self.dim = int(table.shape[1])
        self.identity = identity

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for k, text in enumerate(texts):
            ids = self.tokenizer.piece_ids(text)
            if ids:
                # One gather and sum per text: measured 4x cheaper than one gather of the
                # whole batch summed by `np.add.reduceat`, which is slow along axis 0.
                self.table[ids].sum(axis=0, out=out[k])
        return normalise(out)

    @classmethod
    def load(
        cls,
        cache_dir: Path | None = None,
        model_dir: Path | None = None,
        progress: Progress | None = None,
    ) -> StaticEmbedder:
        """The table from the cache, distilled (and cached) first if missing or stale."""
        root = model_dir or package_dir(MINILM_PACKAGE, MINILM_INSTALL) / "model"
        if not (root / "model.safetensors").is_file() or not (root / "vocab.txt").is_file():
            raise EmbeddingUnavailableError(f"{root}: model files missing: {MINILM_INSTALL}")
        cache = TableCache(cache_dir or default_cache_dir(), source_digest(root))
        table = cache.read()
        tokenizer = WordPieceTokenizer(root / "vocab.txt")
        if table is None:
            encoder = MiniLMEmbedder(model_dir=root)
            table = distill(encoder, progress=progress or stderr_progress(f"distilling {STATIC_NAME}"))
            cache.write(table)
        return cls(table, tokenizer, cache.identity)


class TableCache:
    """The cache file of one source (weights and vocabulary digest) under one directory."""

    def __init__(self, directory: Path, source: str) -> None:
        self.source = source
        self.path = directory / f"{STATIC_NAME}-r{RECIPE}-{source[:16]}.safetensors"
        self.identity = f"{STATIC_NAME}/r{RECIPE}/{source[:16]}"
        self.meta = {"source_sha256": source, "recipe": str(RECIPE), "dims": str(PCA_DIMS)}

    def read(self) -> NDArray[np.float32] | None:
        return read_table(self.path, self.meta)

    def write(self, table: NDArray[np.float32]) -> None:
        try:
            write_table(self.path, table, self.meta)
        except OSError as exc:
            raise EmbeddingUnavailableError(
                f"cannot cache the distilled {STATIC_NAME} table at {self.path}: {exc};"
                " set retrieval.model_cache to a writable directory"
            ) from exc
