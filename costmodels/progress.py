"""Progress bars for the long commands (calibrate, tune, costmodel report): tqdm on
stderr when it is installed and the output is wanted, else a silent stand-in."""

from __future__ import annotations

import sys


class _Silent:
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


def bar(total: int, desc: str, enabled: bool = True, unit: str = "it"):
    """A progress bar over `total` steps (a context manager with `update`)."""
    if not enabled:
        return _Silent(total)
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency; a stripped install still runs
        return _Silent(total)
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True, leave=False)
