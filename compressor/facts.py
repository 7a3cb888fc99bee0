"""Offline fact extraction: what a turn says about someone, as atomic third-person statements.

A fact worth keeping reads on its own, long after the conversation: who, what,
and when in absolute terms. So a turn is cut into sentences and clauses (a
question is never a fact, and "I moved to Osaka, can you update my address?"
keeps only its first clause), each clause that states a preference, a
correction, a request or something about the speaker's life is rewritten in
the third person ("I moved to Osaka last month", said by alice on 21 November
2026, becomes "alice moved to Osaka in October 2026"), and each gets

- a category: `user` (about the person the agent talks to), `personal` (the
  agent's own context, what it says about itself);
- a topic: one word from a small vocabulary (family, work, home, health, ...)
  or, failing that, the clause's most telling word;
- a confidence, calibrated on who says it and how: a person speaking about
  themselves plainly is the surest source (a stated preference or correction
  more so), an agent reporting on the person's account less, an agent
  describing itself (in character, improvising) least; hedges ("maybe", "I
  think"), plans and jokes lower it.

Deterministic, no model. The signal patterns are shared with the offline
scorer, which also weighs them for importance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from tiermem.dates import human_date, resolve_relative_dates
from tiermem.similarity import normalize, text_similarity
from tiermem.text import STOP_WORDS, WORD_RE, any_word_pattern, content_words, fold, folded_twin, wordset

PREFERENCE_RE = re.compile(
    r"\b(i (?:really )?(?:love|like|enjoy|prefer|adore|hate|dislike|can't stand)|my fav(?:ou?rite)?|"
    r"i'm (?:a big )?fan of|i'm into|i'm passionate about|i'd rather)\b",
    re.IGNORECASE,
)
DISCLOSURE_RE = re.compile(
    r"\b(i am|i'm|i was|i have|i've|i had|i went|i got|i started|i finished|i just|i decided|i plan|"
    r"i'm planning|i'm going to|i work|i live|i moved|i bought|i made|i joined|i signed|my (?:wife|husband|"
    r"partner|kids?|son|daughter|mom|dad|mother|father|sister|brother|friend|family|dog|cat|job|boss|team|"
    r"birthday|name|home|house))\b",
    re.IGNORECASE,
)
CORRECTION_RE = re.compile(
    r"\b(actually|correction|i meant|to be clear|not quite|that's wrong|that's not right|no,|scratch that|"
    r"i misspoke|changed my mind)\b",
    re.IGNORECASE,
)
# Words each pattern cannot match without (see text.fold): skip the scan when absent.
PREFERENCE_WORDS = any_word_pattern(
    ("love", "like", "enjoy", "prefer", "adore", "hate", "stand", "fav", "fan of", "into", "passionate", "rather")
)  # fmt: skip
# Every alternative of DISCLOSURE_RE starts with "i " (a literal space), "i'" or "my ".
DISCLOSURE_WORDS = any_word_pattern(("i ", "i'", "my "))
CORRECTION_WORDS = any_word_pattern(
    ("actually", "correction", "meant", "clear", "quite", "wrong", "right", "no,", "scratch", "misspoke", "changed")
)  # fmt: skip


# The same patterns, searched in fold(text) without IGNORECASE: same yes/no, cheaper.
_PREFERENCE_FOLDED = folded_twin(PREFERENCE_RE)
_CORRECTION_FOLDED = folded_twin(CORRECTION_RE)
_DISCLOSURE_FOLDED = folded_twin(DISCLOSURE_RE)


def signals(text: str) -> tuple[bool, bool, bool]:
    """(states a preference, makes a correction, discloses something) anywhere in `text`."""
    low = fold(text)
    return (
        PREFERENCE_WORDS.search(low) is not None and _PREFERENCE_FOLDED.search(low) is not None,
        CORRECTION_WORDS.search(low) is not None and _CORRECTION_FOLDED.search(low) is not None,
        DISCLOSURE_WORDS.search(low) is not None and _DISCLOSURE_FOLDED.search(low) is not None,
    )


@dataclass(frozen=True)
class Statement:
    content: str  # the third-person statement
    category: str  # user | personal
    topic: str
    confidence: float
    is_correction: bool
    about_listener: bool  # a fact about the person the agent talks to
    quote: str  # the sentence as it was said


# ------------------------------------------------------------------ clauses

_SENTENCES = re.compile(r"(?<=[.!?;])\s+|\s+[—–]\s+|\s+--?\s+|\n+")
_QUESTION_START = r"(?:can|could|would|will|do|does|did|is|are|what|when|where|why|how|should|may|any)\b"
_QUESTION_TAIL = re.compile(rf",\s+(?={_QUESTION_START})", re.IGNORECASE)
# "..., and I made a bowl": a new clause with its own first-person subject.
_CLAUSE_JOIN = re.compile(r"(?:,|,?\s+(?:and|but|so|because|while))\s+(?=(?:I|i)(?:\b|')|[Mm]y\b)")
DISCOURSE = re.compile(
    r"^(?:(?:actually|oh|well|so|also|yeah|yes|no|nope|ok|okay|hey|wow|haha|lol|honestly|anyway|btw|"
    r"by the way|oh wait|wait|correction|to be clear|hmm|um|and|but|plus|sorry|omg|yay|ugh|thanks|"
    r"thank you|great|cool|nice|sure|right|oops|alright|guess what|got it|noted|done|understood|"
    r"sure thing|just so you know|fyi|of course|absolutely|certainly)\b[,:!.]?\s*)+",
    re.IGNORECASE,
)
_FIRST_PERSON = re.compile(r"\b(?:i|my|me|mine|myself)\b|\bI['’]", re.IGNORECASE)
_REQUEST = re.compile(r"^please\s+", re.IGNORECASE)
_YOUR_STATE = re.compile(r"^(?:your|you)\b.*\b(?:is|are|was|were|has|have|now)\b", re.IGNORECASE)
# What lowers the confidence of a statement, and by how much: a hedge, a plan
# (plans change), a joke, a "we" whose members are unknown.
_MODIFIERS = re.compile(
    r"\b(?:(?P<hedge>maybe|might|probably|perhaps|possibly|i think|i guess|i suppose|not sure|kind of|sort of|"
    r"if|unless)|(?P<plan>going to|gonna|plan to|plans to|planning to|will|want to|wanna|hope|hoping|"
    r"would like|thinking about|someday)|(?P<joke>lol|haha|hahaha|jk|kidding|joking)|(?P<group>we|our|us|ours))\b",
    re.IGNORECASE,
)
_PENALTY = {"hedge": 0.3, "plan": 0.1, "joke": 0.3, "group": 0.1}
# Words _MODIFIERS cannot match without: a clause with none of them is taken as said.
_MODIFIER_WORDS = wordset(
    "maybe might probably perhaps possibly think guess suppose sure kind sort if unless going gonna plan plans "
    "planning will want wanna hope hoping would thinking someday lol haha hahaha jk kidding joking we our us ours"
)
_SMALL = wordset(
    "hi hey hello bye goodbye thanks thank ok okay cool nice yeah yes yep sure lol haha wow great good "
    "awesome see later talk soon take care night morning"
)
MAX_PER_SPEAKER = 3


def clauses(text: str) -> list[tuple[str, str]]:
    """(clause, its sentence) for the statements of `text`: questions dropped, compound sentences cut."""
    out: list[tuple[str, str]] = []
    for sentence in _SENTENCES.split(text):
        sentence = sentence.strip()
        if not sentence:
            continue
        parts = _QUESTION_TAIL.split(sentence)
        if sentence.endswith("?"):
            parts = parts[:-1]  # the question itself; a statement before it stays
        for part in parts:
            out.extend((c.strip(), sentence) for c in _CLAUSE_JOIN.split(part) if c.strip())
    return out


# ------------------------------------------------------------------ rewriting

_TOKENS = re.compile(r"\s+|[A-Za-z]+(?:['’][A-Za-z]+)*|[^\sA-Za-z]+")
_ADVERBS = wordset(
    "really also just still usually always never often sometimes actually finally recently definitely "
    "totally absolutely mostly only even already truly honestly literally generally normally rarely "
    "seriously currently occasionally"
)
_MODALS = wordset(
    "can could will would should might must may did was had can't couldn't won't wouldn't shouldn't "
    "didn't wasn't hadn't mustn't"
)
_IRREGULAR_PAST = wordset(
    "went got had was made bought saw took came found gave knew left met ran said sent sold spent told "
    "thought won wrote began felt heard kept lost paid put read set sat stood built brought caught chose "
    "drove ate fell flew forgot grew held hurt led lent let meant rode rose sang shot shut slept spoke "
    "swam taught threw understood woke wore became did been done gone seen taken given broke chosen "
    "fought hid hung lay won"
)
_PRESENT_IN_ED = wordset("need feed seed bleed speed breed proceed succeed exceed embed shred heed")
_PRESENT = {
    "am": "is",
    "are": "is",
    "were": "was",
    "have": "has",
    "do": "does",
    "go": "goes",
    "don't": "doesn't",
    "haven't": "hasn't",
    "aren't": "isn't",
    "weren't": "wasn't",
}
_CONTRACTED = {"m": "is", "ve": "has", "ll": "will", "re": "is"}
_SUBJECT_JOINS = wordset("and but then so or")


def _third_person(verb: str) -> str:
    low = verb.lower()
    if low in _PRESENT:
        return _PRESENT[low]
    past = low.endswith("ed") and low not in _PRESENT_IN_ED
    if low in _MODALS or low in _IRREGULAR_PAST or past or low.endswith("ing") or not low.isalpha():
        return verb
    if low.endswith("y") and len(low) > 2 and low[-2] not in "aeiou":
        return verb[:-1] + "ies"
    if low.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    return verb + "s"


def _possessive(name: str) -> str:
    return f"{name}'" if name.endswith("s") else f"{name}'s"


# After the speaker has been named once, "I", "my" and "me" become singular
# "they" forms: "alice moved with their family", not "with alice's family".
_THEY = {"i": "they", "my": "their", "mine": "theirs", "me": "them", "myself": "themselves"}
_THEY_VERB = {"am": "are", "was": "were", "wasn't": "weren't"}
_THEY_CONTRACTED = {"m": "are", "ve": "have", "ll": "will", "d": "would", "re": "are"}


# The words `_Rewrite.word` turns (before any apostrophe): every other word is kept as
# written unless a verb is waiting for its new subject.
_PERSON_WORDS = frozenset(("i", "you", "your", "yours", "yourself", *_THEY))
_SPACES = re.compile(r"\s+")
_SPACE_BEFORE_MARK = re.compile(r"\s+([,.;:!?])")


class _Rewrite:
    """One pass over a clause's words, turning the first and second persons into third ones."""

    def __init__(self, speaker: str, listener: str, named: bool) -> None:
        self.speaker, self.listener, self.named = speaker, listener, named
        self.agree = ""  # how the next verb agrees with its new subject: "s", "they", or "" (as is)
        self.last = ""  # the previous word, lower case

    def first_person(self, tail: str) -> str:
        """I, I'm, I've, I'll, I'd."""
        named, self.named = self.named, True
        if tail:
            if named:
                return f"they {_THEY_CONTRACTED.get(tail, tail)}"
            return f"{self.speaker} {'would' if tail == 'd' else _CONTRACTED.get(tail, tail)}"
        if named and self.last in _SUBJECT_JOINS:
            self.agree = "s"
            return ""  # "..., and I made" -> "..., and made"
        # "my mom and I are close": a compound subject keeps its plural verb.
        self.agree = "they" if named else ("" if self.last == "and" else "s")
        return "they" if named else self.speaker

    def second_person(self, low: str, tail: str) -> str | None:
        """you, you're, your, yours, yourself (but "thank you" stays)."""
        if low in ("your", "yours"):
            return _possessive(self.listener)
        if low == "yourself":
            return self.listener
        if tail:
            return f"{self.listener} {'would' if tail == 'd' else _CONTRACTED.get(tail, tail)}"
        if self.last == "thank":
            return None
        self.agree = "s" if self.last in ("", *_SUBJECT_JOINS) else ""
        return self.listener

    def word(self, tok: str) -> str | None:
        """The replacement of one word, or None to keep it."""
        low = tok.lower().replace("’", "'")
        base, _, tail = low.partition("'")
        if not self.agree and base not in _PERSON_WORDS:
            return None  # most words: no person to turn and no verb waiting for its subject
        if base == "i" and tok[0] in "Ii":
            return self.first_person(tail)
        if base == "you" or low in ("your", "yours", "yourself"):
            return self.second_person(low, tail)
        if low in _THEY:
            if self.named:
                return _THEY[low]
            return _possessive(self.speaker) if low in ("my", "mine") else self.speaker
        if self.agree and low not in _ADVERBS:
            agree, self.agree = self.agree, ""
            return _THEY_VERB.get(low, tok) if agree == "they" else _third_person(tok)
        return None

    def run(self, clause: str) -> str:
        out: list[str] = []
        for tok in _TOKENS.findall(clause):
            first = tok[0]
            if first.isspace():  # a token is all whitespace or holds none
                out.append(" ")
                continue
            if not first.isalpha():
                out.append(tok)
                self.agree = ""  # punctuation ends the subject's reach
                continue
            low = tok.lower()
            if not self.agree and low.replace("’", "'").partition("'")[0] not in _PERSON_WORDS:
                out.append(tok)  # what `word` would keep, without the call
                self.last = low
                continue
            repl = self.word(tok)
            if repl is None:
                out.append(tok)
            elif repl:
                out.append(repl)
            elif out and out[-1] == " ":
                out.pop()
            self.last = low
        text = _SPACES.sub(" ", "".join(out)).strip()
        return _SPACE_BEFORE_MARK.sub(r"\1", text)


