"""The LoCoMo budget protocol (../shared/bench/README.md): tiermem against BM25 over dated turns.

Turn mapping: one interaction per LoCoMo turn. Each conversation is one agent
(`locomo-<sample_id>`, display name speaker_a, set as `metadata.agent_name`);
speaker_b is the participant (`user`). A speaker_a turn is an interaction
with only `agent_response`, a speaker_b turn one with only `user_message`.
Timestamps are the session date-time (UTC) plus one second per turn, so order
and day survive; `metadata.dia_id` keeps the turn's LoCoMo id. Image captions
are not ingested (the baseline does not see them either).

Pipeline, exactly as a user runs it, offline, in a temporary data root:
`EventLog.append_many` (the public write path) -> `run_compress` ->
`run_evolve` (when the evolver is installed) -> projector. Then, per question
of categories 1-4, the delivered memory is what `recall_memory` shows for
the question (`runtime.episode_search.recall_lines`: the agent's remembered
turns ranked one by one across episodes, taken best first while they fit the
budget, shown under one date header per day with relative dates resolved,
e.g. `8 May 2023:` / `Caroline: I went ... yesterday (yesterday = 7 May 2023)`),
then the runtime's `assemble_context` (the question as query; the fixed
prompt sections excluded) in the room left, packed line by line (never cut)
until the budget (tokens = ceil(len(text)/4) over the whole delivered text).

Scores (micro-averaged, overall and per category):
- evidence_recall_verbatim: a gold evidence turn's text appears whole;
- evidence_recall_cited: a delivered item lists the turn's event id and the
  item's delivered text contains at least half of the turn's content words;
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


def normalize_evidence(raw: Iterable[Any]) -> list[str]:
    """Fix the malformed ids the README lists: "D8:6; D9:17", "D:11:26", "D30:05"."""
    out: list[str] = []
    for item in raw:
        for part in re.split(r"[;,]", str(item)):
            part = part.strip().replace("D:", "D")
            m = re.fullmatch(r"D(\d+):(\d+)", part)
            if m:
                out.append(f"D{int(m.group(1))}:{int(m.group(2))}")
    return list(dict.fromkeys(out))


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
                conv.turns.append(Turn(t["dia_id"], t["speaker"], t["text"], n, date_text, ts, eid))
        for q in sample["qa"]:
            cat = str(q.get("category"))
            evidence = normalize_evidence(q.get("evidence") or [])
            if cat not in CATEGORIES or not evidence or "answer" not in q:
                continue  # category 5 (adversarial) and the few questions without evidence
            conv.questions.append(Question(q["question"], str(q["answer"]), evidence, cat))
        convs.append(conv)
    return convs


def interaction_events(conv: Conversation) -> list[dict[str, Any]]:
    out = []
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
        words = set(answer_tokens(t.text))
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
    docs = [f"[{t.session_date}] {t.speaker}: {t.text}" for t in conv.turns]
    return [Item(docs[i], (conv.turns[i].event_id,)) for i, _ in bm25.rank(question)]


# ------------------------------------------------------------------ tiermem side


# Sections of the assembled prompt that are fixed text, not memory (the protocol does not count them).
FIXED_SECTIONS = {"base": 0, "scope_rules": 0, "constraints": 0, "instructions": 0}
_ID_PREFIX = re.compile(r"^\s*-?\s*\[([^\]]+)\]")


class TiermemContext:
    """What one agent delivers for a question: recall_memory's episodes, then the assembled context."""

    def __init__(self, settings: Settings, conv: Conversation) -> None:
        from tiermem.runtime.memory import open_memory

        self.settings = settings
        self.conv = conv
        self.memory = open_memory(settings, conv.agent_id, user=conv.speaker_b)

    def close(self) -> None:
        self.memory.close()

    def assembled(self, question: str, budget: int) -> list[Item]:
        from tiermem.runtime.context import assemble_context

        ctx = assemble_context(
            self.memory, user=self.conv.speaker_b, query=question, budget=budget, tier_budgets=FIXED_SECTIONS
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
                out.append(Item(line, own))
        return out

    def recall_block(self, question: str, budget: int) -> list[Item]:
        """recall_memory's remembered turns for the question: dated block, best turns that fit the budget."""
        # Asked as the participant: the turns are theirs, and a read for no user sees none of them.
        lines = self.memory.store.recall_lines(self.memory.principal, question, budget=budget)
        return [Item(text, ids) for text, ids in lines]

    def deliver(self, question: str, budget: int) -> list[Item]:
        """recall_memory's matching turns first, then the assembled context in the room left."""
        recalled = pack(self.recall_block(question, budget), budget)
        seen = {i for item in recalled for i in item.ids}
        used = count_tokens("\n".join(i.text for i in recalled))
        rest = [
            item
            for item in self.assembled(question, max(0, budget - used))
            if not (len(item.ids) == 1 and item.ids[0] in seen)
        ]
        return pack(recalled + rest, budget)


# ------------------------------------------------------------------ the run


def prepare(settings: Settings, convs: list[Conversation]) -> dict[str, Any]:
    """Ingest, compress, evolve and project, as a user would; returns what each step did."""
    from tiermem.compressor.job import run_compress
    from tiermem.eventlog import EventLog

    steps: dict[str, Any] = {}
    with EventLog(settings) as log:
        res = log.append_many(e for c in convs for e in interaction_events(c))
        steps["ingested"] = res.accepted
    info = run_compress(settings, progress=False)
    steps["compress"] = {
        "scorer": info.scorer,
        "episodes": info.episodes,
        "proposals": info.proposals,
        "relationships": info.relationships,
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
    retrieval: RetrievalMode | None = None,
) -> dict[str, Any]:
    """The whole protocol in a temporary data root; returns {"tiermem": M, "baseline": M, ...}.

    `retrieval` overrides `retrieval.mode` (lexical, dense, hybrid) for the run.
    """
    convs = load_locomo(data)[:limit_conversations]
    with tempfile.TemporaryDirectory(prefix="tiermem-locomo-", dir=work_dir) as tmp:
        base = resolve_settings(data_dir=Path(tmp) / "data", env={})
        # Offline by construction; bulk load that can be replayed needs no fsync per append.
        settings = replace(base, anthropic_api_key=None, fsync="none")
        if retrieval is not None:
            settings = replace(settings, retrieval=replace(settings.retrieval, mode=retrieval))
        steps = prepare(settings, convs)

        ours: list[tuple[str, dict[str, float], float]] = []
        theirs: list[tuple[str, dict[str, float], float]] = []
        for conv in convs:
            turns = {t.dia_id: t for t in conv.turns}
            system = TiermemContext(settings, conv)
            bm25 = BM25([f"[{t.session_date}] {t.speaker}: {t.text}" for t in conv.turns])
            try:
                for q in conv.questions:
                    t0 = time.perf_counter()
                    delivered = system.deliver(q.question, budget)
                    ours.append(
                        (q.category, score_question(delivered, q, turns), (time.perf_counter() - t0) * 1e3)
                    )
                    t0 = time.perf_counter()
                    base_items = pack(baseline_items(conv, bm25, q.question), budget)
                    theirs.append(
                        (q.category, score_question(base_items, q, turns), (time.perf_counter() - t0) * 1e3)
                    )
            finally:
                system.close()
    return {
        "tiermem": aggregate(ours),
        "baseline": aggregate(theirs),
        "budget": budget,
        "retrieval": settings.retrieval.mode,
        "conversations": len(convs),
        "context_path": "recall_memory (episode_search.recall_lines, dated turn block) + runtime.context.assemble_context",
        "pipeline": steps,
    }


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
    return f"{head}\n{table}\ncontext path: {result['context_path']}"
