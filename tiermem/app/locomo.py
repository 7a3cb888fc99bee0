"""The LoCoMo budget protocol (../shared/bench/README.md): tiermem against BM25 over dated turns.

Turn mapping: one interaction per LoCoMo turn. Each conversation is one agent
(`locomo-<sample_id>`, display name speaker_a, set as `metadata.agent_name`);
speaker_b is the participant (`user`). A speaker_a turn is an interaction
with only `agent_response`, a speaker_b turn one with only `user_message`.
Timestamps are the session date-time (UTC) plus one second per turn, so order
and day survive; `metadata.dia_id` keeps the turn's LoCoMo id. A shared image
(`img_url`, `blip_caption`, `query`) becomes the interaction's `attachments`
entry: its caption is part of the turn, for tiermem (searched and shown with
the turn) and for the baseline (`Speaker: text [image: caption]`), and when
scoring (a cited turn's content words include its caption's).

Pipeline, exactly as a user runs it, offline, in a temporary data root:
`EventLog.append_many` (the public write path) -> `run_compress` ->
`run_evolve` (when the evolver is installed) -> projector. Then, per question
of categories 1-4, the delivered memory is what `recall_memory` shows for
the question (`runtime.quote_search.recall_lines`: the agent's remembered
turns ranked one by one across episodes, taken best first while they fit the
budget, shown under one date header per day with relative dates resolved,
e.g. `8 May 2023:` / `Caroline: I went ... yesterday (yesterday = 7 May 2023)`,
the dates being the compressor's derived notes for the turn),
and the runtime's `assemble_context` (the question as query; the fixed
prompt sections excluded), split by `runtime.recall_share`: the recalled
turns for `share x budget` first, the context in the rest, told which turns
they are so its retrieval does not repeat them (a fact line cites the turns
it was derived from), and the recalled turns take every token left; packed line by line
(never cut) until the budget (tokens = ceil(len(text)/4) over the whole
delivered text). Each delivered line keeps the section it came from, so the
result attributes tokens, evidence and answer words per section (`sections`).

Scores (micro-averaged, overall and per category):
- evidence_recall_verbatim: a gold evidence turn's text appears whole;
- evidence_recall_cited: a delivered item lists the turn's event id and the
  item's delivered text contains at least half of the turn's content words
  (with or without its image caption);
- evidence_recall: either;
- answer_recall / answer_full: share of the gold answer's content tokens
  (lower-case alphanumerics minus stop words) present in the delivered text,
  and whether all are. An answer with no content token (e.g. "no") is
  scored on all its tokens.
"""

from __future__ import annotations

import math
import re
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from tiermem.attachments import with_attachments
from tiermem.dates import MONTHS
from tiermem.errors import ConfigError
from tiermem.ids import derived_event_id, format_ts
from tiermem.settings import RetrievalMode, Settings, resolve_settings
from tiermem.text import STOP_WORDS, WORD_RE

CATEGORIES = ("1", "2", "3", "4")
METRICS = (
    "evidence_recall",
    "evidence_recall_verbatim",
    "evidence_recall_cited",
    "answer_recall",
    "answer_full",
    "mean_tokens",
    "n",
    "latency_p50_ms",
    "latency_p99_ms",
)


# ------------------------------------------------------------------ data


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    session: int
    session_date: str  # as written in the data, e.g. "1:56 pm on 8 May, 2023"
    ts: datetime
    event_id: str
    attachments: tuple[dict[str, str], ...] = ()

    @property
    def full_text(self) -> str:
        """The turn with its images' captions, as both systems see it."""
        return with_attachments(self.text, self.attachments)


CATEGORY_NAMES = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop"}


@dataclass
class Question:
    question: str
    answer: str
    evidence: list[str]
    category: str


@dataclass
class Conversation:
    sample_id: str
    speaker_a: str
    speaker_b: str
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)

    @property
    def agent_id(self) -> str:
        return f"locomo-{self.sample_id}"


