"""The search process's side of `svod.searchproc`: read search requests on stdin, answer
on stdout (the protocol: svod.searchproc's module docstring). Started by the parent as
``python -c "from svod.searchserver import serve; serve()"``; never imported by svod.
"""

from __future__ import annotations

import json
import os
import sys


def serve() -> None:
    """The search process's loop (module docstring)."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything else printed goes to stderr
    sys.stdout = sys.stderr
    import select
    import time

    from svod import planner
    from svod.config import SearchLimits, pinned
    from svod.key import GraphKey

    idle = float(os.environ.get("SVOD_SEARCH_PROCESS_IDLE", "60"))
    while True:
        # NOTE: select on the fd, then a buffered readline: safe because the parent has
        # one request in flight at a time (it waits for each answer under its lock)
        ready, _, _ = select.select([sys.stdin], [], [], idle)
        if not ready:
            return  # idle: exit (the parent starts another when it needs one)
        line = sys.stdin.readline()
        if not line:
            return  # the parent closed our stdin or exited
        t0 = time.perf_counter()
        try:
            req = json.loads(line)
            key = GraphKey.from_json(req["key"])
            lim = SearchLimits(**req["limits"])
            with pinned(lim):
                exe, source, detail, _ = planner.search_plan(key, limits=lim)
                planner._save(key, exe)
                data = exe.to_json()
            build = getattr(exe, "graph_program", None)
            if build is not None:  # compiled here into the shared object cache: the parent loads it
                build()
            reply = {"ok": True, "plan": data, "source": source, "detail": detail,
                     "provisional": bool(exe.provisional), "seconds": time.perf_counter() - t0}
        except Exception as e:  # noqa: BLE001 - answered; the parent keeps its provisional plan
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        try:
            out.write(json.dumps(reply) + "\n")
            out.flush()
        except OSError:  # the parent has exited: the plan is persisted; nothing to answer
            try:
                out.close()
            except OSError:
                pass
            return


__all__ = ["serve"]
