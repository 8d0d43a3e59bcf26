"""svod/store.py: the one persistent store (plans, objects, tuning, profiles).

Every damaged-disk case checks the contract: the caller sees misses (never an exception),
later puts/gets still work, and exactly one SvodCacheWarning is emitted per store.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest

import svod.store as st
from svod.memory import store_info_text
from svod.store import KINDS, Store, SvodCacheWarning
from tests.threads import run_threads

STORE_PY = Path(st.__file__).resolve()

# Loads store.py by path, so subprocess tests do not depend on the rest of the package.
LOAD = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("svod_store_t", {path!r})
m = importlib.util.module_from_spec(spec); sys.modules["svod_store_t"] = m; spec.loader.exec_module(m)
"""


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SVOD_CACHE_DIR", str(tmp_path / "svod-cache"))
    st.reset_default_store()
    yield
    st.reset_default_store()


@contextmanager
def recorded():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        yield w


def cache_warnings(w) -> list[str]:
    return [str(x.message) for x in w if issubclass(x.category, SvodCacheWarning)]


def fill(path: Path, n: int = 200, size: int = 2000) -> None:
    with Store(path) as s:
        for i in range(n):
            assert s.put("objects", f"k{i}", bytes([i % 251]) * size)


# ---------------------------------------------------------------- the basic contract


def test_roundtrip_each_kind(tmp_path):
    s = Store(tmp_path / "db.sqlite")
    for kind in KINDS:
        assert s.get(kind, "a") is None
        assert s.put(kind, "a", b"\x00raw\xff" + kind.encode(), meta={"gen": 3})
        assert s.get(kind, "a") == b"\x00raw\xff" + kind.encode()
        assert s.entry(kind, "a").meta == {"gen": 3}
        assert s.put_json(kind, "j", {"x": [1, 2.5, None], "inf": float("inf")})
        assert s.get_json(kind, "j") == {"x": [1, 2.5, None], "inf": float("inf")}
        assert s.keys(kind) == ["a", "j"]
        s.delete(kind, "a")
        assert s.get(kind, "a") is None and s.keys(kind) == ["j"]
    # kinds are separate namespaces
    s.put("plans", "same", b"p")
    s.put("objects", "same", b"o")
    assert (s.get("plans", "same"), s.get("objects", "same")) == (b"p", b"o")
    assert s.put("plans", "same", bytearray(b"p2")) and s.get("plans", "same") == b"p2"
    with pytest.raises(ValueError):
        s.get("nope", "a")
    with pytest.raises(TypeError):
        s.put("plans", "a", "not bytes")
    s.close()


def test_dir_is_created_private_and_default_store(tmp_path):
    cache = tmp_path / "svod-cache"  # set by the autouse fixture; does not exist yet
    s = st.default_store()
    assert s is st.default_store()
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(cache / st.DB_NAME).st_mode) == 0o600
    assert s.info()["path"] == str(cache / st.DB_NAME)
    assert s.put_json("tuning", "k", 1)
    text = store_info_text(s)
    assert str(cache / st.DB_NAME) in text and "tuning" in text
    assert st.default_store().clear() == 1 and st.default_store().keys("tuning") == []


def test_default_store_is_one_instance_across_threads():
    seen = []
    run_threads(lambda: seen.append(st.default_store()), [()] * 8)
    assert len({id(s) for s in seen}) == 1


def test_loose_dir_is_tightened(tmp_path):
    d = tmp_path / "loose"
    d.mkdir()
    os.chmod(d, 0o755)
    with recorded() as w:
        s = Store(d / "db.sqlite")
        assert s.put("plans", "k", b"v")
    assert cache_warnings(w) == []
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700


def test_shared_sticky_dir_is_refused(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o1777)
    with recorded() as w:
        s = Store(d / "db.sqlite")
        assert s.put("plans", "k", b"v") is False
        assert s.get("plans", "k") == b"v"
    assert len(cache_warnings(w)) == 1
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o1777  # never chmod a shared dir
    assert not (d / "db.sqlite").exists()


