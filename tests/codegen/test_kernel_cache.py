"""The kernel cache: safe to share, self-healing, bounded (graphc.codegen.cache and its
folder, files and compile worker)."""
from __future__ import annotations

import errno
import gc
import hashlib
import json
import os
import pickle
import subprocess
import sys
import textwrap
import time
import warnings
import weakref
from pathlib import Path

import numpy as np
import pytest

import graphc
from graphc import LogicalTensor, Op
from graphc.codegen import cache, cache_files, cache_folder, cache_worker
from support.graphs import graph_of
from support.kernel_cache import cache_warnings, check, child_env, kernel_of, posix_only, root, version_dir  # noqa: F401 - root: a fixture


# ------------------------------------------------------------ the folder

def test_fresh_folder_is_private_and_used(root):
    cg = check((3, 5))
    d = version_dir(root)
    for p in (root, d, d / "__pycache__"):
        assert p.stat().st_mode & 0o777 == 0o700
    files = list(d.glob("k_*.py")) + list((d / "__pycache__").iterdir())
    assert files and all(f.stat().st_mode & 0o777 == 0o600 for f in files)
    assert kernel_of(cg).py_func.__code__.co_filename.startswith(str(d))


def test_created_parents_are_private(tmp_path, monkeypatch):
    r = tmp_path / "a" / "b" / "cache"
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(r))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check((2, 9))
    for p in (tmp_path / "a", tmp_path / "a" / "b", r):
        assert p.stat().st_mode & 0o777 == 0o700


@posix_only
@pytest.mark.parametrize("which", ["root", "version", "pycache"])
def test_group_writable_folder_is_refused(root, which):
    tag_dir = None
    if which == "root":
        root.mkdir()
        root.chmod(0o777)
        bad = root
    else:
        cache_folder.cache_dir()           # creates the folders
        tag_dir = version_dir(root)
        bad = tag_dir if which == "version" else tag_dir / "__pycache__"
        cache_folder._dirs.pop(str(root))  # as in a new process
        bad.chmod(0o775)
    with pytest.warns(RuntimeWarning, match="graphc kernel cache folder") as record:
        check((4, 3))
        check((4, 4))              # one warning only
    assert len(cache_warnings(record)) == 1
    assert str(root) in str(cache_warnings(record)[0].message)
    assert "writable by group or others" in str(cache_warnings(record)[0].message)
    assert not list(root.rglob("k_*.py"))          # nothing written, nothing imported from there
    assert cache_folder.cache_dir() is None


@posix_only
def test_folder_of_another_user_is_refused(root, monkeypatch):
    root.mkdir(mode=0o700)
    monkeypatch.setattr(cache_folder, "euid", lambda: os.geteuid() + 1)
    with pytest.warns(RuntimeWarning, match="not by the current user"):
        cg = check((5, 2))
    assert not list(root.rglob("k_*.py"))
    # compiled in memory: numba without cache=True
    from numba.core.caching import NullCache
    assert isinstance(kernel_of(cg)._cache, NullCache)


@pytest.mark.parametrize("kind", ["file", "devnull", "under_a_file", "unwritable", "read_only", "fails_in_use"])
def test_unusable_folder_falls_back_to_memory(tmp_path, monkeypatch, kind):
    cache.clear_memory()
    r = tmp_path / "cache"
    if kind == "file":
        r.write_text("not a folder")
    elif kind == "devnull":
        r = Path(os.devnull)
    elif kind == "under_a_file":
        (tmp_path / "f").write_text("")
        r = tmp_path / "f" / "cache"
    elif kind == "unwritable":
        r.mkdir(mode=0o500)
        if hasattr(os, "geteuid") and os.geteuid() == 0:   # root writes anywhere: as a kernel would refuse
            def refuse(p):
                raise PermissionError(errno.EACCES, "Permission denied", str(p))
            monkeypatch.setattr(cache_folder, "_mkdir", refuse)
    elif kind == "read_only":
        def read_only(*a, **k):
            raise OSError(errno.EROFS, "Read-only file system")
        monkeypatch.setattr(cache_folder, "_mkdir", read_only)
    else:  # the folder is fine at first, writing a module file then fails (disk full)
        def full(*a, **k):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(cache_files, "write_private", full)
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(r))
    with pytest.warns(RuntimeWarning) as record:
        check((6, 5))
        check((6, 6))
    ours = cache_warnings(record)
    assert len(ours) == 1 and str(r) in str(ours[0].message)
    if kind == "unwritable":
        r.chmod(0o700)


