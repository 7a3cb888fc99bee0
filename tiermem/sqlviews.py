"""The analyst catalog: the log's views plus each part's derived views.

`open_catalog(settings)` is what `tiermem sql`, the batch jobs and notebooks
use. Each part that derives a view declares it in its own `views.py` as
`VIEWS: dict[name, SELECT-sql]` (written against the log's views), so the log
never needs to know what an episode is.
"""

from __future__ import annotations

import importlib

import duckdb

from tiermem.log import catalog
from tiermem.settings import Settings

VIEW_MODULES = ("tiermem.compressor.views", "tiermem.evolver.views", "tiermem.runtime.views")


def open_catalog(settings: Settings) -> duckdb.DuckDBPyConnection:
    con = catalog.connect(settings)
    for name in VIEW_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        for view, sql in module.VIEWS.items():
            con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS {sql}")
    return con
