"""The quote search's near-duplicate check over a run of results (runtime/near_duplicates.py, and its
compiled form runtime/_distinct.c): the same results kept as checking one result at a time with
the reference word sets and prefixes of tests/helpers_dedup.py."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest
from helpers_dedup import dedup_set
from tiermem.runtime import near_duplicates as pd
from tiermem.runtime import quote_search as qs

KEEP = qs.DUPLICATE_JACCARD
PATHS = ["python", "compiled"]


def _one_at_a_time(sets: list[np.ndarray], late: frozenset[int], limit: int) -> list[int]:
    """What the search kept before: each result's frozen set and prefix (`dedup_set`), compared with
    the kept results filed under a word of its prefix."""
    out: list[int] = []
    keys: list[frozenset[int]] = []
    by_word: dict[int, list[int]] = {}
    for i, words in enumerate(sets):
        at = np.array([0, len(words)], dtype=np.int64)
        key, prefix = dedup_set(words, at, 0, KEEP, late)
        met = {m for w in prefix for m in by_word.get(w, ())}
        if any(pd._near_identical(key, keys[m]) for m in met):
            continue
        for w in prefix:
            by_word.setdefault(w, []).append(len(keys))
        keys.append(key)
        out.append(i)
        if len(out) >= limit:
            break
    return out


def _run(path: str, sets: list[np.ndarray], late: frozenset[int], limit: int) -> list[int]:
    ranked: Iterator[tuple[int, np.ndarray]] = iter(list(enumerate(sets)))
    if path == "python":
        return pd.python_run(ranked, late, KEEP, limit)
    if pd._compiled is None:
        pytest.skip("the compiled check is not built")
    return pd.distinct_run(ranked, late, KEEP, limit)


def _shortlist(rng: random.Random) -> tuple[list[np.ndarray], frozenset[int]]:
    """A run of word sets, many of them near copies (a few words changed) of earlier ones, some
    exact copies, some small or empty; the question's words in most."""
    question = rng.sample(range(40), rng.randint(0, 6))
    sets: list[set[int]] = []
    for _ in range(rng.randint(1, 90)):
        roll = rng.random()
        if sets and roll < 0.35:
            words = set(rng.choice(sets))
            for _ in range(rng.randint(0, max(1, len(words) // 8))):
                if words and rng.random() < 0.5:
                    words.discard(rng.choice(sorted(words)))
                else:
                    words.add(rng.randrange(40, 3000))
        elif roll < 0.42:
            words = set(rng.sample(range(3000), rng.randint(0, 3)))
        else:
            words = set(rng.sample(range(40, 3000), rng.randint(5, 70)))
            words |= {w for w in question if rng.random() < 0.8}
        sets.append(words)
    late = frozenset(question) | frozenset(rng.sample(range(3000, 3100), 2))  # some never met
    return [np.array(sorted(s), dtype=np.int64) for s in sets], late


@pytest.mark.parametrize("path", PATHS)
def test_a_run_keeps_what_checking_one_result_at_a_time_keeps(path: str) -> None:
    rng = random.Random(11)
    dropped = 0
    for _ in range(600):
        sets, late = _shortlist(rng)
        limit = rng.choice([1, 5, 20, 40, 60, 200])
        expected = _one_at_a_time(sets, late, limit)
        assert _run(path, sets, late, limit) == expected
        dropped += min(len(sets), limit) - len(expected) if len(expected) < limit else 0
    assert dropped > 300  # near copies were met and dropped, not only kept


@pytest.mark.parametrize("path", PATHS)
def test_near_copies_are_dropped_and_different_sets_kept(path: str) -> None:
    base = np.arange(100, 150, dtype=np.int64)  # 50 words
    near = np.array(sorted([*range(100, 148), 900, 901]), dtype=np.int64)  # 48 shared of 52: 0.92
    apart = np.array(sorted([*range(100, 144), 902, 903, 904, 905, 906, 907]), dtype=np.int64)  # 0.78
    sets = [base, near, apart, base.copy()]
    assert _run(path, sets, frozenset(), 10) == [0, 2]
    # The question's words are filed last, whatever they are: the same answer.
    assert _run(path, sets, frozenset(range(100, 140)), 10) == [0, 2]
    # Two empty sets share no filing word and are both kept (as one result at a time kept them).
    empty = np.zeros(0, dtype=np.int64)
    assert _run(path, [empty, empty, base], frozenset(), 10) == [0, 1, 2]


@pytest.mark.parametrize("path", PATHS)
def test_the_limit_and_the_end_of_the_run(path: str) -> None:
    sets = [np.array([i, 1000 + i], dtype=np.int64) for i in range(10)]
    assert _run(path, sets, frozenset(), 3) == [0, 1, 2]
    assert _run(path, sets, frozenset(), 0) == [0]  # at least one, as the search always took
    assert _run(path, sets, frozenset(), 50) == list(range(10))
    assert _run(path, [], frozenset(), 5) == []


def test_the_compiled_check_refuses_sets_it_cannot_read() -> None:
    if pd._compiled is None:
        pytest.skip("the compiled check is not built")
    late = np.zeros(0, dtype=np.int64)
    for bad, error in [
        (np.array([3, 2], dtype=np.int64), ValueError),  # not ascending
        (np.array([2, 2], dtype=np.int64), ValueError),  # not distinct
        (np.array([1, 2], dtype=np.int32), TypeError),
        (np.array([[1, 2]], dtype=np.int64), TypeError),
    ]:
        with pytest.raises(error):
            pd._compiled.distinct_run(iter([(0, np.array([5], dtype=np.int64)), (1, bad)]), late, KEEP, 5)
    with pytest.raises(TypeError):
        pd._compiled.distinct_run(iter([0]), late, KEEP, 5)
    with pytest.raises(ValueError):
        pd._compiled.distinct_run(iter([]), np.array([4, 1], dtype=np.int64), KEEP, 5)


# Calls with a `keep` outside (0, 1]: each path must refuse them alike. Run in a child process, so
# that a path that reads or writes out of bounds fails this test instead of ending the test run.
_HOSTILE_KEEPS = r"""
import sys
import numpy as np
from tiermem.runtime import near_duplicates as pd

n = 600
sets = [np.arange(k * 10**7, k * 10**7 + n, dtype=np.int64) for k in range(1, 60)]
late = np.zeros(0, dtype=np.int64)
paths = [("python", lambda run, keep: pd.python_run(run, frozenset(), keep, 1000))]
if pd._compiled is not None:
    paths.append(("compiled", lambda run, keep: pd._compiled.distinct_run(run, late, keep, 1000)))
# -(2**61 - 512) / n: a prefix length near 2**61, whose buffer size in bytes wraps to a small one.
for keep in [float("nan"), float("inf"), -float("inf"), 1e300, -1e300, -(2**61 - 512) / n, 0.0, -0.5, 1.5]:
    for name, run in paths:
        try:
            got = run(iter(list(enumerate(sets))), keep)
            print(name, keep, "kept", len(got))
        except ValueError:
            print(name, keep, "ValueError")
        except Exception as error:
            print(name, keep, type(error).__name__)
        sys.stdout.flush()
for name, run in paths:
    print(name, 1.0, "kept", len(run(iter(list(enumerate(sets + sets))), 1.0)))
"""


def test_either_path_refuses_a_keep_outside_zero_to_one() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _HOSTILE_KEEPS], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    paths = 2 if pd._compiled is not None else 1
    assert len(lines) == 9 * paths + paths
    for line in lines[:-paths]:
        assert line.endswith(" ValueError"), line
    for line in lines[-paths:]:
        assert line.endswith(" 1.0 kept 59"), line  # the exact copies dropped: a sound keep still runs


def test_a_quote_search_keeps_the_same_results_on_either_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The flag the search reads: off, the Python path runs (and the same sets give the same answer)."""
    rng = random.Random(3)
    sets, late = _shortlist(rng)
    monkeypatch.setattr(pd, "ENABLED", False)
    python = pd.distinct_run(iter(list(enumerate(sets))), late, KEEP, 30)
    monkeypatch.setattr(pd, "ENABLED", pd._compiled is not None)
    assert pd.distinct_run(iter(list(enumerate(sets))), late, KEEP, 30) == python
    assert python == _one_at_a_time(sets, late, 30)
