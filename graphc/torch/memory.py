"""Large buffers kept by the C allocator between steps, once per process.

A model's step allocates and frees the same large buffers again and again:
region outputs (torch's allocator), graphc's intermediates, kernels' scratch.
glibc serves each one above its mmap threshold (128 KiB, growing as such
buffers are freed, at most 32 MiB) with fresh pages from the kernel and
returns them on free, so every step touches its buffers' pages for the first
time again: a page fault per 4 KiB.  ResNet-50's training step (batch 2,
224x224) spent more time there than in its memory-bound kernels: graphc 420-820
ms a step, eager torch 282 ms; with the setting below 324 ms and 228 ms (quiet
machine; docs/performance.md).

``tune()`` sets glibc's M_MMAP_THRESHOLD to its largest value (32 MiB: larger
buffers are still mapped), M_TRIM_THRESHOLD to 1 GiB (the heap's top is not
given back under that) and M_TOP_PAD to 64 MiB, as ``MALLOC_*_`` environment
variables would.  The process keeps up to its peak's memory.  The torch
backend calls it when it first compiles; ``GRAPHC_MALLOC=default`` leaves the
allocator as it is; elsewhere than glibc it does nothing."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
SETTINGS = ((M_MMAP_THRESHOLD, 32 << 20), (M_TRIM_THRESHOLD, 1 << 30), (M_TOP_PAD, 64 << 20))


@functools.cache
def tune() -> bool:
    """Apply SETTINGS once; True when glibc took them."""
    if os.environ.get("GRAPHC_MALLOC", "") == "default":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return all(mallopt(param, value) == 1 for param, value in SETTINGS)
