"""BiasAdd, PReLU and their backward ops against PyTorch (float64 torch on the very values
graphc reads, compared at each output's dtype), and float64 finite-difference
gradchecks of the backward ops against their forward references."""
import numpy as np
import pytest

from graphc.tolerances import ORACLE
from support import assert_close, assert_grad_close, data, n64, numeric_grad, reference64, run_single, t64

torch = pytest.importorskip("torch")
F = torch.nn.functional

SHAPE = (2, 3, 4)


# ------------------------------------------------------------- BiasAdd, PReLU
def channel_axis(fmt, ndim):
    return ndim - 1 if fmt == "NXC" else 1


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
def test_bias_add_and_backward(dt, fmt):
    rng = np.random.default_rng(4)
    axis = channel_axis(fmt, 3)
    c = SHAPE[axis]
    x, bias, dy = data(rng, SHAPE, dt), data(rng, [c], dt), data(rng, SHAPE, dt)
    xt, bt = t64(x), t64(bias, grad=True)
    view = [c if i == axis else 1 for i in range(3)]
    y = xt + bt.reshape(view)
    y.backward(t64(dy))
    (got,) = run_single("BiasAdd", [x, bias], [(dt, SHAPE)], {"data_format": fmt})
    assert_close(got, n64(y), dt, ORACLE, "dst")
    (db,) = run_single("BiasAddBackward", [dy], [(dt, [c])], {"data_format": fmt})
    assert_close(db, n64(bt.grad), dt, ORACLE, "diff_bias")


def torch_prelu(x, slope, view):
    """PReLU in torch: F.prelu for a per-channel slope at dim 1, else by where."""
    if view is None:
        return F.prelu(x, slope)
    return torch.where(x >= 0, x, slope.reshape(view) * x)


# (slope shape, data_format, per_channel_broadcast, view of the slope for torch or None for F.prelu)
PRELU_CASES = [
    ((3,), "NCX", True, None),
    ((4,), "NXC", True, (1, 1, 4)),
    ((1,), "NXC", True, None),
    ((4,), "NCX", False, (1, 1, 4)),
    ((3, 1), "NCX", True, (1, 3, 1)),
    ((3, 4), "NXC", True, (1, 3, 4)),
    (SHAPE, "NCX", True, SHAPE),
]


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("slope_shape, fmt, per_channel, view", PRELU_CASES)
def test_prelu(dt, slope_shape, fmt, per_channel, view):
    rng = np.random.default_rng(5)
    x, slope = data(rng, SHAPE, dt), data(rng, slope_shape, dt)
    (y,) = run_single("PReLU", [x, slope], [(dt, SHAPE)], {"data_format": fmt, "per_channel_broadcast": per_channel})
    assert_close(y, n64(torch_prelu(t64(x), t64(slope), view)), dt, ORACLE, "dst")


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("slope_shape, fmt, per_channel, view",
                         [c for c in PRELU_CASES if c[2] or len(c[0]) > 1])   # the backward op has no attribute
def test_prelu_backward(dt, slope_shape, fmt, per_channel, view):
    rng = np.random.default_rng(6)
    x, slope, dy = data(rng, SHAPE, dt), data(rng, slope_shape, dt), data(rng, SHAPE, dt)
    xt, st = t64(x, grad=True), t64(slope, grad=True)
    torch_prelu(xt, st, view).backward(t64(dy))
    dx, ds = run_single("PReLUBackward", [x, slope, dy], [(dt, SHAPE), (dt, list(slope_shape))], {"data_format": fmt})
    assert_close(dx, n64(xt.grad), dt, ORACLE, "diff_src")
    assert_close(ds, n64(st.grad), dt, ORACLE, "diff_slope")


@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
def test_bias_add_backward_gradcheck(fmt):
    rng = np.random.default_rng(8)
    c = SHAPE[channel_axis(fmt, 3)]
    x, bias, dy = rng.standard_normal(SHAPE), rng.standard_normal(c), rng.standard_normal(SHAPE)
    attrs = {"data_format": fmt}

    def f(b):
        return reference64("BiasAdd", [x, b], [("f32", SHAPE)], attrs)[0]

    (db,) = reference64("BiasAddBackward", [dy], [("f32", [c])], attrs)
    assert_grad_close(db, numeric_grad(f, bias, dy), what="diff_bias")


@pytest.mark.parametrize("slope_shape, fmt", [((3,), "NCX"), ((4,), "NXC"), ((1,), "NXC"), ((3, 1), "NCX"),
                                              (SHAPE, "NXC")])
def test_prelu_backward_gradcheck(slope_shape, fmt):
    rng = np.random.default_rng(9)
    x, slope, dy = rng.standard_normal(SHAPE), rng.standard_normal(slope_shape), rng.standard_normal(SHAPE)
    attrs = {"data_format": fmt}

    def f(x, s):
        return reference64("PReLU", [x, s], [("f32", SHAPE)], attrs)[0]

    dx, ds = reference64("PReLUBackward", [x, slope, dy], [("f32", SHAPE), ("f32", list(slope_shape))], attrs)
    assert_grad_close(dx, numeric_grad(lambda v: f(v, slope), x, dy), what="diff_src")
    assert_grad_close(ds, numeric_grad(lambda v: f(x, v), slope, dy), what="diff_slope")
