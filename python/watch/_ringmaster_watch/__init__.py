"""Ringmaster's zero-code watch of a Python rank (docs/python.md). Placeholder."""