_DATE_RE = re.compile(r"(\d{1,2}):(\d{2})\s*(am|pm)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})", re.I)
_MONTHS = {m.lower(): i + 1 for i, m in enumerate(MONTHS)}


def parse_session_date(text: str) -> datetime:
    m = _DATE_RE.search(text)
    if not m:
        raise ConfigError(f"unrecognised LoCoMo session date {text!r}")
    hour, minute, ampm, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    return datetime(int(year), _MONTHS[month.lower()], int(day), h, int(minute), tzinfo=UTC)


_EVIDENCE_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")


def normalize_evidence(raw: Iterable[Any]) -> list[str]:
    """Every turn id in the evidence, however written: "D8:6; D9:17", "D1:3 D1:4", "D:11:26", "D1: 3", "D30:05"."""
    out: list[str] = []
    for item in raw:
        for session, turn in _EVIDENCE_ID.findall(str(item)):
            out.append(f"D{int(session)}:{int(turn)}")
    return list(dict.fromkeys(out))


_GLUED_DATE = re.compile(r"\b(\d{1,2})(" + "|".join(MONTHS) + r")\b", re.I)


def normalize_answer(answer: str) -> str:
    """A gold answer with a day and month written together apart ("3June, 2022" -> "3 June, 2022").

    About twenty temporal answers of the data glue the day to the month; read
    as one word, no delivered date could ever state them (the same fix for
    both systems, like the evidence ids above).
    """
    return _GLUED_DATE.sub(r"\1 \2", answer)


def turn_attachments(turn: dict[str, Any]) -> tuple[dict[str, str], ...]:
    """A LoCoMo turn's shared image (`img_url`, `blip_caption`, `query`) as interaction attachments."""
    caption = str(turn.get("blip_caption") or "").strip()
    urls = turn.get("img_url") or []
    urls = [urls] if isinstance(urls, str) else [str(u) for u in urls if u]
    if not caption and not urls:
        return ()
    item = {"kind": "image"}
    if caption:
        item["caption"] = caption
    if urls:
        item["url"] = urls[0]
    if turn.get("query"):
        item["query"] = str(turn["query"])
    return (item,)


def load_locomo(path: Path | str) -> list[Conversation]:
    try:
        raw = orjson.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise ConfigError(f"LoCoMo data not found: {path}") from None
    convs = []
    for sample in raw:
        c = sample["conversation"]
        conv = Conversation(str(sample["sample_id"]), c["speaker_a"], c["speaker_b"])
        sessions = sorted(
            int(k.split("_")[1]) for k in c if re.fullmatch(r"session_\d+", k) and c.get(f"{k}_date_time")
        )
        for n in sessions:
            date_text = c[f"session_{n}_date_time"]
            start = parse_session_date(date_text)
            for k, t in enumerate(c[f"session_{n}"]):
                ts = start + timedelta(seconds=k)
                eid = derived_event_id(ts, "locomo-turn", conv.sample_id, t["dia_id"])
                conv.turns.append(
                    Turn(t["dia_id"], t["speaker"], t["text"], n, date_text, ts, eid, turn_attachments(t))
                )
        for q in sample["qa"]:
            cat = str(q.get("category"))
            evidence = normalize_evidence(q.get("evidence") or [])
            if cat not in CATEGORIES or not evidence or "answer" not in q:
                continue  # category 5 (adversarial) and the few questions without evidence
            conv.questions.append(Question(q["question"], normalize_answer(str(q["answer"])), evidence, cat))
        convs.append(conv)
    return convs


def interaction_events(conv: Conversation, *, captions: bool = True) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t in conv.turns:
        by_agent = t.speaker == conv.speaker_a
        out.append(
            {
                "type": "interaction",
                "event_id": t.event_id,
                "ts": format_ts(t.ts),
                "agent_id": conv.agent_id,
                "agent_type": "locomo",
                "user": conv.speaker_b,
                "session_id": f"session_{t.session}",
                "channel": "locomo",
                "user_message": "" if by_agent else t.text,
                "agent_response": t.text if by_agent else "",
                "metadata": {"dia_id": t.dia_id, "speaker": t.speaker, "agent_name": conv.speaker_a},
            }
        )
        if t.attachments and captions:
            out[-1]["attachments"] = [dict(a) for a in t.attachments]
    return out


