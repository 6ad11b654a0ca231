"""Taking a numba dispatcher's compiled overload from numba's on-disk cache
without the target refresh numba's own ``Dispatcher.compile`` does first (it
imports every numba registry, and scipy, for about 0.4 s in a fresh process):
machine code loaded from the cache needs only numba's runtime.  Used for
kernels (graphc.codegen.cache) and the helpers kernels call by symbol
(graphc.codegen.exported)."""
from __future__ import annotations


def load_cached(fn, sig: tuple) -> bool:
    """Add ``fn``'s overload for ``sig`` from numba's on-disk cache; False on a
    miss (or numba internals not as expected: the caller then takes numba's
    path).  The caller holds numba's compiler lock."""
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
