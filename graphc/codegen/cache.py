"""The kernel cache.

In process: a bounded LRU of generated source -> compiled dispatcher
(``$GRAPHC_KERNEL_CACHE_SIZE`` kernels, default 128).  Across processes: each
generated module is written into the cache folder under a name derived from the
hash of its source (which holds every shape, stride, dtype and attribute value
the kernel depends on), and the source graphc generated (never the file's text)
is executed as that module, so that numba's on-disk cache (``cache=True``)
serves its machine code to the next process; :func:`compile_kernel` loads it
from there without numba's full target refresh.

Folder: ``$GRAPHC_CACHE_DIR`` or ``~/.cache/graphc``, with one subfolder per
graphc cache format/numba/python version and per version of the runtime helpers.

Numba's index and data files are pickles, which run code when loaded; so the
cache is used only when the folder, its version subfolder, their
``__pycache__`` and any parent graphc creates are directories of the current
user that neither group nor others may write to.  Every module, index and data
file is created 0600 by graphc; one that is not a regular file of the current
user, or is writable by group/others, is never loaded (a module file is
rewritten, an index or data file removed: a miss).  Index and data files carry
a SHA-256 of their payload: a corrupt or truncated file is removed and treated
as a miss.  A folder that cannot be used (refused, not a directory, unwritable,
read-only) gives one warning per folder, and kernels are then compiled in
memory only (numba without ``cache=True``).
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import pickle
import re
import shutil
import stat
import sys
import threading
import time
import types
import uuid
import warnings
import weakref
from collections import OrderedDict
from pathlib import Path

import numba

from . import helpers
from .blas_import import mkl_path

#: bumped when the layout or format of the files in the cache folder changes
_FORMAT = 2
DEFAULT_KERNEL_CACHE_SIZE = 128

_lock = threading.Lock()
_mem: OrderedDict[str, object] = OrderedDict()   # kernel key -> dispatcher, least recently used first
_dirs: dict[str, Path | None] = {}               # cache root -> its checked version folder (None: refused)
_warned: set[str] = set()
_runtime_tag: str | None = None


class _Refused(Exception):
    """A cache folder graphc will not use (the reason is the message)."""


def _linked_files() -> list[Path]:
    """The files whose code is compiled into what this cache holds, read rather than
    imported (launch starts numba's threads, blas loads the BLAS library): the
    modules kernels import helpers from (graphc.codegen.helpers: the runtime
    helpers, fastmath's, which kernels inline, the small-float conversions, the
    BLAS binding of kernels that multiply, and its library, see _runtime_digest),
    then parallel kernels' thread launch and the trampolines' call and unboxing."""
    here = Path(__file__).parent
    files = [Path(importlib.util.find_spec(m).origin) for m in helpers.linked_modules()]
    return files + [here / "launch.py", here / "entry.py"]


def _runtime_digest() -> str:
    global _runtime_tag
    if _runtime_tag is None:
        h = hashlib.sha256()
        for path in _linked_files():
            h.update(path.read_bytes())
        h.update(b"mkl" if mkl_path() else b"openblas")
        _runtime_tag = h.hexdigest()[:12]
    return _runtime_tag


def cache_root() -> Path:
    base = os.environ.get("GRAPHC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "graphc")
    return Path(os.path.abspath(base))


def _euid() -> int | None:
    return os.geteuid() if hasattr(os, "geteuid") else None


def _warn_once(folder, why: str) -> None:
    folder = str(folder)
    if folder in _warned:
        return
    _warned.add(folder)
    warnings.warn(f"graphc kernel cache folder {folder} not used ({why}); "
                  "compiling kernels in memory only", RuntimeWarning, stacklevel=4)


# ---------------------------------------------------------------- the folder

def _dir_problem(path) -> str | None:
    """Why ``path`` may not hold the cache (None: it may)."""
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    uid = _euid()
    if uid is not None and st.st_uid != uid:
        return f"owned by uid {st.st_uid}, not by the current user (uid {uid})"
    if os.name == "posix" and st.st_mode & 0o022:
        return f"writable by group or others (mode {oct(st.st_mode & 0o777)})"
    return None


def _mkdir(path: Path) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass


def _prepare(root: Path) -> Path:
    """The version folder under ``root``, created (0700) and checked; raises
    _Refused or OSError."""
    created = []
    p = root
    while not os.path.lexists(p):
        created.append(p)
        if p.parent == p:
            break
        p = p.parent
    for p in reversed(created):
        _mkdir(p)
    tag = f"c{_FORMAT}-py{sys.version_info[0]}{sys.version_info[1]}-numba{numba.__version__}-rt{_runtime_digest()}"
    d = root / tag
    for p in (*reversed(created), root, d, d / "__pycache__"):
        if p == d or p == d / "__pycache__":
            _mkdir(p)
        why = _dir_problem(p)
        if why is not None:
            raise _Refused(f"{p} is {why}")
        if not os.access(p, os.W_OK | os.X_OK):
            raise _Refused(f"{p} is not writable")
    return d


#: version folders of any graphc build: c<format>-py<ver>-numba<ver>-rt<digest> (older
#: builds left out the c<format>- part)
_VERSION_FOLDER = re.compile(r"(c\d+-)?py\d+-numba[0-9A-Za-z.+_-]+-rt[0-9a-f]{12}")
#: days a version folder no build used may stay (GRAPHC_CACHE_MAX_AGE_DAYS; 0: forever)
DEFAULT_MAX_AGE_DAYS = 30


def max_age_days() -> float:
    raw = os.environ.get("GRAPHC_CACHE_MAX_AGE_DAYS")
    try:
        return float(raw) if raw else DEFAULT_MAX_AGE_DAYS
    except ValueError:
        return DEFAULT_MAX_AGE_DAYS


def _prune(root: Path, current: Path) -> None:
    """Marks ``current`` used now and removes the version folders of other graphc
    builds (another runtime, numba or Python) that no process has used for
    max_age_days(): each runtime-helper change starts a new folder, and nothing
    else would ever remove the old ones.  Only this user's folders that group and
    others cannot write, named as graphc names them; never a failure of its own."""
    try:
        os.utime(current)
        days = max_age_days()
        if days <= 0:
            return
        cutoff = time.time() - days * 86400
        with os.scandir(root) as entries:
            for e in entries:
                if e.name == current.name or not _VERSION_FOLDER.fullmatch(e.name):
                    continue
                if not e.is_dir(follow_symlinks=False) or _dir_problem(e.path) is not None:
                    continue
                if e.stat(follow_symlinks=False).st_mtime < cutoff:
                    shutil.rmtree(e.path, ignore_errors=True)
    except OSError:
        pass


def cache_dir() -> Path | None:
    """The checked version folder of the current cache root, or None (after one
    warning) when it cannot be used: kernels are then compiled in memory."""
    root = cache_root()
    key = str(root)
    if key in _dirs:
        return _dirs[key]
    try:
        d = _prepare(root)
        _prune(root, d)
    except _Refused as e:
        _warn_once(root, str(e))
        d = None
    except OSError as e:
        _warn_once(root, f"{type(e).__name__}: {e.strerror or e}")
        d = None
    _dirs[key] = d
    return d


def _refuse(d: Path, e: BaseException) -> None:
    """The folder failed in use (a write, a read): in memory from now on."""
    root = d.parent
    _dirs[str(root)] = None
    _warn_once(root, f"{type(e).__name__}: {getattr(e, 'strerror', None) or e}")


# ----------------------------------------------------------------- the files

def _untrusted(st: os.stat_result) -> bool:
    uid = _euid()
    return (not stat.S_ISREG(st.st_mode) or (uid is not None and st.st_uid != uid)
            or (os.name == "posix" and bool(st.st_mode & 0o022)))


def _remove(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def _read_trusted(path) -> bytes | None:
    """The bytes of ``path`` if it is a regular file of the current user that
    group/others cannot write; None if missing; an untrusted file is removed
    and None returned."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        return None
    except OSError:            # a symlink (ELOOP), unreadable...
        _remove(path)
        return None
    with os.fdopen(fd, "rb") as f:
        if _untrusted(os.fstat(fd)):
            bad = True
        else:
            bad = False
            data = f.read()
    if bad:
        _remove(path)
        return None
    return data


def _write_private(path, data: bytes) -> None:
    """Write ``path`` atomically, as a 0600 file of the current user."""
    tmp = f"{path}.tmp.{os.getpid()}.{uuid.uuid4().hex[:12]}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_BINARY", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise


_MAGIC = b"graphc-nb1\n"


def _read_checked(path) -> bytes | None:
    """The payload of a file written by :func:`_write_checked`; None if missing,
    untrusted or corrupt (removed)."""
    data = _read_trusted(path)
    if data is None:
        return None
    n = len(_MAGIC)
    payload = data[n + 32:]
    if data[:n] != _MAGIC or len(data) < n + 32 or hashlib.sha256(payload).digest() != data[n:n + 32]:
        _remove(path)
        return None
    return payload


def _write_checked(path, payload: bytes) -> None:
    _write_private(path, _MAGIC + hashlib.sha256(payload).digest() + payload)


def _guard(disp) -> None:
    """Make a dispatcher's numba on-disk cache load only checked files of the
    current user and treat any failure as a miss; or, when that cannot be done
    (numba internals not as expected, a folder graphc would refuse), turn its
    disk cache off."""
    from numba.core.caching import NullCache
    cache = getattr(disp, "_cache", None)
    if cache is None or isinstance(cache, NullCache):
        return
    try:
        cf = cache._cache_file
        needed = (cf._index_path, cf._source_stamp, cf._version, cf._data_path, cf._dump,
                  cache._load_overload, cache._save_overload)
        if _dir_problem(cache._cache_path) is not None:
            raise _Refused(cache._cache_path)
    except Exception:  # noqa: BLE001 - anything unexpected: no disk cache for it
        disp._cache = NullCache()
        return
    index_path, data_path, dump = cf._index_path, cf._data_path, cf._dump
    load_overload, save_overload = cache._load_overload, cache._save_overload

    def load_index():
        payload = _read_checked(index_path)
        if payload is None:
            return {}
        try:
            version, stamp, overloads = pickle.loads(payload)
            if not (isinstance(overloads, dict)
                    and all(isinstance(v, str) and os.sep not in v and v != ".." for v in overloads.values())):
                raise ValueError("bad index")
        except Exception:  # noqa: BLE001 - corrupt: a miss
            _remove(index_path)
            return {}
        if version != cf._version or stamp != cf._source_stamp:
            return {}
        return overloads

    def save_index(overloads):
        _write_checked(index_path, dump((cf._version, cf._source_stamp, overloads)))

    def load_data(name):
        path = data_path(name)
        payload = _read_checked(path)
        if payload is None:
            raise OSError(f"no usable cache data in {path}")   # IndexDataCacheFile.load: a miss
        try:
            return pickle.loads(payload)
        except Exception as e:  # noqa: BLE001 - corrupt: a miss
            _remove(path)
            raise OSError(f"corrupt cache data in {path}") from e

    def save_data(name, data):
        _write_checked(data_path(name), dump(data))

    def checked_load_overload(sig, target_context):
        try:
            return load_overload(sig, target_context)
        except Exception:  # noqa: BLE001 - data that does not rebuild: a miss, recompiled and saved again
            _remove(index_path)
            return None

    def checked_save_overload(sig, data):
        try:
            save_overload(sig, data)
        except Exception:  # noqa: BLE001 - the kernel is compiled; only the next process misses it
            pass

    cache._graphc_checked = True
    cf._load_index, cf._save_index = load_index, save_index
    cf._load_data, cf._save_data = load_data, save_data
    cache._load_overload, cache._save_overload = checked_load_overload, checked_save_overload


# ------------------------------------------------------------- the modules

def kernel_key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:32]


