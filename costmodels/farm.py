"""A measurement farm on Ray: `svod tune|calibrate|costmodel report --ray ADDRESS`.

Timing many variants is embarrassingly parallel, but a timing means something only on
the machine that took it and only when nothing else disturbed it. So (as Kernel
Tuner's Ray runner, one actor per device):

- one Ray actor per share of a node: by default the node's whole CPU count (one actor
  per machine: timings do not disturb each other), or `actor_cpus` each. An actor runs
  one job at a time with svod's thread pool sized to its CPUs (`SVOD_THREADS`, and
  OpenBLAS/OpenMP threads alike): never more threads than the CPUs Ray gave it;
- each actor reports its machine fingerprint (CPU model and features, as the store's
  keys) and svod's code fingerprint; actors running other svod code are refused, the
  rest are grouped by machine (`jobs.MachineGroup`), and each group's results go into
  the local tuning database under that machine's fingerprint
  (`Store(path, machine=fingerprint)`): timings of different machines never mix, and a
  farm of identical machines tunes once for all of them;
- jobs (`costmodels.jobs.Job`) are handed to idle actors of their group; each has a
  timeout (the job's, else the farm's): an actor past it is killed and replaced and the
  job reported as timed out; an actor that dies mid-job is replaced and its job retried
  (`retries` times) on another, then reported; a job that raises is reported. None of
  these stops the run.

`address`: "local" starts a Ray instance on this machine for the run (`ray.init(
address="local")`; `num_cpus` caps it), "auto" joins the cluster this machine belongs
to, "HOST:PORT" or "ray://HOST:PORT" a cluster's head. An unreachable address fails
fast with `FarmError`; Ray is imported only here (`pip install 'svod[distributed]'`).

Layering: this module imports svod core and costmodels, never the search.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from costmodels.jobs import Farm, Job, JobResult, MachineGroup, error_text

DEFAULT_TIMEOUT = 600.0  # seconds a job may run when neither it nor the farm says
CONNECT_TIMEOUT = 5.0  # seconds to wait for a TCP answer from a cluster's address
_POLL = 0.5  # seconds between timeout checks while jobs run


class FarmError(RuntimeError):
    """The farm cannot be used (Ray missing, the cluster unreachable, no usable worker)."""


def import_ray():
    try:
        import ray
    except ImportError:
        raise FarmError("Ray is not installed: pip install 'svod[distributed]' (or pip install ray)") from None
    return ray


class MeasureActor:
    """What runs in each Ray actor (wrapped by `ray.remote` when a farm starts)."""

    def __init__(self, cpus: int):
        self.cpus = cpus

    def describe(self) -> dict:
        from costmodels.jobs import this_machine

        return this_machine(self.cpus)

    def run(self, fn: str, args: dict):
        from costmodels.jobs import run_job

        return run_job(fn, args)


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of "HOST:PORT" / "ray://HOST:PORT" / "HOST" (Ray's default port)."""
    a = address.split("://", 1)[1] if "://" in address else address
    if a in ("local", "auto", ""):
        return None
    host, _, port = a.rpartition(":") if ":" in a else (a, "", "")
    try:
        return (host or a).strip("[]"), int(port) if port else (10001 if address.startswith("ray://") else 6379)
    except ValueError:
        raise FarmError(f"cannot read the Ray address {address!r}: expected local, auto, HOST:PORT or "
                        "ray://HOST:PORT") from None


def _reachable(host: str, port: int, timeout: float) -> None:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as e:
        why = "no answer" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise FarmError(f"cannot reach a Ray cluster at {host}:{port} ({why}); start one there with "
                        "`ray start --head`, or use --ray local for a Ray instance on this machine") from None