def third_person(clause: str, speaker: str, listener: str, *, named: bool = False) -> str:
    """`clause` with the speaker's I/me/my and the listener's you/your turned into third persons.

    `named`: the speaker's name already stands before the clause (so "I" is "they").
    """
    return _Rewrite(speaker, listener, named).run(clause)


# ------------------------------------------------------------------ topics

_TOPIC_WORDS: dict[str, str] = {
    word: topic
    for topic, words in {
        "family": "mom mum mother dad father sister brother kids kid son daughter wife husband partner family "
        "parents grandma grandmother grandpa grandfather baby children child cousin aunt uncle niece nephew",
        "pets": "dog dogs cat cats puppy kitten pet pets horse bird parrot hamster",
        "work": "job work boss office career company colleague colleagues coworker promotion hired interview "
        "shift manager clients client",
        "home": "moved move moving live lives house apartment flat home city address neighborhood rent hometown",
        "travel": "trip travel traveled travelled vacation holiday flight beach camping abroad hotel roadtrip tour",
        "food": "food eat ate cook cooking recipe ramen pizza dinner lunch breakfast restaurant vegan vegetarian "
        "coffee tea bake baking cake",
        "health": "health sick ill doctor hospital therapy therapist medication diagnosis diagnosed surgery injury "
        "injured pain anxiety depression allergic allergy pregnant mental cancer disease",
        "finances": "salary debt loan mortgage savings bank income money bankrupt",
        "billing": "invoice charge charged refund billing payment subscription plan price",
        "contact": "email phone contacted contact sms",
        "identity": "transgender trans gay lesbian queer lgbtq lgbt nonbinary gender sexuality bisexual",
        "beliefs": "church faith religion religious god pray praying politics political vote",
        "education": "school class course exam study studying university college degree teacher student "
        "homework graduate graduated",
        "hobbies": "painting paint painted art music guitar piano sing singing dance dancing hiking hike running "
        "swim swimming reading books book pottery photography gaming games sport sports soccer football yoga "
        "garden gardening knitting drawing concert",
        "friends": "friend friends friendship buddy",
        "relationships": "dating boyfriend girlfriend breakup married wedding engaged divorce",
        "events": "birthday party anniversary festival conference parade",
    }.items()
    for word in words.split()
}
_GENERIC = _SMALL | wordset(
    "really like just also much lot lots things thing gonna got get getting feel feeling know think totally "
    "super always last time making taking going sounds sound glad amazing definitely pretty way stuff "
    "something anything everything new lately recently well even still love loves prefer prefers enjoy "
    "enjoys want wants went made said says remember remembers quite favorite favourite"
)


