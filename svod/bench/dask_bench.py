"""Benchmark: a dask.array program on a 2-worker LocalCluster, numpy chunks against svod chunks.

The program (DESIGN "Workloads and measuring": one run, interleaved repeats, medians):
an elementwise chain and a reduction over a float32 vector of `total_bytes` (4 GiB by
default, 64 MiB chunks), persisted in the workers' memory first so that neither side
pays for making the data::

    y = tanh(x * 0.5 + 1) * exp(-x * x) - 0.25 + sqrt(x)      # six numpy temporaries per chunk
    result = y.sum(), y.max()

Each repeat computes the result once with dask's numpy chunks and once with svod chunks
(`svod.dask.compute`), in a shuffled order; the first svod run (search, compile, or the
persistent cache) is timed apart. Both results are checked against each other. Workers
have one thread each, and svod one thread per worker (never more threads than cores).

>>> r = run(total_bytes=16 << 20, chunk_bytes=4 << 20, repeats=1, out=None)   # doctest: +SKIP
>>> r["check"]["ok"]                                                           # doctest: +SKIP
True
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time

import numpy as np

SIZES = {"default": (4 << 30, 64 << 20), "quick": (256 << 20, 16 << 20), "tiny": (16 << 20, 4 << 20)}
REPEATS = {"default": 5, "quick": 3, "tiny": 1}


def available() -> str | None:
    """None when dask.array and distributed are installed, else why not."""
    try:
        import dask.array  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as e:
        return f"needs dask and distributed (pip install 'svod[distributed]'): {e}"
    return None


def program(x):
    import dask.array as da

    y = da.tanh(x * 0.5 + 1.0) * da.exp(-x * x) - 0.25 + da.sqrt(x)
    return y.sum(), y.max()


def settle(client, wait_for: int, timeout: float = 60.0) -> None:
    """Wait until the scheduler holds only the persisted data: the two sides' graphs share
    their output keys, and a key the scheduler still knows is not computed again from the
    new graph (so a side could be timed running the other side's tasks)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)) <= wait_for:
            return
        time.sleep(0.05)


def run(total_bytes: int = 4 << 30, chunk_bytes: int = 64 << 20, workers: int = 2, repeats: int = 5,
        out=sys.stdout) -> dict:
    """Time the program with numpy and with svod chunks; return the figures (see the module
    docstring). `out`: where progress goes (None: silent)."""
    import dask
    import dask.array as da
    from distributed import Client, LocalCluster, wait

    import svod.dask

    def say(msg: str) -> None:
        if out is not None:
            print(msg, file=out, flush=True)

    n, per = total_bytes // 4, max(1, chunk_bytes // 4)
    t0 = time.perf_counter()
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0", silence_logs=40) as cluster, Client(cluster) as client:
        say(f"dask bench: {total_bytes / 2**30:.2f} GiB float32 in {-(-n // per)} chunks on {workers} workers")
        x = da.random.default_rng(0).random(n, chunks=per, dtype=np.float32).persist()
        wait(x)
        made = time.perf_counter() - t0
        y = program(x)
        t1 = time.perf_counter()
        got = svod.dask.compute(*y)
        first_s = time.perf_counter() - t1
        want = dask.compute(*y)  # also the numpy side's warm-up
        settle(client, wait_for=len(x.__dask_keys__()))
        times: dict[str, list[float]] = {"numpy": [], "svod": []}
        regions: dict[str, list[int]] = {"numpy": [], "svod": []}
        rng = random.Random(0)
        for i in range(repeats):
            order = ["numpy", "svod"]
            rng.shuffle(order)
            for side in order:
                before = sum(s["regions"] for s in client.run(svod.dask.region_stats).values())
                t1 = time.perf_counter()
                res = svod.dask.compute(*y) if side == "svod" else dask.compute(*y)
                times[side].append(time.perf_counter() - t1)
                regions[side].append(sum(s["regions"] for s in client.run(svod.dask.region_stats).values()) - before)
                if side == "svod":
                    got = res
                settle(client, wait_for=len(x.__dask_keys__()))
            say(f"  repeat {i + 1}/{repeats}: numpy {times['numpy'][-1]:.3f} s, svod {times['svod'][-1]:.3f} s")
        stats = client.run(lambda: dict(svod.dask.region_stats(), **{
            k: v for k, v in svod.stats().items() if k in ("searches", "graph_cache_hits", "disk_cache_hits")}))
    err = max(abs(float(a) - float(b)) / max(abs(float(b)), 1e-30) for a, b in zip(got, want))
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "bytes": total_bytes, "chunk_bytes": chunk_bytes, "chunks": -(-n // per), "workers": workers,
        "repeats": repeats, "times_s": times, "median_s": med, "speedup": med["numpy"] / med["svod"],
        "svod_first_s": first_s, "data_seconds": made, "regions": regions,
        "check": {"ok": err < 1e-4 and not any(regions["numpy"]) and all(r == -(-n // per) for r in regions["svod"]),
                  "max_rel_err": err},
        "workers_stats": list(stats.values()), "cpu_count": os.cpu_count(),
    }


def format_result(r: dict) -> str:
    if "skipped" in r:
        return f"dask 2-worker LocalCluster: skipped: {r['skipped']}"
    st = r["workers_stats"]
    ok = "check PASS" if r["check"]["ok"] else "check *** FAIL ***"
    return "\n".join([
        f"dask 2-worker LocalCluster: {r['bytes'] / 2**30:.2f} GiB float32 chain + sum/max, {r['chunks']} chunks; "
        f"median of {r['repeats']} interleaved repeats; {ok} (rel err {r['check']['max_rel_err']:.1e})",
        f"  dask + numpy chunks  {r['median_s']['numpy'] * 1e3:10.1f} ms",
        f"  dask + svod chunks   {r['median_s']['svod'] * 1e3:10.1f} ms   numpy/svod {r['speedup']:.2f}x "
        f"(first run {r['svod_first_s'] * 1e3:.0f} ms; svod regions per run {r['regions']['svod']}, numpy runs "
        f"{r['regions']['numpy']}; searches per worker "
        f"{[s['searches'] for s in st]}, regions on numpy {sum(s['fallbacks'] for s in st)})",
    ])


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", choices=sorted(SIZES), default="default")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--json", default=None, metavar="PATH")
    args = p.parse_args(argv)
    why = available()
    if why:
        print(f"skipped: {why}", file=sys.stderr)
        return 1
    total, chunk = SIZES[args.sizes]
    r = run(total, chunk, repeats=args.repeats or REPEATS[args.sizes])
    print(format_result(r))
    if args.json:
        import json

        with open(args.json, "w") as fh:
            json.dump(r, fh, indent=1)
    return 0 if r["check"]["ok"] else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
