"""The review job: per day and agent, a report in JSON and Markdown plus a PNG overview.

Layout: `<reports_dir>/review/date=YYYY-MM-DD/<agent>.{json,md,png}`. Reports are
derived data: re-running overwrites them with the same content (idempotent);
`forget` calls `scrub_reports` so no report keeps erased interactions.

The interactions to review are read in one scan (`report.prepare`), cut into
partitions of one day and up to `batch.partition_agents` agents, and each partition
becomes its reports in grouped queries (`bulk`), computed by an engine (this
process, or Ray) and written here; a checkpoint per (day, agent) lets a killed
run resume without computing the written reports again (`progress`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any
from urllib.parse import quote

import duckdb
import orjson
import pyarrow as pa
from tiermem.reviewer import bulk
from tiermem.reviewer import report as rep
from tiermem.reviewer.charts import overview_bytes
from tiermem.reviewer.progress import ReviewProgress, settings_print

from tiermem.engine import LOCAL, Engine
from tiermem.errors import ValidationError
from tiermem.llm import Reachability
from tiermem.settings import Settings
from tiermem.sqlviews import open_catalog


@dataclass
class ReviewInfo:
    reports: int = 0
    days: list[str] = field(default_factory=list)
    agents: list[str] = field(default_factory=list)
    interactions: int = 0
    enrichment_coverage: dict[str, float] = field(default_factory=dict)
    fully_enriched_fraction: float = 0.0
    tokens: dict[str, int] = field(default_factory=dict)
    cost_usd: float = 0.0
    flags: dict[str, int] = field(default_factory=dict)
    flagged_interactions: int = 0
    path: str = "offline"  # "claude" when a judged sample was added
    judged: int = 0
    files: list[str] = field(default_factory=list)
    per_report: list[dict[str, Any]] = field(default_factory=list)
    resumed: int = 0  # reports a killed run had written, kept as they were
    engine: str = "local"
    elapsed_s: float = 0.0


def review_dir(settings: Settings) -> Path:
    return settings.reports_dir / "review"


def report_name(agent: str) -> str:
    """The file name stem of an agent's reports: never the same for two agent ids.

    Letters, digits, `-` and `_` stay; every other character (`.`, `/`, `%`,
    spaces, non-ASCII) is percent-encoded, so `bot.v1` and `bot.v2` (or `a/b`
    and `a_b`) stay apart and a name holds no dot for a suffix to cut at. An id
    with capitals gets a short hash of its exact spelling too, so `Bot` and
    `bot` stay apart on case-insensitive file systems; a very long id is cut
    and given a hash of the whole (`~` appears in no other name).
    """
    encoded = quote(agent, safe="").replace(".", "%2E").replace("~", "%7E") or "%"
    if agent != agent.lower() or len(encoded) > 120:
        digest = hashlib.blake2b(agent.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
        encoded = encoded[:100] + "~" + digest
    return encoded


def report_paths(settings: Settings, day: str, agent: str) -> dict[str, Path]:
    folder = review_dir(settings) / f"date={day}"
    stem = report_name(agent)
    return {kind: folder / f"{stem}.{kind}" for kind in ("json", "md", "png")}


def render_markdown(r: dict[str, Any]) -> str:
    cov = r["enrichment_coverage"]
    lines = [
        f"# Review: agent `{r['agent_id']}`, {r['day']}",
        "",
        f"{r['interactions']} interactions; fully enriched ({', '.join(r['fully_enriched_fields'])}): "
        f"**{r['fully_enriched_fraction']:.0%}**.",
    ]
    if r["missing_fields"]:
        lines.append(f"Fields not always set: {', '.join('`' + f + '`' for f in r['missing_fields'])}.")
    lines += [
        "",
        f"![overview]({quote(report_paths_name(r), safe='')}.png)",  # the link's own escaping of the name
        "",
        "## Enrichment coverage",
        "",
        "| field | set | coverage |",
        "|---|---:|---:|",
    ]
    for name, frac in cov.items():
        mark = "" if frac >= 1.0 else (" ⚠" if frac > 0 else " ✗")
        lines.append(f"| {name} | {r['enrichment_set_counts'][name]} | {frac:.0%}{mark} |")
    lines += [
        "",
        "## Tokens and estimated cost by model",
        "",
        "| model | interactions | input | output | cache read | cost (USD) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for m in r["tokens_by_model"]:
        cost = "n/a (no price)" if m["cost_usd"] is None else f"{m['cost_usd']:.4f}"
        lines.append(
            f"| {m['model']} | {m['interactions']} | {m['input_tokens']} | {m['output_tokens']} | {m['cache_read_tokens']} | {cost} |"
        )
    lines.append(f"\nTotal estimated cost: **${r['cost_usd']:.4f}**.")
    rl = r["response_length"]
    lines += [
        "",
        "## Response length (characters)",
        "",
        f"min {rl['min']}, median {rl['p50']}, p90 {rl['p90']}, p99 {rl['p99']}, max {rl['max']}, mean {rl['mean']}.",
        "",
        "## Tool use",
        "",
        f"{r['tool_use']['interactions_with_tools']} of {r['interactions']} interactions used a tool.",
    ]
    for t in r["tool_use"]["by_tool"]:
        lines.append(f"- `{t['tool']}`: {t['uses']}")
    lines += ["", "## Approval status", ""]
    for a in r["approval_status"]:
        lines.append(f"- {a['approval_status']}: {a['n']}")
    lines += ["", "## Flagged interactions", ""]
    for flag, rows in r["flagged"].items():
        lines.append(f"### {flag.replace('_', ' ')} ({len(rows)})")
        lines.append("")
        for row in rows[:50]:
            lines.append(
                f"- `{row['event_id']}` {row['ts']} ({row['response_length']} chars): “{row['snippet']}”"
            )
        if len(rows) > 50:
            lines.append(f"- … {len(rows) - 50} more in the JSON report")
        lines.append("")
    if r.get("judge"):
        j = r["judge"]
        lines += ["## Claude-judged sample", "", f"{j['n']} interactions, mean score {j['mean_score']}.", ""]
        for item in j["items"]:
            lines.append(f"- `{item['event_id']}`: {item['score']}/5 — {item['reason']}")
    return "\n".join(lines) + "\n"


def report_paths_name(r: dict[str, Any]) -> str:
    return report_name(r["agent_id"])


def report_files(r: dict[str, Any]) -> dict[str, bytes]:
    """The three files of a report, by suffix (computed where the partition runs, written by the job)."""
    return {
        "json": orjson.dumps(r, default=str, option=orjson.OPT_INDENT_2) + b"\n",
        "md": render_markdown(r).encode("utf-8"),
        "png": overview_bytes(r),
    }


def write_report(settings: Settings, r: dict[str, Any], files: dict[str, bytes] | None = None) -> list[Path]:
    paths = report_paths(settings, r["day"], r["agent_id"])
    paths["json"].parent.mkdir(parents=True, exist_ok=True)
    for kind, data in (files or report_files(r)).items():
        paths[kind].write_bytes(data)
    return list(paths.values())


@dataclass(frozen=True)
class Judge:
    """Whether and how a partition asks a model to judge a sample (the client only in this process)."""

    enabled: bool
    sample: int = 5
    client: Any = None


@dataclass
class PartitionResult:
    reports: list[tuple[dict[str, Any], dict[str, bytes]]]
    path: str = ""  # the judge's path when it ran ("claude", "openai", or an unreachable marker)
    judged: int = 0


def review_partition(settings: Settings, judge: Judge, rows: pa.Table) -> PartitionResult:
    """The reports of the (day, agent) pairs whose reviewed rows are `rows`: pure, so any engine may run it."""
    con = duckdb.connect(":memory:")
    out = PartitionResult(reports=[])
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.register("reviewed", rows)
        reach = Reachability(settings)  # one per partition: an outage costs one short retry
        for r in bulk.iter_reports(con, settings):
            if judge.enabled:
                from tiermem.reviewer.claude_judge import judge_sample as run_judge

                r["judge"] = run_judge(
                    settings, con, r["day"], r["agent_id"], judge.sample, client=judge.client, reach=reach
                )
                if r["judge"]:
                    out.path = "openai" if settings.llm.provider == "openai" else "claude"
                    out.judged += r["judge"]["n"]
            if reach.unreachable is not None:
                out.path = reach.path_name(out.path or "offline")
            out.reports.append((r, report_files(r)))
    finally:
        con.close()
    return out


def _fingerprints(con: duckdb.DuckDBPyConnection, salt: str) -> dict[tuple[str, str], str]:
    """Per (day, agent): a digest of the reviewed ids in order, salted with what else the report depends on."""
    rows = con.execute(
        "SELECT CAST(day AS VARCHAR), agent_id, count(*), md5(string_agg(event_id, ',' ORDER BY ts, event_id)) "
        "FROM reviewed GROUP BY 1, 2"
    ).fetchall()
    return {(d, a): f"{salt}:{n}:{digest}" for d, a, n, digest in rows}


def _partitions(todo: list[tuple[str, str]], size: int) -> list[tuple[str, list[str]]]:
    """(day, agents) partitions of at most `size` agents, in (day, agent) order."""
    by_day: dict[str, list[str]] = {}
    for d, a in todo:
        by_day.setdefault(d, []).append(a)
    return [
        (d, agents[i : i + size]) for d, agents in sorted(by_day.items()) for i in range(0, len(agents), size)
    ]


def _partition_rows(con: duckdb.DuckDBPyConnection, parts: list[tuple[str, list[str]]]) -> Iterator[pa.Table]:
    for d, agents in parts:
        yield con.sql(
            "SELECT * FROM reviewed WHERE day = CAST($day AS DATE) AND agent_id IN (SELECT unnest($agents))",
            params={"day": d, "agents": agents},
        ).to_arrow_table()


def _brief(r: dict[str, Any]) -> dict[str, Any]:
    """What the run's summary needs of a report (not its flagged rows and ids)."""
    return {k: v for k, v in r.items() if k not in ("flagged", "event_ids", "judge")}