# ------------------------------------------------------------------ scoring


def tokens(text: str) -> list[str]:
    return WORD_RE.findall(text.lower())


def answer_tokens(answer: str) -> list[str]:
    toks = tokens(answer)
    content = [t for t in toks if t not in STOP_WORDS]
    return list(dict.fromkeys(content or toks))


def count_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


@dataclass
class Item:
    text: str
    ids: tuple[str, ...] = ()
    section: str = ""  # where it was delivered from: "recall", a context section, "memory_context:<kind>"


def pack(items: Iterable[Item], budget: int) -> list[Item]:
    """Greedy, in the given order: an item that does not fit is skipped, later smaller ones may fit."""
    out: list[Item] = []
    used = 0  # characters including one newline between items
    limit = budget * 4
    for item in items:
        extra = len(item.text) + (1 if out else 0)
        if used + extra <= limit:
            out.append(item)
            used += extra
    return out


def score_question(items: list[Item], q: Question, turns: dict[str, Turn]) -> dict[str, float]:
    text = "\n".join(i.text for i in items)
    present = set(tokens(text))
    gold = [turns[d] for d in q.evidence if d in turns]
    verbatim = any(t.text.strip() and t.text.strip() in text for t in gold)
    cited = False
    for t in gold:
        # The caption is part of its turn: stating the words or the words with the caption both count.
        for words in {frozenset(answer_tokens(t.text)), frozenset(answer_tokens(t.full_text))}:
            for item in items:
                if t.event_id in item.ids and words:
                    have = words & set(tokens(item.text))
                    if len(have) >= 0.5 * len(words):
                        cited = True
    ans = answer_tokens(q.answer)
    hit = sum(1 for a in ans if a in present)
    return {
        "evidence_recall": float(verbatim or cited),
        "evidence_recall_verbatim": float(verbatim),
        "evidence_recall_cited": float(cited),
        "answer_recall": hit / len(ans) if ans else 1.0,
        "answer_full": float(hit == len(ans)),
        "tokens": float(count_tokens(text)),
    }


def attribute(items: list[Item], q: Question, turns: dict[str, Turn]) -> dict[str, tuple[bool, set[str]]]:
    """Per delivered section: whether it carries a gold evidence turn (its text whole, or an
    item citing the turn with half its content words) and which answer tokens it holds."""
    by: dict[str, list[Item]] = {}
    for item in items:
        by.setdefault(item.section or "other", []).append(item)
    ans = set(answer_tokens(q.answer))
    out: dict[str, tuple[bool, set[str]]] = {}
    for name, its in by.items():
        scored = score_question(its, q, turns)
        present = set(tokens("\n".join(i.text for i in its)))
        out[name] = (bool(scored["evidence_recall"]), ans & present)
    return out


def section_shares(rows: list[tuple[list[Item], dict[str, tuple[bool, set[str]]]]]) -> dict[str, Any]:
    """Each section's share of the delivered tokens, of the questions whose evidence it
    carries (and carries alone), and of the answer tokens found."""
    tok: Counter[str] = Counter()
    evidence: Counter[str] = Counter()
    alone: Counter[str] = Counter()
    answers: Counter[str] = Counter()
    with_evidence = found = 0
    for items, att in rows:
        for item in items:
            tok[item.section or "other"] += len(item.text) + 1
        carriers = [name for name, (ev, _) in att.items() if ev]
        with_evidence += bool(carriers)
        evidence.update(carriers)
        if len(carriers) == 1:
            alone[carriers[0]] += 1
        found += len(set().union(*(a for _, a in att.values())))
        for name, (_, a) in att.items():
            answers[name] += len(a)
    total = sum(tok.values()) or 1
    return {
        name: {
            "token_share": round(tok[name] / total, 4),
            "evidence_questions": evidence[name],
            "evidence_share": round(evidence[name] / with_evidence, 4) if with_evidence else 0.0,
            "evidence_alone": alone[name],
            "answer_token_share": round(answers[name] / found, 4) if found else 0.0,
        }
        for name in sorted(set(tok) | set(evidence))
    }


