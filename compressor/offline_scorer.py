"""The deterministic offline scorer: importance from the signals a person would use.

No network, no model, same input same output. For each interaction it weighs
what makes a moment worth remembering (names and first mentions, dates and
numbers, stated preferences and self-disclosure, corrections, emotion, a
question that got a real answer) against what does not (greetings, thanks,
filler). Related consecutive interactions (same session and participant,
close in time, sharing vocabulary) are grouped into episodes; informative
turns are kept verbatim as key quotes, small talk is dropped, and the episode
text carries absolute dates, including the dates relative phrases point to.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from itertools import pairwise

from tiermem.compressor.facts import extract
from tiermem.compressor.facts import signals as _signals
from tiermem.compressor.naming import episode_name
from tiermem.compressor.scoring import BatchResult, EpisodeDraft, FactDraft, Interaction, Quote

from tiermem.attachments import split_described
from tiermem.dates import MONTHS, WEEKDAYS, anchor_relative_dates, human_day
from tiermem.similarity import normalize
from tiermem.text import (
    STOP_WORDS,
    WORD_RE,
    any_word_pattern,
    content_stems,
    content_words,
    fold,
    folded_twin,
    stem,
    wordset,
)

MAX_EPISODE_TURNS = 8
ANCHOR_LIMIT = 3  # relative time phrases anchored per turn (dates.anchor_relative_dates)
MAX_GAP = timedelta(hours=2)  # between turns that name no session
# A session the client named is one conversation even with long pauses in it
# (a chat left open over an afternoon); past this, it is picked up another day.
SESSION_GAP = timedelta(hours=8)
MIN_TOPIC_TURNS = 4  # an episode this long may end where the talk moves to another subject
TOPIC_OVERLAP = 0.15
# Turns scored below this are small talk, left out of an episode's key quotes, unless they answer
# a question (the turn before ends with "?"): a short answer ("Their name is Luna.", "They were
# awestruck and humbled.") scores as filler, yet only its words answer the question, and a turn no
# episode quotes can never be recalled. Measured on LoCoMo dev (lexical, 500 tokens, with the query
# word forms of runtime.query_terms): evidence recall 0.8364 -> 0.8383 with the answers kept,
# 0.8422 with every turn kept; but every turn kept cost the generated long-reply conversations
# answers ("Sounds good.", "Got it, noted." crowded small budgets: answer recall at 250 tokens 0.963
# -> 0.931), and the answers alone cost nothing there.
QUOTE_MIN_IMPORTANCE = 2

_NAME_RE = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-z]+(?:\s+[A-Z][a-z]+)*)")
_NUMBER_RE = re.compile(r"\b\d+(?:[.,:]\d+)?\b")
_MONTH_RE = re.compile(
    r"\b(january|february|march|april|may|june|july|august|september|october|november|december|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend|birthday|anniversary)\b",
    re.IGNORECASE,
)
_EMOTIONS: dict[str, str] = {
    w: label
    for label, ws in {
        "joy": "happy glad excited thrilled amazing awesome wonderful love loved fun proud delighted great",
        "gratitude": "thanks thank grateful appreciate appreciated thankful",
        "sadness": "sad miss missed lonely lost grief cry cried hurt heartbroken tough hard",
        "fear": "scared afraid worried anxious nervous stress stressed overwhelmed terrified",
        "anger": "angry mad furious annoyed frustrated upset",
        "hope": "hope hopeful dream dreams inspired inspiring motivated determined",
        "trust": "trust support supportive safe accepted belong understood",
    }.items()
    for w in ws.split()
}
_SMALL_TALK = wordset(
    "hi hey hello bye goodbye thanks thank ok okay cool nice yeah yes yep sure lol haha wow great good "
    "awesome see later talk soon take care night morning"
)
# Words too common in conversation to name what an episode was about.
_GENERIC = _SMALL_TALK | wordset(
    "really like just also much lot lots things thing gonna got get getting feel feeling know think "
    "totally super always last time making taking going sounds sound glad amazing definitely pretty way "
    "stuff something anything everything new lately recently well even still"
)
_COMMON_CAPS = wordset(
    "I I'm I've I'd I'll Hey Hi Hello Thanks Thank Wow Yeah Yes No Oh Ok Okay So Well That This It "
    "What When Where Why How Who The A An And But Or My Your We You He She They Me Sounds Great Good "
    "Awesome Cool Nice Sure Really Definitely Absolutely Congrats Congratulations Haha Lol"
)


# Capitalised, but a day or a month is not someone or somewhere worth a first mention.
_CALENDAR = frozenset((*MONTHS, *WEEKDAYS))


def _names(text: str) -> list[str]:
    return [n for n in _NAME_RE.findall(text) if n.split()[0] not in _COMMON_CAPS and n not in _CALENDAR]


def _emotions(text: str) -> list[str]:
    return [_EMOTIONS[w] for w in content_words(text) if w in _EMOTIONS]


# What makes a moment weigh more than its words: life events (births, deaths,
# unions and partings, health, work, moves, milestones), closeness and trust,
# rules the agent must keep, promises, who is who, and goals or identity. Each
# kind counts once, with the weight it adds to the score.
_WEIGHTY_KINDS: tuple[tuple[float, str, tuple[str, ...]], ...] = (
    (
        3.5,
        "adopt adopted adopting adoption pregnant pregnancy newborn born died dies death funeral married marry "
        "marriage wedding engaged divorce divorced divorcing breakup hospital hospitalized hospitalised "
        "diagnosed diagnosis surgery cancer allergic allergy allergies accident hired fired promoted promotion "
        "retire retired retiring retirement graduate graduated graduating graduation emergency",
        (
            "passed away", "broke up", "got the job", "new job", "laid off", "passed the", "passed my",
            "first time", "first marathon", "first child", "first baby", "first job", "saved my life",
            "lost my", "lost the",
        ),
    ),
    (
        3.0,
        "scared afraid terrified lonely alone trust safe accepted belong sleep cry cried grief",
        (
            "wake up", "still be here", "miss you", "love you", "can't believe", "hold you", "holds you",
            "stay with me", "stayed with me", "staying with me", "who are you",
        ),
    ),
    (
        2.5,
        "must",
        (
            "from now on", "make sure", "don't ever", "please keep", "we use", "we don't use", "in this repo",
            "our convention", "the rule",
        ),
    ),
    (
        2.0,
        "promise",
        (
            "i'll be here", "i will be here", "i'll be there", "i'll wait", "i'd do it again", "will update you",
            "i'll update you", "count on me", "i won't let",
        ),
    ),
    (
        2.0,
        "approves",
        (
            "my name is", "call me", "i'm the new", "i am the new", "is responsible for", "in charge of",
            "will take over", "takes over", "reports to",
        ),
    ),
    (
        2.0,
        "career transgender trans lgbtq identity",
        (
            "i want to be", "i want to become", "i want to help", "i want to work", "my dream", "my goal",
            "going into", "thinking of leaving", "leaving the team",
        ),
    ),
)  # fmt: skip
# "Always ..." or "never ..." said as a rule (at the start, after "please" or "I"),
# not "nature always cheers me up".
_RULE_WORDS = r"(?:^|[.!?]\s+|please\s+|\bi\s+)(?:always|never)\b"


def _needed_word(phrase: str) -> str:
    words = WORD_RE.findall(phrase.lower())
    content = [w for w in words if w not in STOP_WORDS and len(w) > 2]
    return content[-1] if content else max(words, key=len)


def _weighty_kind(
    words: str, phrases: tuple[str, ...], extra: bool
) -> tuple[re.Pattern[str], frozenset[str]]:
    """The pattern of one kind, and the words it cannot match without (its cheap pre-check)."""
    alternatives = [*words.split(), *phrases]
    # Each alternative needs each of its words; the pre-check asks for its rarest-looking one
    # (the last that is not a function word, else the longest): none present, no match.
    needs = {_needed_word(a) for a in alternatives}
    body = "|".join(re.escape(a) for a in sorted(alternatives, key=len, reverse=True))
    pattern = rf"\b(?:{body})\b"
    if extra:
        pattern += "|" + _RULE_WORDS
        needs |= {"always", "never"}
    return re.compile(pattern, re.IGNORECASE), frozenset(needs)


_WEIGHTY = tuple(
    (weight, *_weighty_kind(words, phrases, weight == 2.5)) for weight, words, phrases in _WEIGHTY_KINDS
)
WEIGHT_CAP = 5.0
# "today" or "tonight" places nothing worth remembering the way "last May" does.
_PRESENT_MOMENT = frozenset(("today", "tonight", "this morning", "this afternoon", "this evening"))


# Each kind's pattern searched in fold(text) without IGNORECASE: same yes/no, cheaper.
_WEIGHTY_FOLDED = tuple((weight, folded_twin(rx), needs) for weight, rx, needs in _WEIGHTY)


def _gravity(low: str, present: set[str]) -> float:
    """The weight of the kinds of moment a text is; `low` is `fold(text)`, `present` its words."""
    total = sum(
        weight for weight, rx, needs in _WEIGHTY_FOLDED if not needs.isdisjoint(present) and rx.search(low)
    )
    return min(WEIGHT_CAP, total)


_MONTH_WORDS = any_word_pattern(
    ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
    "november", "december", "day", "weekend", "anniversary")
)  # fmt: skip


_MONTH_FOLDED = folded_twin(_MONTH_RE)


@dataclass(frozen=True)
class _Features:
    """What the scorer reads from one interaction, computed once (scoring, grouping,
    episodes and facts all need the same words, names, dates and emotions)."""

    cwords: list[str]
    informative: int
    names: list[str]
    anchors: list[tuple[str, str]]
    emotions: list[str]
    stems: frozenset[str]
    dated: bool
    gravity: float
    # (preference, correction, disclosure) per side of it.spoken. No pattern can
    # span the newline joining the sides, so the turn matches iff a side does.
    sides: tuple[tuple[bool, bool, bool], ...]

    @property
    def preference(self) -> bool:
        return any(p for p, _c, _d in self.sides)

    @property
    def correction(self) -> bool:
        return any(c for _p, c, _d in self.sides)

    @property
    def disclosure(self) -> bool:
        return any(d for _p, _c, d in self.sides)

    @classmethod
    def of(cls, it: Interaction) -> _Features:
        text = it.text
        low = fold(text)
        words = WORD_RE.findall(low)
        # On ASCII text fold() is lower(): the content words are these words minus the stop words.
        cwords = [w for w in words if w not in STOP_WORDS] if text.isascii() else content_words(text)
        anchors = anchor_relative_dates(text, it.ts, ANCHOR_LIMIT, folded=low)
        return cls(
            cwords=cwords,
            informative=len([w for w in cwords if w not in _SMALL_TALK]),
            names=_names(text),
            anchors=anchors,
            emotions=[_EMOTIONS[w] for w in cwords if w in _EMOTIONS],
            stems=frozenset(map(stem, cwords)),
            dated=bool(
                any(phrase.lower() not in _PRESENT_MOMENT for phrase, _ in anchors)
                or _NUMBER_RE.search(text)
                or (_MONTH_WORDS.search(low) and _MONTH_FOLDED.search(low))
            ),
            gravity=_gravity(low, set(words)),
            sides=tuple(_signals(side) for _speaker, side in it.spoken),
        )


class OfflineScorer:
    """Deterministic importance, grouping and fact extraction; see the module docstring."""

    name = "offline"
    deterministic = True  # same input, same output: the job need not keep its answers

    def score_interaction(
        self, it: Interaction, prev: Interaction | None, seen: set[str], feats: _Features | None = None
    ) -> int:
        f = feats or _Features.of(it)
        informative = f.informative
        score = 1.0
        score += min(informative / 6.0, 2.0)  # substance
        score += min(len(f.names) * 0.5, 1.0)
        new_names = [n for n in f.names if n.lower() not in seen]
        score += 1.0 if new_names else 0.0  # a first mention is worth remembering
        if f.dated:
            score += 1.5
        if f.preference:
            score += 1.5
        if f.disclosure:
            score += 0.5
        if f.correction:
            score += 1.5
        score += min(len(f.emotions) * 0.5, 1.5)
        score += f.gravity
        if prev is not None and prev.text.rstrip().endswith("?") and informative >= 4:
            score += 0.5  # a question that got a real answer
        if informative <= 2:
            score -= 1.5  # greeting, thanks, filler
        return max(1, min(10, round(score)))

    def score_batch(self, agent_id: str, batch: list[Interaction]) -> BatchResult:
        feats = {it.event_id: _Features.of(it) for it in batch}
        scores: dict[str, int] = {}
        seen: set[str] = set()
        prev: Interaction | None = None
        for it in batch:
            f = feats[it.event_id]
            scores[it.event_id] = self.score_interaction(it, prev, seen, f)
            seen.update(n.lower() for n in f.names)
            prev = it
        stated = {it.event_id: self.facts(it, scores[it.event_id], feats[it.event_id]) for it in batch}
        groups = self.group(batch, feats)
        episodes = [self.episode(g, scores, feats, stated) for g in groups]
        facts = merge_repeats([f for it in batch for f in stated[it.event_id]])
        return BatchResult(scores=scores, episodes=episodes, facts=facts, scorer=self.name)

    # ------------------------------------------------------------ grouping
    def group(
        self, batch: list[Interaction], feats: dict[str, _Features] | None = None
    ) -> list[list[Interaction]]:
        groups: list[list[Interaction]] = []
        vocab: set[str] = set()  # the stems of the episode so far
        for it in batch:
            stems = feats[it.event_id].stems if feats else frozenset(content_stems(it.text))
            current = groups[-1] if groups else None
            new = current is None
            if current is not None:
                last = current[-1]
                gap = SESSION_GAP if it.session_id else MAX_GAP
                if (
                    it.session_id != last.session_id
                    or it.user != last.user
                    or it.ts - last.ts > gap
                    or len(current) >= MAX_EPISODE_TURNS
                ):
                    new = True
                elif len(current) >= MIN_TOPIC_TURNS and len(stems) >= 5:
                    overlap = sum(1 for s in stems if s in vocab) / len(stems)
                    new = overlap < TOPIC_OVERLAP  # the talk moved on to something else
            if new:
                groups.append([it])
                vocab = set(stems)
            else:
                groups[-1].append(it)
                vocab.update(stems)
        return groups

    # ------------------------------------------------------------ episodes
    def episode(
        self,
        group: list[Interaction],
        scores: dict[str, int],
        feats: dict[str, _Features] | None = None,
        stated: dict[str, list[FactDraft]] | None = None,
    ) -> EpisodeDraft:
        feats = feats or {it.event_id: _Features.of(it) for it in group}
        if stated is None:
            stated = {it.event_id: self.facts(it, scores[it.event_id], feats[it.event_id]) for it in group}
        start = group[0].ts
        participants = sorted({it.user for it in group if it.user})
        ranked = sorted(group, key=lambda it: (-scores[it.event_id], it.ts, it.event_id))
        keep = {it.event_id for it in ranked if scores[it.event_id] >= QUOTE_MIN_IMPORTANCE}
        # ...and every answer to a question, however short: only its words answer it. The question
        # is what was said, without the description of an image shared with it.
        keep |= {b.event_id for a, b in pairwise(group) if split_described(a.text)[0].rstrip().endswith("?")}
        if not keep:
            keep = {ranked[0].event_id}
        quotes = [
            Quote(text=text, event_id=it.event_id, speaker=speaker)
            for it in group
            if it.event_id in keep
            for speaker, text in it.spoken
        ]
        weights: dict[str, float] = {}
        for it in group:
            for w in feats[it.event_id].cwords:
                if w not in _GENERIC and not w.isdigit() and len(w) > 2:
                    weights[w] = weights.get(w, 0.0) + 1 + scores[it.event_id] / 10
        topics = [w for w, _ in sorted(weights.items(), key=lambda kv: (-kv[1], kv[0]))[:4]]
        speakers = list(dict.fromkeys(s for it in group for s, _ in it.spoken))
        who = " and ".join(speakers) if speakers else "someone"
        anchors: list[str] = []
        for it in group:
            for phrase, resolved in feats[it.event_id].anchors:
                anchors.append(f'"{phrase}" = {resolved}')
        summary = f"{who}, {human_day(start)}: {', '.join(topics) or 'small talk'}."
        if anchors:
            summary += " " + "; ".join(dict.fromkeys(anchors)) + "."
        emotions = Counter(e for it in group for e in feats[it.event_id].emotions)
        emotional = ", ".join(e for e, _ in emotions.most_common(3))
        top = max(scores[it.event_id] for it in group)
        strong = sum(1 for it in group if scores[it.event_id] >= 7)
        importance = max(1, min(10, top + (1 if strong >= 3 else 0)))
        lead = speakers[0] if speakers else (participants[0] if participants else "")
        name = episode_name(ranked, stated, participants, lead, top)
        return EpisodeDraft(
            name=name,
            summary=summary,
            member_ids=[it.event_id for it in group],
            key_quotes=quotes,
            emotional_context=emotional,
            importance=importance,
        )

    # ------------------------------------------------------------ facts
    def facts(self, it: Interaction, importance: int, feats: _Features | None = None) -> list[FactDraft]:
        """Atomic third-person statements from each side of the turn (see `facts.extract`)."""
        out: list[FactDraft] = []
        feats = feats or _Features.of(it)
        sides = feats.sides
        for i, ((speaker, text), side) in enumerate(zip(it.spoken, sides, strict=True)):
            # Every statement needs one of the signals, or a "your ..." report by the agent.
            is_user = i == 0 and bool(it.user_message.strip())  # the user's side is spoken first
            if not any(side) and ("please" if is_user else "your") not in text.lower():
                continue
            listener = it.agent_name if is_user else (it.user or "the user")
            made = extract(
                speaker,
                text,
                at=it.ts,
                listener=listener,
                speaker_is_user=is_user,
                # Anchoring stops at a few phrases; past that, let every statement be resolved.
                time_phrases=tuple(p for p, _ in feats.anchors)
                if len(feats.anchors) < ANCHOR_LIMIT
                else None,
            )
            for s in made:
                out.append(
                    FactDraft(
                        category=s.category,
                        content=s.content,
                        topic=s.topic,
                        participant=it.user if s.about_listener else "",
                        confidence=s.confidence,
                        importance=importance,
                        is_correction=s.is_correction,
                        evidence=[Quote(text=s.quote, event_id=it.event_id, speaker=speaker)],
                    )
                )
        return out


def merge_repeats(facts: list[FactDraft]) -> list[FactDraft]:
    """One draft per thing said: a statement repeated in the batch keeps every turn as evidence."""
    first: dict[tuple[str, str, str], FactDraft] = {}
    for f in facts:
        key = (f.participant, f.category, normalize(f.content))
        kept = first.get(key)
        if kept is None:
            first[key] = f
            continue
        kept.evidence.extend(f.evidence)
        kept.confidence = max(kept.confidence, f.confidence)
        kept.importance = max(kept.importance, f.importance)
        kept.is_correction = kept.is_correction or f.is_correction
    return list(first.values())
