"""tiermem.runtime"""