def _module_name(key: str) -> str:
    return f"graphc_kernel_{key}"


def _in_memory(source: str, key: str):
    """The module of ``source`` compiled in memory only: numba without cache=True."""
    module = types.ModuleType(_module_name(key))
    code = compile(source.replace("cache=True", "cache=False"), f"<graphc kernel {key}>", "exec")
    exec(code, module.__dict__)  # noqa: S102 - graphc's own generated source
    return module


def _on_disk(source: str, key: str, d: Path):
    """The module of ``source`` backed by its file in ``d`` (for numba's cache);
    raises OSError when the folder fails."""
    path = d / f"k_{key}.py"
    text = source.encode()
    if _read_trusted(path) != text:   # missing, untrusted (removed) or not this source
        _write_private(path, text)
    module = types.ModuleType(_module_name(key))
    module.__file__ = str(path)
    module.__graphc_source__ = source
    # registered in sys.modules so that numba can name it in its cache index
    sys.modules[module.__name__] = module
    try:
        # the source graphc generated, not the file's text, is what runs
        exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102
    except BaseException:
        sys.modules.pop(module.__name__, None)
        raise
    for obj in list(module.__dict__.values()):
        if _defined_in(obj, module.__dict__):
            _guard(obj)
    return module


def _defined_in(obj, namespace: dict) -> bool:
    from numba.core.dispatcher import Dispatcher
    return isinstance(obj, Dispatcher) and getattr(obj.py_func, "__globals__", None) is namespace


