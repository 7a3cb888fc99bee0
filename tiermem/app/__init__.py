"""The application layer: the CLI, jobs, scheduler, demo, benchmarks and servers.

It may import every part; no component imports it.
"""
