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
graphc cache format/numba/python version and per version of the runtime helpers
(graphc.codegen.cache_folder).

Numba's index and data files are pickles, which run code when loaded; so the
cache is used only when the folder, its version subfolder, their
``__pycache__`` and any parent graphc creates are directories of the current
user that neither group nor others may write to, and no one but the current
user and root can replace the folder or one on the way to it
(graphc.codegen.cache_folder.path_problem).  Every module, index and data
file is created 0600 by graphc; one that is not a regular file of the current
user, or is writable by group/others, is never loaded (a module file is
rewritten, an index or data file removed: a miss).  Index and data files carry
a SHA-256 of their payload: a corrupt or truncated file is removed and treated
as a miss (graphc.codegen.cache_files).  A folder that cannot be used (refused,
not a directory, unwritable, read-only) gives one warning per folder, and
kernels are then compiled in memory only (numba without ``cache=True``).

After the first few kernels compiled in a process, misses are compiled into the
cache by a worker process (graphc.codegen.cache_worker).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import threading
import types
import warnings
import weakref
from collections import OrderedDict
from pathlib import Path

from .. import verbose
from . import cache_files as files
from . import cache_folder as folder
from . import cache_worker as worker
from . import exported
from .cached_overload import load_cached

DEFAULT_KERNEL_CACHE_SIZE = 128

_lock = threading.Lock()
_mem: OrderedDict[str, object] = OrderedDict()   # kernel key -> dispatcher, least recently used first
_warned: set[str] = set()


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
    if files.read_trusted(path) != text:   # missing, untrusted (removed) or not this source
        files.write_private(path, text)
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
            files.guard(obj)
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
    d = folder.cache_dir()
    if d is not None:
        try:
            return _on_disk(source, key, d)
        except (OSError, RuntimeError) as e:   # RuntimeError: numba finds no cache locator
            folder.refuse(d, e)
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
    if fn is not None:
        if verbose.wanted(2):
            verbose.emit(2, "cache", "hit", "memory", key)
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



# ------------------------------------------------------------ compiling

def compile_kernel(fn, sig: tuple) -> None:
    """``fn.compile(sig)`` for a dispatcher from :func:`load_kernel`, taking a kernel
    found in numba's on-disk cache without the target refresh numba does first
    (which imports every numba registry, and scipy, for about 0.4 s in a fresh
    process): loaded machine code needs only numba's runtime.  A miss is
    compiled by a worker process into the cache and loaded from there (after
    the first COLD_IN_PROCESS kernels), or else by numba's own path here (a
    kernel compiled in memory, numba internals not as expected, no worker)."""
    if _in_process(fn, sig, "hit", "disk"):
        return
    if worker.compile_elsewhere(fn, sig) and _in_process(fn, sig, "miss", "worker"):
        return
    fn.compile(sig)
    _tell(fn, "miss", "compiled")


def _in_process(fn, sig: tuple, what: str, where: str) -> bool:
    """Whether ``fn`` has its overload for ``sig`` here, taking it from numba's
    on-disk cache if there (told as a ``what`` from ``where``)."""
    from numba.core.compiler_lock import global_compiler_lock

    with global_compiler_lock:
        if sig in fn.overloads:
            return True
        _bind_exported(fn)
        if load_cached(fn, sig):
            _tell(fn, what, where)
            return True
    return False


def _bind_exported(fn) -> None:
    """Bind the helpers ``fn``'s module calls by symbol (graphc.codegen.exported)
    before its machine code is loaded or compiled."""
    source = getattr(getattr(fn, "py_func", None), "__globals__", {}).get("__graphc_source__")
    if source:
        exported.bind_called(source)


#: cold kernels in one batch from which they compile at once on worker processes
PARALLEL_MIN = 8


def compile_kernels(pairs) -> None:
    """:func:`compile_kernel` for each (dispatcher, signature) of a batch (a graph's
    kernels): those in the on-disk cache are loaded; the cold ones, when there are
    PARALLEL_MIN or more, compile at once on a worker process per core
    (graphc.codegen.cache_worker.compile_in_parallel) and load from the cache;
    whatever is left compiles as :func:`compile_kernel` compiles it."""
    cold, seen = [], set()
    for fn, sig in pairs:
        if (id(fn), sig) not in seen and not _in_process(fn, sig, "hit", "disk"):
            cold.append((fn, sig))
        seen.add((id(fn), sig))
    if len(cold) >= PARALLEL_MIN:
        for (fn, sig), done in zip(cold, worker.compile_in_parallel(cold)):
            if done:
                _in_process(fn, sig, "miss", "worker")
    for fn, sig in pairs:
        compile_kernel(fn, sig)   # (at once for those loaded)


def _tell(fn, what: str, where: str) -> None:
    """A ``cache`` line (GRAPHC_VERBOSE=2): where kernel ``fn``'s machine code came from."""
    if verbose.wanted(2):
        source = getattr(fn, "py_func", fn).__globals__.get("__graphc_source__")
        verbose.emit(2, "cache", what, where, kernel_key(source) if source else "-")


def _serve() -> None:
    """The compile worker's process (graphc.codegen.cache_worker): each request's
    kernel compiled into the on-disk cache."""
    def handle(source: str, entry: str, sig: tuple) -> bool:
        fn = load_kernel(source, entry)
        ok = getattr(getattr(fn, "_cache", None), "_graphc_checked", False)
        if ok:
            compile_kernel(fn, sig)
        clear_memory()
        return ok
    worker.serve(handle)
