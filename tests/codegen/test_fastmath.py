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
                 "key_max_f32", "f32_of_key", "exp_f32", "expm1_f32", "log_f32", "log1p_f32", "softplus_f32",
                 "mish_grad_f32", "exp_sub_f32", "exp_scaled_f32", "sigmoid_sub_f32"):
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


@pytest.mark.parametrize("kind, attrs, helper", [
    ("GELU", {}, "gelu_erf_f32"), ("GELU", {"mode": "gelu_tanh"}, "tanh_f32"), ("Tanh", {}, "tanh_f32"),
    ("Sigmoid", {}, "sigmoid_f32"), ("Exp", {}, "exp_f32"), ("Elu", {"alpha": 0.5}, "expm1_f32"),
    ("Log", {}, "log_f32"), ("SoftPlus", {"beta": 2.0}, "softplus_f32"), ("Mish", {}, "softplus_f32"),
    ("EluBackward", {"alpha": 0.5, "use_dst": False}, "exp_sub_f32"), ("GELUBackward", {}, "erf_f32"),
    ("MishBackward", {}, "mish_grad_f32"),
    ("SoftPlusBackward", {"beta": 2.0}, "sigmoid_sub_f32"), ("SigmoidBackward", {"use_dst": False}, "sigmoid_sub_f32")])
def test_f32_kernels_call_the_vector_helpers(kind, attrs, helper):
    """float32 math calls graphc's vectorizable helpers: no libm or float64 runtime
    call is left in the kernel (a call keeps the loop scalar)."""
    from graphc.builder import single_op_graph
    ins = [("f32", [64])] * (2 if kind.endswith("Backward") else 1)
    g = single_op_graph(kind, ins, [("f32", [64])], attrs)
    src = g.get_partitions()[0].compile().source
    body = src.split("def kernel")[1]
    assert f"{helper}(" in body and f"from graphc.codegen.fastmath import {helper}\n" in src
    for libm in ("math.", "np.log(", "np.exp(", "softplus(x", "mish_grad(", "gelu_tanh_grad("):
        assert libm not in body, (libm, body)


def _f64(fn):
    return lambda x: fn(np.asarray(x, np.float64))


def _softplus(x, beta=1.0):
    bx = beta * x
    return np.where(bx > 0, x + np.log1p(np.exp(-np.abs(bx))) / beta, np.log1p(np.exp(-np.abs(bx))) / beta)


def _mish_grad(x):
    t = np.tanh(_softplus(x))
    return t + x * (1 - t * t) / (1 + np.exp(-x))


#: float32 arguments: dense around 0, log-spaced over the whole range, random bit patterns
WIDE = np.concatenate([np.linspace(-100, 100, 200_001), np.geomspace(1e-38, 3e38, 50_001),
                       -np.geomspace(1e-38, 3e38, 50_001)]).astype(np.float32)
_RANDOM = np.random.default_rng(1).integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
WIDE = np.concatenate([WIDE, _RANDOM[np.isfinite(_RANDOM)]])


@pytest.mark.parametrize("name, exact, bound, floor", [
    ("exp_f32", np.exp, 1.2e-7, 1.2e-38), ("expm1_f32", np.expm1, 1.8e-7, 1.2e-38),
    ("log_f32", np.log, 1.2e-7, 1.2e-38), ("log1p_f32", np.log1p, 2.5e-7, 1.2e-38),
    ("softplus_f32", _softplus, 3e-7, 1.7e-38)])
def test_relative_error_over_the_float32_range(name, exact, bound, floor):
    """The whole-range helpers against float64 numpy where the float64 result is a
    normal float32 (below: subnormal results flush to 0, as the other helpers;
    softplus's exp_neg_f32 flushes below exp(-87))."""
    f = _helpers()[name]
    out = np.empty_like(WIDE)
    if name == "softplus_f32":
        _apply_beta(f, WIDE, np.float32(1.0), out)
    else:
        _apply(f, WIDE, out)
    with np.errstate(all="ignore"):
        want = exact(WIDE.astype(np.float64))
    normal = np.isfinite(want) & (np.abs(want) >= floor) & (np.abs(want) <= 3.4e38)
    rel = np.abs(out[normal].astype(np.float64) - want[normal]) / np.abs(want[normal])
    assert rel.max() < bound, (name, rel.max(), WIDE[normal][rel.argmax()])
    tiny = np.isfinite(want) & (np.abs(want) < floor)
    assert np.all(np.abs(out[tiny]) < floor)
    with np.errstate(all="ignore"):
        want32 = want.astype(np.float32)
    rest = ~normal & ~tiny
    assert np.array_equal(out[rest], want32[rest], equal_nan=True), (WIDE[rest], out[rest], want32[rest])


