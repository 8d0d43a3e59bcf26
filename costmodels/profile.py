"""Machine profiles: the calibrated model's constants, as JSON, kept in the store.

Where `profile()` finds one, first hit wins:

1. `SVOD_MACHINE_PROFILE=path.json` (a profile file, e.g. `tests/machine_profile.json` in
   CI; the old spelling `SVOD_PROFILE=path.json` still works: `SVOD_PROFILE=1` now turns
   on kernel profiling, `svod.profiler`, so only a value that is not a switch is a path);
2. the store (kind "profiles"), written by `svod calibrate` on this machine — a profile
   written by an older svod version on this machine is reused (and re-stored under
   this version) until the next calibration: it describes the machine, not the code;
3. the reference profile shipped with svod (`costmodels.reference`, measured on the
   project's 2-core reference VM), so planning never needs a calibration first; its
   thread count and all-core speed-ups are scaled to this process's pool
   (`host_reference`).

>>> p = reference()
>>> p.cores >= 1 and p.bandwidth_at("copy1", 1 << 20) > 0
True
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import os
import sys
import threading
import types
from dataclasses import dataclass, field

from svod.flags import machine_profile_path

PROFILE_FORMAT = 1
STORE_KEY = f"machine-profile/v{PROFILE_FORMAT}"

# A library (BLAS) step's fixed cost in a graph program, besides its flops and bytes: the
# Python call between native segments (operand views, the gemm call's set-up), and the
# graph program's single-segment replay path it rules out. `svod calibrate` measures it
# (`costmodels.stepprobes._library_step_cost`); profiles from before that probe get this
# figure, measured on the reference VM (docs/costmodels.md).
LIBRARY_STEP_SECONDS = 15e-6


@dataclass
class Profile:
    """A machine profile (see `costmodels.calibrate` for how each constant is measured).

    `data` is the JSON form; the properties are views of it. `source` says where it came
    from ("store", "file:<path>", "reference", "memory")."""

    data: dict
    source: str = "memory"
    _curves: dict = field(default_factory=dict, repr=False)

    @staticmethod
    def from_json(data: dict, source: str = "memory") -> Profile:
        if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT:
            raise ValueError(f"not a svod machine profile of format {PROFILE_FORMAT}")
        for key in ("bandwidth", "op_seconds", "launch_seconds", "dispatch_seconds", "unit_seconds"):
            if key not in data:
                raise ValueError(f"machine profile lacks {key!r}")
        return Profile(data, source)

    @staticmethod
    def load(path: str | os.PathLike) -> Profile:
        with open(path) as fh:
            return Profile.from_json(json.load(fh), f"file:{path}")

    def to_json(self) -> dict:
        return self.data

    def dump(self, path: str | os.PathLike) -> None:
        with open(path, "w") as fh:
            json.dump(self.data, fh, indent=1, sort_keys=True)
            fh.write("\n")

    @property
    def id(self) -> str:
        """A content hash: part of the plan generation (a new profile re-plans)."""
        core = {k: v for k, v in self.data.items() if k not in ("raw", "created", "calibrate_seconds")}
        text = json.dumps(core, sort_keys=True, separators=(",", ":"))
        return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()

    # ---- the constants
    @property
    def cores(self) -> int:
        return int(self.data.get("cores", 1))

    @property
    def bandwidth(self) -> dict[str, list]:
        return self.data["bandwidth"]

    @property
    def op_seconds(self) -> dict[str, float]:
        return self.data["op_seconds"]

    @property
    def launch_seconds(self) -> float:
        return float(self.data["launch_seconds"])

    @property
    def dispatch_seconds(self) -> float:
        return float(self.data["dispatch_seconds"])

    @property
    def unit_seconds(self) -> float:
        return float(self.data["unit_seconds"])

    @property
    def library_step_seconds(self) -> float:
        """Seconds a library (BLAS) step costs a graph program besides its work (see
        `LIBRARY_STEP_SECONDS`; the default where a profile predates the probe)."""
        return float(self.data.get("library_step_seconds", LIBRARY_STEP_SECONDS))

    @property
    def compute_scaling(self) -> float:
        return float(self.data.get("compute_scaling", 1.0))

    def get(self, key: str, default=None):
        return self.data.get(key, default)

    def bandwidth_at(self, curve: str, working_set: float) -> float:
        """Bytes/s of `curve` ("read1", "copy2", ...) at `working_set` bytes:
        interpolated in log(size) between measured points, flat beyond them."""
        pts = self._curves.get(curve)
        if pts is None:
            raw = sorted(self.bandwidth.get(curve) or self.bandwidth.get(curve[:-1] + "1") or [[1, 1e10]])
            pts = ([math.log(max(p[0], 1)) for p in raw], [float(p[1]) for p in raw])
            self._curves[curve] = pts
        xs, ys = pts
        x = math.log(max(working_set, 1))
        if x <= xs[0]:
            return ys[0]
        if x >= xs[-1]:
            return ys[-1]
        i = bisect.bisect_right(xs, x)
        w = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
        # harmonic interpolation: seconds per byte are what add up
        return 1.0 / ((1 - w) / ys[i - 1] + w / ys[i])

    def curves(self) -> dict[str, list[tuple[float, float]]]:
        """Every bandwidth curve as (working-set bytes, bytes/s) points (for plotting)."""
        return {k: [(float(a), float(b)) for a, b in sorted(v)] for k, v in self.bandwidth.items()}


# ----------------------------------------------------------------------------- finding one

_lock = threading.Lock()
_cached: dict[str, Profile] = {}


def reference() -> Profile:
    """The profile shipped with svod (measured on the project's reference VM)."""
    from costmodels.reference import PROFILE

    return Profile.from_json(PROFILE, "reference")


def host_reference(threads: int | None = None) -> Profile:
    """The reference profile for a pool of `threads` (default: this process's pool,
    `svod.codegen.target.pool_size`): the profile the planner uses on a machine with no
    calibration. The reference was measured on 2 cores, and its `cores` is the thread
    count every split kernel is given; kept as it is, an uncalibrated 16-core machine ran
    every planned kernel on 2 threads (bench_scaling and bench_kernels on a 16-core Xeon:
    W1/W2 flat, full reductions at 21% of the read probe). So `cores` becomes the pool's
    size, and the two all-core speed-ups the reference measured are extended at the
    per-core gain it measured: `compute_scaling` (s on 2 cores -> 1 + (s - 1)(t - 1))
    and the generated GEMM's all-core rate (`matmul_flops["native2:1024"]`), each at
    most t. The all-core bandwidth curves stay the 2-core ones: a memory-bound kernel is
    priced pessimistically (DRAM bandwidth grows with cores by a machine-dependent
    factor: 2-3x on desktops, 15x on the 16-core Xeon), which changes its price, not
    whether it splits. `svod calibrate` measures all of it on the machine itself."""
    p = reference()
    if threads is None:
        from svod.codegen.target import pool_size

        threads = pool_size()
    ref = max(1, p.cores)
    t = max(1, int(threads))
    if t == ref:
        return p
    data = dict(p.data)
    data["cores"] = t
    data["scaled_from_cores"] = ref
    gain = (p.compute_scaling - 1.0) / max(ref - 1, 1)  # measured speed-up per added core
    data["compute_scaling"] = min(float(t), 1.0 + gain * (t - 1))
    mm = dict(data.get("matmul_flops", {}))
    one, two = mm.get("native"), mm.get("native2:1024")
    if one and two and t > 1:
        g = max(0.0, two / one - 1.0) / max(ref - 1, 1)
        mm["native2:1024"] = one * min(float(t), 1.0 + g * (t - 1))
        data["matmul_flops"] = mm
    return Profile(data, f"reference (measured on {ref} cores, scaled to {t} threads)")


def _from_store(store) -> Profile | None:
    obj = store.get_json("profiles", STORE_KEY)
    source = "store"
    if obj is None:
        obj = store.get_json_any_code("profiles", STORE_KEY) if hasattr(store, "get_json_any_code") else None
        if obj is not None:
            store.put_json("profiles", STORE_KEY, obj)  # re-stored under this svod version
            source = "store (older svod version)"
    if obj is None:
        return None
    try:
        return Profile.from_json(obj, source)
    except ValueError:
        return None


def profile(store=None, refresh: bool = False) -> Profile:
    """The profile this process plans with (see the module docstring for the order).

    >>> profile().source in ("store", "store (older svod version)") or \
        profile().source.startswith(("file:", "reference"))
    True
    """
    path = machine_profile_path()
    if path:
        key = "file:" + path
        with _lock:
            if refresh or key not in _cached:
                try:
                    _cached[key] = Profile.load(path)
                except (OSError, ValueError) as e:
                    import warnings

                    from svod.errors import SvodWarning, user_stacklevel

                    warnings.warn(f"svod: SVOD_MACHINE_PROFILE={path} is not a usable profile ({e}); using the "
                                  "reference profile", SvodWarning, stacklevel=user_stacklevel())
                    _cached[key] = reference()
            return _cached[key]
    if store is None:
        from svod.store import default_store

        store = default_store()
    key = f"store:{id(store)}"
    with _lock:
        if refresh or key not in _cached:
            _cached[key] = _from_store(store) or host_reference()
        return _cached[key]


def save(p: Profile, store=None) -> None:
    """Store `p` as this machine's profile (and use it from now on in this process)."""
    if store is None:
        from svod.store import default_store

        store = default_store()
    store.put_json("profiles", STORE_KEY, p.to_json())
    p.source = "store"
    with _lock:
        _cached.clear()
        _cached[f"store:{id(store)}"] = p


def forget() -> None:
    """Drop the per-process cache (tests; after changing SVOD_CACHE_DIR)."""
    with _lock:
        _cached.clear()


def write_reference(p: Profile, path: str | os.PathLike | None = None) -> str:
    """Write `p` (without its raw probe timings) as `costmodels/reference.py`, the profile
    shipped with svod; keep `tests/machine_profile.json` the same profile."""
    import pprint

    data = {k: v for k, v in p.data.items() if k != "raw"}
    path = path or os.path.join(os.path.dirname(__file__), "reference.py")
    text = ('"""The reference machine profile shipped with svod: `svod calibrate` on the project\'s\n'
            "reference VM (2 vCPUs, AMD EPYC under KVM, AVX2 JIT target). `costmodels.profile()` falls back\n"
            "to it when this machine has no profile of its own. Generated by\n"
            "`costmodels.profile.write_reference(Profile.load('tests/machine_profile.json'))`; the tests check\n"
            'that the two agree."""\n\n'
            f"PROFILE = {pprint.pformat(data, width=110, sort_dicts=True)}\n")
    with open(path, "w") as fh:
        fh.write(text)
    return str(path)


class _CallableModule(types.ModuleType):
    """`costmodels.profile()` is `costmodels.profile.profile()` (the issue's and the
    notebooks' spelling), while `costmodels.profile.save` and friends stay module
    attributes."""

    def __call__(self, store=None, refresh: bool = False) -> Profile:
        return profile(store, refresh)


sys.modules[__name__].__class__ = _CallableModule
