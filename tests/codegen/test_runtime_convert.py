"""The kernels' storage conversions (graphc/codegen/runtime.py) against ml_dtypes,
bit for bit: f32 -> bf16 on every sign/exponent with many mantissas, and its NaNs."""
import ml_dtypes
import numpy as np
from numba import njit

from graphc.codegen.runtime import f32_to_bf16


@njit(error_model="numpy")
def _to_bf16(x, out):
    for i in range(x.size):
        out[np.uint64(i)] = f32_to_bf16(x[np.uint64(i)])


def _patterns():
    """Every sign and exponent with the mantissas around each rounding boundary
    (low 16 bits 0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, with kept lsb 0 and 1,
    and the largest kept part) and 2^20 random bit patterns."""
    top = np.arange(1 << 9, dtype=np.uint32) << np.uint32(23)
    kept = np.array([0, 1, 2, 0x7E, 0x7F], np.uint32) << np.uint32(16)
    low = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)
    grid = (top[:, None, None] | kept[None, :, None] | low[None, None, :]).ravel()
    rnd = np.random.default_rng(0).integers(0, 1 << 32, size=1 << 20, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([grid, rnd])


def test_f32_to_bf16_matches_ml_dtypes():
    bits = _patterns()
    x = bits.view(np.float32)
    got = np.empty(x.size, np.uint16)
    _to_bf16(x, got)
    nan = np.isnan(x)
    want = x[~nan].astype(ml_dtypes.bfloat16).view(np.uint16)
    np.testing.assert_array_equal(got[~nan], want)
    # a NaN keeps its sign and top payload bits, made quiet (ml_dtypes may canonicalize)
    np.testing.assert_array_equal(got[nan], (bits[nan] >> 16).astype(np.uint16) | np.uint16(0x40))
    assert nan.sum() > 1000 and (~nan).sum() > 100_000
