"""The permanent, append-only, date-partitioned event log (cold tier).

Public surface:
- `tiermem.registry`: every event type declared once (fields, version, writers, projection, views)
- `tiermem.events`: validation against it (caller vs internal writers, limits), enrichment, upcasting
- `tiermem.eventlog.EventLog`: durable appends (fsync always|group|none) and positioned reads
- `tiermem.catalog`: DuckDB views for analysts and batch jobs
- `tiermem.log.seal`: closed days to verified zstd Parquet (`seal`, `parquet_events`)
- `tiermem.log.erasure`: forget requests applied to every file at seal time (`erased_filter`)
- `tiermem.log.manifest`: `_manifest.json`, what the log holds
- `tiermem.log.sql`: analyst SQL that can only read the memory (`run_query`, `open_sandbox`)
"""
