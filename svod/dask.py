"""svod chunks for dask.array: each chunk's computation as one fused svod graph.

dask.array runs numpy per chunk, one numpy call (and one temporary) per op. With svod,
the per-chunk work of a dask graph — its blockwise layers (elementwise ops, the chunk
step of reductions, blockwise matmul), and the per-chunk aggregates of reductions along
axes held in one chunk (softmax's and layer norm's row reductions) — runs as one svod
graph per chunk: searched and compiled once per worker (the plan is shared by every
worker through the persistent cache, `SVOD_CACHE_DIR`), then replayed for every chunk of
the same shape. Reductions across chunks stay dask's tree reduction, on numpy. Results
equal dask's with numpy chunks (dtypes included: every op casts as numpy would).

>>> import dask, dask.array as da, numpy as np, svod.dask
>>> x = da.from_array(np.arange(8.0, dtype=np.float32).reshape(4, 2), chunks=(2, 2))
>>> with svod.dask.enabled():
...     round(float((da.exp(x * 0.5) + 1.0).sum().compute(scheduler="sync")), 3)
90.621

How: `optimize` (dask's `array_optimize` hook; `enabled()` sets it) takes the graph after
dask's blockwise fusion, groups the tasks of each chunk into a region — a task joins the
region of the tasks it reads when they are all one region, and a task that reads several
regions (a tree reduction's combine step) stays a numpy task — and replaces each region by
one task that evaluates its tasks on `LazyChunk`s: numpy-compatible stand-ins for lazy svod
Tensors (NEP 13/18 protocols), so numpy's and dask's own chunk functions build one svod
graph; the region's outputs are realized together at its end. Ops svod lacks are found
before anything runs: such a task stays on numpy, with one `SvodWarning` naming the op. A
region that still fails on a worker (a search or compile failure, an argument svod does not
take) runs that chunk with numpy, with one warning per cause — never a wrong result.

The integration is a graph optimization, not a chunk type: svod's chunks are numpy arrays in
and out of each region, so dask's backend entry point (`dask.array.backends`, which picks
the chunk type of creation functions) has nothing to add; numpy-backed dask arrays are what
svod reads. Needs dask and distributed (`pip install 'svod[distributed]'`), imported only here.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import operator
import os
import sys
import threading
import warnings

import numpy as np
from dask._task_spec import (
    Alias,
    DataNode,
    NestedContainer,
    Task,
    TaskRef,
    _execute_subgraph,
    convert_legacy_graph,
    execute_graph,
    fuse_linear_task_spec,
)

import svod
from svod._dask_chunk import _FUNCS, _UFUNCS, LazyChunk, Unsupported, _functions
from svod.eager import eager_mode
from svod.errors import SvodWarning, user_stacklevel

# ----------------------------------------------------------------------------- what svod runs


@functools.cache
def _known_set() -> frozenset:
    import dask.array.chunk as C
    import dask.array.core as CORE
    import dask.array.reductions as R
    import dask.array.routines as RT
    from dask._task_spec import _identity_cast

    if not _FUNCS:
        _FUNCS.update(_functions())
    ops = [getattr(operator, n) for n in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos",
                                           "abs", "lt", "le", "gt", "ge", "eq", "ne", "and_", "or_", "xor", "invert",
                                           "matmul", "getitem")]
    dask_fns = [getattr(mod, n, None) for mod, names in (
        (C, ("astype", "getitem")),
        (R, ("mean_chunk", "mean_combine", "mean_agg", "moment_chunk", "moment_combine", "moment_agg",
             "chunk_max", "chunk_min", "divide", "numel", "_sqrt", "safe_sqrt")),
        (CORE, ("_concatenate2",)), (RT, ("_matmul", "_tensordot", "_chunk_sum"))) for n in names]
    return frozenset(f for f in [*ops, *_FUNCS, *dask_fns, _identity_cast] if f is not None)


def _enforce_dtype():
    import dask.array.core as CORE

    return getattr(CORE, "_enforce_dtype", None)


def known(f, kwargs: dict | None = None) -> bool:
    """Whether svod runs `f` on array data (see the module docstring)."""
    while isinstance(f, functools.partial):
        f = f.func
    if isinstance(f, np.ufunc):
        return f.__name__ in _UFUNCS
    if type(f).__name__ == "Compose" and hasattr(f, "funcs"):  # toolz: a tree reduction's aggregate
        return all(known(g) for g in (f.first, *f.funcs))
    if f is _enforce_dtype() and kwargs is not None:  # sqrt of std and friends: the wrapped function decides
        return known(kwargs.get("enforce_dtype_function"))
    try:
        return f in _known_set()
    except TypeError:  # unhashable callables
        return False


@functools.cache
def _plumbing() -> frozenset:
    """dask's own data movement (reading a source, assembling results, storing): never an
    op svod lacks, just not svod's work."""
    import dask.array.core as CORE

    names = ("getter", "getter_nofancy", "getter_inline", "finalize", "concatenate3", "concatenate_shaped",
             "store_chunk", "load_store_chunk", "load_chunk", "insert_to_ooc", "retrieve_from_ooc")
    return frozenset(f"dask.array.core.{n}" for n in names if hasattr(CORE, n))


