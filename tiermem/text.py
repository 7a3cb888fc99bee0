"""Word-level helpers shared by the offline scorer, episode search and the LoCoMo harness.

Tokens are lower-case alphanumeric runs; stop words are the common English
function words (the NLTK English list, inlined so nothing is downloaded).
"""

from __future__ import annotations

import re
from functools import lru_cache

WORD_RE = re.compile(r"[a-z0-9]+")


def wordset(text: str) -> frozenset[str]:
    """The whitespace-separated words of `text` (for word lists written as one string)."""
    return frozenset(text.split())


STOP_WORDS: frozenset[str] = wordset(
    """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she
    her hers herself it its itself they them their theirs themselves what which who whom this that
    these those am is are was were be been being have has had having do does did doing a an the and
    but if or because as until while of at by for with about against between into through during
    before after above below to from up down in out on off over under again further then once here
    there when where why how all any both each few more most other some such no nor not only own
    same so than too very s t can will just don should now d ll m o re ve y ain aren couldn didn
    doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn weren won wouldn
    """
)


# Under re.IGNORECASE an ASCII letter matches only itself, its capital and these
# four characters (checked over all of Unicode). So when a word is absent from
# `fold(text)`, no IGNORECASE pattern that needs that word can match `text`:
# a substring test that safely skips a slower regex scan.
_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})


def fold(text: str) -> str:
    if text.isascii():  # none of the four characters can be there: lower() alone is the same, and cheaper
        return text.lower()
    return text.translate(_FOLD).lower()


def folded_twin(rx: re.Pattern[str]) -> re.Pattern[str]:
    """`rx` (IGNORECASE, written in lower case) as a case-sensitive pattern to search `fold(text)` with.

    Whether it matches anywhere is the same (see above: fold keeps every character's
    place and kind, and maps each character that an ASCII letter matches under
    IGNORECASE to that letter), and a case-sensitive scan is cheaper. For a yes/no
    answer only: positions and groups are those of the folded text.
    """
    body = re.sub(r"\\.", "", rx.pattern)  # escapes such as \b or \S are not letters to match
    if not rx.flags & re.IGNORECASE or any(c.isupper() for c in body):
        raise ValueError(f"not an IGNORECASE pattern written in lower case: {rx.pattern[:60]!r}")
    return re.compile(rx.pattern, rx.flags & ~re.IGNORECASE)


def any_word_pattern(needed: tuple[str, ...]) -> re.Pattern[str]:
    """A case-sensitive literal alternation, to test `fold(text)` for any of `needed` in one scan."""
    return re.compile("|".join(re.escape(w) for w in needed))


def words(text: str) -> list[str]:
    return WORD_RE.findall(text.lower())


def content_words(text: str) -> list[str]:
    return [w for w in WORD_RE.findall(text.lower()) if w not in STOP_WORDS]


@lru_cache(maxsize=1 << 16)  # pure, and conversation reuses a small vocabulary
def stem(word: str) -> str:
    """A light suffix stripper so 'paintings' meets 'painting' and 'painted' meets 'paint'."""
    for suffix in ("ings", "ing", "edly", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            base = word[: -len(suffix)]
            if suffix == "es" and not base.endswith(("s", "x", "z", "ch", "sh")):
                return word[:-1]
            return base
    return word


def content_stems(text: str) -> list[str]:
    return [stem(w) for w in content_words(text)]
