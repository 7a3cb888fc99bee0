"""The compiled counting steps refuse an output array that shares memory with one of their inputs.

runtime._blockscore's counting functions check every index they read from an
input once, before writing, then write into the caller's `out`. An input that
is a view of `out`'s own bytes would change under those writes: a checked
index would become a number far outside the arrays (a crash, or a write
anywhere). Each call here passes such a view; it must raise ValueError. Each
runs in a child interpreter, so that a crash fails the test instead of the
test run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from tiermem.runtime import passage_compiled

PRELUDE = """
from array import array
import numpy as np
from tiermem.runtime import _blockscore as m
def refused(call):
    try:
        call()
    except ValueError as e:
        print("refused:", e)
    else:
        print("accepted")
"""

CASES = {
    # `near` is out's first four cells: zero bits (passage 0) when checked, counts once written.
    "near_counts: near in out": """
        out = np.zeros((4, 2))
        near = out.view(np.int64).ravel()[0:4]
        one = np.zeros(1, dtype=np.int64)
        lists = ((array('q', [0]), array('q', [1])),)
        refused(lambda: m.near_counts(lists, np.array([0]), one, one, one, near, (np.zeros((1, 2)),), out))
    """,
    # A word's group read from out's bytes: 1 and 0 when checked, then the bits of a count.
    "near_counts: groups in out": """
        out = np.zeros((1, 2))
        out[0, 0] = 5e-324
        groups = out.view(np.int64).ravel()[0:2]
        one = np.zeros(1, dtype=np.int64)
        lists = ((array('q', [0]), array('q', [1])), (array('q', [0]), array('q', [1])))
        refused(lambda: m.near_counts(lists, groups, one, one, one, one, (), out))
    """,
    # A word's postings in out's bytes.
    "near_counts: postings in out": """
        out = np.zeros((1, 1))
        pids = out.view(np.int64).ravel()
        one = np.zeros(1, dtype=np.int64)
        lists = ((pids, array('q', [1])),)
        refused(lambda: m.near_counts(lists, np.array([0]), one, one, one, one, (), out))
    """,
    # A range's offset read from out's bytes: 0 when checked, the bits of 1.0 after the first word.
    "inside_counts: offsets in out": """
        out = np.zeros((2, 1))
        offsets = out.view(np.int64).ravel()[0:1]
        starts, sizes = np.array([0]), np.array([2])
        post = [array('q', [0, 1]), array('q', [0, 1])]
        cnt = [array('q', [1, 1]), array('q', [1, 1])]
        refused(lambda: m.inside_counts(post, cnt, [(0, 0), (1, 0)], starts, sizes, offsets, out, 1))
    """,
    "inside_counts: counts in out": """
        out = np.zeros((2, 1))
        cnt = [out.view(np.int64).ravel()]
        refused(lambda: m.inside_counts(
            [array('q', [0, 1])], cnt, [(0, 0)], np.array([0]), np.array([2]), np.array([0]), out, 1))
    """,
    "block_sums: rows in out": """
        out = np.zeros((2, 1))
        rows = out.view(np.int64).ravel()[0:1]
        one = np.zeros(1, dtype=np.int64)
        maxima = ((np.array([0, 1]), np.array([1, 1]), 0),)
        refused(lambda: m.block_sums(maxima, one, np.array([2]), rows, out, 1))
    """,
    "block_sums: found in out": """
        out = np.zeros((2, 1))
        found = out.view(np.int64).ravel()
        one = np.zeros(1, dtype=np.int64)
        maxima = ((found, np.array([1, 1]), 0),)
        refused(lambda: m.block_sums(maxima, one, np.array([2]), one, out, 1))
    """,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_output_sharing_memory_with_an_input_is_refused(case: str) -> None:
    if passage_compiled._blockscore is None:
        pytest.skip("the optional extension tiermem.runtime._blockscore is not built")
    script = PRELUDE + textwrap.dedent(CASES[case])
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.startswith("refused: out: shares memory with an input"), done.stdout


def test_an_output_apart_from_its_inputs_is_counted() -> None:
    """The refusal looks at bytes, not at arrays: separate arrays (even of one base) are counted."""
    m = passage_compiled._blockscore
    if m is None:
        pytest.skip("the optional extension tiermem.runtime._blockscore is not built")
    base = np.zeros(6)
    out = base[0:2].reshape(2, 1)
    offsets = base[2:3].view(np.int64)  # the same allocation, other bytes: fine
    m.inside_counts(
        [np.array([0, 1])], [np.array([3, 4])], [(0, 0)], np.array([0]), np.array([2]), offsets, out, 1
    )
    assert out.ravel().tolist() == [3.0, 4.0]
