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

from tiermem.compressor.scoring import BatchResult, EpisodeDraft, FactDraft, Interaction, Quote

from tiermem.dates import anchor_relative_dates, human_date, human_day, human_range
from tiermem.text import any_word_pattern, content_stems, content_words, fold, stem, wordset

MAX_EPISODE_TURNS = 8
MAX_GAP = timedelta(hours=2)
QUOTE_MIN_IMPORTANCE = 2

_NAME_RE = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-z]+(?:\s+[A-Z][a-z]+)*)")
_NUMBER_RE = re.compile(r"\b\d+(?:[.,:]\d+)?\b")
_MONTH_RE = re.compile(
    r"\b(january|february|march|april|may|june|july|august|september|october|november|december|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend|birthday|anniversary)\b",
    re.IGNORECASE,
)
_PREFERENCE_RE = re.compile(
    r"\b(i (?:really )?(?:love|like|enjoy|prefer|adore|hate|dislike|can't stand)|my fav(?:ou?rite)?|"
    r"i'm (?:a big )?fan of|i'm into|i'm passionate about|i'd rather)\b",
    re.IGNORECASE,
)
_DISCLOSURE_RE = re.compile(
    r"\b(i am|i'm|i was|i have|i've|i had|i went|i got|i started|i finished|i just|i decided|i plan|"
    r"i'm planning|i'm going to|i work|i live|i moved|i bought|i made|i joined|i signed|my (?:wife|husband|"
    r"partner|kids?|son|daughter|mom|dad|mother|father|sister|brother|friend|family|dog|cat|job|boss|team|"
    r"birthday|name|home|house))\b",
    re.IGNORECASE,
)
_CORRECTION_RE = re.compile(
    r"\b(actually|correction|i meant|to be clear|not quite|that's wrong|that's not right|no,|scratch that|"
    r"i misspoke|changed my mind)\b",
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


def _names(text: str) -> list[str]:
    return [n for n in _NAME_RE.findall(text) if n.split()[0] not in _COMMON_CAPS]


def _emotions(text: str) -> list[str]:
    return [_EMOTIONS[w] for w in content_words(text) if w in _EMOTIONS]


_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+")


# Words each pattern cannot match without (see text.fold): skip the scan when absent.
_PREFERENCE_WORDS = any_word_pattern(
    ("love", "like", "enjoy", "prefer", "adore", "hate", "stand", "fav", "fan of", "into", "passionate", "rather")
)  # fmt: skip
_CORRECTION_WORDS = any_word_pattern(
    ("actually", "correction", "meant", "clear", "quite", "wrong", "right", "no,", "scratch", "misspoke", "changed")
)  # fmt: skip
_MONTH_WORDS = any_word_pattern(
    ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
    "november", "december", "day", "weekend", "anniversary")
)  # fmt: skip