def test_persists_across_instances_and_fingerprints_scope_rows(tmp_path):
    p = tmp_path / "db.sqlite"
    with Store(p) as s:
        s.put("plans", "g1", b"plan")
        s.put("objects", "o1", b"\x7fELF")
    with Store(p) as s:
        assert s.get("plans", "g1") == b"plan" and s.get("objects", "o1") == b"\x7fELF"
        assert s.info()["rows"]["plans"] == 1
    # another commit (code) or another CPU (machine) never sees them
    assert Store(p, code="other-commit").get("plans", "g1") is None
    assert Store(p, machine="other-cpu").get("plans", "g1") is None
    with Store(p, code="old-commit") as old:
        old.put("plans", "g0", b"stale")
    with Store(p) as s:
        i = s.info()
        assert i["rows"]["plans"] == 1 and i["rows_all_versions"]["plans"] == 2
        assert s.prune() == 1
        assert s.info()["rows_all_versions"]["plans"] == 1 and s.get("plans", "g1") == b"plan"
        assert s.clear("plans") == 1 and s.get("objects", "o1") == b"\x7fELF"
    key = st.full_key("plans", "g1")
    assert st.machine_fingerprint() in key and st.code_fingerprint() in key and key.endswith(":g1")


def test_readonly_flag(tmp_path):
    p = tmp_path / "db.sqlite"
    ro = Store(p, readonly=True)  # no database yet: an empty store, no file made, no warning
    assert ro.get("plans", "k") is None and not p.exists()
    with Store(p) as s:
        s.put("plans", "k", b"v")
    with recorded() as w:
        ro = Store(p, readonly=True)
        assert ro.get("plans", "k") == b"v"
        assert ro.put("plans", "k2", b"w") is False and ro.get("plans", "k2") == b"w"
    assert cache_warnings(w) == []
    assert Store(p).get("plans", "k2") is None


# ---------------------------------------------------------------- damaged databases


def _corrupt_random(p: Path) -> None:
    p.write_bytes(os.urandom(50_000))


