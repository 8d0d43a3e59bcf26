"""One persistent store for every svod cache: plans, object code, tuning data, profiles.

Everything svod keeps between processes lives in one SQLite database (WAL mode) in the
cache directory (`svod.cachedir`: `SVOD_CACHE_DIR` or the user cache dir, mode 0700
because it holds native code that svod loads).

- Values are bytes; callers serialise (JSON text via `put_json`/`get_json` for plans,
  profiles and tuning, raw object code for objects). No pickle anywhere.
- Every row is stored under (machine fingerprint, code fingerprint, key): a new commit
  or another CPU never replays a stale plan or object. The store adds the fingerprints
  itself, so callers cannot forget them; plan callers put their cost-model generation
  into `key`.
- Every value carries a blake2b checksum verified on read; a bad row is a miss.
- Nothing here raises on disk trouble. A corrupt, truncated or foreign database is moved
  aside and rebuilt; a read-only, full or unopenable disk degrades to an in-memory
  dict. Either way the caller sees misses, never an exception, and the store emits
  exactly one `SvodCacheWarning` per instance (later problems are listed by `info()`).
- Processes and threads may share a database: WAL, busy timeout, retries, a lock per Store.
- Bounded: plans and object code together stay under `SVOD_DISK_CACHE_MB` (default 256)
  of live database pages; beyond it the least recently used rows are evicted, oldest
  first, down to 90% of the bound (rows of old code versions are never used, so they go
  first). Reads record use in memory and write it back in batches. Tuning data and
  calibration profiles are small and costly to rebuild: never evicted.
- A directory (or anything but a file) squatting the database's path is moved aside once
  (`<name>.moved-aside`), with one warning at the user's line; if it cannot be moved,
  the sibling file `<stem>-alt.sqlite` is used (warned once, when it is created).

>>> import os, tempfile
>>> s = Store(os.path.join(tempfile.mkdtemp(), "store.sqlite"))
>>> s.put_json("plans", "graph-3f2a/gen1", {"kernels": 3})
True
>>> s.get_json("plans", "graph-3f2a/gen1")
{'kernels': 3}
>>> s.get("objects", "missing") is None
True
>>> s.info()["rows"]["plans"]
1
>>> s.close()
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import sqlite3
import threading
import time
import urllib.parse
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
KINDS = ("plans", "objects", "tuning", "profiles")
# NOTE: the schema version is in the file name too, so two svod versions sharing a cache
# dir use two files instead of moving each other's database aside.
DB_NAME = f"store-v{SCHEMA_VERSION}.sqlite"
MEMORY = ":memory:"

_APP = "svod"
_BUSY_TIMEOUT_S = 5.0
_RETRIES = 4
_MEM_CAP_BYTES = 256 << 20
DISK_CACHE_MB = 256  # default of SVOD_DISK_CACHE_MB
EVICTABLE = ("plans", "objects")
_TOUCH_BATCH = 64  # reads remembered before their use times are written back
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent

# primary SQLite result codes (extended code & 0xff)
_BUSY = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
_CORRUPT = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
_NO_WRITE = {8, 13}  # SQLITE_READONLY, SQLITE_FULL


class SvodCacheWarning(UserWarning):
    """A cache problem svod recovered from (corrupt file, read-only disk, ...).

    Results stay correct: the affected entries are misses and get rebuilt.
    """


@dataclass(frozen=True)
class Entry:
    """One stored value with the caller's metadata and its creation time (Unix seconds)."""

    value: bytes
    meta: dict | None
    created: float


class _Corrupt(Exception):
    """The database file is not a usable svod store (garbage, truncated, foreign schema)."""


if __package__:  # the usual case: part of svod
    from svod.cachedir import UnusableDir as _Unusable
    from svod.cachedir import alt_path as _alt_path
    from svod.cachedir import cache_dir
    from svod.cachedir import prepare_dir as _prepare_dir
    from svod.fingerprint import _SOURCE_PACKAGES, code_fingerprint, cpu_name, machine_fingerprint
