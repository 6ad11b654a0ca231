"""graphc.torch.memory: large buffers come from the heap (reused between steps),
not from fresh mappings, once the backend has tuned glibc's allocator; and
GRAPHC_MALLOC=default leaves the allocator alone."""
from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("torch")

#: a child printing whether the backend's setting took and how many mmapped blocks an 8 MiB malloc adds
CHILD = r"""
import ctypes, ctypes.util
from graphc.torch.memory import tune
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
took = tune()
before = libc.mallinfo2().hblks
p = libc.malloc(8 << 20)
print(took, libc.mallinfo2().hblks - before)
libc.free(ctypes.c_void_p(p))
"""


def _child(env_extra):
    import os
    env = dict(os.environ, **env_extra)
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, check=True)
    took, mapped = out.stdout.split()
    return took == "True", int(mapped)


def test_large_buffers_come_from_the_heap_once_tuned():
    try:
        took, mapped = _child({"GRAPHC_MALLOC": ""})
    except (subprocess.CalledProcessError, AttributeError) as e:   # (no glibc, or one before mallinfo2)
        pytest.skip(f"not glibc 2.33+: {e}")
    assert took and mapped == 0


def test_graphc_malloc_default_leaves_the_allocator_alone():
    try:
        took, mapped = _child({"GRAPHC_MALLOC": "default"})
    except subprocess.CalledProcessError as e:
        pytest.skip(f"not glibc 2.33+: {e}")
    assert not took and mapped == 1