def _percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    k = min(len(s) - 1, max(0, math.ceil(p * len(s)) - 1))
    return s[k]


def aggregate(rows: list[tuple[str, dict[str, float], float]]) -> dict[str, dict[str, float]]:
    """rows: (category, scores, latency_ms) -> {"all": M, "1": M, ...}."""
    out: dict[str, dict[str, float]] = {}
    for cat in ("all", *CATEGORIES):
        sel = [r for r in rows if cat == "all" or r[0] == cat]
        n = len(sel)
        m: dict[str, float] = {}
        for key in (
            "evidence_recall",
            "evidence_recall_verbatim",
            "evidence_recall_cited",
            "answer_recall",
            "answer_full",
        ):
            m[key] = round(sum(r[1][key] for r in sel) / n, 4) if n else 0.0
        m["mean_tokens"] = round(sum(r[1]["tokens"] for r in sel) / n, 1) if n else 0.0
        m["n"] = n
        lat = [r[2] for r in sel]
        m["latency_p50_ms"] = round(_percentile(lat, 0.5), 3)
        m["latency_p99_ms"] = round(_percentile(lat, 0.99), 3)
        out[cat] = m
    return out


# ------------------------------------------------------------------ baseline


class BM25:
    """Okapi BM25 (k1 1.5, b 0.75) over stop-word-filtered lower-case tokens."""

    def __init__(self, docs: list[str], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.tfs = [Counter(t for t in tokens(d) if t not in STOP_WORDS) for d in docs]
        self.lens = [sum(tf.values()) for tf in self.tfs]
        self.avg = sum(self.lens) / max(1, len(self.lens))
        df: Counter[str] = Counter()
        for tf in self.tfs:
            df.update(tf.keys())
        n = len(docs)
        self.idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in df.items()}

    def rank(self, query: str) -> list[tuple[int, float]]:
        q = [t for t in dict.fromkeys(tokens(query)) if t not in STOP_WORDS and t in self.idf]
        scores = []
        for i, tf in enumerate(self.tfs):
            s = 0.0
            norm = self.k1 * (1 - self.b + self.b * self.lens[i] / self.avg)
            for w in q:
                f = tf.get(w)
                if f:
                    s += self.idf[w] * f * (self.k1 + 1) / (f + norm)
            if s > 0:
                scores.append((i, s))
        scores.sort(key=lambda x: (-x[1], x[0]))
        return scores


def baseline_items(conv: Conversation, bm25: BM25, question: str) -> list[Item]:
    docs = [f"[{t.session_date}] {t.speaker}: {t.full_text}" for t in conv.turns]
    return [Item(docs[i], (conv.turns[i].event_id,)) for i, _ in bm25.rank(question)]


# ------------------------------------------------------------------ tiermem side


# Sections of the assembled prompt that are fixed text, not memory (the protocol does not count them).
FIXED_SECTIONS = {"base": 0, "scope_rules": 0, "constraints": 0, "instructions": 0}
_ID_PREFIX = re.compile(r"^\s*-?\s*\[([^\]]+)\]")


_QUOTED = re.compile(r'"([^"]+)"')
FACT_SECTIONS = ("knowledge", "memory_context:fact")  # lines whose ids are (fact, *its source turns)


