"""Input data for running graphs: values in ranges that keep each op meaningful.

Like benchdnn's fillers: each graph input gets values from the range its
consuming op asks for (``OpSchema.input_range``: positive variance, indices in
range, no division by zero), else a small symmetric range that is exact in
every float type.
"""
from __future__ import annotations

import numpy as np

from .types import DataType, f4_e3m0_encode

#: e8m0 (scales: powers of two) gets exponents in this range where none is asked for
_E8M0_EXPONENTS = (-4, 4)
#: ranges by port name where the op's schema gives none (a probability is in [0, 1])
_PORT_RANGES = {"probability": (0.0, 1.0)}


def _default_range(dt: DataType):
    return dt.info.data_range


def fill_tensor(lt, rng: np.random.Generator, lo=None, hi=None, integer=False) -> np.ndarray:
    dt = lt.dtype
    shape = lt.shape
    if dt is DataType.boolean:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if lo is None:
        lo, hi = _default_range(dt)
    if dt.is_int or integer:
        v = rng.integers(int(np.ceil(lo)), int(np.floor(hi)) + 1, size=shape)
        return v.astype(dt.np)
    if dt is DataType.c64:
        v = rng.uniform(lo, hi, size=shape) + 1j * rng.uniform(lo, hi, size=shape)
        return v.astype(np.complex64)
    if dt is DataType.e8m0:   # positive powers of two only (no sign, no zero)
        e_lo, e_hi = _E8M0_EXPONENTS
        if lo > 0:
            e_lo, e_hi = int(np.ceil(np.log2(lo))), int(np.floor(np.log2(hi)))
            e_hi = max(e_lo, e_hi)
        return np.ldexp(1.0, rng.integers(e_lo, e_hi + 1, size=shape)).astype(dt.np)
    # multiples of 1/64: exactly representable in bf16/f16/f8 for this range, so
    # every backend sees the same input values
    v = np.round(rng.uniform(lo, hi, size=shape) * 64) / 64
    if lo > 0:
        v = np.maximum(v, lo)
    if dt is DataType.f4_e3m0:   # stored as codes (graphc.types.f4_e3m0_encode)
        return f4_e3m0_encode(v)
    return v.astype(dt.np)


def make_inputs(graph, seed: int = 0, shapes: dict | None = None) -> dict:
    """{input tensor id: array} for every graph input port."""
    rng = np.random.default_rng(seed)
    out = {}
    for tid in graph.input_ports:
        lt = graph.tensors[tid]
        if shapes and tid in shapes:
            lt = lt.with_shape(shapes[tid])
        lo = hi = None
        integer = False
        for oid, idx in graph.consumers.get(tid, []):
            op = graph.ops[oid]
            r = op.schema.input_range(op, idx)
            if r is None and lt.dtype.is_float and idx < len(op.input_names):
                r = _PORT_RANGES.get(op.input_names[idx])
            if r is not None:
                lo, hi = r[0], r[1]
                integer = len(r) > 2 and r[2] == "int"
                break
        out[tid] = fill_tensor(lt, rng, lo, hi, integer)
    return out
