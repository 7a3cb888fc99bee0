"""tiermem.ingest"""