def topic_of(text: str) -> str:
    """One word naming what `text` is about: the vocabulary's first match, else its most telling word."""
    return _topic(content_words(text))


def _topic(words: list[str]) -> str:
    """`topic_of` for a text whose content words are `words`."""
    for w in words:
        topic = _TOPIC_WORDS.get(w)
        if topic:
            return topic
    telling = [w for w in words if w not in _GENERIC and not w.isdigit() and len(w) > 3]
    return max(telling, key=len) if telling else "general"


# ------------------------------------------------------------------ extraction


def _confidence(base: float, clause: str, words: list[str] | None = None) -> float:
    """`words`: those of `fold(clause)` when the caller has them."""
    if _MODIFIER_WORDS.isdisjoint(WORD_RE.findall(fold(clause)) if words is None else words):
        return round(min(0.95, max(0.3, base)), 2)
    kinds = {m.lastgroup for m in _MODIFIERS.finditer(clause)}
    conf = base - sum(_PENALTY[k] for k in kinds if k)
    return round(min(0.95, max(0.3, conf)), 2)


def _finish(text: str) -> str:
    text = text.strip().rstrip(",;:-—– ")
    return text if text.endswith((".", "!")) else text + "."


# What an agent says about itself that describes it (not an action it took, not a promise).
_AGENT_SELF = re.compile(
    r"\b(?:i am|i'm|i was|i grew up|i used to|i remember|i've never|i have never|i never|i always|"
    r"i come from|i was born|my name)\b",
    re.IGNORECASE,
)
# A clause made only of how someone feels right now is a mood, not a fact.
_MOODS = wordset(
    "feel feels feeling felt excited happy sad glad sorry tired scared nervous worried upset angry thrilled "
    "proud grateful thankful stressed bored lonely okay fine good great well bad awesome amazing much "
    "really very super totally pumped honored blessed lucky relieved"
)


