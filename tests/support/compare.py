"""Comparing arrays: bit for bit (``assert_same``) or within graphc.tolerances
(``assert_close``), and a whole set of outputs at once (``assert_outputs``)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from graphc import tolerances
from graphc.tolerances import COMPILED
from graphc.types import DataType

from .torch_conv import n64

#: stored one value a byte: compared by value, not by the byte's spare bits
_NIBBLES = (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4))


def assert_same(actual, expected, what=""):
    """Equal dtype, shape and bit patterns, except that any NaN matches any NaN:
    every dtype (floats of each width, ints, int4/uint4 by value, booleans by
    their byte, c64 per real and imaginary part).  Arrays of any strides are
    compared in place; values are widened only where the bits differ."""
    a, e = np.asarray(actual), np.asarray(expected)
    assert a.dtype == e.dtype and a.shape == e.shape, f"{what}: {a.dtype}{a.shape} != {e.dtype}{e.shape}"
    if a.dtype in _NIBBLES:
        bad = a.astype(np.int8) != e.astype(np.int8)
    elif a.dtype.kind == "c":  # (..., 2) real and imaginary parts, each compared as a float
        pa, pe = (np.ascontiguousarray(x).view(x.real.dtype).reshape(*x.shape, 2) for x in (a, e))
        bad = ~_same_bits(pa, pe).all(axis=-1)
    else:
        bad = ~_same_bits(a, e)
    assert not bad.any(), f"{what}: {bad.sum()} differences: actual {a[bad][:6]}, expected {e[bad][:6]}"


def _same_bits(a, e):
    """Where ``a`` and ``e`` (one dtype and shape) hold the same bits, or NaN both
    (views: ml_dtypes types have no bit ops)."""
    bits = np.dtype(f"u{a.dtype.itemsize}")
    same = a.view(bits) == e.view(bits)
    if a.dtype.kind not in "biu" and not same.all():
        at = np.nonzero(~same)
        same[at] = np.isnan(a[at].astype(np.float64)) & np.isnan(e[at].astype(np.float64))
    return same


def assert_close(actual, expected, dt, table=None, what=""):
    """Equal shapes and values within graphc.tolerances' ``table`` (COMPILED by
    default, ORACLE against torch) for dtype ``dt``; integers and booleans exact."""
    a, e = np.asarray(actual), np.asarray(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
    tolerances.assert_close(a, e, dt, table, what)


def assert_close_each(actual, expected, dt, table=None, what=""):
    """Each element within graphc.tolerances' ``table`` (COMPILED by default) of
    its own expected value, ``atol + rtol * |expected|``, not of the largest one
    (as assert_close does): values of every magnitude in one tensor (NaN, inf,
    the f32 extremes and small ones) are each judged.  NaN matches NaN, an
    infinity only itself."""
    a, e = np.asarray(actual), np.asarray(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
    rtol, atol = tolerances.tolerance(dt, table)
    a, e = a.astype(np.float64).ravel(), e.astype(np.float64).ravel()
    with np.errstate(invalid="ignore"):
        ok = (a == e) | (np.isnan(a) & np.isnan(e)) | (np.abs(a - e) <= atol + rtol * np.abs(e))
    bad = np.flatnonzero(~ok)
    assert not bad.size, f"{what}: {bad.size} elements differ, at {bad[:6]}: actual {a[bad][:6]}, expected {e[bad][:6]}"


def assert_outputs(got, want, dtypes=None, table=COMPILED, exact=False, what="", names=None):
    """Every output of ``got`` against ``want``: both {id: array} (same ids) or both
    sequences (of equal length; torch tensors in ``want`` are read as float64);
    ``dtypes`` one dtype each (by default the arrays' own); bit for bit when
    ``exact``, else within ``table`` (COMPILED; ORACLE against torch).  Messages
    name each output by ``names`` or by its id / position."""
    if isinstance(want, dict):
        assert got.keys() == want.keys(), f"{what}: outputs {sorted(got)} != {sorted(want)}"
        keys, got, want = list(want), [got[k] for k in want], list(want.values())
    else:
        got, want = list(got), [n64(e) if hasattr(e, "detach") else e for e in want]
        assert len(got) == len(want), f"{what}: {len(got)} outputs != {len(want)}"
        keys = range(len(want))
    if dtypes is None:
        dtypes = [DataType.from_numpy(np.asarray(a).dtype) for a in got]
    elif isinstance(dtypes, dict):
        dtypes = [dtypes[k] for k in keys]
    names = [f"{what} {k}".strip() for k in keys] if names is None else names
    for name, a, e, dt in zip(names, got, want, dtypes):
        if exact:
            assert_same(a, e, name)
        else:
            assert_close(a, e, dt, table, name)
