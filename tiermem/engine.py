"""Where the partitions of a batch job run: in this process, or on a cluster (Ray).

A batch job (compress, review, evolve) cuts its work into partitions (by agent
and day), runs one function over them, and commits each result itself, in the
order the partitions were made. The engine decides only where the function
runs; the job keeps its checkpoint, its log appends and its lock, so the
events it appends are the same whichever engine computed them.

A partition function must be a module-level function of picklable arguments,
with no side effect outside what it returns: a cluster may run it twice (a
worker that dies is retried) or on another machine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Engine(Protocol):
    """Runs `fn(*shared, item)` for each item and yields the results in the items' order."""

    name: str
    workers: int

    def map(self, fn: Callable[..., R], items: Iterable[Any], *shared: Any) -> Iterator[R]: ...


class LocalEngine:
    """The embedded default: the partitions run one after the other in this process."""

    name = "local"
    workers = 1

    def map(self, fn: Callable[..., R], items: Iterable[Any], *shared: Any) -> Iterator[R]:
        for item in items:
            yield fn(*shared, item)


LOCAL = LocalEngine()