def _name(f) -> str:
    while isinstance(f, functools.partial):
        f = f.func
    mod = getattr(f, "__module__", None) or ""
    name = getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or type(f).__name__
    return f"{mod.replace('_operator', 'operator')}.{name}" if mod else name


def _scan(node, unknown: set, ops: list) -> bool:
    """Walk a task: add the names of functions svod lacks that it applies to array data to
    `unknown`, and one entry to `ops` per function svod runs on array data. Returns
    whether `node`'s value may be array data."""
    if isinstance(node, (TaskRef, Alias)):
        return True
    if isinstance(node, DataNode):
        return False
    if isinstance(node, Task):
        if node.func is _execute_subgraph:
            for t in node.args[0].values():
                _scan(t, unknown, ops)
            return True
        data = [_scan(a, unknown, ops) for a in node.args] + [_scan(v, unknown, ops) for v in node.kwargs.values()]
        if isinstance(node, NestedContainer):
            return any(data)
        if any(data):
            if known(node.func, node.kwargs):
                ops.append(node.func)
            else:
                unknown.add(_name(node.func))
        return True
    if isinstance(node, (list, tuple)):
        return any([_scan(a, unknown, ops) for a in node])
    if isinstance(node, dict):
        return any([_scan(a, unknown, ops) for a in node.values()])
    return False


# ----------------------------------------------------------------------------- evaluating a region


def _lift(x, memo: dict):
    """Arrays passed to an op svod runs become svod leaves (so the op joins the graph),
    one leaf per array in a region (`memo`: id -> (array, LazyChunk)): a chunk read by four
    ops is one input of the graph, read once, not four."""
    if isinstance(x, np.ndarray):
        hit = memo.get(id(x))
        if hit is None:
            from svod._dask_chunk import _tensor

            hit = memo[id(x)] = (x, LazyChunk(_tensor(x)))  # the array is kept: its id stays its own
        return hit[1]
    if isinstance(x, list):
        return [_lift(a, memo) for a in x]
    if isinstance(x, tuple):
        return tuple(_lift(a, memo) for a in x)
    return x


def _inner_order(inner: dict, out) -> list:
    """The keys of a fused task's inner graph that `out` needs, dependencies first."""
    order, seen, stack = [], set(), [(out, False)]
    while stack:
        k, done = stack.pop()
        if done:
            order.append(k)
            continue
        if k in seen or k not in inner:
            continue
        seen.add(k)
        stack.append((k, True))
        stack.extend((d, False) for d in inner[k].dependencies if d in inner and d not in seen)
    return order


def _eval(node, env: dict, memo: dict):
    if isinstance(node, TaskRef):
        return env[node.key]
    if isinstance(node, Alias):
        return env[node.target]
    if isinstance(node, DataNode):
        return node.value
    if isinstance(node, Task):
        if node.func is _execute_subgraph:
            inner, out, inkeys, *deps = node.args
            sub = dict(zip(inkeys, (_eval(d, env, memo) for d in deps)))
            for k in _inner_order(inner, out):
                sub[k] = _eval(inner[k], sub, memo)
            return sub[out]
        args = [_eval(a, env, memo) for a in node.args]
        kwargs = {k: _eval(v, env, memo) for k, v in node.kwargs.items()}
        if not isinstance(node, NestedContainer) and known(node.func, node.kwargs):
            args = [_lift(a, memo) for a in args]
        try:
            return node.func(*args, **kwargs)
        except Unsupported:
            raise
        except Exception as e:
            if any(isinstance(a, LazyChunk) for a in args):
                raise Unsupported(f"{_name(node.func)} on svod chunks ({type(e).__name__}: {e})") from e
            raise
    if isinstance(node, list):
        return [_eval(a, env, memo) for a in node]
    if isinstance(node, tuple):
        return tuple(_eval(a, env, memo) for a in node)
    return node