# ------------------------------------------------------------ the files

def _evil_pickle(marker: Path) -> bytes:
    class Evil:
        def __reduce__(self):
            return (exec, (f"open({str(marker)!r}, 'w').write('pwned')",))
    return pickle.dumps(Evil())


@posix_only
@pytest.mark.parametrize("how", ["group_writable", "other_owner", "symlink"])
def test_untrusted_index_or_data_file_is_never_loaded(root, tmp_path, monkeypatch, how):
    shape = (7, 3)
    cg = check(shape)
    pyc = version_dir(root) / "__pycache__"
    marker = tmp_path / "pwned"
    payload = _evil_pickle(marker)
    evil = cache_files._MAGIC + hashlib.sha256(payload).digest() + payload   # passes the checksum
    victims = sorted(pyc.glob("k_*kernel*.nb?"))
    assert {p.suffix for p in victims} == {".nbi", ".nbc"}
    for p in victims:
        p.unlink()
        if how == "symlink":
            target = tmp_path / (p.name + ".target")
            target.write_bytes(evil)
            target.chmod(0o600)
            p.symlink_to(target)
        else:
            p.write_bytes(evil)
            p.chmod(0o666 if how == "group_writable" else 0o600)
    if how == "other_owner":
        monkeypatch.setattr(cache_folder, "euid", lambda: os.geteuid() + 1)
        monkeypatch.setattr(cache_folder, "dir_problem", lambda p: None)   # only the files are someone else's
    del cg
    cache.clear_memory()
    cg = check(shape)                     # a miss: compiled again, correct
    assert not marker.exists()
    assert not kernel_of(cg)._cache_hits
    monkeypatch.undo()
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(root))
    for p in victims:                      # replaced by graphc's own files
        assert not p.is_symlink() and p.stat().st_mode & 0o777 == 0o600 and p.read_bytes() != evil


def test_module_file_text_is_never_run(root, tmp_path):
    shape = (3, 11)
    cg = check(shape)
    (path,) = version_dir(root).glob("k_*.py")
    source = path.read_text()
    marker = tmp_path / "pwned"
    path.write_text(f"open({str(marker)!r}, 'w').write('pwned')\n" + source)
    path.chmod(0o600)
    del cg
    cache.clear_memory()
    check(shape)
    assert not marker.exists()
    assert path.read_text() == source       # rewritten


@posix_only
def test_group_writable_module_file_is_rewritten(root):
    shape = (3, 12)
    check(shape)
    (path,) = version_dir(root).glob("k_*.py")
    path.chmod(0o666)
    cache.clear_memory()
    check(shape)
    assert path.stat().st_mode & 0o777 == 0o600


_RUN = textwrap.dedent("""
    import json, sys
    import numpy as np
    import graphc
    from graphc import Graph, LogicalTensor, Op
    shape = [5, 7]
    g = Graph()
    a, b = LogicalTensor(0, "f32", shape), LogicalTensor(1, "f32", shape)
    c, d = LogicalTensor(2, "f32", [-1, -1]), LogicalTensor(3, "f32", [-1, -1])
    g.add_op(Op(0, "Add", [a, b], [c])); g.add_op(Op(1, "ReLU", [c], [d])); g.finalize()
    x = np.linspace(-1, 1, 35, dtype=np.float32).reshape(shape)
    cg = graphc.compile(g)
    out = cg.run({0: x, 1: x})[3]
    k = next(cp.kernel for cp in cg.compiled if cp is not None and cp.kernel is not None)
    print(json.dumps({"ok": bool(np.allclose(out, np.maximum(2 * x, 0))), "hits": sum(k._cache_hits.values())}))
""")


