"""Where svod keeps its persistent files: the cache directory and the database's path.

- `cache_dir()`: `SVOD_CACHE_DIR` if set, else the platform's user cache directory +
  `/svod` (`$XDG_CACHE_HOME/svod` or `~/.cache/svod` on Linux).
- `prepare_dir(d)`: the directory exists with mode 0700 and belongs to this user, or
  `UnusableDir` is raised: svod loads native code from it, so a directory others can
  write to (or that others own) is never used; a shared sticky directory (/tmp) is never
  chmod-ed.
- `alt_path(path)`: the sibling database used when `path` is squatted by something that
  is not a file and cannot be moved aside (svod.store).

Imports nothing of svod's (svod.store loads it by path when run alone).
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path


class UnusableDir(Exception):
    """The cache directory or file cannot be used at all."""


def cache_dir() -> Path:
    """`SVOD_CACHE_DIR` if set, else the platform's user cache dir + `/svod`."""
    env = os.environ.get("SVOD_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local") / "svod" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "svod"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache") / "svod"


def prepare_dir(d: Path) -> None:
    """Create `d` with mode 0700, or tighten it; refuse a directory others control."""
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.stat(d)
    except OSError as e:
        raise UnusableDir(f"cannot create cache directory {d}: {e}") from e
    if not stat.S_ISDIR(st.st_mode):
        raise UnusableDir(f"{d} is not a directory")
    if os.name != "posix":
        return
    if st.st_uid != os.geteuid():
        raise UnusableDir(f"cache directory {d} belongs to uid {st.st_uid}, not to this user; "
                        "svod will not load native code from it")
    if st.st_mode & 0o077:
        # NOTE: a shared sticky dir (/tmp) is never chmod-ed: point SVOD_CACHE_DIR below it.
        if st.st_mode & stat.S_ISVTX:
            raise UnusableDir(f"cache directory {d} is a shared directory (mode {st.st_mode & 0o7777:o}); "
                            "set SVOD_CACHE_DIR to a private subdirectory")
        try:
            os.chmod(d, stat.S_IMODE(st.st_mode) & 0o700)
        except OSError as e:
            raise UnusableDir(f"cache directory {d} has mode {st.st_mode & 0o777:o} and cannot be "
                            f"restricted to 0700: {e}") from e


def alt_path(path: Path) -> Path:
    """The sibling database used when `path` is squatted and cannot be moved aside."""
    return path.with_name(f"{path.stem}-alt{path.suffix}")
