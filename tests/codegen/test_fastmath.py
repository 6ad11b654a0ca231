"""The float32 transcendental helpers kernels call (graphc/codegen/fastmath.py)
against float64 libm over a dense range, the tails and the special values, and
the kernels calling them: vectorized (no scalar loop left) for float32 math."""
import math

import numpy as np
import pytest
from numba import njit

from graphc.codegen import helpers
from graphc.codegen.runtime import bits_to_f32, f32_to_bits

_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _helpers():
    ns = {"np": np, "njit": njit, "bits_to_f32": bits_to_f32, "f32_to_bits": f32_to_bits}
    for name in ("fma_f32", "exp_neg_f32", "exp_le0_f32", "sigmoid_f32", "tanh_f32", "erfc_f32", "erf_f32", "gelu_erf_f32", "key_f32",
                 "key_max_f32", "f32_of_key"):
        exec(helpers.HELPERS[name].imports.text, ns)   # the line a kernel imports it with
    return ns


@njit(error_model="numpy")
def _apply(f, x, out):
    for i in range(x.size):
        out[np.uint64(i)] = f(x[np.uint64(i)])


X = np.concatenate([np.linspace(-20, 20, 400_001), np.geomspace(1e-30, 20, 20_001),
                    -np.geomspace(1e-30, 20, 20_001), [0.0, -0.0]]).astype(np.float32)
X64 = X.astype(np.float64)


@pytest.mark.parametrize("name, exact, bound", [
    ("exp_le0_f32", np.exp, 3e-7),
    ("sigmoid_f32", lambda x: 1 / (1 + np.exp(-x)), 3e-7),
    ("tanh_f32", np.tanh, 3e-7),
    ("erfc_f32", _erfc, 1e-5),          # float32 z^2 in exp(-z^2) costs relative accuracy at z > 8
])
def test_relative_error(name, exact, bound):
    f = _helpers()[name]
    x = X[X <= 0] if name == "exp_le0_f32" else X   # its domain
    out = np.empty_like(x)
    _apply(f, x, out)
    want = exact(x.astype(np.float64))
    normal = np.abs(want) > 1e-36          # below: float32 subnormals, flushed
    rel = np.abs(out.astype(np.float64) - want)[normal] / np.abs(want[normal])
    assert rel.max() < bound, (name, rel.max(), x[normal][rel.argmax()])
    assert np.all(np.abs(out[~normal]) < 1e-35)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _gelu(x):
    return 0.5 * x * _erfc(-x / math.sqrt(2.0))


@pytest.mark.parametrize("name, exact, bound", [("erf_f32", _erf, 4.5e-7), ("gelu_erf_f32", _gelu, 2.2e-7)])
def test_absolute_error(name, exact, bound):
    """erf_f32 and gelu_erf_f32: absolute error (GELU's over 1 + |x|) everywhere,
    GELU's relative error where 1 + erf does not cancel (x >= -1)."""
    out = np.empty_like(X)
    _apply(_helpers()[name], X, out)
    want = exact(X64)
    err = np.abs(out.astype(np.float64) - want) / (1 + np.abs(X64) if name == "gelu_erf_f32" else 1)
    assert err.max() < bound, (name, err.max(), X[err.argmax()])
    if name == "gelu_erf_f32":
        m = (X64 >= -1) & (np.abs(want) > 1e-36)
        assert (np.abs(out[m] - want[m]) / np.abs(want[m])).max() < 2e-5


def test_special_values():
    h = _helpers()
    vals = np.array([np.nan, np.inf, -np.inf], np.float32)
    out = np.empty_like(vals)
    _apply(h["tanh_f32"], vals, out)
    assert np.isnan(out[0]) and out[1] == 1 and out[2] == -1
    _apply(h["erfc_f32"], vals, out)
    assert np.isnan(out[0]) and out[1] == 0 and out[2] == 2
    _apply(h["erf_f32"], vals, out)
    assert np.isnan(out[0]) and out[1] == 1 and out[2] == -1
    _apply(h["gelu_erf_f32"], vals, out)
    assert np.isnan(out[0]) and out[1] == np.inf and np.isnan(out[2])   # -inf * 0, as the reference


@pytest.mark.parametrize("kind, attrs, helper", [("GELU", {}, "gelu_erf_f32"),
                                                 ("GELU", {"mode": "gelu_tanh"}, "tanh_f32"),
                                                 ("Tanh", {}, "tanh_f32"), ("Sigmoid", {}, "sigmoid_f32")])
