"""Offline importance against a person's judgement (the labelled set in tests/data).

    .venv/bin/python bench/bench_importance.py [--labels tests/data/importance_labels.jsonl] [--show]

Prints Spearman's rank correlation between the offline scorer and the labels,
on the whole set and on its two interleaved halves (a rough check that the
agreement is not carried by a few turns), the hand-picked reference examples, and with
`--show` every turn whose score is two or more away from its label.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tiermem.compressor.calibration import load_labels, offline_scores, spearman

DEFAULT = Path(__file__).resolve().parent.parent / "tests" / "data" / "importance_labels.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labels", type=Path, default=DEFAULT)
    ap.add_argument("--show", action="store_true", help="list the turns scored 2+ away from their label")
    args = ap.parse_args()
    turns = load_labels(args.labels)
    scores = offline_scores(turns)
    labels = [t.label for t in turns]
    print(f"{len(turns)} labelled turns ({sum(t.source.startswith('seed') for t in turns)} hand-picked)")
    print(f"Spearman rank correlation, offline scorer vs labels: {spearman(scores, labels):.3f}")
    for name, part in (("even", range(0, len(turns), 2)), ("odd", range(1, len(turns), 2))):
        rho = spearman([scores[i] for i in part], [labels[i] for i in part])
        print(f"  {name} half ({len(part)} turns): {rho:.3f}")
    for t, s in zip(turns, scores, strict=True):
        if t.source.startswith("seed-004"):
            print(f"  seed example {t.id}: label {t.label}, offline score {s}")
    if args.show:
        for t, s in sorted(zip(turns, scores, strict=True), key=lambda p: p[0].label - p[1]):
            if abs(t.label - s) >= 2:
                print(f"  label {t.label:2d} score {s:2d}  {t.id}: {t.reason}")


if __name__ == "__main__":
    main()
