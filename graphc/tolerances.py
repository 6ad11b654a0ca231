"""Dtype-aware tolerances, written down in one place.

``COMPILED``: compiled kernel vs graphc's reference (same math, f32 compute for
low-precision types, one rounding on store), so about one or two ulps of the
output dtype, relative to the magnitude of the data.
``ORACLE``: graphc's reference vs an independent oracle (PyTorch in its own
precision, or float64 finite differences).
"""
from __future__ import annotations

import numpy as np

from .types import DataType

#: dtype -> (rtol, atol)
COMPILED = {
    DataType.f64: (1e-12, 1e-12),
    DataType.f32: (2e-5, 2e-6),
    DataType.c64: (2e-5, 2e-6),
    DataType.f16: (2e-3, 2e-3),
    DataType.bf16: (1.6e-2, 1.6e-2),
    DataType.f8_e4m3: (1.3e-1, 2e-2),
    DataType.f8_e5m2: (2.6e-1, 4e-2),
}
ORACLE = {
    DataType.f64: (1e-10, 1e-10),
    DataType.f32: (1e-4, 1e-5),
    DataType.c64: (1e-4, 1e-5),
    DataType.f16: (4e-3, 4e-3),
    DataType.bf16: (3.2e-2, 3.2e-2),
    DataType.f8_e4m3: (1.3e-1, 2e-2),
    DataType.f8_e5m2: (2.6e-1, 4e-2),
}
#: finite differences: float64 central differences with step 1e-6
GRADCHECK = (1e-5, 1e-6)


def tolerance(dt: DataType, table=None) -> tuple[float, float]:
    table = COMPILED if table is None else table
    return table.get(DataType.parse(dt), (0.0, 0.0))  # integers and booleans: exact


def compare(actual, expected, dt: DataType, table=None) -> tuple[bool, float]:
    """(ok, max scaled error).  Error per element is |a - e| / (atol + rtol * scale),
    where scale is the max |expected| (so ops whose outputs cancel are judged
    against the size of their data); ok when it is <= 1 everywhere and NaN/inf
    positions agree."""
    rtol, atol = tolerance(dt, table)
    a = np.asarray(actual)
    e = np.asarray(expected)
    if a.shape != e.shape:
        return False, float("inf")
    if a.size == 0:
        return True, 0.0
    if dt in (DataType.c64,):
        a, e = a.astype(np.complex128), e.astype(np.complex128)
    elif np.dtype(a.dtype).kind in "biu" and np.dtype(e.dtype).kind in "biu":
        diff = np.abs(a.astype(np.int64) - e.astype(np.int64))
        m = float(diff.max())
        return m == 0 or (rtol > 0 and m <= 1), m
    else:
        a, e = a.astype(np.float64), e.astype(np.float64)
    fin_a, fin_e = np.isfinite(a), np.isfinite(e)
    if not np.array_equal(fin_a, fin_e):
        return False, float("inf")
    if not np.array_equal(a[~fin_a], e[~fin_e], equal_nan=True):
        return False, float("inf")
    if not fin_a.any():
        return True, 0.0
    scale = float(np.max(np.abs(e[fin_e])))
    denom = atol + rtol * max(scale, 1e-30)
    if denom == 0:
        m = float(np.max(np.abs(a[fin_a] - e[fin_e])))
        return m == 0, m
    err = float(np.max(np.abs(a[fin_a] - e[fin_e]))) / denom
    return err <= 1.0, err


def assert_close(actual, expected, dt: DataType, table=None, what: str = ""):
    ok, err = compare(actual, expected, DataType.parse(dt), table)
    if not ok:
        rtol, atol = tolerance(dt, table)
        raise AssertionError(f"{what}: mismatch for {dt}: scaled error {err:.3g} > 1 (rtol={rtol}, atol={atol})\n"
                             f"actual={np.asarray(actual).ravel()[:8]}\nexpected={np.asarray(expected).ravel()[:8]}")
