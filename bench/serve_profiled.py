"""`tiermem serve` under cProfile, one profile per thread kind (`bench_serve.py --profile OUT`).

    python bench/serve_profiled.py DATA_DIR PORT OUT

Runs the same application as `tiermem serve` on 127.0.0.1:PORT, with a
profiler on the event-loop thread, one on the memory thread and one on the
hot store's update thread (cProfile sees only the thread it runs in). At
shutdown (SIGTERM) it writes OUT.loop.prof, OUT.memory.prof and
OUT.update.prof; read them with `python -m pstats`. cProfile slows Python
down (~1.6× here): compare shares, not absolute times.
"""

from __future__ import annotations

import cProfile
import sys
from pathlib import Path

import uvicorn

from tiermem.app.server import service
from tiermem.app.server.app import application, uvicorn_config
from tiermem.settings import resolve_settings


def main() -> None:
    data_dir, port, out = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    profiles = {name: cProfile.Profile() for name in ("loop", "memory", "update")}
    opened = service.MemoryService.__init__
    closed = service.MemoryService.close

    def init(self: service.MemoryService, settings: object) -> None:
        opened(self, settings)  # type: ignore[arg-type]
        self._executor.submit(profiles["memory"].enable).result()
        self._updater.submit(profiles["update"].enable).result()

    def close(self: service.MemoryService) -> None:
        self._executor.submit(profiles["memory"].disable).result()
        self._updater.submit(profiles["update"].disable).result()
        profiles["loop"].disable()
        for name, profile in profiles.items():
            profile.dump_stats(f"{out}.{name}.prof")
        closed(self)

    service.MemoryService.__init__ = init  # type: ignore[method-assign]
    service.MemoryService.close = close  # type: ignore[method-assign]
    app = application(resolve_settings(data_dir=data_dir, env={}), server_process=True)
    profiles["loop"].enable()
    uvicorn.Server(uvicorn_config(app, "127.0.0.1", port, "warning")).run()


if __name__ == "__main__":
    main()