def _lazies(value, out: list) -> None:
    if isinstance(value, LazyChunk):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _lazies(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _lazies(v, out)


def _concrete(value, done: dict, copy: bool):
    if isinstance(value, LazyChunk):
        a = done[id(value)]
        return np.array(a) if copy else a
    if isinstance(value, list):
        return [_concrete(v, done, copy) for v in value]
    if isinstance(value, tuple):
        return tuple(_concrete(v, done, copy) for v in value)
    if isinstance(value, dict):
        return {k: _concrete(v, done, copy) for k, v in value.items()}
    return value


_warned: set = set()
_counts = {"regions": 0, "fallbacks": 0}  # this process: regions run, and of those run with numpy
_warn_lock = threading.Lock()
_prepared: list = []


def _count(name: str) -> None:
    with _warn_lock:  # regions run on several threads under dask's threaded scheduler
        _counts[name] += 1


def _in_worker() -> bool:
    try:
        from distributed import get_worker

        get_worker()
        return True
    except (ImportError, ValueError):
        return False


def _warn_once(cause: str, message: str, frame=None) -> None:
    """One SvodWarning per cause and process, at `frame` (the user's line) when given;
    from a dask worker it also reaches the client (`distributed.warn`)."""
    with _warn_lock:
        if cause in _warned:
            return
        _warned.add(cause)
    if _in_worker():
        from distributed import warn as remote_warn

        remote_warn(message, SvodWarning)
    elif frame is not None:
        g = frame.f_globals
        warnings.warn_explicit(message, SvodWarning, frame.f_code.co_filename, frame.f_lineno,
                               module=g.get("__name__"), registry=g.setdefault("__warningregistry__", {}),
                               module_globals=g)
    else:
        warnings.warn(message, SvodWarning, stacklevel=user_stacklevel())


def _prepare_process() -> None:
    """Once per process: on a dask worker, svod's thread pool gets the worker's threads
    (2 workers x 1 thread on 2 cores: one svod thread each, never oversubscribed)."""
    if _prepared:
        return
    _prepared.append(True)
    if "SVOD_THREADS" in os.environ:
        return
    try:
        from distributed import get_worker

        os.environ["SVOD_THREADS"] = str(max(1, int(get_worker().state.nthreads)))
    except (ImportError, ValueError, AttributeError):
        pass


class Region:
    """One region of a dask graph: `tasks` (key -> task, in `order`), computed from
    `inputs` (keys outside); returns the values of `outputs` (one value, or a tuple)."""

    __slots__ = ("name", "tasks", "order", "inputs", "outputs", "final")

    def __init__(self, name, tasks: dict, order: list, inputs: list, outputs: list, final: set):
        self.name, self.tasks, self.order = name, tasks, order
        self.inputs, self.outputs, self.final = inputs, outputs, final

    def __getstate__(self):
        return (self.name, self.tasks, self.order, self.inputs, self.outputs, self.final)

    def __setstate__(self, state):
        self.name, self.tasks, self.order, self.inputs, self.outputs, self.final = state

    def __dask_tokenize__(self):
        return ("svod-region", str(self.name), tuple(map(str, self.outputs)))

    def __repr__(self) -> str:
        return f"svod.dask region {self.name} ({len(self.tasks)} tasks -> {len(self.outputs)} output(s))"

    def __call__(self, *values):
        _prepare_process()
        _count("regions")
        try:
            with eager_mode(False):  # a region is one graph (svod.eager)
                outs = self.run_svod(values)
        except Exception as e:  # noqa: BLE001 - any failure: this chunk on numpy, one warning per cause
            _count("fallbacks")
            cause = str(e).split(" (", 1)[0] if isinstance(e, Unsupported) else type(e).__name__
            _warn_once(f"runtime:{cause}", f"svod.dask: a region of '{_layer(self.name)}' ran with numpy: "
                                            f"{type(e).__name__}: {e}")
            outs = self.run_numpy(values)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run_svod(self, values) -> list:
        env, memo = dict(zip(self.inputs, values)), {}
        for k in self.order:
            env[k] = _eval(self.tasks[k], env, memo)
        outs = [env[k] for k in self.outputs]
        lazies: list = []
        _lazies(outs, lazies)
        if lazies:
            svod.realize(*[c.t for c in lazies])
            done = {id(c): c.t.numpy() for c in lazies}
            outs = [_concrete(v, done, k in self.final) for k, v in zip(self.outputs, outs)]
        return outs

    def run_numpy(self, values) -> list:
        graph = dict(self.tasks)
        graph.update({k: DataNode(k, v) for k, v in zip(self.inputs, values)})
        res = execute_graph(graph, keys=set(self.outputs))
        return [res[k] for k in self.outputs]


def _layer(key) -> str:
    name = key[0] if isinstance(key, tuple) else key
    return str(name).rsplit("-", 1)[0]


# ----------------------------------------------------------------------------- forming regions


def _topological(dsk: dict) -> list:
    indeg = {k: 0 for k in dsk}
    users: dict = {k: [] for k in dsk}
    for k, node in dsk.items():
        for d in node.dependencies:
            if d in dsk:
                indeg[k] += 1
                users[d].append(k)
    # NOTE: ties broken by the key's text, so every chunk's region lists its tasks, and so
    # builds its svod graph, in one order: one GraphKey, one plan (dask's dict order varies)
    ready = [(str(k), k) for k, n in indeg.items() if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, k = heapq.heappop(ready)
        order.append(k)
        for u in users[k]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, (str(u), u))
    return order


def _broadcast(d, k, users: dict) -> bool:
    """Whether `d` feeds several chunks like `k` (a weight every row block multiplies): a
    region joined through it would take in every chunk's work, one after another."""
    if not isinstance(k, tuple):
        return False
    return len({u[1:] for u in users.get(d, ()) if isinstance(u, tuple) and len(u) == len(k)}) > 1


def lower(dsk: dict, keys, warn: bool = True) -> dict:
    """Replace the per-chunk work of a task-spec graph by svod regions (module docstring).

    In one topological pass, a task that applies ops svod runs to array data, and only
    such ops: joins the region of the tasks it reads when they are in one region (none of
    its other inputs depending on that region: no cycles; and not only through a value
    that several chunks read, `_broadcast`), else starts a region (a chunk's first op; an
    op after a global reduction or on a broadcast operand, reading its result). A task
    that reads several regions, or several results of numpy tasks that read regions (a
    tree reduction's combine step, dask's final assembly), stays a numpy task. Tasks
    applying an op svod lacks stay numpy tasks, and each such op is named in one warning."""
    keys = set(keys)
    order = _topological(dsk)
    users: dict = {}
    for k, node in dsk.items():
        for d in node.dependencies:
            users.setdefault(d, []).append(k)
    region_of: dict = {}
    members: list[list] = []
    reach: dict = {}  # key -> bitset of the regions its value depends on
    lacking: dict[str, str] = {}
    for k in order:
        node = dsk[k]
        deps = [d for d in node.dependencies if d in dsk]
        r_bits = 0
        for d in deps:
            r_bits |= reach[d]
        rs = {region_of[d] for d in deps if d in region_of}
        derived = [d for d in deps if d not in region_of and reach[d]]  # results of numpy tasks after regions
        unknown: set = set()
        ops: list = []
        if isinstance(node, Task) and len(rs) <= 1 and len(derived) <= 1:  # else a combine step: numpy's
            _scan(node, unknown, ops)
            for name in unknown - _plumbing():
                lacking.setdefault(name, _layer(k))
        if ops and not unknown:
            target = None
            if rs:
                r = next(iter(rs))
                if all(region_of.get(d) == r or not (reach[d] >> r) & 1 for d in deps) and any(
                        region_of.get(d) == r and not _broadcast(d, k, users) for d in deps):
                    target = r  # joins the region it reads (its other inputs do not depend on it)
            if target is None:
                target = len(members)
                members.append([])
            region_of[k] = target
            members[target].append(k)
            r_bits |= 1 << target
        reach[k] = r_bits
    if warn and lacking:
        frame = _user_frame()
        for name, layer in lacking.items():
            _warn_once(f"lacks:{name}", f"svod.dask: svod has no {name} (in '{layer}'): those chunks run with numpy",
                       frame)
    if not members:
        return dsk
    out = {k: v for k, v in dsk.items() if k not in region_of}
    for r, ks in enumerate(members):
        inside = set(ks)
        inputs = sorted({d for k in ks for d in dsk[k].dependencies if d not in inside}, key=str)
        outputs = [k for k in ks if k in keys or any(u not in inside for u in users.get(k, ()))]
        region = Region(ks[-1], {k: dsk[k] for k in ks}, ks, inputs, outputs, {k for k in outputs if k in keys})
        refs = [TaskRef(i) for i in inputs]
        if len(outputs) == 1:
            out[outputs[0]] = Task(outputs[0], region, *refs)
            continue
        rkey = ("svod-region-" + _layer(ks[-1]), r)
        out[rkey] = Task(rkey, region, *refs)
        for j, o in enumerate(outputs):
            out[o] = Task(o, operator.getitem, TaskRef(rkey), j)
    return out


def _user_frame():
    """The innermost frame of the user's code (past svod, dask, distributed, toolz and the
    standard library), where a warning about their dask program belongs."""
    import dask

    skip = [os.path.dirname(m.__file__) for m in (svod, dask)]
    for name in ("distributed", "toolz", "tlz"):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "__file__", None):
            skip.append(os.path.dirname(mod.__file__))
    stdlib = os.path.dirname(os.__file__)
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if not (name.startswith(tuple(skip)) or (name.startswith(stdlib) and "site-packages" not in name)
                or name.startswith("<")):
            return f
        f = f.f_back
    return _entry[-1] if _entry else None  # optimized on another thread (a distributed client's loop)