def run_review(
    settings: Settings,
    day: str | None = None,
    agent: str | None = None,
    *,
    judge_client: Any | None = None,
    judge_sample: int = 5,
    engine: Engine | None = None,
    partition_agents: int | None = None,
) -> ReviewInfo:
    """Review every (day, agent) with interactions, or only the given day and/or agent.

    The pairs are cut into partitions (one day, up to `partition_agents`
    agents) that `engine` computes; each partition's files are written and
    recorded in the checkpoint before the next, so a killed run resumes where
    it stopped (see `progress`).
    """
    if day is not None:
        try:
            day = date.fromisoformat(day).isoformat()
        except ValueError:
            raise ValidationError("day", f"not a date (YYYY-MM-DD): {day[:40]!r}") from None
    started = time.monotonic()
    engine = engine or LOCAL
    judged = (judge_client is not None and settings.llm.provider != "offline") or settings.llm_available
    # A client object lives in this process only; a cluster's partitions build their own from settings.
    judge = Judge(judged, judge_sample, judge_client if engine.name == "local" else None)
    info = ReviewInfo()
    reports: list[dict[str, Any]] = []
    con = open_catalog(settings)
    try:
        rep.prepare(con, day, agent)
        prints = _fingerprints(con, settings_print(settings, judged))
        with ReviewProgress(settings) as progress:
            recorded = progress.recorded()
            todo: list[tuple[str, str]] = []
            for pair, fp in sorted(prints.items()):
                json_path = report_paths(settings, *pair)["json"]
                if recorded.get(pair) == fp and json_path.exists():
                    reports.append(_brief(orjson.loads(json_path.read_bytes())))
                    info.resumed += 1
                else:
                    todo.append(pair)
            parts = _partitions(todo, max(1, partition_agents or settings.batch.partition_agents))
            for result in engine.map(review_partition, _partition_rows(con, parts), settings, judge):
                for r, files in result.reports:
                    info.files += [str(p) for p in write_report(settings, r, files)]
                    reports.append(_brief(r))
                if result.path:
                    info.path = result.path
                info.judged += result.judged
                progress.mark(
                    {(r["day"], r["agent_id"]): prints[(r["day"], r["agent_id"])] for r, _f in result.reports}
                )
            progress.clear(prints)
    finally:
        con.close()
    reports.sort(key=lambda r: (r["day"], r["agent_id"]))
    _summarize(info, reports)
    info.engine = engine.name
    info.elapsed_s = round(time.monotonic() - started, 3)
    return info