def kernel_cache_size() -> int:
    raw = os.environ.get("GRAPHC_KERNEL_CACHE_SIZE")
    if raw:
        try:
            n = int(raw)
            if n >= 0:
                return n
        except ValueError:
            pass
        if "GRAPHC_KERNEL_CACHE_SIZE" not in _warned:
            _warned.add("GRAPHC_KERNEL_CACHE_SIZE")
            warnings.warn(f"GRAPHC_KERNEL_CACHE_SIZE={raw!r} is not a count of kernels; "
                          f"using {DEFAULT_KERNEL_CACHE_SIZE}", RuntimeWarning, stacklevel=3)
    return DEFAULT_KERNEL_CACHE_SIZE


def _release(fn) -> None:
    """Let an evicted kernel's module be freed once its callers drop it.  numba
    keeps every compiled overload (whose environment refers to the module's
    globals, hence to every dispatcher in it) reachable from two places until
    the dispatcher is collected, which those very references prevent: its
    target context's table of user functions and the dispatcher's own
    weakref.finalize callback.  Detach the callbacks and drop the table
    entries, as that callback would.  The kernel's compiled code stays callable
    for a caller still holding it; helpers of its module forget their overloads
    (compiled again, and registered again, should the kernel ever compile
    another signature: that kernel then stays in memory)."""
    from numba.core.compiler_lock import global_compiler_lock
    ns = getattr(getattr(fn, "py_func", None), "__globals__", None)
    if not isinstance(ns, dict):
        return
    name = ns.get("__name__")
    if getattr(sys.modules.get(name), "__dict__", None) is ns:   # (not a module loaded again since)
        sys.modules.pop(name, None)
    with global_compiler_lock:
        disps = [v for v in ns.values() if _defined_in(v, ns)]
        registry = getattr(weakref.finalize, "_registry", None)
        detached = 0
        if isinstance(registry, dict):
            for fin in list(registry):
                info = registry.get(fin)
                if info is not None and any(info.weakref() is disp for disp in disps):
                    fin.detach()
                    detached += 1
        for disp in disps:
            for cres in list(disp.overloads.values()):
                with contextlib.suppress(KeyError):
                    disp.targetctx.remove_user_function(cres.entry_point)
            if disp is not fn or detached < len(disps):
                disp._reset_overloads()


