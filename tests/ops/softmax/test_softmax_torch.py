"""SoftMax, LogSoftmax and their backward ops against PyTorch (float64 torch on the very
values graphc reads, compared at each output's dtype), and float64 finite-difference
gradchecks of the backward ops against their forward references."""
import numpy as np
import pytest

from graphc.tolerances import ORACLE
from support import NP, assert_close, assert_grad_close, data, n64, numeric_grad, reference64, run_single, t64

torch = pytest.importorskip("torch")
F = torch.nn.functional

SHAPE = (2, 3, 4)


# --------------------------------------------------------------------- SoftMax
@pytest.mark.parametrize("src, dst", [("f32", "f32"), ("f32", "bf16"), ("f32", "f16"), ("bf16", "bf16"),
                                      ("bf16", "f32"), ("f16", "f16"), ("f16", "f32")])
@pytest.mark.parametrize("axis", [1, -1, 0])
def test_softmax(src, dst, axis):
    rng = np.random.default_rng(0)
    x = data(rng, SHAPE, src) * 3
    stats_shape = [1 if i == axis % 3 else d for i, d in enumerate(SHAPE)]
    y, stats = run_single("SoftMax", [x], [(dst, SHAPE), ("f32", stats_shape)], {"axis": axis})
    assert_close(y, n64(F.softmax(t64(x), dim=axis)), dst, ORACLE, "dst")
    assert_close(stats, n64(torch.logsumexp(t64(x), dim=axis, keepdim=True)), "f32", ORACLE, "stats")


@pytest.mark.parametrize("dst, diff_src", [("f32", "f32"), ("bf16", "bf16"), ("bf16", "f32"), ("f16", "f16"),
                                           ("f16", "f32")])
@pytest.mark.parametrize("axis", [1, -1])
def test_softmax_backward(dst, diff_src, axis):
    rng = np.random.default_rng(1)
    y = n64(F.softmax(t64(data(rng, SHAPE)), dim=axis)).astype(NP[dst])
    dy = data(rng, SHAPE, dst)
    (dx,) = run_single("SoftMaxBackward", [dy, y], [(diff_src, SHAPE)], {"axis": axis})
    # torch's softmax backward kernel, which (like the op) takes the forward output
    expected = torch.ops.aten._softmax_backward_data(t64(dy), t64(y), axis, torch.float64)
    assert_close(dx, n64(expected), diff_src, ORACLE, "diff_src")


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("axis", [1, -1])
def test_logsoftmax(dt, axis):
    rng = np.random.default_rng(2)
    x = data(rng, SHAPE, dt) * 3
    (y,) = run_single("LogSoftmax", [x], [(dt, SHAPE)], {"axis": axis})
    assert_close(y, n64(F.log_softmax(t64(x), dim=axis)), dt, ORACLE, "dst")


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("axis", [1, -1])
def test_logsoftmax_backward(dt, axis):
    rng = np.random.default_rng(3)
    dst = n64(F.log_softmax(t64(data(rng, SHAPE)), dim=axis)).astype(NP[dt])
    dy = data(rng, SHAPE, dt)
    (dx,) = run_single("LogSoftmaxBackward", [dy, dst], [(dt, SHAPE)], {"axis": axis})
    expected = torch.ops.aten._log_softmax_backward_data(t64(dy), t64(dst), axis, torch.float64)
    assert_close(dx, n64(expected), dt, ORACLE, "diff_src")


# ------------------------------------------------------- finite differences
@pytest.mark.parametrize("forward, backward, attrs", [
    ("SoftMax", "SoftMaxBackward", {"axis": 1}), ("SoftMax", "SoftMaxBackward", {"axis": -1}),
    ("LogSoftmax", "LogSoftmaxBackward", {"axis": 0}), ("LogSoftmax", "LogSoftmaxBackward", {"axis": -1})])
def test_softmax_gradcheck(forward, backward, attrs):
    rng = np.random.default_rng(7)
    x, dy = rng.standard_normal(SHAPE), rng.standard_normal(SHAPE)

    def f(v):
        return reference64(forward, [v], [("f32", SHAPE)], attrs)[0]

    (dx,) = reference64(backward, [dy, f(x)], [("f32", SHAPE)], attrs)
    assert_grad_close(dx, numeric_grad(f, x, dy), what="diff_src")