@njit(error_model="numpy")
def _apply_beta(f, x, beta, out):
    for i in range(x.size):
        out[np.uint64(i)] = f(x[np.uint64(i)], beta)


@pytest.mark.parametrize("beta", [2.5, -0.5])
def test_softplus_with_beta(beta):
    """softplus_f32 with beta != 1: relative error for |beta x| <= 20, where the
    float32 product beta * x carries up to |beta x| 2^-24 (1.2e-6) into exp's result;
    absolute error of the result's scale elsewhere."""
    out = np.empty_like(WIDE)
    _apply_beta(_helpers()["softplus_f32"], WIDE, np.float32(beta), out)
    with np.errstate(all="ignore"):
        want = _softplus(WIDE.astype(np.float64), beta)
    near = np.abs(beta * WIDE.astype(np.float64)) <= 20
    assert (np.abs(out[near] - want[near]) / np.abs(want[near])).max() < 1.5e-6
    far = ~near & np.isfinite(want)
    assert (np.abs(out[far] - want[far]) / np.maximum(np.abs(want[far]), 1.0)).max() < 1e-6


@pytest.mark.parametrize("name, exact", [("mish_grad_f32", _mish_grad)])
def test_gradient_helpers(name, exact):
    """The float32 gradient of Mish against its float64 formula:
    absolute error below 3e-7 (the slopes are of order 1; near their zeros relative
    error is not the measure), NaN where the formula gives NaN (+-inf)."""
    x = np.concatenate([np.linspace(-30, 30, 200_001), np.array([1e10, -1e10, 3e38, -3e38, 0.0], np.float64)])
    x32 = x.astype(np.float32)
    out = np.empty_like(x32)
    _apply(_helpers()[name], x32, out)
    with np.errstate(all="ignore"):
        want = exact(x32.astype(np.float64))
    assert np.abs(out - want).max() < 3e-7, (name, np.abs(out - want).max(), x32[np.abs(out - want).argmax()])
    specials = np.array([np.inf, -np.inf, np.nan], np.float32)
    got = np.empty_like(specials)
    _apply(_helpers()[name], specials, got)
    assert np.isnan(got).all()


def test_exp_sub_keeps_subnormal_results():
    """exp_sub_f32 on x <= 0: relative error 1.2e-7 where exp(x) is a normal float32,
    within one subnormal step (2^-149) below, 0 under -104; NaN stays NaN."""
    x = np.concatenate([-np.geomspace(1e-30, 110, 200_001), [0.0, -0.0, -np.inf, np.nan]]).astype(np.float32)
    out = np.empty_like(x)
    _apply(_helpers()["exp_sub_f32"], x, out)
    want = np.exp(x.astype(np.float64))
    normal = want >= 1.2e-38
    assert (np.abs(out[normal] - want[normal]) / want[normal]).max() < 1.2e-7
    sub = ~normal & ~np.isnan(want)
    assert np.abs(out[sub].astype(np.float64) - want[sub]).max() <= 2.0 ** -149
    assert np.any(out[sub] > 0) and np.isnan(out[-1]) and out[-2] == 0


def test_whole_range_specials():
    h = _helpers()
    vals = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 88.8, 89.0, -87.4, -88.0, 1e-45], np.float32)
    out = np.empty_like(vals)
    with np.errstate(all="ignore"):
        for name, fn in (("exp_f32", np.exp), ("expm1_f32", np.expm1), ("log_f32", np.log), ("log1p_f32", np.log1p)):
            _apply(h[name], vals, out)
            want = fn(vals.astype(np.float64)).astype(np.float32)
            flushed = np.abs(want) < 1.2e-38
            assert np.array_equal(out[~flushed], want[~flushed], equal_nan=True), (name, vals, out, want)
            assert np.all((out[flushed] == 0) | (out[flushed] == want[flushed]))


def test_exp_le0_tails_and_specials():
    h = _helpers()
    vals = np.array([-87.7, -100.0, -np.inf, np.nan, 0.0, -0.0, -1e-45, -1e-40, -87.0, -87.5], np.float32)
    out = np.empty_like(vals)
    _apply(h["exp_le0_f32"], vals, out)
    assert list(out[:3]) == [0, 0, 0] and np.isnan(out[3])
    # exp(-87) is a normal float32, exp(-87.5) a subnormal one: both kept
    assert np.abs(out[8:] - np.exp(vals[8:].astype(np.float64))).max() <= 2.0 ** -149 * 4
    out = out[:8]
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
