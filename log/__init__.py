"""The permanent, append-only, date-partitioned event log (cold tier).

Public surface:
- `tiermem.log.events`: the event schema (v1), validation, enrichment, upcasting
- `tiermem.log.store.EventLog`: durable appends and positioned reads
- `tiermem.log.catalog`: DuckDB views for analysts and batch jobs
"""