def _module(source: str, key: str):
    """The module of ``source``: backed by the cache folder, or in memory when the
    folder cannot be used."""
    d = cache_dir()
    if d is not None:
        try:
            return _on_disk(source, key, d)
        except (OSError, RuntimeError) as e:   # RuntimeError: numba finds no cache locator
            _refuse(d, e)
    return _in_memory(source, key)


def load_function(source: str, entry: str):
    """The dispatcher ``entry`` of a module graphc generated, backed by the kernel
    cache folder as a kernel's is, but not kept in the in-process LRU (the caller
    keeps it: graphc.codegen.entry's trampolines)."""
    return getattr(_module(source, kernel_key(source)), entry)


def load_kernel(source: str, entry: str = "kernel"):
    """Return the compiled-on-demand numba dispatcher for ``source``'s ``entry``."""
    key = kernel_key(source)
    with _lock:
        fn = _mem.get(key)
        if fn is not None:
            _mem.move_to_end(key)
            return fn
    evicted = []
    with _lock:
        fn = _mem.get(key)
        if fn is None:
            fn = getattr(_module(source, key), entry)
            _mem[key] = fn
            size = kernel_cache_size()
            while len(_mem) > size:
                evicted.append(_mem.popitem(last=False)[1])
        else:
            _mem.move_to_end(key)
    for old in evicted:
        if old is not fn:
            _release(old)
    return fn