def _summarize(info: ReviewInfo, reports: list[dict[str, Any]]) -> None:
    info.reports = len(reports)
    info.days = sorted({r["day"] for r in reports})
    info.agents = sorted({r["agent_id"] for r in reports})
    total = sum(r["interactions"] for r in reports)
    info.interactions = total
    if total:
        fields = reports[0]["enrichment_set_counts"].keys()
        info.enrichment_coverage = {
            f: round(sum(r["enrichment_set_counts"][f] for r in reports) / total, 6) for f in fields
        }
        info.fully_enriched_fraction = round(sum(r["fully_enriched"] for r in reports) / total, 6)
    info.tokens = {k: sum(r["tokens"][k] for r in reports) for k in ("input", "output", "cache_read")}
    info.cost_usd = round(sum(r["cost_usd"] for r in reports), 6)
    info.flags = {f: sum(r["flags"][f] for r in reports) for f in rep.FLAGS}
    info.flagged_interactions = sum(r["flagged_interactions"] for r in reports)
    info.per_report = [
        {
            "day": r["day"],
            "agent_id": r["agent_id"],
            "interactions": r["interactions"],
            "enrichment_coverage": r["enrichment_coverage"],
            "flags": r["flags"],
            "cost_usd": r["cost_usd"],
        }
        for r in reports
    ]


