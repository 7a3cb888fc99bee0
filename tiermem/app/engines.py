"""The batch engines a job can run on: this process (`local`) or a Ray cluster (`ray`).

`open_engine(settings)` gives the engine `settings.batch.engine` names, for
the duration of one job. The Ray engine connects to `batch.ray_address`, or
starts a local Ray (no dashboard, nothing downloaded: it works offline) that
it stops again at the end; a Ray already started in this process (a test
session, a notebook) is used as it is and left running.

Ray is an optional extra (`pip install 'tiermem[ray]'`): only `--engine ray`
imports it. Tasks run the job's partition function; results come back in the
order the partitions were made, with a bounded number in flight so a large
job never holds every partition's input at once. A task whose worker dies
(killed, out of memory, a lost node) is run again by Ray up to
`batch.ray_max_retries` times; partition functions have no side effect, so a
second run changes nothing but the time.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, TypeVar

from tiermem.engine import LOCAL, Engine
from tiermem.errors import ConfigError
from tiermem.settings import BATCH_ENGINES, Settings

R = TypeVar("R")

IN_FLIGHT_PER_WORKER = 2  # tasks queued per CPU: enough to keep workers busy, little input held


class RayEngine:
    """Partitions as Ray tasks (see the module docstring)."""

    name = "ray"

    def __init__(self, settings: Settings) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError(
                "batch.engine = 'ray' needs Ray: pip install 'tiermem[ray]' (or use --engine local)"
            ) from None
        self._ray = ray
        self.settings = settings
        self.owned = False
        if not ray.is_initialized():
            cfg = settings.batch
            options: dict[str, Any] = {
                "include_dashboard": False,
                "configure_logging": False,
                "log_to_driver": False,
                "logging_level": logging.WARNING,
            }
            if cfg.ray_address:
                options["address"] = cfg.ray_address
            else:
                options["num_cpus"] = cfg.ray_num_cpus or os.cpu_count() or 1
            try:
                ray.init(**options)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ConfigError(
                    f"cannot start or reach Ray ({cfg.ray_address or 'local'}): {exc}"
                ) from None
            self.owned = True
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))

    def map(self, fn: Callable[..., R], items: Iterable[Any], *shared: Any) -> Iterator[R]:
        ray = self._ray
        remote = ray.remote(fn).options(num_cpus=1, max_retries=self.settings.batch.ray_max_retries)
        refs = [ray.put(value) for value in shared]  # sent once, not with every task
        window: deque[Any] = deque()
        try:
            for item in items:
                window.append(remote.remote(*refs, item))
                if len(window) >= self.workers * IN_FLIGHT_PER_WORKER:
                    yield ray.get(window.popleft())
            while window:
                yield ray.get(window.popleft())
        finally:
            for ref in window:  # the job stopped early: what it will not commit need not run
                ray.cancel(ref)

    def close(self) -> None:
        if self.owned:
            self._ray.shutdown()
            self.owned = False


@contextmanager
def open_engine(settings: Settings, name: str | None = None) -> Iterator[Engine]:
    """The engine `name` (default `settings.batch.engine`) for one job."""
    chosen = name or settings.batch.engine
    if chosen not in BATCH_ENGINES:
        raise ConfigError(f"unknown engine {chosen!r}; expected one of {', '.join(BATCH_ENGINES)}")
    if chosen == "local":
        yield LOCAL
        return
    engine = RayEngine(settings)
    try:
        yield engine
    finally:
        engine.close()


def with_engine(settings: Settings, name: str | None) -> Settings:
    """`settings` with the engine a command line chose (unchanged when it chose none)."""
    if not name:
        return settings
    if name not in BATCH_ENGINES:
        raise ConfigError(f"unknown engine {name!r}; expected one of {', '.join(BATCH_ENGINES)}")
    return replace(settings, batch=replace(settings.batch, engine=name))
