"""The search process: tiered planning's background searches run in a child Python
process, so the user's process never imports egglog for them and never shares its GIL
with a search.

A search in a thread of the user's process holds the GIL for most of its run (egglog's
Python layer, the extraction, the cost model); every call the user makes meanwhile waits
up to the interpreter's switch interval (5 ms) each time it takes the GIL back — after
every native call — so a 1 ms realize took 10-30 ms while a search ran (measured on the
loaded 2-core VM, docs/engine.md). In a process of its own the search costs the user's
process nothing but a core, and egglog, which does not survive a fork
(`svod.firstcall`), never enters the user's process.

Protocol (one JSON object a line): the parent writes ``{"key": GraphKey.to_json(),
"limits": SearchLimits fields}``; the child searches it (`svod.planner.search_plan`
under those limits), persists the plan in the shared store (`svod.planner._save`, WAL:
several processes may write), compiles it (its kernels and graph program go to the
object cache, keyed as the parent keys them: the parent then loads them instead of
compiling, and its GIL stays free of the lowering's Python work) and answers ``{"ok": true, "plan": Executable.to_json()
(with its thread counts), "source", "detail", "provisional", "seconds"}`` or ``{"ok":
false, "error": "..."}``. The child is started on the first background search with the
parent's `sys.path` and environment (`SVOD_TIERED=0` in it), serves until its stdin
closes (the parent exited, or `close`) or it has been idle `SVOD_SEARCH_PROCESS_IDLE`
seconds (60: its memory, egglog's included, is given back; the next search starts
another), and prints nothing but answers on its stdout
(anything else it would print goes to the parent's stderr); its loop is
`svod.searchserver.serve` (a module of its own: it imports the planner, which imports
this one).

`SVOD_SEARCH_PROCESS=0`, or a child that cannot start or dies, makes the background
worker search in its own thread instead (`svod.planner._background_search`).
Memory: the search process holds ~240 MB (numpy, svod, egglog: measured VmRSS after a
search) while it lives; it exits after `SVOD_SEARCH_PROCESS_IDLE` idle seconds. Each
process that tiers (each Dask or Ray worker, say) has its own.
A fork of the parent gives the child process no search process (it starts its own).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading


def enabled() -> bool:
    """`SVOD_SEARCH_PROCESS` not 0."""
    return os.environ.get("SVOD_SEARCH_PROCESS", "1").strip().lower() not in ("0", "false", "no", "off")


class SearchProcess:
    """The parent's handle on its search process (one per process; module docstring)."""

    def __init__(self):
        self._proc: subprocess.Popen | None = None
        self._owner = os.getpid()
        self._lock = threading.Lock()
        self.started = 0  # processes started (tests)

    def _start(self) -> subprocess.Popen:
        env = dict(os.environ, SVOD_TIERED="0", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        env.pop("SVOD_PROFILE", None)
        # NOTE: -P (3.11+): the working directory is not put first on the child's path;
        # the parent's path, in its order, comes through PYTHONPATH
        flags = ["-P"] if sys.version_info >= (3, 11) else []
        p = subprocess.Popen([sys.executable, *flags, "-c", "from svod.searchserver import serve; serve()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, bufsize=1)
        self.started += 1
        return p

    def search(self, key, limits, on_sent=None) -> dict:
        """`key` searched under `limits` in the search process (started if needed): its
        answer (module docstring); `on_sent()` once the request is written. Raises
        RuntimeError when the process fails."""
        from dataclasses import asdict

        req = json.dumps({"key": key.to_json(), "limits": asdict(limits)}) + "\n"
        with self._lock:
            for _attempt in (0, 1):  # a process that exited idle just as we asked: once more
                p = self._proc
                fresh = p is None or p.poll() is not None or self._owner != os.getpid()
                if fresh:
                    p = self._proc = self._start()
                    self._owner = os.getpid()
                try:
                    p.stdin.write(req)
                    p.stdin.flush()
                    if on_sent is not None:
                        on_sent()
                    line = p.stdout.readline()
                except (OSError, ValueError) as e:
                    self._proc, line = None, ""
                    err = f"{type(e).__name__}: {e}"
                else:
                    err = f"exit status {p.poll()}"
                if line:
                    return json.loads(line)
                self._proc = None
                if fresh:
                    break
        raise RuntimeError(f"the search process ended ({err})")

    def close(self, timeout: float = 5.0) -> None:
        """End the search process (its stdin closed: it exits after the search under way)."""
        with self._lock:
            p, self._proc = self._proc, None
        if p is None or self._owner != os.getpid():
            return
        try:
            p.stdin.close()
            p.wait(timeout)
        except (OSError, subprocess.TimeoutExpired):
            p.kill()

    def forget_in_child(self) -> None:
        """After a fork, in the child: the parent's search process is not ours; its pipe
        ends are closed here (the parent keeps its own)."""
        p, self._proc = self._proc, None
        self._lock = threading.Lock()
        if p is not None:
            for f in (p.stdin, p.stdout):
                try:
                    f.close()
                except (OSError, ValueError):
                    pass


SEARCH_PROCESS = SearchProcess()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=SEARCH_PROCESS.forget_in_child)


__all__ = ["SEARCH_PROCESS", "SearchProcess", "enabled"]
