"""The kernel cache.

In process: generated source text -> compiled dispatcher.  Across processes:
each generated module is written into the cache folder under a name derived
from the hash of its source (which holds every shape, stride, dtype and
attribute value the kernel depends on) and imported from there, so that
numba's on-disk cache (``cache=True``) serves its machine code to the next
process; :func:`compile_kernel` loads it from there without numba's full
target refresh.

Folder: ``$GRAPHC_CACHE_DIR`` or ``~/.cache/graphc``, with one subfolder per
graphc/numba/python version and per version of the runtime helpers.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
from pathlib import Path

import numba

from . import runtime

_lock = threading.Lock()
_mem: dict[str, object] = {}


def _runtime_digest() -> str:
    h = hashlib.sha256()
    for mod in (runtime,):
        h.update(Path(mod.__file__).read_bytes())
    return h.hexdigest()[:12]


def cache_root() -> Path:
    base = os.environ.get("GRAPHC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "graphc")
    return Path(base)


_DIR: Path | None = None


def cache_dir() -> Path:
    global _DIR
    if _DIR is None or not str(_DIR).startswith(str(cache_root())):
        tag = f"py{sys.version_info[0]}{sys.version_info[1]}-numba{numba.__version__}-rt{_runtime_digest()}"
        _DIR = cache_root() / tag
        _DIR.mkdir(parents=True, exist_ok=True)
    return _DIR


def kernel_key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:32]


def load_kernel(source: str, entry: str = "kernel"):
    """Return the compiled-on-demand numba dispatcher for ``source``'s ``entry``."""
    key = kernel_key(source)
    fn = _mem.get(key)
    if fn is not None:
        return fn
    with _lock:
        fn = _mem.get(key)
        if fn is not None:
            return fn
        d = cache_dir()
        path = d / f"k_{key}.py"
        if not path.exists() or path.read_text() != source:
            tmp = d / f".k_{key}.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_text(source)
            os.replace(tmp, path)
        # registered in sys.modules so that numba can name it in its cache index
        name = f"graphc_kernel_{key}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        fn = getattr(module, entry)
        _mem[key] = fn
        return fn


def compile_kernel(fn, sig: tuple) -> None:
    """``fn.compile(sig)`` for a dispatcher from :func:`load_kernel`, taking a kernel
    found in numba's on-disk cache without the target refresh numba does first
    (which imports every numba registry, and scipy, for about 0.4 s in a fresh
    process): loaded machine code needs only numba's runtime.  Anything else
    (a cache miss, numba internals not as expected) takes numba's own path."""
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.runtime import rtsys

    with global_compiler_lock:
        if sig in fn.overloads:
            return
        try:
            rtsys.initialize(fn.targetctx)
            cres = fn._cache._load_overload(sig, fn.targetctx)
        except Exception:  # noqa: BLE001 - any surprise: numba's path below
            cres = None
        if cres is not None:   # as numba's Dispatcher.compile does with a cache hit
            fn._cache_hits[sig] += 1
            fn.targetctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
            fn.add_overload(cres)
            return
    fn.compile(sig)
