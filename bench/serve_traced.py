"""`tiermem serve` with the time of every turn taken apart (`bench_serve.py --trace OUT`).

    python bench/serve_traced.py DATA_DIR PORT OUT

Runs the same application as `tiermem serve` on 127.0.0.1:PORT and records,
without a profiler's overhead, where each answered turn spent its time in the
server: from the request's first byte in the turn layer to its turn joining the
queue, waiting there for its batch, the batch's work on the memory thread until
its turns are durable (the fsyncs among it apart), and from then to the answer being
sent; beside that every garbage collection's pause and the event loop's lateness
(a 1 ms sleep measured). At shutdown (SIGTERM) it writes OUT.json, and
`--report OUT.json` prints the percentiles and what the slowest 1 % of turns
spent their time on.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

Trace = dict[str, list[Any]]


NOW = time.perf_counter
# The request being answered, whose record its queued turn notes its times in.
CURRENT: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("turn", default=None)
# A turn's record: [arrival, in the layer before the queue, queue wait, its batch until durable, of
# it in fsync, durable -> settled on the loop, settled -> answer sent, batch size]
PARTS = ["before queue", "queue wait", "batch to durable", "of it fsync", "to settled", "to sent"]


def _time_fsync(local: threading.local) -> None:
    """Every fsync's time, added up per thread (the log calls `os.fsync` by attribute)."""
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        t0 = NOW()
        try:
            real_fsync(fd)
        finally:
            local.fsync = getattr(local, "fsync", 0.0) + NOW() - t0

    os.fsync = fsync


def _time_batches(service: Any, trace: Trace, local: threading.local) -> None:
    """A queued turn notes when it was queued, its batch began, was durable, and was settled."""

    class TracedTurn(service.PendingTurn):  # type: ignore[misc,name-defined]
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.times = CURRENT.get()
            if self.times is not None:
                self.times["queued"] = NOW()

    def note(batch: list[Any], **times: Any) -> None:
        for turn in batch:
            if getattr(turn, "times", None) is not None:
                turn.times.update(times)

    real_record_batch = service.MemoryService._record_batch
    real_settle = service._settle

    def record_batch(self: Any, batch: list[Any], on_durable: Any) -> Any:
        start = NOW()
        local.fsync = 0.0

        def durable(outcomes: Any) -> None:
            at = NOW()
            note(batch, start=start, durable=at, fsync=local.fsync, size=len(batch))
            trace["batches"] += (start, at, len(batch), local.fsync)
            on_durable(outcomes)

        return real_record_batch(self, batch, durable)

    def settle(batch: list[Any], outcomes: Any) -> None:
        note(batch, settled=NOW())
        real_settle(batch, outcomes)

    service.PendingTurn = TracedTurn
    service._settle = settle
    service.MemoryService._record_batch = record_batch


def _time_requests(turn_route: Any, trace: Trace) -> None:
    real_call = turn_route.TurnRoute.__call__

    async def call(self: Any, scope: Any, receive: Any, send: Any) -> None:
        times: dict[str, Any] = {"arrived": NOW()}
        token = CURRENT.set(times)
        try:
            await real_call(self, scope, receive, send)
        finally:
            CURRENT.reset(token)
        if len(times) < 7:  # not a turn answered here (or not recorded)
            return
        _record(trace, times)

    turn_route.TurnRoute.__call__ = call


def _record(trace: Trace, t: dict[str, Any]) -> None:
    """One answered turn's times: arrival, then each stage's length, then its batch's size."""
    trace["turns"].extend(
        (
            t["arrived"],
            t["queued"] - t["arrived"],
            t["start"] - t["queued"],
            t["durable"] - t["start"],
            t["fsync"],
            t["settled"] - t["durable"],
            NOW() - t["settled"],
            t["size"],
        )
    )


def _time_protocol(turn_protocol: Any, service: Any, trace: Trace) -> None:
    """The same times for turns answered by the HTTP protocol itself (no task: by callbacks)."""
    waiting: dict[int, dict[str, Any]] = {}  # id of a turn's future -> its times
    real_complete = turn_protocol.TurnProtocol.on_message_complete
    real_answer = turn_protocol.TurnProtocol._answer
    real_submit = service.MemoryService.submit_turn

    def on_message_complete(self: Any) -> None:
        token = CURRENT.set({"arrived": NOW()})
        try:
            real_complete(self)
        finally:
            CURRENT.reset(token)

    def submit_turn(self: Any, *args: Any) -> Any:
        done = real_submit(self, *args)
        times = CURRENT.get()
        if times is not None:
            waiting[id(done)] = times
        return done

    def answer(self: Any, turn: Any, done: Any) -> None:
        t = waiting.pop(id(done), None)
        real_answer(self, turn, done)
        if t is None or len(t) < 7:
            return
        _record(trace, t)

    turn_protocol.TurnProtocol.on_message_complete = on_message_complete
    turn_protocol.TurnProtocol._answer = answer
    service.MemoryService.submit_turn = submit_turn


