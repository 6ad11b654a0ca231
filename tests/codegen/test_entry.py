"""How Python calls a kernel (graphc.codegen.entry): one trampoline serves every
kernel of as many arrays of the same dimensions, whatever their dtypes and
layouts (as spans, whatever their dimensions too), and each kernel still sees
its own arrays, strides and status."""
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


@njit(no_cpython_wrapper=True)
def _strided_copy(x, out):
    # (as graphc's kernels index: flat offsets by the tensor's strides, here
    # x of shape (2, 3) with element strides (1, 4), out dense)
    for i in range(2):
        for j in range(3):
            out[i * 3 + j] = x[i + 4 * j] + 1
    return -1


def test_arrays_of_any_dimensions_reach_a_kernel_as_spans():
    """With ``spans``, each array reaches the kernel as the one-dimensional span of
    its elements: a strided 2-D array (its data from its first element to its last,
    gaps included), a dense 2-D output, a 0-d array, an empty one."""
    sig = (typeof(np.zeros(1, np.float32)),) * 2
    _strided_copy.compile(sig)
    e = kernel_entry(_strided_copy, sig, spans=True)
    buf = np.arange(12, dtype=np.float32)
    x = np.lib.stride_tricks.as_strided(buf, shape=(2, 3), strides=(4, 16))   # element strides (1, 4)
    out = np.zeros((2, 3), np.float32)
    assert e((x, out)) == -1
    np.testing.assert_array_equal(out, x + 1)
    assert e.compiled[1] is not _entry(_twice, buf, buf.copy()).compiled[1]   # (not the pass-through trampoline)
    _length.compile((typeof(buf),))
    length = kernel_entry(_length, (typeof(buf),), spans=True)
    assert length((np.array(5, np.float32),)) == 1
    assert length((np.zeros((2, 0, 3), np.float32),)) == 0
    assert length((np.zeros((2, 4, 3), np.float32)[:, ::2],)) == 2 * 4 * 3 - 3   # (rows 0 and 2 of 4, and between)


@njit(no_cpython_wrapper=True)
def _length(x):
    return x.size


def test_one_span_trampoline_for_arrays_of_any_dimensions():
    """Spans: one trampoline for the kernels of as many arrays, whatever their
    dimensions (0 to 32); an object that is no array is refused, not read."""
    sig = (typeof(np.zeros(1, np.float32)),) * 2
    _twice.compile(sig)
    e = kernel_entry(_twice, sig, spans=True)
    seen = set()
    for shape in [(), (5,), (2, 3), (1, 2, 1, 3)] + [(1,) * 31 + (2,)]:
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        out = np.zeros(shape, np.float32)
        entry = kernel_entry(_twice, sig, spans=True)
        assert entry((x, out)) == -1
        np.testing.assert_array_equal(out, 2 * x)
        seen.add(id(entry.compiled[1]))
    assert len(seen) == 1 and id(e.compiled[1]) in seen
    with pytest.raises(TypeError, match="numpy arrays"):
        e((np.zeros(3, np.float32), [0.0, 0.0, 0.0]))
    with pytest.raises(TypeError, match="numpy arrays"):
        e((np.zeros(3, np.float32), 7))
