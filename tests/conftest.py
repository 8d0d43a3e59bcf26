"""Shared fixtures: every test starts with empty in-memory caches and pools and fresh
counters (`svod.reset()`), and persistent caches live in a temporary directory (never the
user's cache)."""

from __future__ import annotations

import os
import tempfile

import pytest

# Before svod is imported anywhere: the store must never touch ~/.cache during tests.
_TMP_CACHE = tempfile.mkdtemp(prefix="svod-test-cache-")
os.environ.setdefault("SVOD_CACHE_DIR", _TMP_CACHE)
os.environ.setdefault("SVOD_VALIDATE", "1")
# The first realize of a graph searches synchronously, so plans do not depend on timing
# (tiered planning is tested with SVOD_TIERED=1: tests/test_first_call.py).
os.environ.setdefault("SVOD_TIERED", "0")


@pytest.fixture(autouse=True)
def _fresh_svod_state():
    import svod

    svod.reset()
    yield
    svod.reset()


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """A fresh store under tmp_path and the checked-in machine profile, for one test."""
    from pathlib import Path

    import svod

    monkeypatch.setenv("SVOD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SVOD_MACHINE_PROFILE", str(Path(__file__).resolve().parent / "machine_profile.json"))
    svod.reset()
    yield tmp_path
    svod.reset()