def _repeats(item: Item, seen: set[str], shown: str) -> bool:
    """A context line that adds nothing to the recalled turns: it cites one of them, or every
    turn it quotes is already shown whole."""
    if len(item.ids) == 1 and item.ids[0] in seen:
        return True
    if item.section in FACT_SECTIONS and len(item.ids) > 1 and all(i in seen for i in item.ids[1:]):
        return True  # a fact whose source turns are all shown
    if item.section == "memory_context:episode" and " Quotes: " in item.text:
        quotes = _QUOTED.findall(item.text.split(" Quotes: ", 1)[1])
        return bool(quotes) and all(q in shown for q in quotes)
    return False


class TiermemContext:
    """What one agent delivers for a question: recall_memory's episodes, then the assembled context."""

    def __init__(self, settings: Settings, conv: Conversation) -> None:
        from tiermem.runtime.memory import open_memory

        self.settings = settings
        self.conv = conv
        self.memory = open_memory(settings, conv.agent_id, user=conv.speaker_b)
        # The conversation's own present (its last turn): the facts' recency is measured from it,
        # not from the clock, so the figures do not drift with the day the harness is run.
        self.now = max((t.ts for t in conv.turns), default=None)

    def close(self) -> None:
        self.memory.close()

    def assembled(self, question: str, budget: int, shown: frozenset[str] = frozenset()) -> list[Item]:
        from tiermem.runtime.context import assemble_context

        ctx = assemble_context(
            self.memory,
            user=self.conv.speaker_b,
            query=question,
            budget=budget,
            tier_budgets=FIXED_SECTIONS,
            shown_turns=shown,
            now=self.now,
        )
        out: list[Item] = []
        for section in ctx.sections:
            if section.name in FIXED_SECTIONS:
                continue
            ids = set(section.item_ids)
            for line in section.text.splitlines():
                if not line.strip():
                    continue
                m = _ID_PREFIX.match(line)
                own = (m.group(1),) if m and m.group(1) in ids else tuple(section.item_ids)
                name = section.name
                if name == "memory_context":
                    name += ":" + (ctx.retrieval_kinds.get(own[0], "fence") if m else "fence")
                sources = self._sources(own) if name in FACT_SECTIONS else ()
                out.append(Item(line, own + sources, name))
        return out

    def _sources(self, ids: tuple[str, ...]) -> tuple[str, ...]:
        """The turns a delivered fact was derived from: its record cites them, so a fact line that
        states a turn's content carries that turn (scored like any citing item)."""
        if len(ids) != 1:
            return ()
        row = self.memory.store.visible_fact(self.memory.principal, ids[0])
        if row is None:
            return ()
        return tuple(dict.fromkeys(orjson.loads(row["source_event_ids"] or "[]")))

    def recall_block(self, question: str, budget: int) -> list[Item]:
        """recall_memory's remembered turns for the question: dated block, best turns that fit the budget."""
        # Asked as the participant: the turns are theirs, and a read for no user sees none of them.
        lines = self.memory.store.recall_lines(self.memory.principal, question, budget=budget)
        return [Item(text, ids, "recall") for text, ids in lines]

    def deliver(self, question: str, budget: int) -> list[Item]:
        """The budget split (`runtime.recall_share`): the recalled turns for their share come
        first; the assembled context gets the rest, told which turns the recall shows so its
        retrieval does not repeat them; the recalled turns then take every token the context
        leaves. Shown recalled turns first; a context line repeating a shown turn is dropped."""
        room = budget - int(budget * self.settings.runtime.recall_share)
        first = self.recall_block(question, budget - room)
        seen = {i for item in first for i in item.ids}
        context = self.assembled(question, room, frozenset(seen)) if room > 0 else []
        if not any(item.section != "memory_context:fence" for item in context):
            return pack(self.recall_block(question, budget), budget)
        used = count_tokens("\n".join(i.text for i in context)) + 1
        recalled = self.recall_block(question, max(0, budget - used))
        shown = "\n".join(i.text for i in recalled)
        seen = {i for item in recalled for i in item.ids}
        rest = [item for item in context if not _repeats(item, seen, shown)]
        if not any(item.section != "memory_context:fence" for item in rest):
            return pack(self.recall_block(question, budget), budget)
        return pack(recalled + rest, budget)