def _signals(text: str) -> tuple[bool, bool, bool]:
    """(states a preference, makes a correction, discloses something) anywhere in `text`."""
    low = fold(text)
    return (
        _PREFERENCE_WORDS.search(low) is not None and _PREFERENCE_RE.search(text) is not None,
        _CORRECTION_WORDS.search(low) is not None and _CORRECTION_RE.search(text) is not None,
        _DISCLOSURE_RE.search(text) is not None,
    )


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
        cwords = content_words(text)
        anchors = anchor_relative_dates(text, it.ts, folded=low)
        return cls(
            cwords=cwords,
            informative=sum(1 for w in cwords if w not in _SMALL_TALK),
            names=_names(text),
            anchors=anchors,
            emotions=[_EMOTIONS[w] for w in cwords if w in _EMOTIONS],
            stems=frozenset(stem(w) for w in cwords),
            dated=bool(
                anchors or _NUMBER_RE.search(text) or (_MONTH_WORDS.search(low) and _MONTH_RE.search(text))
            ),
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
        groups = self.group(batch, feats)
        episodes = [self.episode(g, scores, feats) for g in groups]
        facts = [f for it in batch for f in self.facts(it, scores[it.event_id], feats[it.event_id].sides)]
        return BatchResult(scores=scores, episodes=episodes, facts=facts, scorer=self.name)

    # ------------------------------------------------------------ grouping
    def group(
        self, batch: list[Interaction], feats: dict[str, _Features] | None = None
    ) -> list[list[Interaction]]:
        groups: list[list[Interaction]] = []
        vocab: Counter[str] = Counter()
        for it in batch:
            stems = feats[it.event_id].stems if feats else frozenset(content_stems(it.text))
            current = groups[-1] if groups else None
            new = current is None
            if current is not None:
                last = current[-1]
                if (
                    it.session_id != last.session_id
                    or it.user != last.user
                    or it.ts - last.ts > MAX_GAP
                    or len(current) >= MAX_EPISODE_TURNS
                ):
                    new = True
                elif len(current) >= 3 and len(stems) >= 5:
                    overlap = sum(1 for s in stems if vocab[s]) / len(stems)
                    new = overlap < 0.15  # the talk moved on to something else
            if new:
                groups.append([it])
                vocab = Counter(stems)
            else:
                groups[-1].append(it)
                vocab.update(stems)
        return groups

    # ------------------------------------------------------------ episodes
    def episode(
        self, group: list[Interaction], scores: dict[str, int], feats: dict[str, _Features] | None = None
    ) -> EpisodeDraft:
        feats = feats or {it.event_id: _Features.of(it) for it in group}
        start, end = group[0].ts, group[-1].ts
        participants = sorted({it.user for it in group if it.user})
        ranked = sorted(group, key=lambda it: (-scores[it.event_id], it.ts, it.event_id))
        keep = {it.event_id for it in ranked if scores[it.event_id] >= QUOTE_MIN_IMPORTANCE}
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
        name = f"{lead}: {' '.join(topics[:3]) or 'a chat'} ({human_range(start, end)})"
        return EpisodeDraft(
            name=name,
            summary=summary,
            member_ids=[it.event_id for it in group],
            key_quotes=quotes,
            emotional_context=emotional,
            importance=importance,
        )

    # ------------------------------------------------------------ facts
    def facts(
        self, it: Interaction, importance: int, sides: tuple[tuple[bool, bool, bool], ...] | None = None
    ) -> list[FactDraft]:
        out: list[FactDraft] = []
        sides = sides or tuple(_signals(side) for _speaker, side in it.spoken)
        for (speaker, text), side in zip(it.spoken, sides, strict=True):
            # A sentence can only match where its whole side does (same characters, same boundaries).
            if not any(side):
                continue
            sentences = _SENTENCE_SPLIT.split(text)
            for sentence in sentences:
                pref, corr, disc = side if len(sentences) == 1 else _signals(sentence)
                if not (pref or corr or disc):
                    continue
                sentence_words = content_words(sentence)
                if len(sentence_words) < 3:
                    continue
                is_user = speaker == it.user
                category = "user" if is_user else "personal"
                topic_words = [w for w in sentence_words if w not in _SMALL_TALK][:3]
                out.append(
                    FactDraft(
                        category=category,
                        content=f"{speaker} (on {human_date(it.ts)}): {sentence.strip()}",
                        topic=" ".join(topic_words),
                        participant=it.user if is_user else "",
                        confidence=0.7 if (pref or corr) else 0.5,
                        importance=importance,
                        is_correction=bool(corr),
                        evidence=[Quote(text=sentence.strip(), event_id=it.event_id, speaker=speaker)],
                    )
                )
        # One fact per speaker and turn: the strongest signal (correction > preference > disclosure).
        best: dict[str, FactDraft] = {}
        for f in out:
            speaker = f.evidence[0].speaker
            rank = (f.is_correction, f.confidence)
            if speaker not in best or rank > (best[speaker].is_correction, best[speaker].confidence):
                best[speaker] = f
        return list(best.values())
