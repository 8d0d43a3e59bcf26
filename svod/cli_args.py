"""The `svod` command line's parser: its class (one-line usage errors), the argument
types (numbers in a range, workload names, shapes) and subcommand descriptions (each
command function's docstring). A value an argument type rejects is a usage error: exit
code 2 with argparse's one-line message.
"""

from __future__ import annotations

import argparse


def about(cmd) -> str:
    """A subcommand's --help description: its function's docstring."""
    import inspect

    return inspect.cleandoc(cmd.__doc__)


class Parser(argparse.ArgumentParser):
    """argparse with a one-line usage error: `svod tune: error: argument -k: must be a
    positive integer, got 0 (see svod tune --help)`, exit code 2, never a traceback.
    Subcommand parsers are of this class too (add_subparsers uses the parent's class)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def number(kind, low=None, high=None, what: str = ""):
    """An argparse `type` that parses `kind` (int or float) and checks low <= value <= high."""
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, "
                                             f"got {text!r}") from None
        if kind is float and v != v:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}")
        if (low is not None and v < low) or (high is not None and v > high):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
        return v

    parse.__name__ = what or kind.__name__
    return parse


positive = number(int, 1, what="a positive integer")
count = number(int, 0, what="0 or more")
seconds = number(float, 1e-9, 1e6, what="a positive number of seconds")
fraction = number(float, 0.0, 1.0, what="between 0 and 1")


def only_arg(value: str) -> list[str]:
    from svod.bench.harness import parse_only

    try:
        return parse_only(value)
    except ValueError as e:  # argparse turns this into a usage error, exit 2
        raise argparse.ArgumentTypeError(str(e)) from None


def shapes_arg(value: str) -> dict:
    from costmodels.targets import TargetError, parse_shapes

    try:
        shapes = parse_shapes(value)
    except TargetError as e:  # argparse turns this into a usage error, exit 2
        raise argparse.ArgumentTypeError(str(e)) from None
    for name, shape in shapes.items():
        if any(d < 1 for d in shape):  # a program over no elements has nothing to time or tune
            raise argparse.ArgumentTypeError(f"shape of {name!r} has a zero dimension ({value.strip()}): "
                                             "every dimension must be at least 1")
    return shapes


def workloads_arg(value: str) -> list[str]:
    from svod import workloads

    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in workloads.names()]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown workload(s) {', '.join(unknown) or '(none given)'}; known: "
                                         f"{', '.join(workloads.names())}")
    return names