def substance(clause: str) -> list[str]:
    """The words of `clause` that carry content (not filler, not how someone feels)."""
    return [w for w in content_words(clause) if w not in _GENERIC and w not in _MOODS]


def _corrects(sentence: str) -> bool:
    low = fold(sentence)
    return CORRECTION_WORDS.search(low) is not None and _CORRECTION_FOLDED.search(low) is not None


def _prefers(clause: str) -> bool:
    low = fold(clause)
    return PREFERENCE_WORDS.search(low) is not None and _PREFERENCE_FOLDED.search(low) is not None


def _statement(
    clause: str, corr: bool, speaker: str, listener: str, speaker_is_user: bool, at: datetime
) -> tuple[str, float, bool] | None:
    """(third-person content, base confidence, about the listener) when `clause` states a fact."""
    first_person = _FIRST_PERSON.search(clause) is not None
    if speaker_is_user:
        if _REQUEST.match(clause):
            body = third_person(_REQUEST.sub("", clause), speaker, listener, named=True)
            return f"{speaker} asked {listener} to {body}", 0.85, True
        if first_person and (corr or _prefers(clause)):
            return third_person(clause, speaker, listener), 0.9, True
        if first_person and _DISCLOSURE_FOLDED.search(fold(clause)):
            return third_person(clause, speaker, listener), 0.8, True
        if corr:
            said = third_person(clause, speaker, listener, named=True)
            return f"According to {speaker} ({human_date(at)}), {said}", 0.8, True
        return None
    if first_person and (corr or _prefers(clause) or _AGENT_SELF.search(clause)):
        return third_person(clause, speaker, listener), 0.6, False
    if _YOUR_STATE.match(clause):
        return third_person(clause, speaker, listener), 0.75, True
    return None


