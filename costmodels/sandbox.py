"""A temporary svod cache for notebooks and experiments: nothing they plan, compile or
tune reaches the user's cache unless they ask.

`temporary_cache()` points this process (and the processes it starts: `svod tune` from
a notebook) at a fresh folder: `SVOD_CACHE_DIR` for plans, objects and tuning rows, and
`SVOD_MACHINE_PROFILE` at a copy of the machine profile the process planned with before
(the one `svod calibrate` stored, read without writing to the user's cache, else the
reference profile), so predictions stay those of this machine.

>>> import os
>>> d = temporary_cache()
>>> os.environ["SVOD_CACHE_DIR"].startswith(d)
True
"""

from __future__ import annotations

import os
import tempfile


def temporary_cache(prefix: str = "svod-notebook-") -> str:
    """Use a new temporary cache from now on (see the module docstring); returns its folder."""
    from costmodels import profile as prof
    from svod import engine, store

    folder = tempfile.mkdtemp(prefix=prefix)
    path = os.path.join(folder, "machine_profile.json")
    current = None
    try:
        from svod.flags import machine_profile_path

        if machine_profile_path():
            current = prof.profile()
        elif store.default_path().exists():  # read the user's profile; never create their cache
            current = prof.profile()
    except Exception:  # noqa: BLE001 - the reference profile then
        current = None
    (current or prof.reference()).dump(path)
    os.environ["SVOD_CACHE_DIR"] = os.path.join(folder, "cache")
    os.environ["SVOD_MACHINE_PROFILE"] = path
    store.reset_default_store()
    prof.forget()
    engine.reset_caches()
    return folder
