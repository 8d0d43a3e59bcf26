"""The `svod` command line: `svod demo | bench | tune | calibrate | explain | viz | cache |
costmodel report | costmodel rescore`.

Usage errors (bad options, malformed shapes, unknown workloads) exit with code 2
(argparse's convention) and a one-line message; expected failures (a missing file, a
script that raises) print a message without a traceback and exit 1; Ctrl-C exits 130.
This module is also where `search` and `costmodels` meet (costmodels never imports
the search): it hands the search's variants and the oracle to costmodels' tune/report.
"""

from __future__ import annotations

import argparse
import sys

from svod.cli_args import Parser as _Parser
from svod.cli_args import about as _about
from svod.cli_args import count as _count
from svod.cli_args import fraction as _fraction
from svod.cli_args import number as _number
from svod.cli_args import only_arg as _only_arg
from svod.cli_args import positive as _positive
from svod.cli_args import seconds as _seconds
from svod.cli_args import shapes_arg as _shapes_arg
from svod.cli_args import workloads_arg as _workloads_arg


class CliError(Exception):
    """An expected failure: printed as one line, exit code 1."""


class UsageError(CliError):
    """A bad argument found after parsing (an unknown workload...): exit code 2."""


def _cmd_demo(args: argparse.Namespace) -> int:
    """Build a small model block on built-in random data, show the plan svod chose, its
    speed against numpy, and the plan cache at work."""
    from svod.demo import run_demo

    run_demo(rows=args.rows, cols=args.cols, repeats=args.repeats, out=sys.stdout)
    return 0


