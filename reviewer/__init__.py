"""tiermem.reviewer"""
