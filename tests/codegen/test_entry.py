"""How Python calls a kernel (graphc.codegen.entry): one trampoline serves every
kernel of as many arrays of the same dimensions, whatever their dtypes and
layouts, and each kernel still sees its own arrays, strides and status."""
import numpy as np
import pytest
from numba import njit, typeof

from graphc.codegen.entry import Kernel, kernel_entry


@njit(no_cpython_wrapper=True)
def _twice(x, out):
    for i in range(x.size):
        out[i] = x[i] * 2
    return -1


@njit(no_cpython_wrapper=True)
def _first_negative(x, out):
    for i in range(x.size):
        if x[i] < 0:
            return i
        out[i] = x[i]
    return -1


def _entry(fn, *arrays):
    sig = tuple(typeof(a) for a in arrays)
    fn.compile(sig)
    return kernel_entry(fn, sig)


def test_one_trampoline_for_kernels_of_any_dtype_and_layout():
    cases = [np.arange(7, dtype=np.float32), np.arange(7, dtype=np.uint8), np.arange(7, dtype=np.int64),
             np.arange(14, dtype=np.float64)[::2]]                       # (layout A: strided)
    entries = []
    for x in cases:
        out = np.zeros(x.size, x.dtype)
        e = _entry(_twice, x, out)
        assert e((x, out)) == -1
        np.testing.assert_array_equal(out, x * 2)
        entries.append(e)
    assert len({typeof(x) for x in cases}) == 4                         # four kernels...
    assert len({id(e.compiled[1]) for e in entries}) == 1               # ...one trampoline


def test_kernel_status_and_strides_reach_python():
    x = np.array([3, 1, -4, 1, 5], np.int16)
    out = np.zeros(5, np.int16)
    assert _entry(_first_negative, x, out)((x, out)) == 2
    np.testing.assert_array_equal(out[:2], [3, 1])
    k = Kernel(_twice)                       # the safe call: types taken from the arrays
    big = np.arange(12, dtype=np.float32).reshape(3, 4)
    col = np.zeros(3, np.float32)
    assert k(big[:, 1], col) == -1
    np.testing.assert_array_equal(col, [2, 10, 18])


def test_a_non_array_argument_is_a_type_error():
    x = np.arange(4, dtype=np.float32)
    e = _entry(_twice, x, x.copy())
    with pytest.raises(TypeError, match="numpy arrays"):
        e((x, [0.0, 0.0, 0.0, 0.0]))
