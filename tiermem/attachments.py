"""Media shared with a turn: what an interaction's `attachments` may hold, and how it reads as text.

A turn can carry images, audio, files or links next to its words (a chat
export's photo, a shared document). Memory cannot look at the media, so what
it keeps is the description: each attachment is an object with a `kind`, a
`caption` (what the media shows or is about, as the sender or an image
captioner described it) and optionally the `url` it came from, its `mime`
type and the `query` the sender used to find it. The caption is part of the
turn: it is searched, scored and shown with the words the sender typed, so
"what did she paint?" can be answered by a photo of a sunset painting.

Limits are deliberately small (a caption is a sentence or two, not a
document): a record beyond them is refused naming the attachment and field.
Attachments belong to the side of the turn that shared them: the user's
message, or the agent's response when the user said nothing in that turn.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from tiermem.errors import ValidationError

ATTACHMENT_KINDS = ("image", "audio", "video", "file", "link")
MAX_ATTACHMENTS = 16
MAX_CAPTION_CHARS = 2_000
MAX_URL_CHARS = 2_048
MAX_QUERY_CHARS = 500
ATTACHMENT_FIELDS = ("kind", "caption", "url", "mime", "query")
_MIME = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}", re.I)
_URL = re.compile(r"(?:https?|file|s3)://\S+|[^\s:]+", re.I)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Image captioners start with "a photo of"; after "[image: " it says nothing.
_BOILERPLATE = re.compile(r"^(?:an? )?(?:photo|picture|image|close up|closeup) of (?=\S)", re.I)


def _text(name: str, value: Any, limit: int, *, single_line: bool = False) -> str:
    if not isinstance(value, str):
        raise ValidationError(name, f"expected a string, got {type(value).__name__}")
    if len(value) > limit:
        raise ValidationError(name, f"longer than {limit} characters ({len(value)})")
    if "\x00" in value or (single_line and _CONTROL.search(value)):
        raise ValidationError(name, "contains control characters")
    return value


def check_attachments(value: Any) -> list[dict[str, str]]:
    """The attachments of one interaction, checked and normalised (raises `ValidationError`)."""
    if not isinstance(value, list):
        raise ValidationError("attachments", f"expected a list of objects, got {type(value).__name__}")
    if len(value) > MAX_ATTACHMENTS:
        raise ValidationError("attachments", f"more than {MAX_ATTACHMENTS} attachments ({len(value)})")
    out: list[dict[str, str]] = []
    for i, item in enumerate(value):
        name = f"attachments[{i}]"
        if not isinstance(item, dict):
            raise ValidationError(name, f"expected an object, got {type(item).__name__}")
        unknown = sorted(str(k) for k in item if k not in ATTACHMENT_FIELDS)
        if unknown:
            raise ValidationError(
                f"{name}.{unknown[0]}", f"unknown field; allowed: {', '.join(ATTACHMENT_FIELDS)}"
            )
        kind = item.get("kind", "image")
        if kind not in ATTACHMENT_KINDS:
            raise ValidationError(
                f"{name}.kind", f"expected one of {', '.join(ATTACHMENT_KINDS)}, got {kind!r}"[:200]
            )
        checked = {"kind": str(kind)}
        caption = _text(f"{name}.caption", item.get("caption", ""), MAX_CAPTION_CHARS).strip()
        url = _text(f"{name}.url", item.get("url", ""), MAX_URL_CHARS, single_line=True).strip()
        if url and not _URL.fullmatch(url):
            raise ValidationError(f"{name}.url", "expected a URL or a path without spaces")
        mime = _text(f"{name}.mime", item.get("mime", ""), 200, single_line=True).strip()
        if mime and not _MIME.fullmatch(mime):
            raise ValidationError(
                f"{name}.mime", f"expected a media type such as image/jpeg, got {mime[:40]!r}"
            )
        query = _text(f"{name}.query", item.get("query", ""), MAX_QUERY_CHARS).strip()
        if not caption and not url:
            raise ValidationError(name, "needs a caption or a url")
        for key, val in (("caption", caption), ("url", url), ("mime", mime), ("query", query)):
            if val:
                checked[key] = val
        out.append(checked)
    return out


def describe(attachments: Sequence[Mapping[str, Any]] | None) -> str:
    """The attachments as words that can follow the turn's text: `[image: a sunset over a lake]`.

    A captioner's opening ("a photo of") is dropped: the kind already says it.

    Only the caption is words about the content; an attachment without one is
    named by its kind alone (a url is an address, not memory).
    """
    parts = []
    for item in attachments or ():
        if not isinstance(item, Mapping):
            continue
        caption = _BOILERPLATE.sub("", str(item.get("caption") or "").strip())
        kind = str(item.get("kind") or "image")
        parts.append(f"[{kind}: {caption}]" if caption else f"[{kind}]")
    return " ".join(parts)


def with_attachments(text: str, attachments: Sequence[Mapping[str, Any]] | None) -> str:
    """`text` followed by the description of its attachments (unchanged when there are none)."""
    extra = describe(attachments)
    if not extra:
        return text
    return f"{text} {extra}" if text.strip() else extra


# The descriptions `describe` appends: `[image: a sunset over a lake]`, `[file]`.
_DESCRIBED = re.compile(r"\s*\[(?:" + "|".join(ATTACHMENT_KINDS) + r")(?:: [^\]]*)?\]")


def split_described(text: str) -> tuple[str, str]:
    """A stored turn's text as (what was said, the descriptions of its attachments).

    The inverse of `with_attachments` on the stored form, so a reader can weigh
    or render the two parts differently: a captioner's words ("a man standing
    on a beach") are about the picture, not what the person said.
    """
    if "[" not in text:  # every description has one: most turns are not scanned
        return text, ""
    described = " ".join(m.group().strip() for m in _DESCRIBED.finditer(text))
    if not described:
        return text, ""
    return _DESCRIBED.sub("", text).strip(), described


_DESCRIPTION_PARTS = re.compile(r"\[(\w+)(?:: ([^\]]*))?\]")
_CAPTION_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'-]*")


def compact_described(said: str, described: str, stop_words: frozenset[str]) -> str:
    """The descriptions in their shortest readable form for a token-bound block.

    A captioner's sentence is mostly function words ("a man standing on a
    beach with a surfboard"): only its content words are kept, and those the
    turn itself already says are not repeated: `[image: man beach surfboard]`.
    """
    said_words = {w.lower() for w in _CAPTION_WORD.findall(said)}
    parts = []
    for kind, caption in _DESCRIPTION_PARTS.findall(described):
        words = [
            w
            for w in _CAPTION_WORD.findall(caption)
            if w.lower() not in stop_words and w.lower() not in said_words
        ]
        parts.append(f"[{kind}: {' '.join(dict.fromkeys(words))}]" if words else f"[{kind}]")
    return " ".join(parts)
