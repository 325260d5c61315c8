"""Helpers for tests and benchmarks (NumPy reference loops, a tiny policy model); not installed."""