def connect(address: str, num_cpus: int | None = None, connect_timeout: float = CONNECT_TIMEOUT) -> bool:
    """Connect this process to Ray at `address` (see the module docstring); True when it
    started a local instance (which `RayFarm.close` shuts down). An already initialised
    Ray is used as it is."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    hp = _host_port(address)
    if hp is not None:
        _reachable(*hp, connect_timeout)
    kw: dict = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
    if address == "local":
        import svod

        # the workers import the svod this process runs (a checkout on PYTHONPATH included)
        root = os.path.dirname(os.path.dirname(os.path.abspath(svod.__file__)))
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        kw.update(num_cpus=num_cpus, runtime_env={"env_vars": {"PYTHONPATH": path}})
    try:
        ray.init(address=address, **kw)
    except Exception as e:  # noqa: BLE001 - Ray's own errors vary by version: one message
        raise FarmError(f"cannot connect to Ray at {address!r}: {type(e).__name__}: {e}") from None
    return address == "local"


@dataclass
class _Worker:
    handle: object
    node: str
    cpus: int
    info: dict
    group: MachineGroup | None = None

    @property
    def where(self) -> str:
        return f"{self.info.get('host', '?')}:{self.info.get('pid', '?')}"


class RayFarm(Farm):
    """Measurement actors on a Ray cluster, grouped by machine (see the module docstring).

    >>> with RayFarm("local", num_cpus=2, actor_cpus=1) as farm:          # doctest: +SKIP
    ...     results = tune_farm(target, candidates, farm)

    `groups`: the machine groups; `workers`: the live actors; `refused`: why actors
    were not used (another svod version). `store_path`: the local store whose tuning
    rows the groups' databases are (default: svod's default store)."""

    def __init__(self, address: str = "local", *, actor_cpus: int | None = None, num_cpus: int | None = None,
                 job_timeout: float | None = None, retries: int = 1, store_path=None,
                 connect_timeout: float = CONNECT_TIMEOUT):
        if actor_cpus is not None and actor_cpus < 1:
            raise ValueError(f"RayFarm: actor_cpus must be at least 1, not {actor_cpus}")
        self.ray = import_ray()
        self.address = address
        self.job_timeout = job_timeout
        self.retries = max(0, int(retries))
        self.actor_cpus = actor_cpus
        self.refused: list[str] = []
        self._started = False
        self.workers: list[_Worker] = []
        self.groups: list[MachineGroup] = []
        self._started = connect(address, num_cpus, connect_timeout)
        try:
            self._start_actors(store_path)
        except BaseException:
            self.close()
            raise

    # ---- set-up
    def _actor_class(self):
        return self.ray.remote(MeasureActor)

    def _spawn(self, node: str, cpus: int) -> _Worker:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        threads = str(cpus)
        env = {"SVOD_THREADS": threads, "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads,
               "MKL_NUM_THREADS": threads}
        handle = self._actor_class().options(
            num_cpus=cpus, max_restarts=0, runtime_env={"env_vars": env},
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(cpus)
        return _Worker(handle, node, cpus, {})

    def _start_actors(self, store_path) -> None:
        from svod.store import code_fingerprint

        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        pending = []
        for n in nodes:
            cpus = int(n.get("Resources", {}).get("CPU", 0))
            per = self.actor_cpus or cpus
            for _ in range(cpus // per if per else 0):
                pending.append(self._spawn(n["NodeID"], per))
        if not pending:
            raise FarmError(f"the Ray cluster at {self.address!r} has no node with "
                            f"{self.actor_cpus or 1} free CPU(s) for a measurement actor")
        infos = self._describe(pending)
        code = code_fingerprint()
        for w, info in zip(pending, infos):
            if isinstance(info, str):
                self.refused.append(f"an actor on node {w.node[:12]} did not start: {info}")
                self.ray.kill(w.handle)  # a pending actor would hold its CPUs when they come free
            elif info["code"] != code:
                self.refused.append(f"{info['host']} runs another svod version (code {info['code'][:12]}, "
                                    f"here {code[:12]}): not used")
                self.ray.kill(w.handle)
            else:
                w.info = info
                self.workers.append(w)
        if not self.workers:
            raise FarmError("no usable measurement actor: " + "; ".join(self.refused))
        self._group(store_path)

    def _describe(self, workers: list[_Worker], timeout: float = 300.0) -> list:
        refs = [w.handle.describe.remote() for w in workers]
        out: list = []
        for ref in refs:
            try:
                out.append(self.ray.get(ref, timeout=timeout))
            except Exception as e:  # noqa: BLE001 - an actor that cannot start is reported, not fatal
                out.append(f"{type(e).__name__}: {e}")
        return out

    def _group(self, store_path) -> None:
        from costmodels.tuning import TuningDB
        from svod.store import Store, default_store, machine_fingerprint

        local = default_store()
        path = store_path or local.info().get("path")
        groups: dict[tuple[str, int], MachineGroup] = {}
        for w in self.workers:
            key = (w.info["machine"], w.cpus)
            g = groups.get(key)
            if g is None:
                if w.info["machine"] == machine_fingerprint() and store_path is None:
                    db = TuningDB(local)
                else:
                    db = TuningDB(Store(path or ":memory:", machine=w.info["machine"]))
                g = groups[key] = MachineGroup(w.info["machine"], w.cpus, 0, w.info["cpu"], (), db)
            g.workers += 1
            if w.info["host"] not in g.hosts:
                g.hosts = (*g.hosts, w.info["host"])
            w.group = g
        self.groups = list(groups.values())

    def _replace(self, dead: _Worker) -> _Worker | None:
        """A new actor where `dead` was (same node, same CPUs), or None when none starts."""
        try:
            self.ray.kill(dead.handle)
        except Exception:  # noqa: BLE001 - already gone
            pass
        if dead in self.workers:
            self.workers.remove(dead)
        try:
            w = self._spawn(dead.node, dead.cpus)
            info = self._describe([w], timeout=120.0)[0]
        except Exception:  # noqa: BLE001 - the node went away
            return None
        if isinstance(info, str) or info.get("machine") != dead.info.get("machine"):
            return None
        w.info, w.group = info, dead.group
        self.workers.append(w)
        return w

    # ---- running jobs
    def run(self, pairs: Iterable[tuple[MachineGroup, Job]], pb=None) -> Iterator[JobResult]:
        """Run each (group, job) on an idle actor of its group; yield results as they
        finish (failures included, see the module docstring)."""
        ray = self.ray
        queue: dict[int, deque] = {}
        for g, job in pairs:
            queue.setdefault(id(g), deque()).append((job, 1))
        idle = {id(g): [w for w in self.workers if w.group is g] for g in self.groups}
        flight: dict = {}  # ref -> (worker, job, attempt, started)
        while any(queue.values()) or flight:
            for gid, q in queue.items():
                while q and idle.get(gid):
                    w = idle[gid].pop()
                    job, attempt = q.popleft()
                    flight[w.handle.run.remote(job.fn, job.args)] = (w, job, attempt, time.monotonic())
                    if pb is not None:
                        pb.set_postfix_str(f"{job.label or job.key} on {w.where}")
            for gid, q in queue.items():  # a group with no actor left: its jobs fail
                if q and not idle.get(gid) and not any(f[0].group is not None and id(f[0].group) == gid
                                                       for f in flight.values()):
                    while q:
                        job, attempt = q.popleft()
                        yield JobResult(job, error="no measurement actor left for this machine", attempts=attempt)
            if not flight:
                continue
            ready, _ = ray.wait(list(flight), num_returns=1, timeout=_POLL)
            now = time.monotonic()
            for ref in ready:
                w, job, attempt, t0 = flight.pop(ref)
                res = JobResult(job, machine=w.info["machine"], worker=w.where, seconds=now - t0, attempts=attempt)
                try:
                    res.value = ray.get(ref)
                except ray.exceptions.RayTaskError as e:  # the job raised: the actor is fine
                    cause = getattr(e, "cause", None)
                    res.error = error_text(cause) if isinstance(cause, BaseException) else str(e).splitlines()[0]
                except ray.exceptions.RayError as e:  # the actor died under the job
                    new = self._replace(w)
                    if new is not None:
                        idle[id(new.group)].append(new)
                    if attempt <= self.retries:
                        queue[id(w.group)].appendleft((job, attempt + 1))
                        continue
                    res.error = f"the worker running it died ({type(e).__name__}), {attempt} time(s)"
                    yield res
                    continue
                idle[id(w.group)].append(w)
                yield res
            for ref, (w, job, attempt, t0) in list(flight.items()):
                limit = self.job_timeout or job.timeout or DEFAULT_TIMEOUT
                if now - t0 > limit:
                    del flight[ref]
                    new = self._replace(w)
                    if new is not None:
                        idle[id(new.group)].append(new)
                    yield JobResult(job, error=f"timed out after {limit:g} s (its worker was replaced)",
                                    machine=w.info["machine"], worker=w.where, seconds=now - t0, attempts=attempt)

    # ---- tear-down
    def close(self) -> None:
        for w in self.workers:
            try:
                self.ray.kill(w.handle)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.workers = []
        if self._started and self.ray.is_initialized():
            self.ray.shutdown()
        self._started = False

    def describe(self) -> str:
        lines = [f"Ray farm at {self.address}: {len(self.workers)} measurement actor(s)"]
        lines += [f"  {g.label}" for g in self.groups]
        lines += [f"  refused: {r}" for r in self.refused]
        return "\n".join(lines)


__all__ = ["FarmError", "MeasureActor", "RayFarm", "connect", "import_ray"]


# ----------------------------------------------------------------------------- calibrate and report on a farm


def calibrate_farm(farm, *, budget: float = 60.0, quick: bool = False, progress: bool = True,
                   save: bool = True) -> list[tuple[MachineGroup, object, str | None]]:
    """`svod calibrate --ray`: calibrate each machine kind of the farm once (one of its
    workers; its CPUs are the profile's cores) and store each profile in the local store
    under that machine's fingerprint, where `svod tune --ray` finds it. Returns
    (group, Profile or None, error or None) per group, in the farm's order."""
    from costmodels.profile import Profile
    from costmodels.profile import save as save_profile
    from costmodels.progress import bar

    timeout = max(600.0, 20 * budget)
    wave = [(g, Job(f"calibrate:{g.fingerprint}", "costmodels.jobs:calibrate_job", {"budget": budget, "quick": quick},
                    f"calibrate {g.cpu or g.fingerprint}", timeout)) for g in farm.groups]
    out: dict[int, tuple] = {}
    with bar(total=len(wave), desc="calibrate", enabled=progress, unit="machine") as pb:
        for res in farm.run(wave, pb):
            g = next(g for g, j in wave if j is res.job)
            prof = None
            if res.ok:
                prof = Profile.from_json(res.value, "farm")
                prof.data.setdefault("machine", {})["fingerprint"] = g.fingerprint
                if save:
                    save_profile(prof, store=g.db.store)
            out[id(g)] = (g, prof, res.error)
            pb.update(1)
    return [out.get(id(g), (g, None, "not run")) for g in farm.groups]


def report_farm(farm, oracle: str, names, *, model: str = "calibrated", small: bool = False, max_variants: int = 24,
                repeats: int = 9, max_choices: int = 12, seed: int = 0, budget: float = 5.0, instances: int = 3,
                doubt: float = 0.7, progress: bool = True, fresh: bool = False) -> list[tuple]:
    """`svod costmodel report --ray`: each workload is one job, timed on one worker of each
    machine kind, priced with that machine's profile (`svod calibrate --ray`; else the
    reference). Each finished row is kept in that machine's tuning rows (keyed by the
    options), so a repeated command resumes — `fresh` times everything again. Returns
    (group, rows, failures) per group: rows of different machines are never pooled."""
    import hashlib
    import json

    from costmodels.profile import profile as profile_of
    from costmodels.progress import bar
    from costmodels.report import Row

    if model not in ("calibrated", "roofline"):
        raise ValueError(f"costmodel report on a farm prices with 'calibrated' or 'roofline', not {model!r}: the "
                         "measured model reads this machine's tuning rows")
    opts = {"model": model, "small": small, "max_variants": max_variants, "repeats": repeats,
            "max_choices": max_choices, "seed": seed, "budget": budget, "instances": instances, "doubt": doubt}
    wave, keys, tags = [], {}, {}
    for g in farm.groups:
        prof = profile_of(store=g.db.store).to_json() if model == "calibrated" else None
        tag = hashlib.blake2b(json.dumps([opts, prof], sort_keys=True, default=str).encode(),
                              digest_size=6).hexdigest()
        for name in names:
            key = f"report:{tag}:{name}"
            if not fresh and isinstance(g.db.store.get_json("tuning", key), dict):
                continue
            keys[key] = g
            wave.append((g, Job(key, "costmodels.jobs:report_job", dict(opts, workload=name, oracle=oracle,
                                                                           profile=prof), name, 60 * budget + 600)))
        tags[id(g)] = tag
    failures: dict[int, list] = {id(g): [] for g in farm.groups}
    with bar(total=len(wave), desc="costmodel report", enabled=progress and bool(wave), unit="workload") as pb:
        for res in farm.run(wave, pb):
            g = keys[res.job.key]
            if res.ok:
                g.db.store.put_json("tuning", res.job.key, res.value)
            else:
                failures[id(g)].append(f"{res.job.label}: {res.error}")
            pb.update(1)
    fields = set(Row.__dataclass_fields__)
    out = []
    for g in farm.groups:
        rows = []
        for name in names:
            obj = g.db.store.get_json("tuning", f"report:{tags[id(g)]}:{name}")
            if isinstance(obj, dict):
                row = Row(**{k: v for k, v in obj.items() if k in fields})
                if row.measured_variants:
                    rows.append(row)
        out.append((g, rows, failures[id(g)]))
    return out
