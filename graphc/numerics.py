"""Widening inputs for the reference and rounding results once to a storage dtype."""
from __future__ import annotations

import numpy as np

from .types import DataType


def widen(a: np.ndarray, dt: DataType) -> np.ndarray:
    """float types -> float64, c64 -> complex128, integer types -> int64, boolean kept."""
    if dt.is_float:
        return np.asarray(a).astype(np.float64)
    if dt is DataType.c64:
        return np.asarray(a).astype(np.complex128)
    if dt.is_int:
        return np.asarray(a).astype(np.int64)
    return np.asarray(a).astype(np.bool_)


def _f64_to_f32_round_to_odd(x: np.ndarray) -> np.ndarray:
    """f64 -> f32 rounding to odd: a later RNE rounding to a narrower type is then
    the same as rounding x directly (no double-rounding error)."""
    with np.errstate(over="ignore", invalid="ignore"):
        y = x.astype(np.float32)
        inexact = (y.astype(np.float64) != x) & np.isfinite(x) & np.isfinite(y)
        away = inexact & (np.abs(y.astype(np.float64)) > np.abs(x))
        y = np.where(away, np.nextafter(y, np.float32(0)), y).astype(np.float32)
        bits = y.view(np.uint32)
        bits = np.where(inexact, bits | np.uint32(1), bits).astype(np.uint32)
    return bits.view(np.float32)


def round_to(x, dt: DataType) -> np.ndarray:
    """Round a float64/complex/int result once to ``dt``'s storage format.
    Integers round half to even and saturate (an integer result to s64 or u64,
    which have no saturating range, is stored as it is)."""
    x = np.asarray(x)
    target = dt.np
    if dt.is_float:
        x = x.astype(np.float64) if x.dtype != np.float64 else x
        if dt.info.round_via_f32:
            return _f64_to_f32_round_to_odd(x).astype(target)
        with np.errstate(over="ignore", invalid="ignore"):
            return x.astype(target)
    if dt is DataType.c64:
        return x.astype(np.complex64)
    if dt is DataType.boolean:
        return x.astype(np.bool_)
    if dt.info.int_range is None and x.dtype.kind in "iub":
        return x.astype(target)   # (s64, u64: an integer result as it is, wrapped as numpy's)
    lo, hi = _int_range(dt)
    if x.dtype.kind == "f":
        x = np.rint(np.nan_to_num(x, nan=0.0, posinf=hi, neginf=lo))
    return np.clip(x, lo, hi).astype(np.int64).astype(target)


def _int_range(dt: DataType) -> tuple[int, int]:
    """The range a result rounded to integer type ``dt`` saturates to (its row's)."""
    r = dt.info.int_range
    if r is None:
        raise KeyError(dt)   # (s64, u64: no saturating store)
    return r


# ------------------------------------------------------------------ fpmath_mode
#: fpmath_mode -> the type whose precision f32 inputs of the ops that allow it
#: (MatMul and the convolutions: ``OpSchema.fpmath_inputs``) are rounded to.
#: "any" lets the implementation choose: graphc keeps f32, the fastest path on
#: CPUs without bf16/f16 matrix units; "strict" never converts.
FPMATH_DOWN = {"bf16": "bf16", "f16": "f16", "tf32": "tf32"}


def fpmath_down(op):
    """The type op's f32 inputs are rounded to under its graph's fpmath_mode, or None."""
    if not op.schema.fpmath_inputs:
        return None
    if not any(t.dtype is DataType.f32 for n, t in op.named_ports() if n in op.schema.fpmath_inputs):
        return None
    return FPMATH_DOWN.get(getattr(op, "fpmath_mode", "strict"))


def round_tf32(x: np.ndarray) -> np.ndarray:
    """f32 values rounded (to nearest even) to tf32's 10 mantissa bits, as float64."""
    bits = np.asarray(x, np.float64).astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + np.uint64(0xFFF) + ((bits >> np.uint64(13)) & np.uint64(1))) & np.uint64(0xFFFFE000)
    out = bits.astype(np.uint32).view(np.float32).astype(np.float64)
    return np.where(np.isnan(x), x, out)


def fpmath_round(x: np.ndarray, down: str) -> np.ndarray:
    """f32 values (held in float64) as fpmath_mode lets an op read them."""
    if down == "tf32":
        return round_tf32(x)
    return widen(round_to(x, DataType(down)), DataType(down))