def _time_collections(trace: Trace) -> None:
    """Each collection's pause (wall and the collecting thread's CPU), and for a full one the
    objects it walked."""
    started = [0.0, 0.0, 0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        generation = info.get("generation", 0)
        if phase == "start":
            walked = len(gc.get_objects(generation=2)) if generation == 2 else 0
            started[:] = NOW(), time.thread_time(), walked
        else:
            wall, cpu = NOW() - started[0], time.thread_time() - started[1]
            trace["gc"] += (started[0], wall, generation, cpu, started[2])

    gc.callbacks.append(on_gc)


def _thread_cpu() -> list[Any]:
    """[name, CPU seconds] of each live thread, from /proc (Linux)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: list[Any] = []
    for thread in threading.enumerate():
        try:
            fields = Path(f"/proc/self/task/{thread.native_id}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        out += (thread.name, (int(fields[11]) + int(fields[12])) / tick)
    return out


async def _lateness(trace: Trace) -> None:
    while True:
        t = NOW()
        await asyncio.sleep(0.001)
        trace["lag"] += (t, NOW() - t - 0.001)


def serve(data_dir: Path, port: int, out: str) -> None:
    import uvicorn

    from tiermem.app.server import service, turn_protocol, turn_route
    from tiermem.app.server.app import application, uvicorn_config
    from tiermem.settings import resolve_settings

    trace: Trace = {"turns": [], "batches": [], "gc": [], "lag": []}
    local = threading.local()
    _time_fsync(local)
    _time_batches(service, trace, local)
    turn_route.PendingTurn = service.PendingTurn  # the traced one: the protocol's turns are queued there
    _time_requests(turn_route, trace)
    _time_protocol(turn_protocol, service, trace)
    _time_collections(trace)
    app = application(resolve_settings(data_dir=data_dir, env={}), server_process=True)
    real_close = service.MemoryService.close

    def close(self: service.MemoryService) -> None:
        trace["threads"] = _thread_cpu()
        projector = self._memory.projector if self._memory is not None else None
        if projector is not None:  # what it applied again, and what it passed over
            trace["projector"] = [projector.state.applied, projector.applied.noted, projector.applied.skipped]
        Path(f"{out}.json").write_text(json.dumps(trace))
        real_close(self)

    service.MemoryService.close = close  # type: ignore[method-assign]
    config = uvicorn_config(app, "127.0.0.1", port, "warning")
    server = uvicorn.Server(config)

    async def main() -> None:
        lagger = asyncio.ensure_future(_lateness(trace))
        try:
            await server.serve()
        finally:
            lagger.cancel()

    asyncio.run(main())


WIDTH = {"turns": 8, "batches": 4, "gc": 5, "lag": 2, "threads": 2, "projector": 3}


def _rows(flat: list[Any], width: int) -> list[list[Any]]:
    return [flat[i : i + width] for i in range(0, len(flat), width)]


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _ms(values: list[float], qs: tuple[float, ...] = (0.5, 0.9, 0.99, 0.999)) -> str:
    return " ".join(f"{1000 * pct(values, q):7.2f}" for q in qs)


def report(path: Path) -> None:
    # Flat lists of numbers in the server (a list per turn would feed the collector it measures).
    trace = {k: _rows(v, WIDTH[k]) for k, v in json.loads(path.read_text()).items()}
    turns = trace["turns"]
    if not turns:
        print("no turns traced")
        return
    total = [sum(t[1:4]) + sum(t[5:7]) for t in turns]
    print(f"{len(turns):,} turns; server-side ms      p50     p90     p99   p99.9")
    print(f"{'total':18} {_ms(total)}")
    for i, name in enumerate(PARTS, start=1):
        print(f"{name:18} {_ms([t[i] for t in turns])}")
    print(
        f"batch size seen by a turn: p50 {pct([t[7] for t in turns], 0.5)}, p99 {pct([t[7] for t in turns], 0.99)}"
    )
    cut = pct(total, 0.99)
    slow = [t for t, tot in zip(turns, total, strict=True) if tot >= cut]
    print(f"slowest 1 % ({len(slow)} turns, >= {1000 * cut:.1f} ms), mean ms per part:")
    for i, name in enumerate(PARTS, start=1):
        print(f"  {name:16} {1000 * sum(t[i] for t in slow) / len(slow):7.2f}")
    batches = trace["batches"]  # [began, durable, size, fsync seconds]
    to_durable = [b[1] - b[0] for b in batches]
    fs = [b[3] for b in batches]
    print(f"{len(batches):,} batches;                p50     p99     max")
    print(f"{'to durable':24} {_ms(to_durable, (0.5, 0.99, 1.0))}")
    print(f"{'of it fsync':24} {_ms(fs, (0.5, 0.99, 1.0))}")
    for gen in (0, 1, 2):
        runs = [g for g in trace["gc"] if g[2] == gen]
        if runs:
            pauses = [g[1] for g in runs]
            walked = f", objects walked up to {max(g[4] for g in runs):,}" if gen == 2 else ""
            print(
                f"gc gen {gen}: {len(runs)} collections, p99 {1000 * pct(pauses, 0.99):.2f} ms, "
                f"max {1000 * max(pauses):.2f} ms (CPU {1000 * max(g[3] for g in runs):.2f}), "
                f"total {sum(pauses):.2f} s{walked}"
            )
    threads = " ".join(f"{name} {1e6 * cpu / len(turns):.0f}" for name, cpu in trace.get("threads", []))
    print(f"CPU µs per turn by thread (from start-up): {threads}")
    for applied, noted, skipped in trace.get("projector", []):
        print(f"projector: applied {applied:,} events, passed over {skipped:,} of the {noted:,} marked")
    print(
        f"event loop lateness (1 ms sleep), p50 / p99 / max ms: {_ms([x[1] for x in trace['lag']], (0.5, 0.99, 1.0))}"
    )


if __name__ == "__main__":
    if sys.argv[1] == "--report":
        report(Path(sys.argv[2]))
    else:
        serve(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
