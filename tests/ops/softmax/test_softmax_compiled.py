"""Generated kernels of SoftMax (with stats, inf_as_zero), SoftMaxBackward, LogSoftmax and
LogSoftmaxBackward against graphc's numpy reference: every dtype row of their schemas,
any axis, ranks 1 to 5, non-dense strides, shapes past the threading threshold, and
the corpus graphs."""
import numpy as np
import pytest

import graphc
from graphc.fill import make_inputs

from support import check_compiled, corpus_files, one_op, strides


def stats_shape(shape, axis):
    s = list(shape)
    s[axis] = 1
    return s


# ----------------------------------------------------------------- SoftMax
def softmax(shape, axis, dt=("f32", "f32"), stats=False, mode="none", src_strides=None):
    outs = [(dt[1], shape)] + ([("f32", stats_shape(shape, axis))] if stats else [])
    return one_op("SoftMax", [(dt[0], shape, src_strides)], outs, {"axis": axis, "mode": mode})


@pytest.mark.parametrize("shape,axis,stats", [
    ([7], 0, True), ([4, 9], 1, False), ([2, 6, 5, 7], 1, True), ([2, 6, 5, 7], -1, False),
    ([2, 3, 1, 4, 5], 0, True)])
def test_softmax(shape, axis, stats):
    check_compiled(softmax(shape, axis, stats=stats))


@pytest.mark.parametrize("dt", [("f32", "bf16"), ("f32", "f16"), ("bf16", "bf16"), ("bf16", "f32"),
                                ("f16", "f16"), ("f16", "f32")])
def test_softmax_dtypes(dt):
    check_compiled(softmax([3, 4, 6], 1, dt, stats=True))


@pytest.mark.parametrize("mode", ["none", "inf_as_zero"])
@pytest.mark.parametrize("axis", [1, 2])
def test_softmax_infinite_rows(mode, axis):
    """A row all -inf: NaN, or 0 (stats -inf) with inf_as_zero; a row partly -inf."""
    g = softmax([2, 5, 6], axis, stats=True, mode=mode)
    inputs = make_inputs(g)
    x = np.moveaxis(inputs[0], axis, -1)
    x[0, 1] = -np.inf
    x[1, 2, ::2] = -np.inf
    check_compiled(g, inputs)


@pytest.mark.parametrize("kind", ["SoftMax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [1, 2])
def test_softmax_nan_inf_and_wide_rows(kind, axis):
    """NaN and +inf propagate as in the reference (exp(src - max) is a polynomial
    in the kernel, not libm's exp); a row spanning [-200, 0] underflows."""
    shape = [2, 5, 6]
    g = one_op(kind, [("f32", shape)], [("f32", shape)], {"axis": axis})
    inputs = make_inputs(g)
    x = np.moveaxis(inputs[0], axis, -1)
    x[0, 1, 3] = np.nan
    x[0, 2, 0] = np.inf
    x[1, 3] = np.linspace(-200, 0, x.shape[-1])
    check_compiled(g, inputs)


def test_softmax_strided():
    shape = [3, 5, 8]
    check_compiled(softmax(shape, 2, stats=True, src_strides=strides(shape, [2, 0, 1], pad=2)))


@pytest.mark.parametrize("shape,axis", [([2, 400, 400], 1), ([2100, 128], 1), ([4, 256, 256], 0)])
def test_softmax_parallel(shape, axis):
    """Threads over groups (reduced lane or kept lane) and over rows (few groups)."""
    check_compiled(softmax(shape, axis, stats=True), parallel=True)


def softmax_backward(kind, shape, axis, dt=("f32", "f32"), dst_strides=None):
    ins = [(dt[0], shape), (dt[0], shape, dst_strides)]
    return one_op(kind, ins, [(dt[1], shape)], {"axis": axis})


@pytest.mark.parametrize("shape,axis", [([7], 0), ([2, 6, 5, 7], 1), ([4, 9], -1), ([2, 3, 1, 4, 5], 3)])
@pytest.mark.parametrize("kind", ["SoftMaxBackward", "LogSoftmaxBackward"])
def test_softmax_backward(kind, shape, axis):
    check_compiled(softmax_backward(kind, shape, axis))


@pytest.mark.parametrize("kind,dt", [
    ("SoftMaxBackward", ("bf16", "bf16")), ("SoftMaxBackward", ("bf16", "f32")), ("SoftMaxBackward", ("f16", "f16")),
    ("SoftMaxBackward", ("f16", "f32")), ("LogSoftmaxBackward", ("bf16", "bf16")),
    ("LogSoftmaxBackward", ("f16", "f16"))])
def test_softmax_backward_dtypes(kind, dt):
    check_compiled(softmax_backward(kind, [3, 4, 6], 1, dt))


@pytest.mark.parametrize("kind", ["SoftMaxBackward", "LogSoftmaxBackward"])
def test_softmax_backward_strided(kind):
    shape = [3, 5, 8]
    check_compiled(softmax_backward(kind, shape, 1, dst_strides=strides(shape, [1, 2, 0])))


def log_softmax(shape, axis, dt="f32", src_strides=None):
    return one_op("LogSoftmax", [(dt, shape, src_strides)], [(dt, shape)], {"axis": axis})


@pytest.mark.parametrize("shape,axis", [([7], 0), ([2, 6, 5, 7], 1), ([4, 9], -1), ([2, 3, 1, 4, 5], 0)])
def test_log_softmax(shape, axis):
    check_compiled(log_softmax(shape, axis))


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_log_softmax_dtypes(dt):
    check_compiled(log_softmax([3, 4, 6], -1, dt))


def test_log_softmax_strided():
    shape = [3, 5, 8]
    check_compiled(log_softmax(shape, 0, src_strides=strides(shape, [2, 1, 0])))


@pytest.mark.parametrize("path", corpus_files(["softmax", "softmax_w_stats", "softmax_bwd", "softmax_bwd_d_3d",
                                               "logsoftmax", "logsoftmax_bwd"]), ids=lambda p: p.stem)
def test_softmax_corpus(path, corpus):
    check_compiled(graphc.load_graph(path))