def _fresh_process(root: Path) -> dict:
    env = child_env(root)
    r = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", _RUN], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "flip_a_byte"])
def test_corrupt_cache_files_are_a_miss_in_a_fresh_process(root, damage):
    assert _fresh_process(root) == {"ok": True, "hits": 0}
    assert _fresh_process(root) == {"ok": True, "hits": 1}      # served by the on-disk cache
    d = version_dir(root)
    files = sorted((d / "__pycache__").glob("*.nb?"))
    assert {p.suffix for p in files} == {".nbi", ".nbc"}
    for p in [*files, *d.glob("k_*.py")]:
        data = p.read_bytes()
        if damage == "truncate":
            p.write_bytes(data[:len(data) // 2])
        elif damage == "garbage":
            p.write_bytes(os.urandom(len(data)))
        elif damage == "empty":
            p.write_bytes(b"")
        else:
            i = len(data) * 2 // 3
            p.write_bytes(data[:i] + bytes([data[i] ^ 0x40]) + data[i + 1:])
    assert _fresh_process(root) == {"ok": True, "hits": 0}      # recompiled, cache rewritten
    assert _fresh_process(root) == {"ok": True, "hits": 1}      # and used again


def test_corrupt_index_in_process(root):
    shape = (9, 2)
    check(shape)
    for p in (version_dir(root) / "__pycache__").glob("*.nbi"):
        p.write_bytes(b"\x80\x05garbage")
    cache.clear_memory()
    check(shape)


# ------------------------------------------------------------- in memory

def test_kernel_cache_is_a_bounded_lru(root, monkeypatch):
    monkeypatch.setenv("GRAPHC_KERNEL_CACHE_SIZE", "3")
    cache.clear_memory()
    held = check((2, 2))              # kept by its caller across eviction
    first = kernel_of(held)
    name = first.py_func.__globals__["__name__"]
    assert sys.modules.get(name) is not None
    dropped = weakref.ref(kernel_of(check((2, 3))).dispatcher)
    for n in range(4, 9):
        check((2, n))
    assert len(cache._mem) == 3
    assert name not in sys.modules
    gc.collect()
    assert dropped() is None           # nothing else keeps an evicted kernel
    # the evicted kernel its caller holds still runs, also for a new signature (read-only inputs)
    x = np.ones((2, 2), np.float32)
    x.flags.writeable = False
    np.testing.assert_array_equal(held.run({0: x, 1: x})[3], 2 * x)   # (its machine code takes them as they are)
    out = np.empty(4, np.float32)
    first(x.reshape(-1), x.reshape(-1), out)       # a new signature through the dispatcher compiles
    assert len(first.overloads) == 2 and (out == 2).all()
    # loading it again makes a new module, served by the disk cache
    again = kernel_of(check((2, 2)))
    assert again is not first and sum(again._cache_hits.values()) == 1


def test_kernel_cache_size_from_environment(monkeypatch):
    monkeypatch.setenv("GRAPHC_KERNEL_CACHE_SIZE", "7")
    assert cache.kernel_cache_size() == 7
    monkeypatch.delenv("GRAPHC_KERNEL_CACHE_SIZE")
    assert cache.kernel_cache_size() == cache.DEFAULT_KERNEL_CACHE_SIZE
    monkeypatch.setenv("GRAPHC_KERNEL_CACHE_SIZE", "lots")
    monkeypatch.setattr(cache, "_warned", set())
    with pytest.warns(RuntimeWarning, match="GRAPHC_KERNEL_CACHE_SIZE"):
        assert cache.kernel_cache_size() == cache.DEFAULT_KERNEL_CACHE_SIZE


def test_cold_kernels_compiled_by_a_worker(root, monkeypatch):
    monkeypatch.setattr(cache_worker, "COLD_IN_PROCESS", 0)
    monkeypatch.setattr(cache_worker, "_worker_broken", False)
    try:
        cg = check((3, 17), op="Abs")
        assert sum(kernel_of(cg)._cache_hits.values()) == 1   # compiled there, loaded here
    finally:
        cache_worker._close_worker()


def test_a_graphs_cold_kernels_compile_together_on_workers(root, monkeypatch):
    """A graph with PARALLEL_MIN cold kernels or more compiles them at once on a
    worker process per core (graphc.compiler.batch), and loads them from the cache."""
    monkeypatch.setattr(cache, "PARALLEL_MIN", 2)
    monkeypatch.setattr(cache_worker, "_worker_broken", False)
    started = []
    real = cache_worker._Worker

    def counted(root_dir):
        started.append(root_dir)
        return real(root_dir)
    monkeypatch.setattr(cache_worker, "_Worker", counted)
    a, b = LogicalTensor(0, "f32", [4, 33]), LogicalTensor(1, "f32", [5, 31])
    c, d = LogicalTensor(2, "f32", [4, 33]), LogicalTensor(3, "f32", [5, 31])
    g = graph_of(Op(0, "Abs", [a], [c]), Op(1, "SoftMax", [b], [d], {"axis": 0}))
    cg = graphc.compile(g)
    kernels = [cp.kernel for cp in cg.compiled]
    assert len(kernels) == 2 and all(sum(k._cache_hits.values()) == 1 for k in kernels)   # compiled there
    assert len(started) == min(2, cache_worker.cores())
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((4, 33)).astype(np.float32), rng.standard_normal((5, 31)).astype(np.float32)
    out = cg.run({0: x, 1: y})
    np.testing.assert_allclose(out[2], np.abs(x))
    e = np.exp(y - y.max(axis=0))
    np.testing.assert_allclose(out[3], e / e.sum(axis=0), rtol=1e-5)


def test_no_worker_compiles_here(root, monkeypatch):
    monkeypatch.setattr(cache_worker, "COLD_IN_PROCESS", 0)
    monkeypatch.setattr(cache_worker, "_worker_broken", False)

    def no_worker(*a, **k):
        raise OSError(errno.EAGAIN, "cannot fork")
    monkeypatch.setattr(cache_worker, "_Worker", no_worker)
    cg = check((3, 19), op="Abs")
    assert not kernel_of(cg)._cache_hits
    assert cache_worker._worker_broken


def test_hung_worker_is_abandoned(root, monkeypatch):
    """A worker that never answers is killed after GRAPHC_WORKER_TIMEOUT seconds
    and the kernel compiles here: no hang."""
    import subprocess
    import sys
    monkeypatch.setattr(cache_worker, "COLD_IN_PROCESS", 0)
    monkeypatch.setattr(cache_worker, "_worker_broken", False)
    monkeypatch.setenv("GRAPHC_WORKER_TIMEOUT", "1")
    real = subprocess.Popen

    def sleeper(args, **kw):   # a "worker" that reads its request and never answers
        return real([sys.executable, "-c", "import sys, time; sys.stdin.buffer.read(8); time.sleep(60)"], **kw)
    monkeypatch.setattr(subprocess, "Popen", sleeper)
    try:
        cg = check((3, 23), op="Abs")
        assert not kernel_of(cg)._cache_hits and cache_worker._worker_broken
    finally:
        cache_worker._close_worker()


_RSS = textwrap.dedent("""
    import gc, json, sys
    import numpy as np
    import graphc
    from graphc import Graph, LogicalTensor, Op

    def rss():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024

    base = None
    for i in range(300):
        shape = [2 + i % 7, 3 + i // 7]
        g = Graph()
        a, b = LogicalTensor(0, "f32", shape), LogicalTensor(1, "f32", shape)
        c, d = LogicalTensor(2, "f32", [-1, -1]), LogicalTensor(3, "f32", [-1, -1])
        g.add_op(Op(0, "Add", [a, b], [c])); g.add_op(Op(1, "ReLU", [c], [d])); g.finalize()
        x = np.random.randn(*shape).astype(np.float32)
        out = graphc.compile(g).run({0: x, 1: x})[3]
        assert np.allclose(out, np.maximum(2 * x, 0))
        if i == 4:
            gc.collect()
            base = rss()
    gc.collect()
    print(json.dumps({"base": base, "after": rss()}))
""")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmRSS from /proc")
def test_memory_stays_bounded_over_300_graphs(root):
    env = child_env(root)
    env.pop("GRAPHC_KERNEL_CACHE_SIZE", None)
    r = subprocess.run([sys.executable, "-c", _RSS], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"RSS after 5 graphs {m['base']:.0f} MB, after 300 {m['after']:.0f} MB")
    assert m["after"] - m["base"] < 150, m


def test_stale_version_folders_are_pruned(root, monkeypatch):
    """Version folders of other builds unused for GRAPHC_CACHE_MAX_AGE_DAYS go; recent
    ones, the current one, and anything not named as graphc names them stay."""
    root.mkdir(mode=0o700)
    old = time.time() - 40 * 86400

    def folder(name, age=old, mode=0o700):
        p = root / name
        p.mkdir(mode=mode)
        (p / "k.py").write_text("x = 1\n")
        os.chmod(p, mode)
        os.utime(p, (age, age))
        return p

    stale = folder("c2-py311-numba0.68.1-rt0123456789ab")
    older_format = folder("py311-numba0.61.0-rt0123456789ab")
    recent = folder("c2-py311-numba0.68.1-rtba9876543210", age=time.time() - 5 * 86400)
    foreign = folder("mine-keep-out", age=old)
    shared = folder("c2-py311-numba0.68.1-rtaaaaaaaaaaaa", mode=0o777)   # not graphc's to trust
    monkeypatch.setenv("GRAPHC_CACHE_MAX_AGE_DAYS", "30")
    cache_folder._dirs.pop(str(root), None)
    current = cache_folder.cache_dir()
    assert current is not None and current.exists()
    assert not stale.exists() and not older_format.exists()
    assert recent.exists() and foreign.exists() and shared.exists()
    assert time.time() - current.stat().st_mtime < 60     # marked used


def test_pruning_can_be_turned_off(root, monkeypatch):
    root.mkdir(mode=0o700)
    stale = root / "c2-py311-numba0.68.1-rt0123456789ab"
    stale.mkdir(mode=0o700)
    old = time.time() - 400 * 86400
    os.utime(stale, (old, old))
    monkeypatch.setenv("GRAPHC_CACHE_MAX_AGE_DAYS", "0")
    cache_folder._dirs.pop(str(root), None)
    assert cache_folder.cache_dir() is not None
    assert stale.exists()


@pytest.mark.parametrize("name", ["runtime.py", "fastmath.py", "smallfloat.py", "launch.py", "blas.py", "entry.py"])
def test_version_folder_changes_with_code_compiled_into_cached_kernels(monkeypatch, name):
    """A change to a module whose code cached kernels or trampolines hold (helpers
    they inline, the thread launch, the BLAS binding, the trampolines' call and
    unboxing) gives a new version folder: no stale machine code is loaded."""
    monkeypatch.setattr(cache_folder, "_runtime_tag", None)
    before = cache_folder._runtime_digest()
    read = Path.read_bytes

    def edited(path):
        data = read(path)
        return data + b"\n# edited\n" if Path(path).name == name else data

    monkeypatch.setattr(Path, "read_bytes", edited)
    monkeypatch.setattr(cache_folder, "_runtime_tag", None)
    assert cache_folder._runtime_digest() != before
