"""Test helper: run a function on several threads at once."""

from __future__ import annotations

import threading


def run_threads(target, args_list) -> None:
    """One thread per tuple of `args_list`, all started before any is joined."""
    ts = [threading.Thread(target=target, args=tuple(a)) for a in args_list]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
