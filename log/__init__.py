"""The permanent, append-only, date-partitioned event log (cold tier).

Public surface:
- `tiermem.events`: the event schema (v1), validation, enrichment, upcasting
- `tiermem.eventlog.EventLog`: durable appends (fsync always|group|none) and positioned reads
- `tiermem.catalog`: DuckDB views for analysts and batch jobs
- `tiermem.log.seal`: closed days to verified zstd Parquet (`seal`, `parquet_events`)
- `tiermem.log.erasure`: forget requests applied to every file at seal time (`erased_filter`)
- `tiermem.log.manifest`: `_manifest.json`, what the log holds
- `tiermem.log.sql`: read-only analyst SQL (`run_query`)
"""
