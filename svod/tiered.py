"""Tiered planning: a new graph the search may improve runs its greedy plan at once, and
the search runs off the critical path.

A fresh process pays, on the first realize of a graph with fusion choices, for importing
the search (egglog, ~0.3 s) and for the search itself — before the user sees a result.
With tiered planning (`SVOD_TIERED`, on by default) `svod.planner.decide` gives such a
graph, when a realize asks for it, the greedy planner's plan (correct; fused as far as
the greedy rules go), marked *provisional*; the engine runs it at once and then starts
the search of that graph on one background thread. When the search is done, its plan
(compiled there too) replaces the provisional one in the memory cache — the next call
runs it — and is persisted; the provisional plan is never persisted. Each replacement is
recorded (`svod.recompiles`: reason ``searched``, printed under SVOD_LOGS=recompiles),
and `svod.explain` says which plan runs and where it came from.

Contracts:

- **Bounded**: one background search at a time (one worker thread), at most
  `MAX_PENDING` graphs waiting; a graph beyond that is searched synchronously, as with
  tiering off.
- **What runs is what a caller is told**: `decide` callers other than the realize path
  (svod.jit, svod.explain, svod tune, the profiler) never get a provisional plan whose
  search is pending: they wait for it (`wait`), so a jit trace never keeps the greedy
  plan and explain shows the plan realize runs from then on.
- **Results**: the provisional and the searched plan compute the same values up to the
  fusion tolerance of docs/semantics.md (different fusion may round differently); both
  are checked under SVOD_VALIDATE like every plan.
- **Deterministic when asked**: `SVOD_TIERED=0` searches on the first call, as before
  (the test suite runs so); `SVOD_SEARCH=0` never searches; `wait_all()` settles every
  pending search (tests, benchmarks).
- **Fork-safe**: a fork pauses the worker and waits for the search under way
  (`os.register_at_fork`), so a child never inherits a lock held mid-search; the child
  forgets the queue (its provisional plans stay provisional: a child of a process that
  imported egglog cannot search, `svod.firstcall.search_unusable`).
- **Exit**: at interpreter exit one search — the one under way, else the next queued —
  is carried to where it gets persisted: handed to the search process (which finishes
  it, persists the plan and its code, and exits, after this process has gone), or, with
  the search in a thread (`SVOD_SEARCH_PROCESS=0`), finished here; bounded by
  `EXIT_WAIT` seconds. Other graphs still queued are dropped: their next process plans
  them the same way again.
- `svod.reset()` waits for the search under way and drops the queue (`drain`).
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections import deque
from collections.abc import Callable

from svod.flags import warn_once

MAX_PENDING = 8  # graphs queued for the background search at most
EXIT_WAIT = 30.0  # seconds the interpreter's exit waits for the search under way


def enabled() -> bool:
    """Whether tiered planning is on: `SVOD_TIERED` not 0 (read at each plan decision)."""
    return os.environ.get("SVOD_TIERED", "1").strip().lower() not in ("0", "false", "no", "off")


class Job:
    """One graph waiting for, or under, its background search."""

    __slots__ = ("key", "exe", "limits", "work", "done", "sent", "outcome")

    def __init__(self, key, exe, limits, work: Callable[[Job], None]):
        self.key = key  # the GraphKey
        self.exe = exe  # the provisional Executable it replaces
        self.limits = limits  # the search limits in force when it was queued
        self.work = work  # runs the search and the swap (svod.planner)
        self.done = threading.Event()
        # set once the search process has the request: it then finishes and persists the
        # plan on its own, whether or not this process is still there (svod.searchproc)
        self.sent = threading.Event()
        self.outcome = ""  # what happened, in words (tests, explain)


class Background:
    """The queue of background searches and its one worker thread (module docstring)."""

    def __init__(self, max_pending: int = MAX_PENDING):
        self.max_pending = max_pending
        self._lock = threading.Condition()
        self._queue: deque[Job] = deque()
        self._jobs: dict[str, Job] = {}  # key hash -> job queued or running
        self._thread: threading.Thread | None = None
        self._current: Job | None = None
        self._paused = 0
        self._exit_hook = False
        self._exited = False

    # ------------------------------------------------------------------ queue

    def submit(self, key, exe, limits, work: Callable[[Job], None]) -> bool:
        """Queue `key`'s search (not started: `start` does, after the first result);
        False when the queue is full or the key is queued already."""
        with self._lock:
            if key.hash in self._jobs or len(self._queue) >= self.max_pending:
                return False
            job = Job(key, exe, limits, work)
            self._jobs[key.hash] = job
            self._queue.append(job)
            if not self._exit_hook:  # registered after the store's: runs before it closes
                atexit.register(self.finish_at_exit)
                self._exit_hook = True
        return True

    def start(self) -> bool:
        """Start the worker when work is queued and none runs; whether one runs now."""
        with self._lock:
            if self._thread is not None:
                return True
            if not self._queue or self._paused:
                return False
            t = threading.Thread(target=self._work, name="svod-background-search", daemon=True)
            self._thread = t
            t.start()
            return True

    def pending(self, key_hash: str) -> bool:
        """Whether `key_hash`'s search is queued or running."""
        return key_hash in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    # ------------------------------------------------------------------ waiting

    def wait(self, key_hash: str, timeout: float | None = None) -> bool:
        """Wait for `key_hash`'s search (started if it was only queued); True when it is
        not pending any more. Never waits on the worker's own thread."""
        job = self._jobs.get(key_hash)
        if job is None:
            return True
        if threading.current_thread() is self._thread:
            return False
        self.start()
        return job.done.wait(timeout)

    def wait_all(self, timeout: float | None = None) -> bool:
        """Wait until no search is queued or running (tests, benchmarks); True when so."""
        self.start()
        with self._lock:
            return self._lock.wait_for(lambda: not self._jobs, timeout)

    def drain(self, timeout: float | None = None) -> None:
        """Drop the queued searches and wait for the one under way (`svod.reset`)."""
        with self._lock:
            for job in self._queue:
                self._finish(job, "dropped (svod.reset)")
            self._queue.clear()
            cur = self._current
        if cur is not None and threading.current_thread() is not self._thread:
            cur.done.wait(timeout)

    # ------------------------------------------------------------------ the worker

    def _finish(self, job: Job, outcome: str) -> None:  # under the lock
        job.outcome = job.outcome or outcome
        self._jobs.pop(job.key.hash, None)
        job.done.set()
        self._lock.notify_all()

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._queue or self._paused:
                    self._thread = None
                    self._lock.notify_all()
                    return
                job = self._current = self._queue.popleft()
            try:
                job.work(job)
            except BaseException as e:  # noqa: BLE001 - the provisional plan stays; the user's results are fine
                warn_once("tiered", f"svod: the background search of graph {job.key.hash[:12]} failed "
                                    f"({type(e).__name__}: {e}); its greedy plan stays in use")
                job.outcome = f"failed ({type(e).__name__})"
            with self._lock:
                self._current = None
                self._finish(job, "done")

    # ------------------------------------------------------------------ fork and exit

    def pause_and_wait(self, timeout: float | None = None) -> None:
        """Stop taking new jobs and wait for the one under way (before a fork, at exit)."""
        with self._lock:
            self._paused += 1
            t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)

    def resume(self) -> None:
        with self._lock:
            self._paused = max(0, self._paused - 1)
        self.start()

    def forget_in_child(self) -> None:
        """After a fork, in the child: no worker, no queue (the parent searches them)."""
        self._lock = threading.Condition()
        for job in self._queue:
            job.outcome = "dropped (forked)"
            job.done.set()
        self._queue.clear()
        self._jobs.clear()
        self._thread = None
        self._current = None
        self._paused = 0

    def finish_at_exit(self) -> None:
        """At exit: one search — the one under way, else the next queued — is carried
        to where it will be persisted, the rest dropped (the exit hook; also called by
        `svod.codegen.sharedlib` before it links, so that a plan compiled here is linked
        too). A search handed to the search process (`Job.sent`) completes and is
        persisted there on its own: the exit waits only until it is handed over. A search
        in a thread of this process (`SVOD_SEARCH_PROCESS=0`) is waited for. Either wait
        is bounded by `EXIT_WAIT`. Once per process; later calls return."""
        with self._lock:
            if self._exited:
                return
            self._exited = True
            keep = self._queue.popleft() if self._current is None and self._queue else None
            for job in self._queue:
                self._finish(job, "dropped (exit)")
            self._queue.clear()
            if keep is not None:
                self._queue.append(keep)
            job = keep or self._current
        if job is None:
            return
        self.start()
        deadline = time.monotonic() + EXIT_WAIT
        while not job.done.is_set() and not job.sent.is_set() and time.monotonic() < deadline:
            job.done.wait(0.005)
        if job.sent.is_set() and not job.done.is_set():
            return  # the search process finishes and persists it
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(max(0.0, deadline - time.monotonic()))


TIERED = Background()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=TIERED.pause_and_wait, after_in_parent=TIERED.resume,
                        after_in_child=TIERED.forget_in_child)


__all__ = ["EXIT_WAIT", "MAX_PENDING", "TIERED", "Background", "Job", "enabled"]
