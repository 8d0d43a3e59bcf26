"""Shared fixtures: every test starts with empty in-memory caches and fresh counters,
and persistent caches live in a temporary directory (never the user's cache)."""

from __future__ import annotations

import os
import tempfile

import pytest

# Before svod is imported anywhere: the store must never touch ~/.cache during tests.
_TMP_CACHE = tempfile.mkdtemp(prefix="svod-test-cache-")
os.environ.setdefault("SVOD_CACHE_DIR", _TMP_CACHE)
os.environ.setdefault("SVOD_VALIDATE", "1")


@pytest.fixture(autouse=True)
def _fresh_svod_state():
    import svod
    from svod import engine

    engine.reset_caches()
    svod.reset_stats()
    yield
    engine.reset_caches()
