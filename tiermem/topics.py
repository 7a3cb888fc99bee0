"""A cheap, deterministic topic for a text: the keyword class it mentions most.

Memories get a topic when they are written (turns and facts when the hot store
applies them, ideas when the agent saves them), so a topic filter has
something to filter on without any model call.

The rule, in full:

1. The text is split into lower-case words (`WORD_RE`); a word ending in "s"
   also counts as the word without it ("trains" -> "train").
2. Each class in `TOPICS` scores the number of the text's words that are in
   its keyword list (a word repeated counts each time).
3. The class with the highest score is the topic; a tie goes to the class
   listed first. A text that hits no class has no topic (None): it stays
   untagged, and topic filters include untagged memories.

Topics are short lower-case names; a caller that gives its own topic keeps it.
"""

from __future__ import annotations

from tiermem.text import WORD_RE, wordset

# Listed in tie-break order: the more specific classes first.
TOPICS: dict[str, frozenset[str]] = {
    "health": wordset(
        "health doctor hospital medicine medication pill sick ill illness pain injury allergy allergic "
        "diet therapy therapist nurse surgery symptom fever flu cold headache sleep insomnia dentist "
        "exercise gym workout run running yoga"
    ),
    "family": wordset(
        "family mother mom mum father dad parent sister brother son daughter child kid baby wife "
        "husband partner grandmother grandma grandfather grandpa aunt uncle cousin wedding married "
        "birthday"
    ),
    "food": wordset(
        "food eat eating ate cook cooking recipe dinner lunch breakfast meal restaurant cafe coffee "
        "tea bake baking bread cake vegetarian vegan pizza pasta wine beer drink snack"
    ),
    "travel": wordset(
        "travel trip journey flight fly plane airport train station hotel holiday vacation visit "
        "visited abroad passport luggage suitcase tour beach ticket country city museum"
    ),
    "work": wordset(
        "work job office boss manager colleague coworker career meeting deadline project client "
        "customer salary interview hire hired promotion team shift contract business"
    ),
    "money": wordset(
        "money pay paid payment price cost budget bank loan debt rent invoice refund order purchase "
        "buy bought sell sold card account bill tax savings"
    ),
    "tech": wordset(
        "code coding software bug deploy deployment server database api test tests build release "
        "branch git python script app computer laptop phone password login error crash"
    ),
    "education": wordset(
        "school university college class course lesson study studying exam homework teacher student "
        "degree learn learning research thesis"
    ),
    "home": wordset(
        "home house apartment flat garden kitchen room move moved moving neighbour neighbor repair "
        "furniture clean cleaning pet dog cat"
    ),
    "hobbies": wordset(
        "hobby music song sing guitar piano paint painting draw drawing art book books read reading "
        "novel game games play film movie photo photography craft knit pottery dance hike hiking camping"
    ),
    "feelings": wordset(
        "feel feeling happy sad angry upset worried anxious anxiety stress stressed lonely scared "
        "afraid excited proud grateful love hate tired"
    ),
}


# Each keyword's classes, by position in TOPICS: the rule above looks a word up once, not in every class.
_ORDER = list(TOPICS)
_CLASSES_OF: dict[str, frozenset[int]] = {}
for _i, _name in enumerate(_ORDER):
    for _word in TOPICS[_name]:
        _CLASSES_OF[_word] = _CLASSES_OF.get(_word, frozenset()) | {_i}
_NONE: frozenset[int] = frozenset()


def detect_topic(*texts: str | None) -> str | None:
    """The topic of the given texts together (see the module doc), or None."""
    scores = [0] * len(_ORDER)
    classes_of = _CLASSES_OF
    for text in texts:
        for word in WORD_RE.findall((text or "").lower()):
            hit = classes_of.get(word, _NONE)
            if word.endswith("s") and len(word) > 3:  # a class counts the word once, in either form
                hit = hit | classes_of.get(word[:-1], _NONE)
            for i in hit:
                scores[i] += 1
    best = max(range(len(_ORDER)), key=scores.__getitem__)  # max keeps the first of equals
    return _ORDER[best] if scores[best] > 0 else None