def _cmd_cache(args: argparse.Namespace) -> int:
    """Show where svod's persistent cache lives and what it holds (and the bounds of the
    in-memory caches), or empty it."""
    from svod import store

    st = store.default_store()
    if args.action == "info":
        from svod.memory import cache_info_text

        print(cache_info_text(st))
    elif args.action == "clear":
        n = st.clear(args.kind)
        from svod import engine

        engine.reset_caches()
        print(f"cleared {n} entr{'y' if n == 1 else 'ies'} from {st.info().get('path', 'the cache')}")
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    """Run FILE.py (arguments after -- go to the script); list every distinct graph it
    realized or traced with svod.jit, and for each print the plan realize() runs, where
    it came from (memory cache, tuning database, disk cache, search, fallback), the cost
    model, the saturation report and the search's variants with their predicted costs."""
    import os
    import runpy

    from svod import engine
    from svod.explain import explain_key

    if not os.path.isfile(args.file):
        raise CliError(f"no such file: {args.file}")
    script_args = list(getattr(args, "script_args", None) or [])
    engine.RECORDER = []
    saved_argv = sys.argv
    sys.argv = [args.file, *script_args]
    try:
        runpy.run_path(args.file, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise CliError(f"{args.file} exited with status {e.code}") from None
    except Exception as e:  # noqa: BLE001 - the user's script failed: say so, no traceback
        raise CliError(f"{args.file} raised {type(e).__name__}: {e}") from None
    finally:
        sys.argv = saved_argv
        recorded, engine.RECORDER = engine.RECORDER, None
    seen: dict[str, tuple] = {}
    for key, where in recorded:
        if key.hash in seen:
            if where not in seen[key.hash][1]:
                seen[key.hash][1].append(where)
        else:
            seen[key.hash] = (key, [where])
    if not seen:
        print(f"{args.file} realized nothing and traced no jitted function: no graph to explain")
        return 0
    graphs = list(seen.values())
    print(f"{args.file}: {len(graphs)} distinct graph(s)")
    for i, (key, wheres) in enumerate(graphs):
        print(f"  graph {i}: {len(key.nodes)} nodes, key {key.hash[:12]}, from {', '.join(wheres)}")
    print()
    for i, (key, wheres) in enumerate(graphs[: args.max_graphs]):
        e = explain_key(key, k=args.variants)
        print(f"=== graph {i} ({len(key.nodes)} nodes, key {key.hash[:12]}, from {', '.join(wheres)}) ===")
        print(e)
        if args.ir:
            for j in range(len(e.kernels)):
                print(f"--- LLVM IR of kernel {j} ---")
                print(e.ir(j) or "(library step: no generated code)")
        print()
    if len(graphs) > args.max_graphs:
        print(f"{len(graphs) - args.max_graphs} more graph(s) not explained: {args.file} realized {len(graphs)} "
              f"distinct graphs (--max-graphs {args.max_graphs}; raise it to see them)")
    return 0


def _viz_views(path: str, argv: list[str] | None = None, *, max_graphs: int = 8, k: int = 8,
               progress: bool = True) -> tuple[list[dict], int]:
    """Run the script at `path` with source lines recorded and build one view per
    distinct graph it realized (first `max_graphs`); returns (views, graphs realized).
    The script's exceptions propagate (the CLI turns them into one line)."""
    import runpy
    import sys

    from svod import engine, sources
    from svod.explain import explain_key
    from svod.progress import bar
    from svod.viewer import build

    graphs: dict[str, tuple] = {}
    compact = engine.PIPELINE.compact

    def recording_compact(roots):
        key, bindings = compact(roots)
        if key.hash not in graphs:
            graphs[key.hash] = (key, sources.key_sources(roots, text=True))
        return key, bindings

    old_argv = sys.argv
    engine.PIPELINE.compact = recording_compact
    sys.argv = [path, *(argv or [])]
    try:
        with sources.record():
            try:
                runpy.run_path(path, run_name="__main__")
            except SystemExit:
                pass
    finally:
        engine.PIPELINE.compact = compact
        sys.argv = old_argv
    views = []
    todo = list(graphs.values())[:max_graphs]
    with bar(len(todo), "viewer: explaining graphs", enabled=progress, unit="graph", delay=1.0) as pb:
        for i, (key, src) in enumerate(todo):
            e = explain_key(key, k=k)
            views.append(build(e, sources=src, title=f"graph {i}: {len(key.nodes)} nodes, "
                                                     f"{len(e.kernels)} kernel(s) (key {key.hash[:10]})"))
            pb.update(1)
    return views, len(graphs)


def _cmd_viz(args: argparse.Namespace) -> int:
    """Run FILE.py (with source lines recorded), search each distinct graph it realizes
    again keeping the e-graph after every saturation iteration, and serve an interactive
    viewer on 127.0.0.1: step through saturation, click an e-class for its alternatives
    with their kernels and prices, the chosen plan outlined, kernels with their ops and
    source lines, why each boundary is not fused."""
    import os
    import time

    from svod import viewer_serve

    if not os.path.isfile(args.file):
        raise CliError(f"no such file: {args.file}")
    script_args = list(getattr(args, "script_args", None) or [])
    try:
        views, total = _viz_views(args.file, script_args, max_graphs=args.max_graphs, k=args.variants,
                                  progress=not args.no_progress)
    except Exception as e:  # noqa: BLE001 - the user's script failed: say so, no traceback
        raise CliError(f"{args.file} raised {type(e).__name__}: {e}") from None
    if not views:
        print(f"{args.file} realized nothing: no graph to show")
        return 0
    if total > len(views):
        print(f"showing {len(views)} of the {total} distinct graphs {args.file} realized (--max-graphs)")
    title = f"svod viz {os.path.basename(args.file)}"
    if args.write:
        try:
            index = viewer_serve.write_static(views, args.write, title)
        except OSError as e:
            raise CliError(f"cannot write {args.write}: {e}") from None
        print(f"viewer written to {index} (serve the folder over HTTP: python3 -m http.server -d {args.write})")
        return 0
    try:
        srv = viewer_serve.serve(views, port=args.port, open_browser=not args.no_browser, title=title)
    except OSError as e:
        raise CliError(f"cannot serve on 127.0.0.1:{args.port}: {e}") from None
    print(f"svod viz: {len(views)} graph(s) at {srv.url} (Ctrl-C to stop)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.close()
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    """Time the named workloads W1-W7 (medians of interleaved repeats) against numpy,
    numexpr, numba, jax.jit, PyTorch, tinygrad when installed, and for W1 a gcc C loop;
    every svod result is checked against numpy."""
    import json

    from svod.bench import harness

    sizes = "quick" if args.quick else "default"
    res = harness.run(sizes=sizes, only=args.only, repeats=args.repeats, peers=not args.no_peers, out=sys.stdout,
                      progress=not args.no_progress)
    if args.json:
        try:
            with open(args.json, "w") as fh:
                json.dump(res, fh, indent=1, default=str)
        except OSError as e:
            raise CliError(f"cannot write {args.json}: {e}") from None
        print(f"results written to {args.json}")
    if args.chart:
        msg = harness.write_chart(res, args.chart)
        print(msg if msg else f"chart written to {args.chart}")
    if res["failures"]:
        raise CliError(f"{len(res['failures'])} result check(s) FAILED: {', '.join(res['failures'])}")
    return 0


def _merge_shapes(items) -> dict:
    out: dict = {}
    for d in items or []:
        for k, v in d.items():
            if k in out:
                raise UsageError(f"shape of {k!r} given twice")
            out[k] = v
    return out


def _target(args: argparse.Namespace):
    """The program `svod tune` works on: a workload name, or FILE.py[:FUNC] with shapes."""
    import os

    from costmodels.targets import TargetError, script_target, workload_target
    from svod import workloads

    shapes = _merge_shapes(args.shapes)
    spec = args.target
    is_file = spec.endswith(".py") or ".py:" in spec or os.sep in spec or os.path.isfile(spec)
    try:
        if is_file:
            if not shapes:
                raise UsageError(f"{spec}: give the input shapes with --shapes NAME=AxB,...")
            path = spec if os.path.isfile(spec) else spec.rsplit(":", 1)[0]
            if not os.path.isfile(path):
                raise CliError(f"no such file: {path}")
            return script_target(spec, shapes)
        if spec not in workloads.names():
            raise UsageError(f"unknown workload {spec!r}; known: {', '.join(workloads.names())} "
                             f"(or a Python file FILE.py[:FUNC])")
        return workload_target(spec, shapes, small=args.small)
    except TargetError as e:
        msg = str(e)
        if msg.startswith("malformed") or "has no input" in msg or "needs shapes" in msg:
            raise UsageError(msg) from None
        raise CliError(msg) from None


def _candidates(target, model, k: int, oracle_choices: int) -> list:
    """The plans `svod tune` times, each as realize() would run it (the lowering's plan passes included):
    first the plan realize() runs now (`svod.planner.decide`: the tuned one when the graph
    was tuned before; a provisional plan is searched again first), then the search's k
    best with `model` (cheapest predicted first), then the oracle's cheapest covers when
    the graph is small enough to enumerate."""
    from search import plan_search
    from search.oracle import all_covers, choices
    from svod import planner
    from svod.costing import Machine

    d = planner.decide(target.key)
    if d.exe.provisional:
        d = planner.research(target.key)
    out = [("realize", d.plan)] if d.plan is not None else []
    r = plan_search(target.key, cost_model=model, k=k)
    out += [("search", v.plan) for v in r.variants] or [("search", r.plan)]
    if 0 < len(choices(target.key)) <= oracle_choices:
        covers = all_covers(target.key, model, Machine.host(), max_choices=oracle_choices)
        out += [("oracle", c.plan) for c in covers[:k]]
    return out


def _ensure_profile(args: argparse.Namespace) -> None:
    """The first `svod tune` on a machine calibrates (unless a profile is given or stored)."""
    from costmodels.profile import profile

    p = profile()
    if p.source == "reference" and not args.no_calibrate:
        from costmodels.calibrate import calibrate
        from costmodels.digest import summary

        print("no machine profile yet: calibrating first (svod calibrate; about a minute)", file=sys.stderr)
        print(summary(calibrate(progress=not args.no_progress)), file=sys.stderr)


def _tune_provisional(args: argparse.Namespace) -> int:
    """`svod tune --provisional`: search every stored provisional plan again."""
    from svod import planner

    keys = planner.provisional_keys()
    if not keys:
        print("no provisional plans stored: every stored plan came from a complete search")
        return 0
    complete = 0
    for key in keys:
        d = planner.research(key, seconds=args.seconds)
        complete += not d.exe.provisional
        print(f"graph {key.hash[:12]} ({len(key.nodes)} nodes): {d.source}"
              f"{' (' + d.detail + ')' if d.detail else ''}")
    print(f"searched {len(keys)} provisional plan(s) again: {complete} complete, {len(keys) - complete} still "
          "provisional")
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    """Take the plan realize() runs for a program, the search's k best fusion variants
    (and, for small graphs, the oracle's cheapest covers), each as realize() would run
    it (the lowering's plan passes, attention fusion, included), time every kernel and every variant,
    store the results in the tuning database and the fastest variant as the program's
    tuned plan. Resumable: an interrupted run keeps every finished measurement, a
    repeated run measures nothing new. A provisional plan (a search cut short by its
    budget) is searched again first; --provisional searches every stored one again."""
    if args.provisional:
        if args.target is not None:
            raise UsageError("give a target or --provisional, not both")
        return _tune_provisional(args)
    if args.target is None:
        raise UsageError("the following arguments are required: target (a workload or FILE.py), or --provisional")
    _check_farm_args(args)
    target = _target(args)
    if not args.ray:
        _ensure_profile(args)
    from costmodels.analytic import CalibratedModel
    from costmodels.tune import tune, tune_farm

    farm = _farm(args) if args.ray else None  # an unreachable cluster fails before the search
    try:
        estimate = CalibratedModel()
        cands = _candidates(target, estimate, args.k, args.oracle_choices)
        if farm is not None:
            results = tune_farm(target, cands, farm, estimate=estimate, progress=not args.no_progress,
                                repeats=args.repeats)
        else:
            results = [tune(target, cands, estimate=estimate, progress=not args.no_progress, repeats=args.repeats)]
    finally:
        if farm is not None:
            farm.close()
    print("\n\n".join(r.table() for r in results))
    if args.json:
        from svod.boundaries import describe_plan

        data = [{"label": res.label, "graph": res.graph, "numpy_seconds": res.numpy_seconds, "chosen": res.chosen,
                 "default": res.default, "confirm_repeats": res.confirm_repeats, "machine": res.machine,
                 "failures": res.failures, "workers": res.workers,
                 "variants": [{"source": v.source, "sig": v.sig, "kernels": v.kernels, "ops": describe_plan(v.plan),
                               "predicted": v.predicted, "measured": v.measured,
                               "confirmed": res.confirmed.get(i)} for i, v in enumerate(res.variants)]}
                for res in results]
        _write_json(args.json, data[0] if len(data) == 1 else {"machines": data})
    return 0


def _check_farm_args(args: argparse.Namespace) -> None:
    if not args.ray and (args.ray_actor_cpus is not None or args.job_timeout is not None):
        raise UsageError("--ray-actor-cpus and --job-timeout go with --ray ADDRESS")


def _farm(args: argparse.Namespace):
    """The Ray measurement farm `--ray ADDRESS` names (costmodels.farm), described on stderr."""
    from costmodels.farm import FarmError, RayFarm

    try:
        farm = RayFarm(args.ray, actor_cpus=args.ray_actor_cpus, job_timeout=args.job_timeout)
    except FarmError as e:
        raise CliError(str(e)) from None
    print(farm.describe(), file=sys.stderr)
    return farm


def _add_run_args(p: argparse.ArgumentParser, json_help: str, farm_what: str, fn) -> None:
    """A measuring command's common tail: --json PATH, --no-progress, the farm options
    (`_add_farm_args`) and the function that runs it."""
    p.add_argument("--json", default=None, metavar="PATH", help=json_help)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_farm_args(p, farm_what)
    p.set_defaults(fn=fn)


def _add_farm_args(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--ray", default=None, metavar="ADDRESS",
                   help=f"{what} on a Ray cluster (pip install 'svod[distributed]'): 'local' starts one on this "
                        "machine, 'auto' joins this machine's, HOST:PORT names a head node; results are stored here "
                        "under each machine's fingerprint")
    p.add_argument("--ray-actor-cpus", type=_positive, default=None, metavar="N",
                   help="CPUs (and svod threads) of each measurement actor (default: one actor per node, all its "
                        "CPUs, so timings do not disturb each other)")
    p.add_argument("--job-timeout", type=_number(float, 1e-3, what="a positive number of seconds"), default=None,
                   metavar="S",
                   help="seconds one measurement job may run on the farm before it is reported as timed out and "
                        "its actor replaced (default: 300-600 by job kind)")


def _write_json(path: str, data) -> None:
    import json

    try:
        with open(path, "w") as fh:
            json.dump(data, fh, indent=1, default=str)
    except OSError as e:
        raise CliError(f"cannot write {path}: {e}") from None
    print(f"results written to {path}")


def _cmd_calibrate(args: argparse.Namespace) -> int:
    """Time small generated kernels to measure bandwidth per working-set size, the cost
    of every op (each transcendental), reductions, gathers, launch and dispatch
    overheads and thread scaling; store the machine profile the calibrated cost model
    plans with."""
    from costmodels.calibrate import calibrate
    from costmodels.digest import summary

    _check_farm_args(args)
    if args.peak:
        import json

        from costmodels.calibrate import peak
        from svod.bench.peak import describe

        pk = peak()
        print(describe(pk))
        if args.json:
            try:
                with open(args.json, "w") as fh:
                    json.dump(pk, fh, indent=1)
            except OSError as e:
                raise CliError(f"cannot write {args.json}: {e}") from None
        return 0
    if args.ray:
        return _calibrate_farm(args)
    p = calibrate(progress=not args.no_progress, budget=args.budget, quick=args.quick, save=not args.no_store)
    print(summary(p))
    where = "not stored (--no-store)" if args.no_store else "stored in the svod cache (svod cache info)"
    print(f"profile {p.id}: {where}")
    if args.json:
        try:
            p.dump(args.json)
        except OSError as e:
            raise CliError(f"cannot write {args.json}: {e}") from None
        print(f"profile written to {args.json}")
    return 0


def _calibrate_farm(args: argparse.Namespace) -> int:
    from costmodels.digest import summary
    from costmodels.farm import calibrate_farm

    with _farm(args) as farm:
        out = calibrate_farm(farm, budget=args.budget, quick=args.quick, progress=not args.no_progress,
                             save=not args.no_store)
    where = "not stored (--no-store)" if args.no_store else "stored in the svod cache under its fingerprint"
    for g, prof, err in out:
        print(f"== {g.label}")
        print(f"calibration failed: {err}" if prof is None else f"{summary(prof)}\nprofile {prof.id}: {where}")
    done = [p for _, p, _ in out if p is not None]
    if args.json and done:
        data = done[0].to_json() if len(out) == 1 else {g.fingerprint: p.to_json() for g, p, _ in out if p}
        _write_json(args.json, data)
    if len(done) < len(out):
        raise CliError(f"{len(out) - len(done)} of {len(out)} machine(s) could not be calibrated")
    return 0


def _cmd_costmodel(args: argparse.Namespace) -> int:
    """For each workload with a small graph, enumerate its fusion variants (every cover
    by legal kernels, the search's oracle), time them (medians of interleaved repeats)
    and print the Spearman rank correlation of predicted against measured time and the
    measured time of the model's pick over the best, then the means."""
    import search.oracle
    from costmodels.report import format_report, report, summary

    _check_farm_args(args)
    if args.ray:
        return _report_farm(args)
    model, name = _report_model(args.model)
    rows = report(model, search.oracle, names=args.workloads, small=args.small, max_variants=args.max_variants,
                  repeats=args.repeats, max_choices=args.max_choices, seed=args.seed, progress=not args.no_progress,
                  budget=args.budget, instances=args.instances, doubt=args.doubt)
    print(format_report(rows, name))
    if args.json:
        _write_json(args.json, {"model": name, "small": args.small, "summary": summary(rows),
                                "rows": [r.to_json() for r in rows]})
    return 0


def _report_farm(args: argparse.Namespace) -> int:
    import search.oracle
    from costmodels.farm import report_farm
    from costmodels.report import format_report, small_workloads, summary

    if args.model == "measured":
        raise UsageError("--model measured reads this machine's tuning rows: use calibrated or roofline with --ray")
    with _farm(args) as farm:
        names = args.workloads or small_workloads(search.oracle, args.max_choices)
        out = report_farm(farm, search.oracle.__name__, names, model=args.model, small=args.small,
                          max_variants=args.max_variants, repeats=args.repeats, max_choices=args.max_choices,
                          seed=args.seed, budget=args.budget, instances=args.instances, doubt=args.doubt,
                          progress=not args.no_progress, fresh=args.fresh)
    data = []
    for g, rows, failures in out:
        print(f"== {g.label}")
        print(format_report(rows, f"{args.model} (this machine's profile: svod calibrate --ray)"))
        for f in failures:
            print(f"  failed: {f}")
        data.append({"machine": g.fingerprint, "cpu": g.cpu, "model": args.model, "small": args.small,
                     "summary": summary(rows), "rows": [r.to_json() for r in rows], "failures": failures})
    if args.json:
        _write_json(args.json, data[0] if len(data) == 1 else {"machines": data})
    return 0


def _cmd_rescore(args: argparse.Namespace) -> int:
    """Read a report written by `svod costmodel report --json`, price the same measured
    variants with the chosen model, and print the report's table against the stored
    timings: a cost model compared with another on one set of measurements."""
    import json

    import search.oracle
    from costmodels.report import format_report, rescore, summary

    try:
        with open(args.report) as fh:
            data = json.load(fh)
    except OSError as e:
        raise CliError(f"cannot read {args.report}: {e.strerror or e}") from None
    except ValueError as e:
        raise CliError(f"{args.report} is not JSON: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise CliError(f"{args.report} is not a report (svod costmodel report --json)")
    model, name = _report_model(args.model)
    try:
        rows = rescore(data, model, search.oracle)
    except (ValueError, KeyError, TypeError) as e:
        raise CliError(f"{args.report}: {e}") from None
    print(format_report(rows, f"{name}; timings of {args.report} (measured with {data.get('model', '?')})"))
    if args.json:
        _write_json(args.json, {"model": name, "small": bool(data.get("small")), "rescored": args.report,
                                "summary": summary(rows), "rows": [r.to_json() for r in rows]})
    return 0


def _report_model(which: str):
    from costmodels.analytic import CalibratedModel
    from costmodels.profile import profile
    from costmodels.tuning import MeasuredModel
    from svod.costing import RooflineModel

    if which == "roofline":
        return RooflineModel(), "roofline (svod.costing, before calibration)"
    p = profile()
    if which == "measured":
        return MeasuredModel(CalibratedModel(p)), f"measured (tuning database over profile {p.id}, {p.source})"
    return CalibratedModel(p), f"calibrated (profile {p.id}, {p.source})"


def build_parser() -> argparse.ArgumentParser:
    from svod.store import KINDS

    p = _Parser(prog="svod", description="svod: e-graph kernel fusion with a vectorised CPU JIT")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    d = sub.add_parser("demo", help="fuse, compile and time a softmax + layernorm block on built-in data",
                       description=_about(_cmd_demo))
    d.add_argument("--rows", type=_positive, default=2048, help="rows of the input (default 2048)")
    d.add_argument("--cols", type=_positive, default=1024, help="columns of the input (default 1024)")
    d.add_argument("--repeats", type=_positive, default=7, help="timed repeats per side (median reported)")
    d.set_defaults(fn=_cmd_demo)

    e = sub.add_parser("explain", help="run a script and explain the plan of every graph it realizes or jits",
                       description=_about(_cmd_explain),
                       usage="svod explain [-h] [--variants N] [--max-graphs N] [--ir] FILE.py [-- SCRIPT ARGS ...]")
    e.add_argument("file", help="a Python script using svod; its own arguments go after -- "
                                "(svod explain FILE.py -- --size 128)")
    e.add_argument("--variants", type=_positive, default=6, help="variants to show per graph (default 6)")
    e.add_argument("--max-graphs", type=_positive, default=5, help="graphs to explain at most (default 5)")
    e.add_argument("--ir", action="store_true", help="also print each kernel's LLVM IR")
    e.set_defaults(fn=_cmd_explain)

    v = sub.add_parser("viz", help="run a script; explore the e-graph of each graph it realizes in the browser",
                       description=_about(_cmd_viz))
    v.add_argument("file", help="a Python script using svod; its own arguments go after -- "
                                "(svod viz FILE.py -- --size 128)")
    v.add_argument("--port", type=_number(int, 0, 65535, what="a port number (0: any free port)"), default=0,
                   help="port on 127.0.0.1 (default: a free one)")
    v.add_argument("--no-browser", action="store_true", help="do not open the browser (print the address)")
    v.add_argument("--max-graphs", type=_positive, default=8, help="graphs to show at most (default 8)")
    v.add_argument("--variants", type=_positive, default=8, help="variants kept per graph (default 8)")
    v.add_argument("--write", default=None, metavar="DIR", help="write the page and its data to DIR instead of "
                                                                  "serving it")
    v.add_argument("--no-progress", action="store_true", help="no progress bar")
    v.set_defaults(fn=_cmd_viz)

    c = sub.add_parser("cache", help="inspect or empty svod's caches (plans, objects, tuning; memory bounds)",
                       description=_about(_cmd_cache))
    c.add_argument("action", choices=("info", "clear"))
    c.add_argument("--kind", default=None, choices=KINDS, help="clear only this kind (plans, objects, tuning, "
                                                                     "profiles)")
    c.set_defaults(fn=_cmd_cache)

    b = sub.add_parser("bench", help="measure W1-W7 against numpy and the optional peers (svod[bench])",
                       description=_about(_cmd_bench))
    b.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (about a minute)")
    b.add_argument("--only", type=_only_arg, default=None, metavar="W1,W2",
                   help="only these workloads, e.g. w1,w6 (dask: the dask.array program on a 2-worker cluster, run "
                        "when dask is installed; loops: loop-heavy numpy programs run unchanged with svod.numpy, "
                        "only when named; algebra: programs where algebraic rewrites matter, against numpy and the "
                        "peers, only when named)")
    b.add_argument("--repeats", type=_positive, default=None, help="interleaved repeats (default 11, --quick 5)")
    b.add_argument("--json", default=None, metavar="PATH", help="write all results as JSON to PATH")
    b.add_argument("--chart", default=None, metavar="PATH", help="write a bar chart (needs matplotlib)")
    b.add_argument("--no-peers", action="store_true", help="skip the optional peers (numpy and C only)")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.set_defaults(fn=_cmd_bench)

    t = sub.add_parser("tune", help="measure a program's best fusion variants and make realize() use the fastest",
                       description=_about(_cmd_tune))
    t.add_argument("target", nargs="?", help="a workload name (see svod/workloads.py) or FILE.py[:FUNCTION] "
                                             "defining a function of Tensors")
    t.add_argument("--provisional", action="store_true",
                   help="instead of a target: search again every stored provisional plan (a search cut short by "
                        "its budget, or the greedy fallback), with a larger budget")
    t.add_argument("--seconds", type=float, default=None,
                   help="search budget per graph for --provisional (default 8x SVOD_SEARCH_SECONDS, at least 10)")
    t.add_argument("--shapes", type=_shapes_arg, action="append", metavar="NAME=AxB,...",
                   help="input shapes by parameter name, e.g. x=4096x1024,w=1024 (required for a file; for a "
                        "workload they replace its default shapes)")
    t.add_argument("--small", action="store_true", help="a workload's small shapes instead of its default ones")
    t.add_argument("-k", type=_positive, default=8, help="variants to take from the search (default 8)")
    t.add_argument("--oracle-choices", type=_count, default=8,
                   help="also time the oracle's cheapest covers when the graph has at most this many free kernel "
                        "boundaries (default 8; 0 disables)")
    t.add_argument("--repeats", type=_positive, default=7,
                   help="interleaved repeats confirming the fastest (default 7)")
    t.add_argument("--no-calibrate", action="store_true",
                   help="never calibrate first (use the reference profile when this machine has none)")
    _add_run_args(t, "write the table as JSON to PATH", "measure", _cmd_tune)

    cal = sub.add_parser("calibrate", help="measure this machine's cost-model constants (about a minute)",
                         description=_about(_cmd_calibrate))
    cal.add_argument("--budget", type=_seconds, default=60.0, help="seconds to aim for (default 60)")
    cal.add_argument("--quick", action="store_true", help="fewer probes (a rough profile in seconds)")
    cal.add_argument("--peak", action="store_true",
                     help="only the peak probe (< 2 s): FMA GFLOP/s a core and on all, read GB/s from L2, L3 "
                          "and DRAM; nothing stored (--json PATH writes it)")
    cal.add_argument("--no-store", action="store_true", help="do not store the profile (with --json: just measure)")
    _add_run_args(cal, "also write the profile to PATH", "calibrate every kind of machine", _cmd_calibrate)

    cm = sub.add_parser("costmodel", help="evaluate the cost model against measurements (costmodel report)",
                        description="Cost-model tools.")
    cms = cm.add_subparsers(dest="action", metavar="ACTION")
    cms.required = True
    rep = cms.add_parser("report", help="rank correlation of predicted vs measured times over every small workload",
                         description=_about(_cmd_costmodel))
    rep.add_argument("--model", choices=("calibrated", "measured", "roofline"), default="calibrated",
                     help="the model to evaluate (default calibrated)")
    rep.add_argument("--workloads", type=_workloads_arg, default=None, metavar="A,B",
                     help="only these workloads (default: every small one)")
    rep.add_argument("--small", action="store_true", help="the workloads' small shapes (overhead-bound)")
    rep.add_argument("--max-variants", type=_number(int, 2, what="at least 2"), default=24,
                     help="variants timed per workload: all when fewer, else the model's pick and a seeded random "
                          "sample (default 24)")
    rep.add_argument("--max-choices", type=_count, default=12, help="largest graph (free boundaries) to enumerate")
    rep.add_argument("--repeats", type=_positive, default=9, help="interleaved repeats per variant (default 9)")
    rep.add_argument("--budget", type=_number(float, 0.0, 1e6, what="0 or more seconds"), default=5.0,
                     help="seconds of timing per workload: rounds beyond --repeats while under it (default 5)")
    rep.add_argument("--instances", type=_positive, default=3,
                     help="separately built programs per variant, timed together; a variant counts at its fastest "
                          "build (default 3)")
    rep.add_argument("--doubt", type=_fraction, default=0.7,  # costmodels.report.DOUBT
                     help="time a workload again when its odd and even rounds rank the variants with a Spearman "
                          "below this; still below, its Spearman is n/a (unresolved); 0 never reruns "
                          "(default %(default)s)")
    rep.add_argument("--seed", type=_number(int, 0, what="0 or more"), default=0, help="seed of the variant sample")
    rep.add_argument("--fresh", action="store_true",
                     help="with --ray: time again the workloads an identical earlier run finished (default: resume)")
    _add_run_args(rep, "write every row (predicted/measured pairs) as JSON", "time the workloads", _cmd_costmodel)
    res = cms.add_parser("rescore", help="price an earlier report's measured variants again with a model (no timing)",
                         description=_about(_cmd_rescore))
    res.add_argument("report", help="the JSON file of an earlier svod costmodel report --json")
    res.add_argument("--model", choices=("calibrated", "measured", "roofline"), default="calibrated",
                     help="the model to price with (default calibrated, over this machine's profile)")
    res.add_argument("--json", default=None, metavar="PATH", help="write the rescored rows as JSON")
    res.set_defaults(fn=_cmd_rescore)
    return p


_SCRIPT_COMMANDS = ("viz", "explain")  # commands that run a script: `-- ARGS` are the script's own


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args: list[str] = []
    if "--" in argv and argv[:1] and argv[0] in _SCRIPT_COMMANDS:
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1:]
    args = parser.parse_args(argv)
    args.script_args = script_args
    try:
        return args.fn(args)
    except UsageError as e:
        print(f"svod {args.command}: error: {e} (see svod {args.command} --help)", file=sys.stderr)
        return 2
    except CliError as e:
        print(f"svod {args.command}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"svod {args.command}: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print(f"svod {args.command}: out of memory (smaller sizes?)", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