# ------------------------------------------------------------------ the run


def prepare(settings: Settings, convs: list[Conversation], *, captions: bool = True) -> dict[str, Any]:
    """Ingest, compress, evolve and project, as a user would; returns what each step did."""
    from tiermem.compressor.job import run_compress
    from tiermem.eventlog import EventLog

    steps: dict[str, Any] = {}
    with EventLog(settings) as log:
        res = log.append_many(e for c in convs for e in interaction_events(c, captions=captions))
        steps["ingested"] = res.accepted
    info = run_compress(settings, progress=False)
    steps["compress"] = {
        "scorer": info.scorer,
        "episodes": info.episodes,
        "proposals": info.proposals,
        "relationships": info.relationships,
        "notes": info.notes,
        "interactions_scored": info.interactions_scored,
    }
    try:
        from tiermem.evolver.job import run_evolve
    except ImportError:
        run_evolve = None  # type: ignore[assignment]
    if run_evolve is not None:
        evolved = run_evolve(settings, progress=False)
        steps["evolve"] = {k: v for k, v in vars(evolved).items() if isinstance(v, int | float | str)}
    from tiermem.runtime.projector import project

    project(settings)
    return steps


def run_locomo(
    data: Path | str,
    budget: int,
    *,
    work_dir: Path | None = None,
    progress: bool | None = None,
    limit_conversations: int | None = None,
    captions: bool = True,
    notes: bool = True,
    recall_share: float | None = None,
    retrieval: RetrievalMode | None = None,
    rerank: str | None = None,
) -> dict[str, Any]:
    """The whole protocol in a temporary data root; returns {"tiermem": M, "baseline": M, ...}.

    `captions=False` ingests the turns without their images' captions (for both
    systems), `notes=False` compresses without derived notes: what each adds is
    measured with the same harness.
    `retrieval` overrides `retrieval.mode` (lexical, dense, hybrid) for the run,
    `rerank` overrides `retrieval.rerank` (off, words, static, minilm).
    """
    convs = load_locomo(data)[:limit_conversations]
    if not captions:
        convs = [replace(c, turns=[replace(t, attachments=()) for t in c.turns]) for c in convs]
    with tempfile.TemporaryDirectory(prefix="tiermem-locomo-", dir=work_dir) as tmp:
        base = resolve_settings(data_dir=Path(tmp) / "data", env={})
        # Offline by construction; bulk load that can be replayed needs no fsync per append.
        settings = replace(
            base,
            anthropic_api_key=None,
            fsync="none",
            compressor=replace(base.compressor, derived_notes=notes),
        )
        if recall_share is not None:
            if not 0 <= recall_share <= 1:
                raise ConfigError(f"recall share {recall_share}: expected 0 to 1")
            settings = replace(settings, runtime=replace(settings.runtime, recall_share=recall_share))
        if retrieval is not None:
            settings = replace(settings, retrieval=replace(settings.retrieval, mode=retrieval))
        if rerank is not None:
            settings = replace(settings, retrieval=replace(settings.retrieval, rerank=rerank))
        steps = prepare(settings, convs, captions=captions)

        ours: list[tuple[str, dict[str, float], float]] = []
        attribution: list[tuple[list[Item], dict[str, tuple[bool, set[str]]]]] = []
        theirs: list[tuple[str, dict[str, float], float]] = []
        for conv in convs:
            turns = {t.dia_id: t for t in conv.turns}
            system = TiermemContext(settings, conv)
            bm25 = BM25([f"[{t.session_date}] {t.speaker}: {t.full_text}" for t in conv.turns])
            try:
                for q in conv.questions:
                    t0 = time.perf_counter()
                    delivered = system.deliver(q.question, budget)
                    ours.append(
                        (q.category, score_question(delivered, q, turns), (time.perf_counter() - t0) * 1e3)
                    )
                    attribution.append((delivered, attribute(delivered, q, turns)))
                    t0 = time.perf_counter()
                    base_items = pack(baseline_items(conv, bm25, q.question), budget)
                    theirs.append(
                        (q.category, score_question(base_items, q, turns), (time.perf_counter() - t0) * 1e3)
                    )
            finally:
                system.close()
    mine, bm25_m = aggregate(ours), aggregate(theirs)
    return {
        "tiermem": mine,
        "baseline": bm25_m,
        "per_category": per_category(mine, bm25_m),
        "budget": budget,
        "retrieval": settings.retrieval.mode,
        "rerank": settings.retrieval.rerank,
        "conversations": len(convs),
        "captions": captions,
        "derived_notes": notes,
        "context_path": "recall_memory (quote_search.recall_lines, dated turn block) + runtime.context.assemble_context",
        "recall_share": settings.runtime.recall_share,
        "sections": section_shares(attribution),
        "pipeline": steps,
    }