_entry: list = []  # the user's frames where `compute` was called / `enabled` entered


@contextlib.contextmanager
def _entered(frame):
    _entry.append(frame)
    try:
        yield
    finally:
        _entry.pop()


# ----------------------------------------------------------------------------- the user's entry points


def optimize(dsk, keys, **kwargs):
    """dask's array optimization with svod regions (usable as `array_optimize`): cull,
    dask's blockwise fusion, then `lower`, then dask's linear fusion of what is left."""
    from dask import config
    from dask.blockwise import optimize_blockwise
    from dask.core import flatten
    from dask.highlevelgraph import HighLevelGraph
    from dask.utils import ensure_dict

    keys = list(flatten(keys if isinstance(keys, (list, set)) else [keys]))
    if not isinstance(dsk, HighLevelGraph):
        dsk = HighLevelGraph.from_collections(id(dsk), dsk, dependencies=())
    dsk = optimize_blockwise(dsk, keys=keys)
    dsk = dsk.cull(set(keys))
    graph = lower(convert_legacy_graph(ensure_dict(dsk)), keys)
    if config.get("optimization.fuse.active") is False:
        return graph
    return fuse_linear_task_spec(graph, keys=keys)


@contextlib.contextmanager
def enabled():
    """Within this block, dask.array computations run their chunks as svod graphs
    (`dask.config.set(array_optimize=svod.dask.optimize)`)::

        with svod.dask.enabled():
            y = (da.exp(x - x.max(axis=1, keepdims=True))).sum().compute()
    """
    import dask

    with _entered(sys._getframe(2)), dask.config.set(array_optimize=optimize):  # 1: contextlib
        yield


def region_stats(reset: bool = False) -> dict:
    """This process's svod.dask counters: regions run and regions that fell back to numpy
    (on a cluster: `client.run(svod.dask.region_stats)` per worker). `reset` zeroes
    them and forgets which warnings were given."""
    out = dict(_counts)
    if reset:
        _counts.update(regions=0, fallbacks=0)
        with _warn_lock:
            _warned.clear()
    return out


def compute(*collections, **kwargs):
    """`dask.compute(*collections, **kwargs)` with svod chunks (see `enabled`)."""
    import dask

    with _entered(sys._getframe(1)), dask.config.set(array_optimize=optimize):
        return dask.compute(*collections, **kwargs)


__all__ = ["LazyChunk", "Region", "Unsupported", "compute", "enabled", "lower", "optimize", "region_stats"]
