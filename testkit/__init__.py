"""Helpers for tests and benchmarks (NumPy reference loops, a tiny policy model); not installed."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
"""The repository root (where ``pyproject.toml`` is)."""