def clear_memory() -> None:
    """Drop every kernel of the in-process cache (those still held elsewhere keep working)."""
    with _lock:
        old = list(_mem.values())
        _mem.clear()
    for fn in old:
        _release(fn)


# ------------------------------------------------------ compiling elsewhere
#
# numba never frees what LLVM keeps of a kernel it compiled (its execution
# engine and LLVM context hold about 0.6 MB per small kernel for the life of
# the process, whether or not its dispatcher is collected); a kernel loaded as
# machine code from the on-disk cache costs about 0.07 MB.  So after the first
# few kernels compiled here, a process with a usable cache folder has kernels
# compiled into the cache by a worker process (replaced every few dozen
# kernels), and loads them from there.

#: kernels compiled in this process before the worker takes over
COLD_IN_PROCESS = 32
#: kernels a worker compiles before it is replaced (its memory grows as this one's would)
WORKER_KERNELS = 48

_cold = 0
_worker = None
_worker_lock = threading.Lock()
_worker_broken = False
_in_worker = False


def worker_timeout() -> float:
    """Seconds to wait for the compile worker's answer (``GRAPHC_WORKER_TIMEOUT``,
    default 600): past it the worker is killed and kernels compile in process."""
    try:
        return max(1.0, float(os.environ.get("GRAPHC_WORKER_TIMEOUT", "600")))
    except ValueError:
        return 600.0


