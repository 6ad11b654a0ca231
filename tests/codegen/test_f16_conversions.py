"""The f16 <-> f32 conversions kernels call (graphc.codegen.runtime): F16C's
hardware conversions where the CPU has them, the integer code elsewhere; both
against numpy's own float16 casts, on every f16 value and on f32 values around
every rounding boundary (ties to even, subnormals, overflow, NaN)."""
from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from graphc.codegen import runtime
from graphc.codegen.cpu import has_f16c

ALL_F16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


def _f32_cases() -> np.ndarray:
    rng = np.random.default_rng(0)
    f16 = ALL_F16.view(np.float16).astype(np.float32)
    f16 = f16[np.isfinite(f16)]
    bits = f16.view(np.uint32)
    # each f16 value, the f32 halfway to its neighbours, and one f32 ulp either side of that
    around = np.concatenate([bits + d for d in (np.uint32(0x1000), np.uint32(0x0FFF), np.uint32(0x1001))])
    extra = np.array([65504.0, 65519.0, 65520.0, 1e6, -1e6, np.inf, -np.inf, np.nan, 2.0 ** -25, 2.0 ** -26,
                      3 * 2.0 ** -26, 1e-30, -0.0], np.float32)
    return np.concatenate([f16, around.view(np.float32), extra, rng.standard_normal(100_000).astype(np.float32)])


def _each(fn, out_dtype):
    """A jitted loop applying scalar conversion ``fn`` to every element, into ``out_dtype``."""
    @njit
    def run(src):
        out = np.empty(src.size, out_dtype)
        for i in range(src.size):
            out[i] = fn(src[i])
        return out
    return run


WIDEN = [("kernels'", runtime.f16_to_f32), ("integer", runtime._f16_to_f32_int)]
NARROW = [("kernels'", runtime.f32_to_f16), ("integer", runtime._f32_to_f16_int)]


@pytest.mark.parametrize("name,fn", WIDEN, ids=[w[0] for w in WIDEN])
def test_f16_to_f32_is_numpys_on_every_f16(name, fn):
    got = _each(fn, np.float32)(ALL_F16)
    want = ALL_F16.view(np.float16).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))


@pytest.mark.parametrize("name,fn", NARROW, ids=[n[0] for n in NARROW])
def test_f32_to_f16_rounds_as_numpy(name, fn):
    src = _f32_cases()
    got = _each(fn, np.uint16)(src).view(np.float16)
    with np.errstate(over="ignore"):
        want = src.astype(np.float16)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok].view(np.uint16), want[ok].view(np.uint16))


def test_the_hardware_road_is_taken_where_the_cpu_converts():
    from llvmlite import binding
    assert runtime.F16C == has_f16c() and (not runtime.F16C or binding.get_host_cpu_features().get("f16c"))
    if runtime.F16C:
        assert runtime.f16_to_f32 is not runtime._f16_to_f32_int
