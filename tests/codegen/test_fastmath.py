"""The float32 transcendental helpers kernels call (graphc/codegen/fastmath.py)
against float64 libm over a dense range, the tails and the special values, and
the kernels calling them: vectorized (no scalar loop left) for float32 math."""
import math

import numpy as np
import pytest
from numba import njit

from graphc.codegen import fastmath
from graphc.codegen.runtime import bits_to_f32, f32_to_bits

_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _helpers():
    ns = {"np": np, "njit": njit, "bits_to_f32": bits_to_f32, "f32_to_bits": f32_to_bits}
    for name in ("exp_neg_f32", "tanh_f32", "erfc_f32", "gelu_erf_f32"):
        exec(fastmath.HELPERS[name][1].replace("cache=True", "cache=False"), ns)
    return ns


@njit(error_model="numpy")
def _apply(f, x, out):
    for i in range(x.size):
        out[np.uint64(i)] = f(x[np.uint64(i)])


X = np.concatenate([np.linspace(-20, 20, 400_001), np.geomspace(1e-30, 20, 20_001),
                    -np.geomspace(1e-30, 20, 20_001), [0.0, -0.0]]).astype(np.float32)
X64 = X.astype(np.float64)


@pytest.mark.parametrize("name, exact, bound", [
    ("tanh_f32", np.tanh, 3e-7),
    ("erfc_f32", _erfc, 1e-5),          # float32 z^2 in exp(-z^2) costs relative accuracy at z > 8
    ("gelu_erf_f32", lambda x: 0.5 * x * _erfc(-x / math.sqrt(2.0)), 2e-5),
])
def test_relative_error(name, exact, bound):
    f = _helpers()[name]
    out = np.empty_like(X)
    _apply(f, X, out)
    want = exact(X64)
    normal = np.abs(want) > 1e-36          # below: float32 subnormals, flushed
    rel = np.abs(out.astype(np.float64) - want)[normal] / np.abs(want[normal])
    assert rel.max() < bound, (name, rel.max(), X[normal][rel.argmax()])
    assert np.all(np.abs(out[~normal]) < 1e-35)


def test_special_values():
    h = _helpers()
    vals = np.array([np.nan, np.inf, -np.inf], np.float32)
    out = np.empty_like(vals)
    _apply(h["tanh_f32"], vals, out)
    assert np.isnan(out[0]) and out[1] == 1 and out[2] == -1
    _apply(h["erfc_f32"], vals, out)
    assert np.isnan(out[0]) and out[1] == 0 and out[2] == 2
    _apply(h["gelu_erf_f32"], vals, out)
    assert np.isnan(out[0]) and out[1] == np.inf and np.isnan(out[2])   # -inf * 0, as the reference


@pytest.mark.parametrize("kind, attrs, helper", [("GELU", {}, "gelu_erf_f32"),
                                                 ("GELU", {"mode": "gelu_tanh"}, "tanh_f32"),
                                                 ("Tanh", {}, "tanh_f32"), ("Sigmoid", {}, "sigmoid_f32")])
def test_f32_kernels_call_the_vector_helpers(kind, attrs, helper):
    from graphc.builder import single_op_graph
    g = single_op_graph(kind, [("f32", [64])], [("f32", [64])], attrs)
    src = g.get_partitions()[0].compile().source
    assert f"{helper}(" in src.split("def kernel")[1] and f"def {helper}(" in src
    assert "math.tanh" not in src and "math.erf" not in src
