"""Array layout helpers: the arrays a compiled partition takes and gives, laid
out as their logical tensors say (strides in elements, gaps, stride-0
broadcasts), and the flat views of them that kernels see."""
from __future__ import annotations

import numpy as np

from ..errors import InvalidArguments, RuntimeFault
from . import recycle
from ..types import LogicalTensor, check_extent, dense_strides, overlaps, span as _span


def flat_view(arr: np.ndarray, lt: LogicalTensor) -> np.ndarray:
    """A 1-D view of ``arr``'s buffer, indexable with lt's element strides, in the
    dtype the kernel sees (bit views for bf16/f16/f8)."""
    view_dt = lt.dtype.info.kernel_view
    if view_dt is not None:
        arr = arr.view(view_dt)
    if arr.size == 0:
        return np.empty(0, dtype=arr.dtype)
    if arr.flags.c_contiguous:  # (the caller made arr's strides lt's): the cheap view
        return arr.reshape(-1)
    span = 1 + sum((d - 1) * s for d, s in zip(lt.shape, lt.strides))
    return np.lib.stride_tricks.as_strided(arr, shape=(span,), strides=(arr.itemsize,))


def element_strides(arr: np.ndarray):
    return tuple(s // arr.itemsize if s % arr.itemsize == 0 else None for s in arr.strides)


def layout_matches(arr: np.ndarray, lt: LogicalTensor) -> bool:
    es = element_strides(arr)
    return all(d <= 1 or s == t for d, s, t in zip(lt.shape, es, lt.strides))


def allocate(lt: LogicalTensor, kept: bool = False) -> np.ndarray:
    """An uninitialized array laid out as ``lt`` says (gaps included); its byte
    sizes are checked first (types.check_extent: InvalidShape, not numpy's
    OverflowError).  A large one is over a recycled buffer (graphc.compiler.recycle)
    unless it is ``kept`` (a workspace that lives as long as its kernel)."""
    dt = lt.dtype.np
    try:
        if lt.strides == dense_strides(lt.shape):
            return np.empty(lt.shape, dtype=dt) if kept else recycle.empty(lt.shape, dt)
        check_extent(lt, "allocate")
        # (an ndarray over a buffer: a few times faster than as_strided, and of any dtype)
        strides = [s * dt.itemsize for s in lt.strides]
        span = max(_span(lt.shape, lt.strides), 1)
        if not kept:
            return recycle.empty(lt.shape, dt, strides, span)
        return np.ndarray(lt.shape, dt, buffer=np.empty(span, dtype=dt), strides=strides)
    except MemoryError:
        raise RuntimeFault("cannot allocate memory for a tensor", where=f"tensor {lt.id}",
                           found=f"shape {list(lt.shape)}, strides {list(lt.strides)}, {lt.dtype}") from None


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.dtype(f"u{a.itemsize}")) if a.itemsize in (1, 2, 4, 8) else a


def into_layout(arr: np.ndarray, lt: LogicalTensor, overlapping: bool = False) -> np.ndarray:
    """``arr`` itself when its strides are lt's (and it is aligned), else a copy
    laid out as lt says.  When lt's strides make elements share memory
    (``overlapping``: a stride-0 broadcast), the copy must hold every value of
    ``arr``: values that differ where the layout has one place are an error."""
    if layout_matches(arr, lt) and arr.flags.aligned:
        return arr
    out = allocate(lt)
    out[...] = arr
    if overlapping and not np.array_equal(_bits(out), _bits(arr)):
        raise InvalidArguments(f"input tensor {lt.id} does not fit its layout: the strides make distinct "
                               "elements share memory, and the values given differ at such elements",
                               where=f"tensor {lt.id}", expected=f"equal values wherever strides "
                               f"{list(lt.strides)} of shape {list(lt.shape)} meet (e.g. a broadcast view)",
                               found="an array with different values there")
    return out


def overlapping_layouts(lts) -> list[bool]:
    """For each logical tensor: its strides make distinct elements share memory."""
    return [lt.strides is not None and all(s >= 0 for s in lt.strides) and overlaps(lt.shape, lt.strides)
            for lt in lts]


def self_overlapping(a: np.ndarray) -> bool:
    """Distinct elements of ``a`` share bytes (e.g. an as_strided view with stride 0)."""
    if a.size <= 1:
        return False
    return overlaps(tuple(a.shape) + (a.itemsize,), tuple(abs(s) for s in a.strides) + (1,))


def shares(a: np.ndarray, b: np.ndarray) -> bool:
    """``a`` and ``b`` share memory (True when numpy cannot tell in bounded work)."""
    try:
        return np.shares_memory(a, b, max_work=1 << 16)
    except np.exceptions.TooHardError:
        return True


def aligned_empty(n: int, dtype, align: int = 4096) -> np.ndarray:
    """An uninitialised 1-D array whose data starts on an ``align``-byte boundary."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(n * itemsize + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + n * itemsize].view(dtype)
