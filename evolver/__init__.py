"""tiermem.evolver"""
