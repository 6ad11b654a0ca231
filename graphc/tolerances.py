"""Comparing results with dtype-aware tolerances.

The tolerances are written down in one place, each data type's row
(graphc.dtypes.ROWS, fields ``compiled_tol`` and ``oracle_tol``); the tables here
are lookups into the rows:

``COMPILED``: compiled kernel vs graphc's reference (same math, f32 compute for
low-precision types, one rounding on store), so about one or two ulps of the
output dtype, relative to the magnitude of the data.
``ORACLE``: graphc's reference vs an independent oracle (PyTorch in its own
precision, or float64 finite differences).
``MODEL``: a model run by graphc.torch vs the same model in eager torch.
Types without a row tolerance (integers, booleans) compare exactly.
"""
from __future__ import annotations

import numpy as np

from .dtypes import ROWS
from .types import DataType

#: dtype -> (rtol, atol)
COMPILED = {r.dtype: r.compiled_tol for r in ROWS if r.compiled_tol is not None}
ORACLE = {r.dtype: r.oracle_tol for r in ROWS if r.oracle_tol is not None}
#: a whole model compiled by the torch backend vs eager torch (rounding differences
#: add up through its layers; relative to the largest |expected| of the tensor)
MODEL = {DataType.f32: (1e-3, 1e-6), DataType.bf16: (3e-2, 1e-3), DataType.f16: (1e-2, 1e-4)}
#: the same under bf16 autocast: f32 results (a parameter's gradient) computed through bf16
#: values carry bf16's rounding
MODEL_BF16_AUTOCAST = {DataType.f32: MODEL[DataType.bf16], DataType.bf16: MODEL[DataType.bf16]}
#: finite differences: float64 central differences with step 1e-6
GRADCHECK = (1e-5, 1e-6)


def tolerance(dt: DataType, table=None) -> tuple[float, float]:
    table = COMPILED if table is None else table
    return table.get(DataType.parse(dt), (0.0, 0.0))  # integers and booleans: exact


#: an integer result rounded from a float within this (relative to max(1, |value|)) of
#: a half may be rounded either way: benchdnn's rule for integer outputs, whose
#: kernels sum in another order than the reference (an int8 convolution's sums
#: 4.500047 in the reference, whose f32 weights round (q - z) * s, and under 4.5 in the
#: kernel, which sums the integers and scales the sum as oneDNN does, round to 5 and 4)
NEAR_HALF = 1e-4


#: an integer output computed through values the partition rounds to bf16/f16/f8 may
#: differ from the reference where such a rounding flips: the kernel sums in f32 (in
#: another order), the reference in f64, and where the two sums land on either side of
#: a half-ulp of the narrow type the rounded values differ by an ulp, which the ops after
#: it (a SoftMax, a Quantize) carry into the integers.  At most this share of the
#: elements may so differ (the int8-bf16 DistilBERT attention at batch 56: 241 of 11M
#: bf16 scores flipped, 54 of 5.5M u8 outputs differing, a share of 1e-5).
FLIPPED_SHARE = 1e-4


#: elements compared at a time (temporaries of a block stay in cache; big tensors need no wide copies)
_BLOCK = 1 << 18


def _wide(a: np.ndarray, e: np.ndarray, dt: DataType):
    """The dtype both are compared in: complex128 for c64; float32 when both are
    floats of at most 32 bits (a difference of two such values, and its scale,
    are within an ulp there: far below any tolerance of theirs); else float64."""
    if dt == DataType.c64:
        return np.complex128
    if all(x.dtype.kind in "fV" and x.dtype.itemsize <= 4 for x in (a, e)):
        return np.float32
    return np.float64


def compare(actual, expected, dt: DataType, table=None, unrounded=None, flips=False) -> tuple[bool, float]:
    """(ok, max scaled error).  Error per element is |a - e| / (atol + rtol * scale),
    where scale is the max |expected| (so ops whose outputs cancel are judged
    against the size of their data); ok when it is <= 1 everywhere and NaN/inf
    positions agree.  ``unrounded``: for integers rounded from floats, the
    reference's values before rounding; where one is within NEAR_HALF of a half,
    a result one off is as good.  ``flips``: integers computed through narrow-float
    roundings, of which a share FLIPPED_SHARE may differ."""
    rtol, atol = tolerance(dt, table)
    a = np.asarray(actual)
    e = np.asarray(expected)
    if a.shape != e.shape:
        return False, float("inf")
    if a.size == 0:
        return True, 0.0
    if dt != DataType.c64 and np.dtype(a.dtype).kind in "biu" and np.dtype(e.dtype).kind in "biu":
        diff = np.abs(a.astype(np.int64) - e.astype(np.int64))
        if unrounded is not None:
            diff = np.where((diff == 1) & _near_half(np.asarray(unrounded, dtype=np.float64)), 0, diff)
        m = float(diff.max())
        if flips and m > 0 and np.count_nonzero(diff) <= FLIPPED_SHARE * diff.size:
            return True, m
        return m == 0 or (rtol > 0 and m <= 1), m
    wide = _wide(a, e, dt)
    a, e = a.reshape(-1), e.reshape(-1)
    most, scale, finite = 0.0, 0.0, False
    for lo in range(0, a.size, _BLOCK):
        x, y = a[lo:lo + _BLOCK].astype(wide), e[lo:lo + _BLOCK].astype(wide)
        fx, fy = np.isfinite(x), np.isfinite(y)
        if not (fx.all() and fy.all()):
            if not np.array_equal(fx, fy) or not np.array_equal(x[~fx], y[~fy], equal_nan=True):
                return False, float("inf")
            if not fx.any():
                continue
            x, y = x[fx], y[fy]
        finite = True
        most = max(most, float(np.max(np.abs(x - y))))
        scale = max(scale, float(np.max(np.abs(y))))
    if not finite:
        return True, 0.0
    denom = atol + rtol * max(scale, 1e-30)
    if denom == 0:
        return most == 0, most
    err = most / denom
    return err <= 1.0, err


def _near_half(v: np.ndarray) -> np.ndarray:
    return np.abs(v - np.floor(v) - 0.5) <= NEAR_HALF * np.maximum(1.0, np.abs(v))


def assert_close(actual, expected, dt: DataType, table=None, what: str = ""):
    ok, err = compare(actual, expected, DataType.parse(dt), table)
    if not ok:
        rtol, atol = tolerance(dt, table)
        raise AssertionError(f"{what}: mismatch for {dt}: scaled error {err:.3g} > 1 (rtol={rtol}, atol={atol})\n"
                             f"actual={np.asarray(actual).ravel()[:8]}\nexpected={np.asarray(expected).ravel()[:8]}")
