"""Output buffers recycled: a large output array the caller has dropped is handed
out again, pages and all, to the next output of its byte size.

A fresh large array is fresh pages from the kernel (glibc serves blocks above
its mmap threshold, at most 32 MiB, with a new mapping each time, and gives
freed heap tops back), and a kernel writing it pays a page fault per 4 KiB:
1.2 ms of a 7.4 ms convolution whose output is 40 MB; 0.6 ms of a LayerNorm
whose two 0.9 MB statistics outputs were fresh at every call.  An output of
``MIN_BYTES`` or more is therefore an ndarray over a buffer kept here; when no
array refers to the buffer any more (its reference count is the pool's own),
the next output of the same byte size gets it, as a caching allocator would.
At most ``GRAPHC_RECYCLE_MB`` (default 512) MiB of buffers are kept; 0 turns
recycling off.  Smaller outputs come from numpy's allocator as before.
"""
from __future__ import annotations

import math
import os
import sys
import threading

import numpy as np

#: outputs of this many bytes or more are recycled
MIN_BYTES = 1 << 18


def _limit() -> int:
    try:
        return max(0, int(os.environ.get("GRAPHC_RECYCLE_MB", "512"))) << 20
    except ValueError:
        return 512 << 20


LIMIT = _limit()
_lock = threading.Lock()
_held: dict[int, list[np.ndarray]] = {}   # byte size -> buffers (uint8)
_bytes = 0


def _unreferenced_count() -> int:
    """sys.getrefcount of a kept buffer nothing else refers to, as ``_free`` sees it."""
    probe = [np.empty(1, np.uint8)]
    for raw in probe:
        return sys.getrefcount(raw)
    raise AssertionError


_FREE = _unreferenced_count()


def _free(bufs: list[np.ndarray]) -> np.ndarray | None:
    for raw in bufs:
        if sys.getrefcount(raw) == _FREE:   # (the list's reference, the loop's and the call's)
            return raw
    return None


def _drop_free(need: int) -> None:
    """Release kept buffers nobody uses until ``need`` more bytes fit under the limit."""
    global _bytes
    for size in list(_held):
        kept = []
        for raw in _held[size]:
            if _bytes + need > LIMIT and sys.getrefcount(raw) == _FREE:   # (counted as _free counts)
                _bytes -= size
            else:
                kept.append(raw)
        if kept:
            _held[size] = kept
        else:
            del _held[size]


def buffer(nbytes: int) -> np.ndarray | None:
    """A uint8 buffer of ``nbytes`` no array refers to (a kept one, or a new one
    kept from now on), or None when recycling is off for this size."""
    global _bytes
    if nbytes < MIN_BYTES or LIMIT <= 0 or nbytes > LIMIT:
        return None
    with _lock:
        bufs = _held.get(nbytes)
        raw = _free(bufs) if bufs else None
        if raw is not None:
            return raw
        if _bytes + nbytes > LIMIT:
            _drop_free(nbytes)
            if _bytes + nbytes > LIMIT:
                return None
        raw = np.empty(nbytes, np.uint8)
        _held.setdefault(nbytes, []).append(raw)
        _bytes += nbytes
        return raw


def empty(shape, dtype, strides=None, span: int | None = None) -> np.ndarray:
    """An uninitialised array of ``shape`` and ``dtype`` (C-contiguous, or of byte
    ``strides`` over ``span`` elements), over a recycled buffer when it is large."""
    dtype = np.dtype(dtype)
    n = (math.prod(shape) if span is None else span) * dtype.itemsize
    raw = buffer(n)
    if raw is None:
        if strides is None:
            return np.empty(shape, dtype)
        return np.ndarray(shape, dtype, buffer=np.empty(max(n // dtype.itemsize, 1), dtype), strides=strides)
    return np.ndarray(shape, dtype, buffer=raw, strides=strides)


def kept_bytes() -> int:
    """The bytes of buffers kept for recycling (in use or not)."""
    return _bytes
