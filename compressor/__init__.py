"""tiermem.compressor"""