def test_f32_kernels_call_the_vector_helpers(kind, attrs, helper):
    from graphc.builder import single_op_graph
    g = single_op_graph(kind, [("f32", [64])], [("f32", [64])], attrs)
    src = g.get_partitions()[0].compile().source
    assert f"{helper}(" in src.split("def kernel")[1] and f"from graphc.codegen.fastmath import {helper}\n" in src
    assert "math.tanh" not in src and "math.erf" not in src


def test_exp_le0_tails_and_specials():
    h = _helpers()
    vals = np.array([-87.5, -100.0, -np.inf, np.nan, 0.0, -0.0, -1e-45, -1e-40], np.float32)
    out = np.empty_like(vals)
    _apply(h["exp_le0_f32"], vals, out)
    assert list(out[:3]) == [0, 0, 0] and np.isnan(out[3])
    assert list(out[4:]) == [1, 1, 1, 1]   # denormal arguments: exp(-tiny) rounds to 1
    _apply(h["sigmoid_f32"], np.array([np.nan, np.inf, -np.inf, -200, 200], np.float32), out[:5])
    assert np.isnan(out[0]) and list(out[1:5]) == [1, 0, 0, 1]


#: every class of float32: zeros, denormals, normals, infinities, NaNs of either sign
KEYS = np.concatenate([np.array([0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 1.2e-38, -1.2e-38, 3.4e38, -3.4e38,
                                 np.inf, -np.inf], np.float32),
                       np.random.default_rng(0).standard_normal(2000).astype(np.float32) * 1e3])


@njit(error_model="numpy")
def _keys(f, g, x, k, back):
    for i in range(x.size):
        k[i] = f(x[i])
        back[i] = g(k[i])


def test_keys_order_as_the_floats():
    h = _helpers()
    k, back = np.empty(KEYS.size, np.int32), np.empty_like(KEYS)
    _keys(h["key_f32"], h["f32_of_key"], KEYS, k, back)
    assert np.array_equal(back.view(np.uint32), KEYS.view(np.uint32))   # exact round trip, -0 too
    order = np.lexsort((~np.signbit(KEYS), KEYS))   # -0 before +0
    assert np.all(np.diff(k[order].astype(np.int64)) >= 0)   # keys sorted as the floats
    pairs = KEYS[order]
    strict = pairs[1:] > pairs[:-1]
    assert np.all(np.diff(k[order].astype(np.int64))[strict] > 0)
    nan = np.array([np.nan], np.float32)
    kn, bn = np.empty(1, np.int32), np.empty_like(nan)
    _keys(h["key_f32"], h["f32_of_key"], nan, kn, bn)
    assert kn[0] > k.max() and np.isnan(bn[0])   # a NaN (sign clear) is above +inf: a max keeps it


@njit(error_model="numpy")
def _key_max(step, key, back, x):
    m = key(np.float32(-np.inf))
    for i in range(x.size):
        m = step(m, x[i])
    return back(m)


@pytest.mark.parametrize("vals", [KEYS, KEYS[KEYS < 0], np.array([-np.inf, -np.inf], np.float32),
                                  np.array([1e-45, -1e-45, 0.0], np.float32), np.array([3.0, np.nan, 5.0], np.float32)])
def test_key_max_is_numpys_max(vals):
    h = _helpers()
    got = _key_max(h["key_max_f32"], h["key_f32"], h["f32_of_key"], vals)
    want = vals.max()
    assert (np.isnan(got) and np.isnan(want)) or got == want


@pytest.mark.parametrize("values", [
    [3e38, 3e38],                                      # the f32 run overflows: summed again in f64
    [3e38] * 700 + [-3e38] * 700,                      # two runs of 1024, each overflowing, cancelling
    [3e38] * 1024 + [1.0] * 5,                         # one run overflowing, one not
    [np.inf, 1.0], [np.inf, -np.inf], [np.nan, 1.0], [1.5] * 3000, []])
def test_fsum32_runs_that_overflow_f32(values):
    """fsum32 adds f32 runs in f64: a run whose f32 sum overflows (or holds inf or
    NaN) is summed again in f64, so the sum is the f64 one (exact for these)."""
    from graphc.codegen.fastmath import fsum32
    buf = np.array(values, np.float32)
    with np.errstate(invalid="ignore"):
        want = buf.astype(np.float64).sum()
    got = fsum32(buf, np.int64(buf.size))
    assert got == want or (np.isnan(want) and np.isnan(got)), (got, want)