def _truncate(p: Path) -> None:
    fill(p)
    data = p.read_bytes()
    assert not Path(str(p) + "-wal").exists()
    p.write_bytes(data[: len(data) // 2])


def _foreign_version(p: Path) -> None:
    fill(p, n=3)
    with sqlite3.connect(p) as c:
        c.execute("UPDATE meta SET value='999' WHERE name='schema_version'")


def _foreign_app(p: Path) -> None:
    with sqlite3.connect(p) as c:
        c.execute("CREATE TABLE objects (k TEXT, v BLOB)")
        c.execute("INSERT INTO objects VALUES ('k0', x'00')")


@pytest.mark.parametrize("damage", [_corrupt_random, _truncate, _foreign_version, _foreign_app])
def test_damaged_database_is_rebuilt_with_one_warning(tmp_path, damage):
    p = tmp_path / "db.sqlite"
    damage(p)
    with recorded() as w:
        s = Store(p)
        assert all(s.get("objects", f"k{i}") is None for i in range(5))
        assert s.put("objects", "k0", b"new") is True
        assert s.get("objects", "k0") == b"new"
        assert s.keys("objects") == ["k0"]
        s.close()
    assert len(cache_warnings(w)) == 1, cache_warnings(w)
    assert (tmp_path / "db.sqlite.bad").exists()
    with recorded() as w:  # the rebuilt database is healthy for the next process
        assert Store(p).get("objects", "k0") == b"new"
    assert cache_warnings(w) == []


def test_corruption_found_mid_session_is_one_warning(tmp_path):
    p = tmp_path / "db.sqlite"
    fill(p, n=3)
    with recorded() as w:
        s = Store(p)
        assert s.get("objects", "k1") is not None
        s.close()  # checkpoint, so the garbage below is all there is
        p.write_bytes(os.urandom(20_000))
        for suffix in ("-wal", "-shm"):
            Path(str(p) + suffix).unlink(missing_ok=True)
        assert s.get("objects", "k1") is None
        assert s.put("objects", "k1", b"again") and s.get("objects", "k1") == b"again"
    assert len(cache_warnings(w)) == 1


def test_checksum_mismatch_is_a_miss_and_dropped(tmp_path):
    p = tmp_path / "db.sqlite"
    with Store(p) as s:
        s.put("plans", "good", b"fine")
        s.put("plans", "bad", b"original")
    with sqlite3.connect(p) as c:
        assert c.execute("UPDATE plans SET value=? WHERE key='bad'", (b"tampered",)).rowcount == 1
    with recorded() as w:
        s = Store(p)
        assert s.get("plans", "bad") is None
        assert s.get("plans", "bad") is None
        assert s.get("plans", "good") == b"fine"
        s.close()
    assert len(cache_warnings(w)) == 1
    with sqlite3.connect(p) as c:
        assert c.execute("SELECT COUNT(*) FROM plans WHERE key='bad'").fetchone()[0] == 0


# ---------------------------------------------------------------- disks that refuse


def test_full_disk_degrades_to_memory(tmp_path):
    p = tmp_path / "db.sqlite"
    s = Store(p)
    assert s.put("objects", "small", b"x")
    pages = s._conn.execute("PRAGMA page_count").fetchone()[0]
    s._conn.execute(f"PRAGMA max_page_count = {pages}")  # SQLITE_FULL on the next growth
    with recorded() as w:
        assert s.put("objects", "big", os.urandom(1 << 20)) is False
        assert len(s.get("objects", "big")) == 1 << 20
        assert s.put("objects", "more", b"y") is False and s.get("objects", "more") == b"y"
        assert s.get("objects", "small") == b"x"  # the disk is still read
        info = s.info()
    assert info["degraded"] and not info["writable"]
    assert len(cache_warnings(w)) == 1
    assert "in memory only" in store_info_text(s)


def test_unopenable_location_degrades_to_memory(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SVOD_CACHE_DIR", str(blocker / "svod"))
    with recorded() as w:
        s = st.default_store()
        assert s.put_json("profiles", "m", {"bw": 40e9}) is False
        assert s.get_json("profiles", "m") == {"bw": 40e9}
        assert s.keys("profiles") == ["m"]
        assert s.info()["backend"] == "memory"
        store_info_text(s)
    assert len(cache_warnings(w)) == 1


RO_SCRIPT = """
import warnings
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    s = m.Store(sys.argv[1] + "/db.sqlite")
    ok = s.put("plans", "k", b"v")
    got = s.get("plans", "k")
    backend = s.info()["backend"]
print(sum(issubclass(x.category, m.SvodCacheWarning) for x in w), ok, got, backend)
"""


def test_readonly_directory_degrades_to_memory(tmp_path):
    if os.geteuid() != 0:
        d = tmp_path / "ro"
        d.mkdir(mode=0o700)
        os.chmod(d, 0o500)
        try:
            with recorded() as w:
                s = Store(d / "db.sqlite")
                assert s.put("plans", "k", b"v") is False and s.get("plans", "k") == b"v"
            assert len(cache_warnings(w)) == 1
        finally:
            os.chmod(d, 0o700)
        return
    # root ignores directory modes: run the store as `nobody` in a subprocess
    base = Path(tempfile.mkdtemp())
    try:
        os.chmod(base, 0o755)
        for name in ("store.py", "fingerprint.py", "cachedir.py"):  # store.py loads its siblings when run alone
            shutil.copy(STORE_PY.with_name(name), base / name)
            os.chmod(base / name, 0o644)
        d = base / "ro"
        d.mkdir()
        os.chown(d, 65534, 65534)
        os.chmod(d, 0o500)
        script = LOAD.format(path=str(base / "store.py")) + RO_SCRIPT
        for exe in (sys.executable, "/usr/bin/python3"):
            try:
                r = subprocess.run([exe, "-c", script, str(d)], user=65534, capture_output=True,
                                   text=True, timeout=30, env={"PATH": "/usr/bin:/bin", "HOME": str(base)})
            except (OSError, subprocess.SubprocessError):
                continue
            if r.returncode == 0:
                break
        else:
            pytest.skip("no Python interpreter usable by an unprivileged user")
        assert r.stdout.split() == ["1", "False", "b'v'", "memory"], r.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="needs root to chown")
def test_dir_owned_by_someone_else_is_refused(tmp_path):
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)
    with recorded() as w:
        s = Store(d / "db.sqlite")
        assert s.put("objects", "k", b"code") is False
    assert len(cache_warnings(w)) == 1 and "uid" in cache_warnings(w)[0]


# ---------------------------------------------------------------- fingerprints


def test_code_fingerprint_tracks_sources(tmp_path):
    root = tmp_path / "tree"
    for rel, text in {"svod/__init__.py": "", "svod/a.py": "A = 1\n", "search/b.py": "B = 2\n",
                      "costmodels/c.py": "C = 3\n", "tests/t.py": "T = 4\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    fp = st.code_fingerprint(root)
    assert fp == st.code_fingerprint(root) and len(fp) == 32
    (root / "svod/a.py").write_text("A = 2\n")
    assert st.code_fingerprint(root) != fp
    (root / "svod/a.py").write_text("A = 1\n")
    assert st.code_fingerprint(root) == fp
    (root / "tests/t.py").write_text("T = 5\n")  # not part of svod
    (root / "svod/__pycache__").mkdir()
    (root / "svod/__pycache__/x.py").write_text("junk")
    (root / "svod/notes.txt").write_text("not python")
    assert st.code_fingerprint(root) == fp
    (root / "search/b.py").rename(root / "search/b2.py")
    fp2 = st.code_fingerprint(root)
    assert fp2 != fp
    (root / "costmodels/sub").mkdir()
    (root / "costmodels/sub/new.py").write_text("")
    assert st.code_fingerprint(root) != fp2


def test_code_fingerprint_memo_is_reused_only_while_no_source_changed(tmp_path):
    import os

    from svod import fingerprint as fpm

    root, memo = tmp_path / "tree", tmp_path / "cache" / "code-fingerprint.json"
    for rel, text in {"svod/a.py": "A = 1\n", "search/b.py": "B = 2\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    want = fpm._hash_sources(root)
    assert fpm._memo_fingerprint(root, memo) == want and memo.exists()
    hashed = []
    real = fpm._hash_files
    fpm_hash = lambda files: hashed.append(1) or real(files)  # noqa: E731
    try:
        fpm._hash_files = fpm_hash
        assert fpm._memo_fingerprint(root, memo) == want and not hashed  # a memo hit: nothing read
        a = root / "svod/a.py"
        st0 = os.stat(a)
        a.write_text("A = 9\n")  # same size, mtime put back: the ctime still moves
        os.utime(a, ns=(st0.st_atime_ns, st0.st_mtime_ns))
        assert fpm._memo_fingerprint(root, memo) == fpm._hash_sources(root) != want and hashed
        memo.write_text("{not json")  # a corrupt memo: hashed again, rewritten
        assert fpm._memo_fingerprint(root, memo) == fpm._hash_sources(root)
        assert fpm._memo_fingerprint(root, None) == fpm._hash_sources(root)  # no memo location
    finally:
        fpm._hash_files = real


def test_machine_fingerprint_is_stable():
    fp = st.machine_fingerprint()
    assert fp == st.machine_fingerprint() and fp.count("-") >= 1 and st.cpu_name()


def test_import_is_cheap(tmp_path):
    script = LOAD.format(path=str(STORE_PY)) + (
        "heavy = {'egglog', 'llvmlite', 'numpy'} & set(sys.modules)\n"
        "m.machine_fingerprint(); m.code_fingerprint()\n"
        "heavy |= {'egglog', 'llvmlite', 'numpy'} & set(sys.modules)\n"
        "print(sorted(heavy))\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


# ---------------------------------------------------------------- concurrency


WRITER = """
import json, warnings
warnings.simplefilter("error", m.SvodCacheWarning)
path, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = m.Store(path, machine="m", code="c")
print("ready", flush=True)
sys.stdin.readline()  # start together with the parent's threads
lost = [i for i in range(n) if not s.put("objects", f"{prefix}-{i}", f"{prefix}-{i}".encode() * 40)]
lost += [i for i in range(n) if not s.put_json("tuning", f"{prefix}-{i}", {"i": i})]
print(json.dumps(lost))
"""


def test_processes_and_threads_lose_nothing(tmp_path):
    p = tmp_path / "db.sqlite"
    Store(p, machine="m", code="c").close()  # an existing database, as in real use
    n = 300
    script = LOAD.format(path=str(STORE_PY)) + WRITER
    procs = [subprocess.Popen([sys.executable, "-c", script, str(p), f"proc{j}", str(n)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for j in range(2)]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    shared = Store(p, machine="m", code="c")
    errors: list[BaseException] = []

    def write(prefix: str, own: bool) -> None:
        try:
            s = Store(p, machine="m", code="c") if own else shared
            for i in range(n):
                assert s.put("objects", f"{prefix}-{i}", f"{prefix}-{i}".encode() * 40)
                assert s.put_json("tuning", f"{prefix}-{i}", {"i": i})
        except BaseException as e:  # surfaced below
            errors.append(e)

    with recorded() as w:
        threads = [threading.Thread(target=write, args=(f"thread{j}", j >= 2)) for j in range(4)]
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert json.loads(out) == []
    assert not errors and cache_warnings(w) == []
    check = Store(p, machine="m", code="c")
    prefixes = [f"proc{j}" for j in range(2)] + [f"thread{j}" for j in range(4)]
    for prefix in prefixes:
        for i in range(n):
            assert check.get("objects", f"{prefix}-{i}") == f"{prefix}-{i}".encode() * 40
            assert check.get_json("tuning", f"{prefix}-{i}") == {"i": i}
    assert len(check.keys("objects")) == len(prefixes) * n


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_store_survives_fork(tmp_path):
    s = Store(tmp_path / "db.sqlite")
    s.put("plans", "parent", b"p")
    pid = os.fork()
    if pid == 0:  # child: the inherited connection is abandoned and the store reopens
        try:
            ok = s.get("plans", "parent") == b"p" and s.put("plans", "child", b"c")
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert s.get("plans", "child") == b"c" and s.get("plans", "parent") == b"p"


# ---------------------------------------------------------------- a squatted path


_SQUAT_USER = """
import warnings, numpy as np, svod
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    out = (svod.asarray(np.arange(4, dtype=np.float32)) * 2).numpy()  # the user's line
print(len([x for x in w if issubclass(x.category, svod.store.SvodCacheWarning)]),
      [(x.filename, x.lineno) for x in w], svod.store.default_store().info()["backend"],
      svod.stats()["disk_cache_hits"], out.tolist())
"""


def test_directory_on_the_database_path_is_moved_aside_once(tmp_path):
    """A directory squatting the database's file name: the first process moves it aside
    with one warning at the user's line and persists; the next one warns nothing and
    reads the plans back."""
    cache = tmp_path / "c"
    (cache / st.DB_NAME).mkdir(parents=True, mode=0o700)
    (cache / st.DB_NAME / "stray.txt").write_text("keep me")
    env = dict(os.environ, SVOD_CACHE_DIR=str(cache), PYTHONPATH=str(STORE_PY.parents[1]))
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", _SQUAT_USER], capture_output=True, text=True, env=env,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        runs.append(r.stdout.split(" ", 1))
    first, second = runs
    assert first[0] == "1" and "('<string>', 5)" in first[1] and "sqlite" in first[1]
    assert second[0] == "0" and "sqlite" in second[1] and " 1 [0.0, 2.0, 4.0, 6.0]" in second[1]
    assert (cache / (st.DB_NAME + ".moved-aside") / "stray.txt").read_text() == "keep me"
    assert (cache / st.DB_NAME).is_file()


def test_squatted_path_that_cannot_move_uses_a_sibling_file(tmp_path, monkeypatch):
    p = tmp_path / "db.sqlite"
    p.mkdir()

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied", str(src))

    monkeypatch.setattr(st.os, "rename", refuse)
    with recorded() as w:
        s = Store(p)
        assert s.put("plans", "k", b"v") is True and s.info()["backend"] == "sqlite"
        s.close()
    assert len(cache_warnings(w)) == 1 and "db-alt.sqlite" in cache_warnings(w)[0]
    assert w[0].filename == __file__  # the warning points at the caller's line, not into svod
    with recorded() as w:  # the sibling is used silently from then on, and read-only too
        assert Store(p).get("plans", "k") == b"v"
        assert Store(p, readonly=True).get("plans", "k") == b"v"
    assert cache_warnings(w) == [] and p.is_dir()


# ---------------------------------------------------------------- the size bound


def test_disk_cache_is_bounded_with_lru_eviction(tmp_path):
    """Plans and objects stay under `max_bytes` of live pages; the entries read most
    recently survive, tuning data is never evicted; the file stops growing."""
    p = tmp_path / "db.sqlite"
    s = Store(p, max_bytes=1 << 20)  # 1 MiB
    s.put_json("tuning", "t", {"keep": True})
    blob = os.urandom(20_000)
    for i in range(40):
        assert s.put("objects", f"k{i}", blob)
    for i in range(4):
        assert s.get("objects", f"k{i}") == blob  # used again: recent
    for i in range(40, 200):  # ~3 MiB more
        assert s.put("objects", f"k{i}", blob)
        if i % 20 == 0:
            assert s.get("objects", "k0") == blob  # k0 stays in use
    info = s.info()
    assert info["live_bytes"] <= 1 << 20 and info["evictions"] > 100
    keys = set(s.keys("objects"))
    assert "k0" in keys and "k199" in keys and "k41" not in keys
    assert s.get_json("tuning", "t") == {"keep": True}
    size = os.path.getsize(p)
    for i in range(200, 300):
        s.put("objects", f"k{i}", blob)
    s.close()
    assert os.path.getsize(p) <= max(size, 2 << 20)  # freed pages are reused (or vacuumed)


def test_disk_cache_bound_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SVOD_DISK_CACHE_MB", "0.25")
    s = Store(tmp_path / "db.sqlite")
    assert s.max_bytes == 1 << 18
    for i in range(50):
        s.put("plans", f"p{i}", os.urandom(10_000))
    assert s.info()["live_bytes"] <= 1 << 18 and len(s.keys("plans")) < 25
    monkeypatch.setenv("SVOD_DISK_CACHE_MB", "lots")
    assert Store(":memory:").max_bytes == st.DISK_CACHE_MB << 20


def test_old_database_gains_the_use_column(tmp_path):
    """A database made before the bound (no `used` column) is upgraded in place; its rows
    count as least recently used."""
    p = tmp_path / "db.sqlite"
    with Store(p) as s:
        s.put("objects", "old", b"o" * 5000)
    with sqlite3.connect(p) as c:
        c.execute("DROP INDEX objects_used")
        c.execute("ALTER TABLE objects DROP COLUMN used")
    s = Store(p, max_bytes=1 << 16)
    assert s.get("objects", "old") == b"o" * 5000
    s2 = Store(p, max_bytes=1 << 16)  # another process reads nothing: "old" stays least recent
    for i in range(30):
        s2.put("objects", f"n{i}", os.urandom(3000))
    assert "old" not in s2.keys("objects")