CATEGORY_METRICS = ("evidence_recall", "answer_recall", "answer_full", "mean_tokens")


def per_category(mine: dict[str, dict[str, float]], base: dict[str, dict[str, float]]) -> dict[str, Any]:
    """{category: {name, n, tiermem: {...}, baseline: {...}}}: the headline metrics side by side."""
    return {
        cat: {
            "name": CATEGORY_NAMES.get(cat, "all categories"),
            "n": mine[cat]["n"],
            "tiermem": {k: mine[cat][k] for k in CATEGORY_METRICS},
            "baseline": {k: base[cat][k] for k in CATEGORY_METRICS},
        }
        for cat in ("all", *CATEGORIES)
    }


def format_category_table(result: dict[str, Any]) -> str:
    from tiermem.output import format_table

    rows = []
    for cat, row in result["per_category"].items():
        ours, theirs = row["tiermem"], row["baseline"]
        rows.append(
            [cat, row["name"], row["n"]]
            + [ours[k] for k in CATEGORY_METRICS[:3]]
            + [theirs[k] for k in CATEGORY_METRICS[:3]]
        )
    heads = [
        "cat",
        "name",
        "n",
        "ev",
        "ans_recall",
        "ans_full",
        "bm25_ev",
        "bm25_ans_recall",
        "bm25_ans_full",
    ]
    return format_table(heads, rows)


def format_report(result: dict[str, Any]) -> str:
    from tiermem.output import format_table

    rows = []
    for cat in ("all", *CATEGORIES):
        for system in ("tiermem", "baseline"):
            m = result[system][cat]
            rows.append(
                [
                    cat,
                    system,
                    m["n"],
                    m["evidence_recall"],
                    m["evidence_recall_verbatim"],
                    m["evidence_recall_cited"],
                    m["answer_recall"],
                    m["answer_full"],
                    m["mean_tokens"],
                    m["latency_p50_ms"],
                    m["latency_p99_ms"],
                ]
            )
    head = (
        f"LoCoMo budget protocol, budget {result['budget']} tokens, {result['conversations']} conversations"
    )
    table = format_table(
        [
            "cat",
            "system",
            "n",
            "ev_recall",
            "ev_verbatim",
            "ev_cited",
            "ans_recall",
            "ans_full",
            "tokens",
            "p50_ms",
            "p99_ms",
        ],
        rows,
    )
    shares = result.get("sections") or {}
    split = format_table(
        ["section", "token_share", "evidence_questions", "evidence_share", "evidence_alone", "answer_share"],
        [
            [
                name,
                m["token_share"],
                m["evidence_questions"],
                m["evidence_share"],
                m["evidence_alone"],
                m["answer_token_share"],
            ]
            for name, m in shares.items()
        ],
    )
    by_cat = format_category_table(result)
    return (
        f"{head}\n{table}\n\nper category (tiermem | BM25 baseline):\n{by_cat}\n"
        f"context path: {result['context_path']}\n{split}"
    )