else:  # NOTE: loaded alone by path (tests run it without the package): its sibling modules
    import importlib.util as _ilu

    def _sibling(name: str):
        spec = _ilu.spec_from_file_location(f"svod_{name}", Path(__file__).with_name(f"{name}.py"))
        mod = _ilu.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    _fp, _cd = _sibling("fingerprint"), _sibling("cachedir")
    _SOURCE_PACKAGES, code_fingerprint, cpu_name, machine_fingerprint = (
        _fp._SOURCE_PACKAGES, _fp.code_fingerprint, _fp.cpu_name, _fp.machine_fingerprint)
    _Unusable, _alt_path, cache_dir, _prepare_dir = _cd.UnusableDir, _cd.alt_path, _cd.cache_dir, _cd.prepare_dir


def full_key(kind: str, key: str) -> str:
    """The fully namespaced identity of `key`: `"kind:machine:code:key"`.

    The store applies this namespacing itself (as its composite primary key); the
    string form is for logs and explanations.
    """
    _check(kind, key)
    return f"{kind}:{machine_fingerprint()}:{code_fingerprint()}:{key}"


# --------------------------------------------------------------------------- paths


def default_path() -> Path:
    """Where `default_store()` keeps its database."""
    return cache_dir() / DB_NAME


def disk_cache_bytes() -> int:
    """The bound on plans + object code: `SVOD_DISK_CACHE_MB` (MiB, default 256)."""
    try:
        mb = float(os.environ.get("SVOD_DISK_CACHE_MB") or DISK_CACHE_MB)
    except ValueError:
        mb = DISK_CACHE_MB
    return max(0, int(mb * (1 << 20)))


def _user_stacklevel() -> int:
    """The `warnings.warn` stacklevel, from the caller of this function's caller, of the
    first frame outside svod's packages: the user's line."""
    from svod.errors import user_stacklevel

    return user_stacklevel(2)


def _looks_truncated(conn: sqlite3.Connection, path: Path) -> bool:
    """True if the file is shorter than the database it claims to hold (a quick_check
    is then due). Only a hint: it is decided with no WAL pending, by size alone."""
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    try:
        size = os.path.getsize(path)
        wal = os.path.getsize(str(path) + "-wal") if os.path.exists(str(path) + "-wal") else 0
    except OSError:
        return False
    return wal == 0 and (size % page != 0 or size < pages * page)


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _code(e: BaseException) -> int | None:
    c = getattr(e, "sqlite_errorcode", None)
    return None if c is None else c & 0xFF


