"""PNG charts for a review: what a person would rather look at than read.

One overview image per day and agent with three panels: enrichment coverage
per field (red below 100%, so an unwired field stands out), the response
length histogram, and tokens by model. matplotlib with the Agg backend (no
display needed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # the backend must be chosen before this import


def overview_png(report: dict[str, Any], path: Path) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.2), gridspec_kw={"width_ratios": [1.2, 1, 1]})
    fig.suptitle(
        f"tiermem review — agent {report['agent_id']} — {report['day']} — {report['interactions']} interactions",
        fontsize=13,
    )

    ax = axes[0]
    coverage = report["enrichment_coverage"]
    names = list(coverage)[::-1]
    values = [coverage[n] * 100 for n in names]
    colors = ["#2e7d32" if v >= 99.999 else ("#f9a825" if v >= 50 else "#c62828") for v in values]
    ax.barh(names, values, color=colors)
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of interactions with the field set")
    ax.set_title("Enrichment coverage")
    for y, v in enumerate(values):
        ax.text(min(v + 1, 80), y, f"{v:.0f}%", va="center", fontsize=8)
    ax.tick_params(axis="y", labelsize=8)

    ax = axes[1]
    hist = report["response_length_histogram"]
    labels = [f"{h['from']}–{h['to']}" if h["to"] is not None else f"{h['from']}+" for h in hist]
    ax.bar(range(len(hist)), [h["count"] for h in hist], color="#1565c0")
    ax.set_xticks(range(len(hist)))
    ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
    ax.set_xlabel("response length (characters)")
    ax.set_ylabel("interactions")
    ax.set_title("Response length")

    ax = axes[2]
    models = report["tokens_by_model"]
    mnames = [m["model"] for m in models]
    x = range(len(models))
    ax.bar(
        [i - 0.2 for i in x], [m["input_tokens"] for m in models], width=0.4, label="input", color="#6a1b9a"
    )
    ax.bar(
        [i + 0.2 for i in x], [m["output_tokens"] for m in models], width=0.4, label="output", color="#ef6c00"
    )
    ax.set_xticks(list(x))
    ax.set_xticklabels(mnames, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("tokens")
    ax.set_title(f"Tokens by model (est. ${report['cost_usd']:.4f})")
    ax.legend(fontsize=8)

    fig.tight_layout(rect=(0, 0, 1, 0.94))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