class _Worker:
    def __init__(self, root: Path):
        import subprocess
        env = dict(os.environ, GRAPHC_CACHE_DIR=str(root))
        top = str(Path(__file__).resolve().parents[2])   # the folder graphc is imported from
        env["PYTHONPATH"] = top + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.root = str(root)
        self.pid = os.getpid()
        self.kernels = 0
        self.proc = subprocess.Popen([sys.executable, "-c", "from graphc.codegen.cache import _serve; _serve()"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, close_fds=True)

    def compile(self, source: str, entry: str, sig: tuple) -> bool:
        msg = pickle.dumps((source, entry, sig), protocol=pickle.HIGHEST_PROTOCOL)
        self.proc.stdin.write(len(msg).to_bytes(8, "little") + msg)
        self.proc.stdin.flush()
        self.kernels += 1
        import select
        ready, _, _ = select.select([self.proc.stdout], [], [], worker_timeout())
        if not ready:   # a hung worker: the caller closes it and compiles here from now on
            raise TimeoutError("the kernel compile worker did not answer")
        return self.proc.stdout.readline() == b"ok\n"

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001
            with contextlib.suppress(Exception):
                self.proc.kill()
                self.proc.wait(timeout=5)
        with contextlib.suppress(Exception):
            self.proc.stdout.close()


def _close_worker() -> None:
    global _worker
    with _worker_lock:
        if _worker is not None and _worker.pid == os.getpid():
            _worker.close()
        _worker = None


def _compile_elsewhere(fn, sig: tuple) -> bool:
    """Have a worker process compile ``fn`` for ``sig`` into the on-disk cache
    (True: asked and done; the caller loads it from there)."""
    global _cold, _worker, _worker_broken
    if _in_worker or _worker_broken or not getattr(getattr(fn, "_cache", None), "_graphc_checked", False):
        return False
    ns = fn.py_func.__globals__
    source, entry = ns.get("__graphc_source__"), fn.py_func.__name__
    _cold += 1
    if source is None or _cold <= COLD_IN_PROCESS:
        return False
    d = cache_dir()
    if d is None:
        return False
    with _worker_lock:
        if _worker is not None and _worker.pid != os.getpid():
            _worker = None      # a forked child: that worker is its parent's
        try:
            if _worker is not None and (_worker.root != str(d.parent) or _worker.kernels >= WORKER_KERNELS
                                        or _worker.proc.poll() is not None):
                _worker.close()
                _worker = None
            if _worker is None:
                _worker = _Worker(d.parent)
                _at_exit()
            return _worker.compile(source, entry, sig)
        except BaseException as e:  # noqa: BLE001 - no worker (cannot start, died): compile here from now on
            if _worker is not None:   # (an answer may be pending: never ask this worker again)
                _worker.close()
                _worker = None
            if not isinstance(e, Exception):
                raise
            _worker_broken = True
            return False


_exit_hook: list = []


def _at_exit() -> None:
    if not _exit_hook:
        import atexit
        atexit.register(_close_worker)
        _exit_hook.append(_close_worker)


def _serve() -> None:
    """The worker: compile (source, entry, signature) requests from stdin into
    the on-disk cache; answer ok or error on stdout."""
    global _in_worker
    _in_worker = True
    warnings.simplefilter("ignore")
    inp = sys.stdin.buffer
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())     # whatever prints cannot garble the answers
    while True:
        head = inp.read(8)
        if len(head) < 8:
            return
        msg = inp.read(int.from_bytes(head, "little"))
        try:
            source, entry, sig = pickle.loads(msg)
            fn = load_kernel(source, entry)
            ok = getattr(getattr(fn, "_cache", None), "_graphc_checked", False)
            if ok:
                compile_kernel(fn, sig)
            clear_memory()
        except BaseException:  # noqa: BLE001 - the asking process compiles it itself
            ok = False
        out.write(b"ok\n" if ok else b"error\n")
        out.flush()


def _load_cached(fn, sig: tuple) -> bool:
    """Add ``fn``'s overload for ``sig`` from numba's on-disk cache, without the
    target refresh numba does first; False on a miss.  (Holding numba's
    compiler lock.)"""
    from numba.core.runtime import rtsys
    load = getattr(getattr(fn, "_cache", None), "_load_overload", None)
    if load is None:
        return False
    try:
        rtsys.initialize(fn.targetctx)
        cres = load(sig, fn.targetctx)
    except Exception:  # noqa: BLE001 - any surprise: numba's path
        return False
    if cres is None:
        return False
    # as numba's Dispatcher.compile does with a cache hit
    fn._cache_hits[sig] += 1
    fn.targetctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
    fn.add_overload(cres)
    return True


def compile_kernel(fn, sig: tuple) -> None:
    """``fn.compile(sig)`` for a dispatcher from :func:`load_kernel`, taking a kernel
    found in numba's on-disk cache without the target refresh numba does first
    (which imports every numba registry, and scipy, for about 0.4 s in a fresh
    process): loaded machine code needs only numba's runtime.  A miss is
    compiled by a worker process into the cache and loaded from there (after
    the first COLD_IN_PROCESS kernels), or else by numba's own path here (a
    kernel compiled in memory, numba internals not as expected, no worker)."""
    from numba.core.compiler_lock import global_compiler_lock

    with global_compiler_lock:
        if sig in fn.overloads or _load_cached(fn, sig):
            return
    if _compile_elsewhere(fn, sig):
        with global_compiler_lock:
            if sig in fn.overloads or _load_cached(fn, sig):
                return
    fn.compile(sig)
