"""PNG charts for a review: what a person would rather look at than read.

One overview image per day and agent with three panels: enrichment coverage
per field (red below 100%, so an unwired field stands out), the response
length histogram, and tokens by model. Drawn with Pillow's primitives: a
review writes one image per agent and day, and a plotting library's figure
cost about a second each (hours for 10k agents); bars and labels cost
milliseconds.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

WIDTH, HEIGHT = 1350, 470
PANEL_TOP, PANEL_BOTTOM = 60, 400
GREEN, AMBER, RED, BLUE = (46, 125, 50), (249, 168, 37), (198, 40, 40), (21, 101, 192)
PURPLE, ORANGE, GREY, INK = (106, 27, 154), (239, 108, 0), (200, 200, 200), (20, 20, 20)

PALETTE = [255, 255, 255, *INK, *GREEN, *AMBER, *RED, *BLUE, *PURPLE, *ORANGE, *GREY]
_FONTS: dict[int, Any] = {}


def _font(size: int) -> Any:
    if size not in _FONTS:
        try:
            _FONTS[size] = ImageFont.load_default(size=size)
        except TypeError:  # Pillow without FreeType: the fixed bitmap font
            _FONTS[size] = ImageFont.load_default()
    return _FONTS[size]


# Rendering a label costs more than the rest of a chart: labels repeat from one
# agent's chart to the next (field names, titles, percentages), so each is drawn once.
_LABELS: dict[tuple[str, int], Image.Image] = {}
LABEL_CACHE = 4096


def _text(image: Image.Image, xy: tuple[float, float], text: str, size: int, anchor: str) -> None:
    """Draw `text` (anchor: horizontal l/m/r then vertical t/m) in ink, from a cache of rendered labels."""
    key = (text, size)
    mask = _LABELS.get(key)
    if mask is None:
        font = _font(size)
        left, top, right, bottom = font.getbbox(text)
        mask = Image.new("1", (right - left + 4, bottom - top + 2), 0)  # a margin for the last glyph
        ImageDraw.Draw(mask).text((-left, -top), text, fill=1, font=font)
        if len(_LABELS) >= LABEL_CACHE:
            _LABELS.clear()
        _LABELS[key] = mask
    w, h = mask.size
    x = xy[0] - {"l": 0, "m": w // 2, "r": w}[anchor[0]]
    y = xy[1] - {"t": 0, "m": h // 2, "s": h, "a": 0}[anchor[1]]
    image.paste(1, (int(x), int(y), int(x) + w, int(y) + h), mask)


def _axes(image: Image.Image, box: tuple[int, int, int, int], title: str) -> None:
    x0, y0, x1, y1 = box
    draw = ImageDraw.Draw(image)
    _text(image, ((x0 + x1) // 2, y0 - 22), title, 15, "mm")
    draw.line([(x0, y0), (x0, y1), (x1, y1)], fill=INK, width=1)


def _coverage(image: Image.Image, report: dict[str, Any], box: tuple[int, int, int, int]) -> None:
    x0, y0, x1, y1 = box
    draw = ImageDraw.Draw(image)
    _axes(image, box, "Enrichment coverage (% of interactions)")
    coverage = report["enrichment_coverage"]
    names = list(coverage)
    step = (y1 - y0) / max(len(names), 1)
    for i, name in enumerate(names):
        v = coverage[name] * 100
        color = GREEN if v >= 99.999 else (AMBER if v >= 50 else RED)
        top = y0 + i * step + 2
        draw.rectangle([x0 + 1, top, x0 + 1 + (x1 - x0 - 40) * v / 100, top + step - 4], fill=color)
        _text(image, (x0 - 6, top + step / 2 - 2), name, 11, "rm")
        _text(image, (x0 + 4 + (x1 - x0 - 40) * v / 100, top + step / 2 - 2), f"{v:.0f}%", 11, "lm")


def _bars(
    image: Image.Image,
    box: tuple[int, int, int, int],
    labels: list[str],
    series: list[tuple[list[float], tuple[int, int, int]]],
) -> None:
    x0, y0, x1, y1 = box
    draw = ImageDraw.Draw(image)
    top = max((max(values, default=0) for values, _c in series), default=0) or 1
    slot = (x1 - x0) / max(len(labels), 1)
    width = slot * 0.8 / len(series)
    for i, label in enumerate(labels):
        for s, (values, color) in enumerate(series):
            left = x0 + i * slot + slot * 0.1 + s * width
            height = (y1 - y0 - 10) * values[i] / top
            if height >= 1:
                draw.rectangle([left, y1 - height, left + width - 1, y1 - 1], fill=color)
        _text(image, (x0 + (i + 0.5) * slot, y1 + 6), label[:18], 10, "ma")
    _text(image, (x0 + 4, y0 - 4), f"max {top:,.0f}", 10, "ls")


def overview_bytes(report: dict[str, Any]) -> bytes:
    """The overview image of one report, as PNG bytes."""
    # A palette image: a dozen colours, so encoding it costs a tenth of a true-colour one.
    image = Image.new("P", (WIDTH, HEIGHT), 0)
    image.putpalette(PALETTE)
    draw = ImageDraw.Draw(image)
    _text(
        image,
        (WIDTH // 2, 16),
        f"tiermem review - agent {report['agent_id']} - {report['day']} - {report['interactions']} interactions",
        17,
        "mm",
    )
    _coverage(image, report, (160, PANEL_TOP, 500, PANEL_BOTTOM))
    hist = report["response_length_histogram"]
    _axes(image, (560, PANEL_TOP, 920, PANEL_BOTTOM), "Response length (characters)")
    _bars(
        image,
        (560, PANEL_TOP, 920, PANEL_BOTTOM),
        [f"{h['from']}-{h['to']}" if h["to"] is not None else f"{h['from']}+" for h in hist],
        [([float(h["count"]) for h in hist], BLUE)],
    )
    models = report["tokens_by_model"]
    box = (980, PANEL_TOP, 1330, PANEL_BOTTOM)
    _axes(image, box, f"Tokens by model (est. ${report['cost_usd']:.4f})")
    _bars(
        image,
        box,
        [str(m["model"]) for m in models],
        [
            ([float(m["input_tokens"]) for m in models], PURPLE),
            ([float(m["output_tokens"]) for m in models], ORANGE),
        ],
    )
    draw.rectangle([1200, 430, 1212, 442], fill=PURPLE)
    _text(image, (1216, 436), "input", 11, "lm")
    draw.rectangle([1260, 430, 1272, 442], fill=ORANGE)
    _text(image, (1276, 436), "output", 11, "lm")
    out = io.BytesIO()
    image.save(out, format="PNG", compress_level=1)
    return out.getvalue()


def overview_png(report: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(overview_bytes(report))
    return path