def _checksum(kind: str, key: str, value: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    h.update(kind.encode() + b"\0" + key.encode("utf-8", "surrogatepass") + b"\0")
    h.update(value)
    return h.digest()


def _check(kind: str, key: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown store kind {kind!r}; expected one of {KINDS}")
    if not isinstance(key, str):
        raise TypeError(f"store key must be str, got {type(key).__name__}")


# --------------------------------------------------------------------------- the store


_LIVE: weakref.WeakSet[Store] = weakref.WeakSet()
# NOTE: a connection inherited through fork must never be closed in the child (SQLite may
# checkpoint and delete the parent's WAL); it is parked here so it is never finalised.
_ABANDONED: list[sqlite3.Connection] = []


class Store:
    """Key → bytes store with one namespace ("kind") per cache; see the module docstring.

    `path` is the database file (default: `default_path()`; `":memory:"` for a store that
    never touches disk). `readonly=True` never writes the disk (puts are kept in memory
    and return False). `machine`/`code` override the fingerprints (tests, tools).
    `max_bytes` bounds plans + objects (default `disk_cache_bytes()`).
    Thread-safe; a `Store` may be used across `fork` (the child reopens).
    """

    def __init__(self, path: str | os.PathLike | None = None, *, readonly: bool = False,
                 machine: str | None = None, code: str | None = None, max_bytes: int | None = None):
        if path is None:
            path = default_path()
        self._path: Path | None = None if str(path) == MEMORY else Path(path).expanduser()
        self._readonly = readonly
        self._machine = machine if machine is not None else machine_fingerprint()
        self._code = code if code is not None else code_fingerprint()
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._state = "memory" if self._path is None else "pending"  # pending | open | memory
        self._writable = not readonly
        self._tables: set[str] = set()
        self._moved_aside = False
        self._file_id: tuple[int, int] | None = None
        self._warned = False
        self._degraded: str | None = None
        self._events: list[str] = []
        self._mem: dict[tuple[str, str], Entry] = {}
        self._mem_bytes = 0
        self.max_bytes = disk_cache_bytes() if max_bytes is None else max_bytes
        self._touched: dict[tuple[str, str], float] = {}  # reads not yet written back (LRU)
        self.evictions = 0
        _LIVE.add(self)
        with self._lock:
            self._connection()  # open now so problems are reported where the store is made

    def __repr__(self) -> str:
        where = self._path if self._state == "open" else f"memory ({self._degraded or 'by request'})"
        return f"Store({where})"

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- public API

    def get(self, kind: str, key: str) -> bytes | None:
        """The value stored under `key`, or None (a miss, also for any damaged entry)."""
        e = self.entry(kind, key)
        return None if e is None else e.value

    def entry(self, kind: str, key: str) -> Entry | None:
        """Like `get`, with the metadata given to `put` and the creation time."""
        _check(kind, key)
        with self._lock:
            hit = self._mem.get((kind, key))
            if hit is not None:
                return hit
            sql = f"SELECT value, checksum, meta, created FROM {kind} WHERE machine=? AND code=? AND key=?"
            row = self._run(kind, lambda c: c.execute(sql, (self._machine, self._code, key)).fetchone(), None)
            if row is None:
                return None
            value, checksum, meta, created = row
            value = bytes(value)
            if checksum != _checksum(kind, key, value):
                self._problem(f"svod cache: entry {kind}/{key!r} in {self._path} failed its checksum; "
                              "dropped (it will be rebuilt)")
                self._delete_disk(kind, key)
                return None
            if kind in EVICTABLE and self._writable:
                self._touched[(kind, key)] = time.time()
                if len(self._touched) >= _TOUCH_BATCH:
                    self._write_touches()
            try:
                meta = json.loads(meta) if meta else None
            except ValueError:
                meta = None
            return Entry(value, meta, float(created))

    def put(self, kind: str, key: str, value: bytes, *, meta: dict | None = None) -> bool:
        """Store `value` under `key` in one transaction. True if it reached the disk,
        False if it is kept in memory only (read-only or degraded store)."""
        _check(kind, key)
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"store values are bytes, got {type(value).__name__} (serialise first)")
        value = bytes(value)
        meta_text = None if meta is None else json.dumps(meta, sort_keys=True)
        created = time.time()
        row = (self._machine, self._code, key, value, _checksum(kind, key, value), meta_text, created, created)
        sql = (f"INSERT OR REPLACE INTO {kind} (machine, code, key, value, checksum, meta, created, used) "
               "VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
        with self._lock:
            if self._run(kind, lambda c: c.execute(sql, row).rowcount > 0, False, write=True):
                self._mem_pop(kind, key)
                self._bound()
                return True
            self._mem_put(kind, key, Entry(value, meta, created))
            return False

    def get_json(self, kind: str, key: str) -> Any:
        """`get` decoded as JSON (None on a miss or on a value that is not JSON)."""
        raw = self.get(kind, key)
        if raw is None:
            return None
        try:
            return json.loads(raw.decode("utf-8"))
        except ValueError:
            self._events.append(f"{kind}/{key!r} is not JSON; treated as a miss")
            return None

    def put_json(self, kind: str, key: str, obj: Any, *, meta: dict | None = None) -> bool:
        """`put` of `obj` as compact, key-sorted JSON text (NaN/inf allowed, as Python's json)."""
        return self.put(kind, key, json.dumps(obj, sort_keys=True, separators=(",", ":")).encode(), meta=meta)

    def get_json_any_code(self, kind: str, key: str) -> Any:
        """The newest JSON value stored under `key` on this machine by any svod code
        version (None if none). For facts about the machine (calibration profiles) that
        stay true across commits; everything code-dependent uses `get_json`."""
        _check(kind, key)
        with self._lock:
            sql = (f"SELECT value, checksum FROM {kind} WHERE machine=? AND key=? "
                   "ORDER BY created DESC LIMIT 8")
            rows = self._run(kind, lambda c: c.execute(sql, (self._machine, key)).fetchall(), [])
        for value, checksum in rows:
            value = bytes(value)
            if checksum != _checksum(kind, key, value):
                continue
            try:
                return json.loads(value.decode("utf-8"))
            except ValueError:
                continue
        return None

    def delete(self, kind: str, key: str) -> None:
        """Remove `key` (for this machine and code) if present."""
        _check(kind, key)
        with self._lock:
            self._mem_pop(kind, key)
            self._delete_disk(kind, key)

    def keys(self, kind: str) -> list[str]:
        """Sorted keys of `kind` visible to this machine and code."""
        _check(kind, "")
        with self._lock:
            sql = f"SELECT key FROM {kind} WHERE machine=? AND code=?"
            disk = self._run(kind, lambda c: [r[0] for r in c.execute(sql, (self._machine, self._code))], [])
            return sorted(set(disk) | {k for (kd, k) in self._mem if kd == kind})

    def clear(self, kind: str | None = None) -> int:
        """Remove every entry of `kind` (all kinds if None), for every machine and code
        version, then compact the file; clearing objects also removes the shared
        libraries linked from them (`<dir>/lib/*.so`, svod.codegen.sharedlib). Returns
        the number of entries removed."""
        kinds = KINDS if kind is None else (kind,)
        for k in kinds:
            _check(k, "")
        removed = 0
        with self._lock:
            for (kd, k) in [mk for mk in self._mem if mk[0] in kinds]:
                self._mem_pop(kd, k)
                removed += 1
            for k in kinds:
                removed += self._run(k, lambda c, k=k: c.execute(f"DELETE FROM {k}").rowcount, 0, write=True)
            self._compact()
        if "objects" in kinds and self._path is not None and not self._readonly:
            # the shared libraries linked from the objects (svod.codegen.sharedlib) go with them
            lib = self._path.parent / "lib"
            try:
                for e in os.scandir(lib):
                    if e.name.endswith(".so"):
                        os.unlink(e.path)
            except OSError:
                pass
        return removed

    def prune(self) -> int:
        """Remove entries this machine wrote with another code version (old commits).
        Entries of other machines sharing the directory are kept. Returns the count."""
        removed = 0
        with self._lock:
            for k in KINDS:
                sql = f"DELETE FROM {k} WHERE machine=? AND code<>?"
                fp = (self._machine, self._code)
                removed += self._run(k, lambda c, sql=sql, fp=fp: c.execute(sql, fp).rowcount, 0, write=True)
        return removed

    def info(self) -> dict:
        """Path, backend, size on disk and live bytes against the bound (`max_bytes`),
        evictions, rows per kind (this machine+code, and all), schema version,
        fingerprints, degraded state and the problems met so far."""
        with self._lock:
            conn = self._connection()
            rows, rows_all = {}, {}
            for k in KINDS:
                mine = f"SELECT COUNT(*) FROM {k} WHERE machine=? AND code=?"
                n = self._run(k, lambda c, q=mine: c.execute(q, (self._machine, self._code)).fetchone()[0], 0)
                n_all = self._run(k, lambda c, k=k: c.execute(f"SELECT COUNT(*) FROM {k}").fetchone()[0], 0)
                n_mem = sum(1 for (kd, _) in self._mem if kd == k)
                rows[k], rows_all[k] = n + n_mem, n_all + n_mem
            size = 0
            if self._path is not None:
                for suffix in ("", "-wal", "-shm"):
                    try:
                        size += os.path.getsize(str(self._path) + suffix)
                    except OSError:
                        pass
            return {
                "path": None if self._path is None else str(self._path),
                "backend": "sqlite" if conn is not None else "memory",
                "readonly": self._readonly,
                "writable": conn is not None and self._writable,
                "degraded": self._degraded is not None,
                "degraded_reason": self._degraded,
                "schema_version": SCHEMA_VERSION,
                "size_bytes": size,
                "live_bytes": self._run(KINDS[0], _live_bytes, 0),
                "max_bytes": self.max_bytes,
                "evictions": self.evictions,
                "rows": rows,
                "rows_all_versions": rows_all,
                "memory_entries": len(self._mem),
                "memory_bytes": self._mem_bytes,
                "machine_fingerprint": self._machine,
                "code_fingerprint": self._code,
                "cpu": cpu_name(),
                "events": list(self._events),
            }

    def close(self) -> None:
        """Write back recorded uses and close the database connection; the store reopens
        it if used again."""
        with self._lock:
            if self._conn is not None:
                self._write_touches()
            self._drop_connection()
            if self._state == "open":
                self._state = "pending"

    # ---- memory overlay (degraded / read-only stores, and writes that lost a lock race)

    def _mem_put(self, kind: str, key: str, e: Entry) -> None:
        self._mem_pop(kind, key)
        self._mem[(kind, key)] = e
        self._mem_bytes += len(e.value)
        while self._mem_bytes > min(_MEM_CAP_BYTES, self.max_bytes) and len(self._mem) > 1:  # evict oldest
            self._mem_pop(*next(iter(self._mem)))

    def _mem_pop(self, kind: str, key: str) -> None:
        e = self._mem.pop((kind, key), None)
        if e is not None:
            self._mem_bytes -= len(e.value)

    # ---- problems: one warning per instance, every event recorded

    def _problem(self, msg: str) -> None:
        self._events.append(msg)
        if not self._warned:
            self._warned = True
            warnings.warn(msg, SvodCacheWarning, stacklevel=_user_stacklevel())

    def _degrade(self, reason: str, *, reads_too: bool = True) -> None:
        """Stop writing the disk (and reading it, if `reads_too`); keep going in memory."""
        if reads_too:
            self._drop_connection()
            self._state = "memory"
            where = "an in-memory cache for this process"
        else:
            where = "the disk read-only and new entries in memory"
        self._writable = False
        self._degraded = reason
        self._problem(f"svod cache: {reason}; using {where} (results stay correct, nothing new persists)")

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error:
                pass

    # ---- opening

    def _connection(self) -> sqlite3.Connection | None:
        """The open connection, opening (and if need be rebuilding) the database first."""
        if self._conn is not None or self._state != "pending":
            return self._conn
        assert self._path is not None
        for attempt in range(_RETRIES):
            try:
                self._conn = self._open()
                self._state = "open" if self._conn is not None else "memory"
                return self._conn
            except _Unusable as e:
                self._degrade(str(e))
                return None
            except _Corrupt as e:
                reason = str(e)
            except sqlite3.Error as e:
                code = _code(e)
                if code in _BUSY:
                    time.sleep(0.02 * 2 ** attempt)
                    continue
                if code not in _CORRUPT:
                    self._degrade(f"cannot open {self._path}: {e}")
                    return None
                reason = f"damaged ({e})"
            except OSError as e:
                self._degrade(f"cannot open {self._path}: {e}")
                return None
            if not self._rebuild(reason):
                return None
        self._degrade(f"{self._path} stayed locked by other processes")
        return None

    def _open(self) -> sqlite3.Connection | None:
        path = self._path
        assert path is not None
        if self._readonly:
            if path.exists() and not path.is_file():
                path = self._path = _alt_path(path)
            if not path.is_file():
                return None  # nothing stored yet: an empty store, not a problem
            target, uri = f"file:{urllib.parse.quote(str(path))}?mode=ro", True
        else:
            _prepare_dir(path.parent)
            if os.path.lexists(path) and not path.is_file():
                path = self._unsquat(path)
            target, uri = str(path), False
        # NOTE: never open() the database file ourselves: closing any descriptor of a file
        # drops every POSIX lock this process holds on it, under another Store's feet.
        existed = path.exists()
        conn = sqlite3.connect(target, uri=uri, timeout=_BUSY_TIMEOUT_S, isolation_level=None,
                               check_same_thread=False)
        try:
            self._file_id = _file_id(path)
            if not self._readonly:
                if not existed:
                    os.chmod(path, 0o600)  # -wal and -shm inherit it
                conn.execute("PRAGMA journal_mode=WAL").fetchone()
                conn.execute("PRAGMA synchronous=NORMAL")  # a cache may lose its last commits on power loss
            if _looks_truncated(conn, path):
                rows = conn.execute("PRAGMA quick_check").fetchall()
                if rows != [("ok",)]:
                    raise _Corrupt(f"damaged or truncated ({rows[0][0] if rows else 'no result'})")
            if not self._ensure_schema(conn):
                conn.close()
                return None
        except BaseException:
            conn.close()
            raise
        return conn

    def _unsquat(self, path: Path) -> Path:
        """`path` is a directory (or another non-file): move it aside, or use the sibling
        file (see the module docstring). Returns the database path to open."""
        what = "a directory" if path.is_dir() else "not a file"
        aside = path.with_name(path.name + ".moved-aside")
        n = 1
        while os.path.lexists(aside):
            aside, n = path.with_name(f"{path.name}.moved-aside.{n}"), n + 1
        try:
            os.rename(path, aside)
        except OSError as e:
            alt = self._path = _alt_path(path)
            if alt.exists():
                self._events.append(f"{path} is {what}; using {alt.name} beside it")
            else:
                self._problem(f"svod cache: {path} is {what} and cannot be moved aside ({e}); keeping the "
                              f"cache in {alt.name} beside it")
            return alt
        self._problem(f"svod cache: {path} was {what}, not svod's database; moved it to {aside.name} and "
                      "started a new cache")
        return path

    def _ensure_schema(self, conn: sqlite3.Connection) -> bool:
        """Check (or create) the svod schema; False for an empty read-only database."""
        def tables() -> set[str]:
            return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}

        names = tables()
        if not names:
            if self._readonly:
                return False
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # evictions can shrink the file
            conn.execute("BEGIN IMMEDIATE")  # serialise with another process creating it
            try:
                if not tables():
                    conn.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
                    meta = [("app", _APP), ("schema_version", str(SCHEMA_VERSION)),
                            ("created", repr(time.time()))]
                    conn.executemany("INSERT INTO meta VALUES (?, ?)", meta)
                    for k in KINDS:
                        conn.execute(_CREATE_KIND.format(kind=k))
                conn.execute("COMMIT")
            except BaseException:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise
            names = tables()
        if "meta" not in names:
            raise _Corrupt("a foreign database (no svod meta table)")
        meta = dict(conn.execute("SELECT name, value FROM meta").fetchall())
        if meta.get("app") != _APP or meta.get("schema_version") != str(SCHEMA_VERSION):
            raise _Corrupt(f"a foreign database (app {meta.get('app')!r}, schema version "
                           f"{meta.get('schema_version')!r}, expected {SCHEMA_VERSION})")
        if not self._readonly:
            for k in KINDS:
                if k not in names:  # a kind added without a schema change
                    conn.execute(_CREATE_KIND.format(kind=k))
            names = tables()
            for k in EVICTABLE:
                _add_use_column(conn, k)
        self._tables = names
        return True

    def _rebuild(self, reason: str) -> bool:
        """Move a damaged/foreign database aside so the next open starts afresh.
        False (and degraded to memory) when that is not possible or already tried."""
        self._drop_connection()
        if self._readonly or self._moved_aside:
            self._degrade(f"{self._path} is {reason}")
            return False
        self._moved_aside = True
        path = self._path
        assert path is not None
        aside = path.with_name(path.name + ".bad")
        if self._file_id is not None and _file_id(path) != self._file_id:  # another process replaced it
            self._problem(f"svod cache: {path} was {reason}; another process has replaced it")
            self._state = "pending"
            return True
        try:
            os.replace(path, aside)
            for suffix in ("-wal", "-shm"):  # a stale WAL must never be replayed into the new file
                try:
                    os.unlink(str(path) + suffix)
                except FileNotFoundError:
                    pass
        except OSError as e:
            self._degrade(f"{path} is {reason} and cannot be moved aside ({e})")
            return False
        self._problem(f"svod cache: {path} was {reason}; moved it to {aside.name} and started a new "
                      "cache (entries will be rebuilt)")
        self._state = "pending"
        return True

    # ---- running statements

    def _run(self, kind: str, fn, default, *, write: bool = False):
        """fn(connection) with every SQLite problem handled: retries while locked, a
        rebuild when corrupt, degradation otherwise. `default` when there is no disk."""
        for attempt in range(_RETRIES):
            conn = self._connection()
            if conn is None or (write and not self._writable) or kind not in self._tables:
                return default
            try:
                return fn(conn)
            except sqlite3.Error as e:
                code = _code(e)
                if code in _BUSY:
                    time.sleep(0.02 * 2 ** attempt)
                    continue
                if code in _CORRUPT:
                    if not self._rebuild(f"damaged ({e})"):
                        return default
                    continue
                if write and code in _NO_WRITE:
                    self._degrade(f"cannot write {self._path} ({e})", reads_too=False)
                    return default
                self._degrade(f"{self._path}: {e}")
                return default
        self._events.append(f"{self._path} stayed locked; one operation fell back to memory")
        return default

    def _delete_disk(self, kind: str, key: str) -> None:
        sql = f"DELETE FROM {kind} WHERE machine=? AND code=? AND key=?"
        self._run(kind, lambda c: c.execute(sql, (self._machine, self._code, key)), None, write=True)

    def _write_touches(self) -> None:
        """Write recorded read times back (`used`), one autocommit UPDATE a row (lock held)."""
        touched, self._touched = self._touched, {}
        for k in EVICTABLE:
            rows = [(t, self._machine, self._code, key) for (kd, key), t in touched.items() if kd == k]
            if rows:
                sql = f"UPDATE {k} SET used=? WHERE machine=? AND code=? AND key=?"
                self._run(k, lambda c, sql=sql, rows=rows: c.executemany(sql, rows), None, write=True)

    def _bound(self) -> None:
        """Evict least recently used plans and objects while the database's live pages
        exceed `max_bytes`, down to 90% of it (lock held, after a successful put)."""
        conn = self._connection()
        if conn is None or not self._writable or _live_bytes(conn) <= self.max_bytes:
            return
        self._write_touches()
        target = _live_bytes(conn) - int(0.9 * self.max_bytes)
        pick = " UNION ALL ".join(f"SELECT '{k}', rowid, used, length(value) + length(key) + 120 FROM {k}"
                                  for k in EVICTABLE if k in self._tables)

        def evict(c) -> int:
            freed = n = 0
            while freed < target:
                rows = c.execute(f"SELECT * FROM ({pick}) ORDER BY 3 LIMIT 256").fetchall()
                if not rows:
                    break
                for kind, rowid, _, nb in rows:
                    c.execute(f"DELETE FROM {kind} WHERE rowid=?", (rowid,))
                    freed, n = freed + nb, n + 1
                    if freed >= target:
                        break
            c.execute("PRAGMA incremental_vacuum")
            return n

        if pick:
            self.evictions += self._run(EVICTABLE[0], evict, 0, write=True)

    def _compact(self) -> None:
        conn = self._connection()
        if conn is None or not self._writable:
            return
        try:  # best effort: another process reading the file may keep VACUUM from running
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as e:
            self._events.append(f"compaction skipped: {e}")


_CREATE_KIND = """CREATE TABLE IF NOT EXISTS {kind} (
    machine TEXT NOT NULL, code TEXT NOT NULL, key TEXT NOT NULL,
    value BLOB NOT NULL, checksum BLOB NOT NULL, meta TEXT, created REAL NOT NULL, used REAL,
    PRIMARY KEY (machine, code, key))"""


def _add_use_column(conn: sqlite3.Connection, kind: str) -> None:
    """The last-use time of rows (`used`, indexed) for LRU eviction: added to a database
    made before it (rows it lacks are NULL: least recently used). Idempotent."""
    if "used" not in {r[1] for r in conn.execute(f"PRAGMA table_info({kind})")}:
        try:
            conn.execute(f"ALTER TABLE {kind} ADD COLUMN used REAL")
        except sqlite3.OperationalError as e:  # another process added it first
            if "duplicate column" not in str(e):
                raise
    conn.execute(f"CREATE INDEX IF NOT EXISTS {kind}_used ON {kind}(used)")


def _live_bytes(conn: sqlite3.Connection) -> int:
    """Bytes of the database's pages in use (free pages are reused by later writes)."""
    pages = conn.execute("PRAGMA page_count").fetchone()[0] - conn.execute("PRAGMA freelist_count").fetchone()[0]
    return pages * conn.execute("PRAGMA page_size").fetchone()[0]


# --------------------------------------------------------------------------- process-wide store


_DEFAULT: Store | None = None
_DEFAULT_LOCK = threading.Lock()


def default_store() -> Store:
    """The process-wide store at `default_path()`, created on first use (thread-safe)."""
    global _DEFAULT
    s = _DEFAULT
    if s is None:
        with _DEFAULT_LOCK:
            if _DEFAULT is None:
                _DEFAULT = Store()
                atexit.register(_close_at_exit, _DEFAULT)  # recorded uses reach the disk (LRU)
            s = _DEFAULT
    return s


def _close_at_exit(s: Store) -> None:
    try:
        s.close()
    except Exception:  # noqa: BLE001 - interpreter shutdown: the cache is an optimisation
        pass


def reset_default_store() -> None:
    """Close and forget the process-wide store (tests; after changing SVOD_CACHE_DIR)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        s, _DEFAULT = _DEFAULT, None
    if s is not None:
        s.close()


def _after_fork_in_child() -> None:
    global _DEFAULT_LOCK
    _DEFAULT_LOCK = threading.Lock()
    for s in list(_LIVE):
        s._lock = threading.RLock()
        if s._conn is not None:
            _ABANDONED.append(s._conn)
            s._conn = None
        if s._state == "open":
            s._state = "pending"


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