def _resolved(content: str, at: datetime, time_phrases: tuple[str, ...] | None) -> str:
    if time_phrases is not None and not any(p in content for p in time_phrases):
        return content
    return resolve_relative_dates(content, at)


def extract(
    speaker: str,
    text: str,
    *,
    at: datetime,
    listener: str,
    speaker_is_user: bool,
    time_phrases: tuple[str, ...] | None = None,
) -> list[Statement]:
    """The statements one side of a turn makes, strongest first, at most `MAX_PER_SPEAKER`.

    `time_phrases`: the relative time phrases of the turn as written, when the caller
    has found them already (`dates.anchor_relative_dates`); only a statement holding
    one of them needs its dates resolved.
    """
    found: list[Statement] = []
    corrections: dict[str, bool] = {}
    for raw, sentence in clauses(text):
        clause = DISCOURSE.sub("", raw).strip().rstrip(".!;,")
        # The clause's words, read once for its substance, topic and confidence.
        words = WORD_RE.findall(fold(clause))
        # On ASCII text fold() is lower(): its content words are these minus the stop words.
        cwords = [w for w in words if w not in STOP_WORDS] if clause.isascii() else content_words(clause)
        if sum(1 for w in cwords if w not in _GENERIC and w not in _MOODS) < (2 if speaker_is_user else 3):
            continue
        if sentence not in corrections:  # a correction marker covers its whole sentence
            corrections[sentence] = _corrects(sentence)
        corr = corrections[sentence]
        made = _statement(clause, corr, speaker, listener, speaker_is_user, at)
        if made is None:
            continue
        content, base, about_listener = made
        found.append(
            Statement(
                content=_finish(_resolved(content, at, time_phrases)),
                category="user" if about_listener else "personal",
                topic=_topic(cwords),
                confidence=_confidence(base, clause, words),
                is_correction=corr,
                about_listener=about_listener,
                quote=sentence,
            )
        )
    found.sort(key=lambda s: (-s.is_correction, -s.confidence))
    return dedupe(found)[:MAX_PER_SPEAKER]


NEAR_DUPLICATE = 0.9


def dedupe(statements: list[Statement]) -> list[Statement]:
    """Drop statements that repeat an earlier one (same words, or nearly): the first is kept."""
    kept: list[Statement] = []
    seen: set[str] = set()
    if len(statements) < 2:
        return statements
    for s in statements:
        norm = normalize(s.content)
        if norm in seen or any(text_similarity(s.content, k.content) > NEAR_DUPLICATE for k in kept):
            continue
        seen.add(norm)
        kept.append(s)
    return kept
