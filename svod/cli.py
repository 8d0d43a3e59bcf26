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
