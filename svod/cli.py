"""The `svod` command line: `svod demo`, `svod cache info|clear`.

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
