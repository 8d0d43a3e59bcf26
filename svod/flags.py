"""The pipeline's environment switches, its SVOD_DEBUG lines and its one-time warnings.

- `flag(name)`: a boolean switch (unset, "", "0", "false" and "False" are off);
- `env_int(name, default)`: an integer setting (unset, empty or not an integer: `default`);
- `debug()`: the `SVOD_DEBUG` level, read on every call (a test or a user may set it at
  any time), without `os.environ.get`'s encoding of the name (it is on the realize path);
  `ENV_DATA`/`DEBUG_KEY` let a hotter path test "is SVOD_DEBUG set at all" inline;
- `debug_log(msg)`: one SVOD_DEBUG line to the "svod" logger when logging is configured,
  else to stderr;
- `warn_once(tag, msg)`: one `SvodWarning` per tag per process, at the user's line;
- `profile_switch()` / `machine_profile_path()`: `SVOD_PROFILE` (kernel profiling on or
  off, svod.profiler) and the machine-profile file (`SVOD_MACHINE_PROFILE`, costmodels).
  `SVOD_PROFILE` once named that file: a value other than a switch (1/0, true/false,
  yes/no, on/off) is still read as its path.

A leaf module (it imports only svod.errors), so every layer may use it.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections import deque

from svod.errors import SvodWarning, user_stacklevel

log = logging.getLogger("svod")


def flag(name: str) -> bool:
    """Whether the switch `name` is on."""
    return os.environ.get(name, "0") not in ("", "0", "false", "False")


def env_int(name: str, default: int) -> int:
    """The integer setting `name` (`default` when unset, empty or not an integer)."""
    try:
        return int(os.environ.get(name, "") or default)
    except ValueError:
        return default


# CPython's dict of encoded names behind os.environ (same values as os.environ.get, which
# encodes the key on every call); None elsewhere
ENV_DATA = getattr(os.environ, "_data", None)
DEBUG_KEY = os.environ.encodekey("SVOD_DEBUG") if hasattr(os.environ, "encodekey") else None


def debug() -> int:
    """The SVOD_DEBUG level (0 when unset; 1 for a value that is not an integer)."""
    if ENV_DATA is not None and DEBUG_KEY is not None:
        v = ENV_DATA.get(DEBUG_KEY)
        if v is None:
            return 0
        v = os.environ.decodevalue(v)
    else:
        v = os.environ.get("SVOD_DEBUG", "0")
    try:
        return int(v or 0)
    except ValueError:
        return 1


def debug_log(msg: str) -> None:
    """One SVOD_DEBUG line: to the "svod" logger when logging is configured, else stderr."""
    if log.isEnabledFor(logging.INFO) and (log.handlers or logging.getLogger().handlers):
        log.info(msg)
    else:  # no logging configured: SVOD_DEBUG still prints
        print(msg, file=sys.stderr)


_warned: set[str] = set()


def warn_once(tag: str, msg: str) -> None:
    """Warn `msg` (an SvodWarning at the user's line) the first time `tag` is seen."""
    if tag not in _warned:
        _warned.add(tag)
        warnings.warn(msg, SvodWarning, stacklevel=user_stacklevel())  # the user's line


_ON = ("1", "true", "yes", "on")
_OFF = ("", "0", "false", "no", "off")


def profile_switch() -> bool:
    """Whether `SVOD_PROFILE` turns kernel profiling on (svod.profiler)."""
    return os.environ.get("SVOD_PROFILE", "").strip().lower() in _ON


def machine_profile_path() -> str | None:
    """The machine-profile file: `SVOD_MACHINE_PROFILE`, else a `SVOD_PROFILE` that is
    not a switch value (the old spelling)."""
    path = os.environ.get("SVOD_MACHINE_PROFILE", "").strip()
    if path:
        return path
    old = os.environ.get("SVOD_PROFILE", "").strip()
    return old if old.lower() not in _ON + _OFF else None


class NoteLog(deque):
    """A bounded log of ``(subject, message)`` notes — why a structure turned dynamic in
    its sizes (svod.shapes) or view offsets (svod.viewfold) — with the running count
    `noted`, so that the engine passes the notes of one lookup (`since(count)`) to the
    recompile record of the plan they cause (svod.recompiles, which prints it under
    ``SVOD_LOGS=recompiles``). Keeps the latest `maxlen` notes."""

    def __init__(self, maxlen: int = 256):
        super().__init__(maxlen=maxlen)
        self.noted = 0  # notes made so far (the log keeps the latest `maxlen`)

    def add(self, subject: str, msg: str) -> None:
        self.append((subject, msg))
        self.noted += 1

    def since(self, count: int) -> tuple[str, ...]:
        """The messages noted after `noted` was `count`."""
        k = min(self.noted - count, len(self))
        return tuple(m for _, m in list(self)[len(self) - k:]) if k > 0 else ()


# Environment switches that change what a planner may build, each with its default: a plan
# is made under one setting of them and used only under it (`plan_switches`, part of the
# plan's store key and checked against the memory cache), so `SVOD_FUSE_ATTENTION=0` is
# never served a stored attention plan. A new kind or pass with a switch lists it here.
PLAN_SWITCHES: tuple[tuple[str, str], ...] = (("SVOD_FUSE_ATTENTION", "1"), ("SVOD_MERGE_STORED", "0"),
                                                ("SVOD_FUSE_ROWCOL", "1"), ("SVOD_FUSE_MLP", "1"),
                                                ("SVOD_BARE_GEMM", "1"), ("SVOD_FUSE_RMSNORM", "1"))


def plan_switches() -> str:
    """The plan switches set away from their defaults, as `+NAME=V` parts ("" when none)."""
    out = ""
    for name, default in PLAN_SWITCHES:
        v = os.environ.get(name)
        if v is not None:
            v = "0" if v in ("0", "false", "False") else "1"
            if v != default:
                out += f"+{name}={v}"
    return out
