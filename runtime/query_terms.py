"""The words of a question as term groups: each content word with the forms that count as it.

"What did she make?" must meet "I made a vase", and "Who shopped there?" the
shop: a question's word is taken to its stem, irregular forms join it both
ways, and a few words that say how a question is asked rather than what it is
about are left out. The quote search scores passages by these groups.

A form of four letters or more matches every word it starts, a shorter one
only itself; so a stem cut below four letters must bring the forms it stands
for: "hiking" -> "hik" alone matches no word, so it brings "hike" and
"hiking"; "movies" brings "movie", "cities" "city";
a four-letter plural ("pets", "dogs") also counts its singular, and an
irregular verb is found by its stem too ("drawing" meets "drew").
"""

from __future__ import annotations

from tiermem.runtime.episode_search import _WORD, _names_in

from tiermem.text import STOP_WORDS, stem

# Words of how a question is asked rather than what it is about ("What kind of...", "Would X likely...").
# Measured on LoCoMo dev: dropping them lowered recall (their IDF is already low), so only these few.
QUESTION_FILLER = frozenset(["likely", "probably"])
# Irregular forms, so "What did she make?" meets "I made..." (both directions via the groups below).
_IRREGULAR = [
    "make made making",
    "go went gone going goes",
    "buy bought",
    "see saw seen",
    "take took taken",
    "give gave given",
    "meet met",
    "find found",
    "run ran",
    "win won",
    "teach taught",
    "bring brought",
    "feel felt",
    "leave left",
    "lose lost",
    "write wrote written",
    "begin began begun",
    "tell told",
    "say said",
    "sing sang sung",
    "swim swam",
    "drive drove driven",
    "ride rode",
    "eat ate eaten",
    "fly flew flown",
    "grow grew grown",
    "draw drew drawn",
    "know knew known",
    "break broke broken",
    "choose chose chosen",
    "catch caught",
    "fall fell fallen",
    "hear heard",
    "hold held",
    "keep kept",
    "sell sold",
    "send sent",
    "spend spent",
    "build built",
    "pay paid",
    "wear wore worn",
    "do did",
    "have had has",
    "think thought",
    "child children",
    "person people",
    "man men",
    "woman women",
]
_NOT_PLURAL = frozenset(["news", "lens"])  # four letters ending in s that are no plural of a word
_FORMS = {w: tuple(line.split()) for line in _IRREGULAR for w in line.split()}


def _normal_form(word: str) -> str:
    """A stem to match as a prefix: 'activities' -> 'activit', 'shopped' -> 'shop', 'status' stays."""
    if len(word) > 5 and word.endswith("ies"):
        return word[:-3]
    if word.endswith(("ss", "us", "is")):
        return word
    term = stem(word) if len(word) > 4 else word
    if term != word and len(term) >= 4 and term[-1] == term[-2] and term[-1] not in "aeiouls":
        term = term[:-1]  # doubled consonant before -ed/-ing
    return term


def _short_stem_forms(word: str, term: str) -> list[str]:
    """The forms a stem too short to match as a prefix stands for ('hiking' -> 'hik': 'hike', 'hiking')."""
    if term == word or len(term) >= 4:
        return []
    if word.endswith("ies"):
        return [word[:-3] + "y", word[:-1]]  # "cities" -> "city", "citie(s)"; "movies" -> "movie"
    if word.endswith(("ing", "ed")):
        return [term + "e", word]  # the silent e the suffix took: "hiking" -> "hike", "riding" -> "ride"
    return [word]


def _singular(word: str) -> list[str]:
    """A four-letter plural's singular ('pets' -> 'pet'): too short a stem to be taken as a prefix."""
    if (
        len(word) == 4
        and word.endswith("s")
        and not word.endswith(("ss", "us", "is"))
        and word not in _NOT_PLURAL
    ):
        return [word[:-1]]
    return []


def query_term_groups(query: str) -> list[tuple[str, ...]]:
    """Each content word of the query as the forms that count as it (stem first)."""
    out: list[tuple[str, ...]] = []
    names = _names_in(query)
    for word in _WORD.findall(query.lower()):
        if word in STOP_WORDS or word in QUESTION_FILLER or len(word) < 2:
            continue
        first = _normal_form(word)
        forms = [first, *_short_stem_forms(word, first), *_singular(word)]
        # An irregular verb by the word or its stem: "drawing" -> "draw" -> "drew", "drawn".
        for other in _FORMS.get(word) or _FORMS.get(first, ()):
            if other != word and len(_normal_form(other)) > 3:
                forms.append(_normal_form(other))
            elif other != word:
                forms.append(other)
        if word.endswith("e") and len(word) >= 4 and word not in names:
            forms.append(word[:-1] + "ing")  # "make" -> "making", which the prefix "make" misses
        group = tuple(dict.fromkeys(forms))
        if all(group[0] != g[0] for g in out):
            out.append(group)
    return out[:24]