def scrub_reports(settings: Settings, erased_ids: set[str], strings: set[str]) -> tuple[int, int]:
    """Regenerate (or remove) every report that mentions an erased event or a forgotten name.

    Returns (regenerated, removed). Called by `forget` after the erasure is in the log,
    so the regenerated reports already exclude the erased interactions.
    """
    root = review_dir(settings)
    if not root.exists():
        return 0, 0
    needles = [s.encode() for s in (*erased_ids, *strings) if s]
    stale: set[tuple[str, str, Path]] = set()
    for path in root.rglob("*"):
        if path.suffix not in (".json", ".md") or not path.is_file():
            continue
        data = path.read_bytes()
        if any(n in data for n in needles):
            day = path.parent.name.removeprefix("date=")
            agent = _agent_of(path)
            stale.add((day, agent, path.parent / path.name[: -len(path.suffix)]))
    regenerated = removed = 0
    for day, agent, base in sorted(stale):
        for suffix in (".json", ".md", ".png"):
            base.with_name(base.name + suffix).unlink(missing_ok=True)
        if agent:
            info = run_review(settings, day=day, agent=agent)
            if info.reports:
                regenerated += 1
                continue
        removed += 1
    return regenerated, removed


def _agent_of(path: Path) -> str:
    json_path = path.with_name(path.name[: -len(path.suffix)] + ".json")
    try:
        agent: str = orjson.loads(json_path.read_bytes())["agent_id"]
        return agent
    except (OSError, ValueError, KeyError):
        return ""
