"""The `svod` command line: `svod demo`, `svod explain FILE.py`, `svod cache info|clear`.

Usage errors exit with code 2 (argparse's convention) and a one-line message; expected
failures (a missing file, an unknown workload) print a message without a traceback.
"""

from __future__ import annotations

import argparse
import sys


class CliError(Exception):
    """An expected failure: printed as one line, exit code 1."""


def _cmd_demo(args: argparse.Namespace) -> int:
    from svod.demo import run_demo

    run_demo(rows=args.rows, cols=args.cols, repeats=args.repeats, out=sys.stdout)
    return 0


def _cmd_cache(args: argparse.Namespace) -> int:
    from svod import store

    st = store.default_store()
    if args.action == "info":
        print(store.cache_info_text(st))
    elif args.action == "clear":
        n = st.clear(args.kind)
        from svod import engine

        engine.reset_caches()
        print(f"cleared {n} entr{'y' if n == 1 else 'ies'} from {st.info().get('path', 'the cache')}")
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    import os
    import runpy

    from svod import engine
    from svod.explain import explain_key

    if not os.path.isfile(args.file):
        raise CliError(f"no such file: {args.file}")
    engine.RECORDER = []
    try:
        runpy.run_path(args.file, run_name="__main__")
    except SystemExit:
        pass
    except Exception as e:  # noqa: BLE001 - the user's script failed: say so, no traceback
        raise CliError(f"{args.file} raised {type(e).__name__}: {e}") from None
    finally:
        keys, engine.RECORDER = engine.RECORDER, None
    seen: dict[str, object] = {}
    for k in keys:
        seen.setdefault(k.hash, k)
    if not seen:
        print(f"{args.file} realized nothing: no graph to explain")
        return 0
    for i, key in enumerate(list(seen.values())[: args.max_graphs]):
        e = explain_key(key, k=args.variants)
        print(f"=== graph {i} ({len(key.nodes)} nodes, key {key.hash[:12]}) ===")
        print(e)
        if args.ir:
            for j in range(len(e.kernels)):
                print(f"--- LLVM IR of kernel {j} ---")
                print(e.ir(j) or "(library step: no generated code)")
        print()
    return 0


def _only_arg(value: str) -> list[str]:
    from svod.bench.harness import parse_only

    try:
        return parse_only(value)
    except ValueError as e:  # argparse turns this into a usage error, exit 2
        raise argparse.ArgumentTypeError(str(e)) from None


def _cmd_bench(args: argparse.Namespace) -> int:
    import json

    from svod.bench import harness

    sizes = "quick" if args.quick else "default"
    res = harness.run(sizes=sizes, only=args.only, repeats=args.repeats, peers=not args.no_peers, out=sys.stdout)
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="svod", description="svod: e-graph kernel fusion with a vectorised CPU JIT")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    d = sub.add_parser("demo", help="fuse, compile and time a softmax + layernorm block on built-in data",
                       description="Build a small model block on built-in random data, show the plan svod "
                                   "chose, its speed against numpy, and the plan cache at work.")
    d.add_argument("--rows", type=int, default=2048, help="rows of the input (default 2048)")
    d.add_argument("--cols", type=int, default=1024, help="columns of the input (default 1024)")
    d.add_argument("--repeats", type=int, default=7, help="timed repeats per side (median reported)")
    d.set_defaults(fn=_cmd_demo)

    e = sub.add_parser("explain", help="run a script and explain the fusion search of every graph it realizes",
                       description="Run FILE.py; for each distinct graph it realizes, print the chosen kernels, the "
                                   "saturation report and the rejected variants with their predicted costs.")
    e.add_argument("file", help="a Python script using svod")
    e.add_argument("--variants", type=int, default=6, help="variants to show per graph (default 6)")
    e.add_argument("--max-graphs", type=int, default=5, help="graphs to explain at most (default 5)")
    e.add_argument("--ir", action="store_true", help="also print each kernel's LLVM IR")
    e.set_defaults(fn=_cmd_explain)

    c = sub.add_parser("cache", help="inspect or empty the persistent cache (plans, objects, tuning)",
                       description="Show where svod's persistent cache lives and what it holds, or empty it.")
    c.add_argument("action", choices=("info", "clear"))
    c.add_argument("--kind", default=None, help="clear only this kind (plans, objects, tuning, profiles)")
    c.set_defaults(fn=_cmd_cache)

    b = sub.add_parser("bench", help="measure W1-W7 against numpy and the optional peers (svod[bench])",
                       description="Time the named workloads W1-W7 (medians of interleaved repeats) against numpy, "
                                   "numexpr, numba, jax.jit, PyTorch, tinygrad when installed, and for W1 a gcc C "
                                   "loop; every svod result is checked against numpy.")
    b.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (about a minute)")
    b.add_argument("--only", type=_only_arg, default=None, metavar="W1,W2", help="only these workloads, e.g. w1,w6")
    b.add_argument("--repeats", type=int, default=None, help="interleaved repeats (default 11, --quick 5)")
    b.add_argument("--json", default=None, metavar="PATH", help="write all results as JSON to PATH")
    b.add_argument("--chart", default=None, metavar="PATH", help="write a bar chart (needs matplotlib)")
    b.add_argument("--no-peers", action="store_true", help="skip the optional peers (numpy and C only)")
    b.set_defaults(fn=_cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except CliError as e:
        print(f"svod {args.command}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"svod {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
