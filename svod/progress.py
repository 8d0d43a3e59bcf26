"""Progress bars for long work: calibrate, tune, costmodel report, bench, big searches.

`bar(total, desc)` is a tqdm bar on stderr when stderr is a terminal, else a silent
stand-in with the same methods (`update`, `set_postfix_str`, `set_description`, `close`,
context manager): piped output, CI logs and notebooks' captured stderr stay clean.
`SVOD_PROGRESS=1` forces bars on (a terminal that does not say it is one), `=0` off;
`enabled=False` (the CLI's `--no-progress`) turns one off. `delay` seconds: the bar
appears only if the work is still going then (a search that usually takes 50 ms shows
nothing, one that takes 10 s shows a bar after 2).

tqdm is a dependency of svod (pyproject.toml); a stripped install without it is quiet.

>>> with bar(3, "demo", enabled=False) as pb:
...     pb.update(3)
>>> pb.n
3
"""

from __future__ import annotations

import os
import sys


class Silent:
    """A bar that draws nothing (not a terminal, disabled, or tqdm missing)."""

    def __init__(self, total: int = 0, **_):
        self.total = total
        self.n = 0

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def set_description(self, s: str = "") -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def wanted(enabled: bool = True, stream=None) -> bool:
    """Whether a bar would be drawn: `enabled`, `SVOD_PROGRESS` (1 forces, 0 silences),
    else whether `stream` (stderr) is a terminal."""
    if not enabled:
        return False
    env = os.environ.get("SVOD_PROGRESS", "").strip().lower()
    if env in ("0", "false", "no", "off"):
        return False
    if env in ("1", "true", "yes", "on"):
        return True
    stream = stream if stream is not None else sys.stderr
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def bar(total: int, desc: str, enabled: bool = True, unit: str = "it", delay: float = 0.0):
    """A progress bar over `total` steps (a context manager with `update`); see the
    module docstring for when it is drawn."""
    if not wanted(enabled):
        return Silent(total)
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency; a stripped install still runs
        return Silent(total)
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True, leave=False, delay=delay)
