"""SoftMax, LogSoftmax and their backward ops: schema rules, shape inference and
hand-checked values."""
import numpy as np
import pytest

from graphc.builder import single_op_graph
from graphc.errors import InvalidDataType, InvalidGraphOp, InvalidShape
from graphc.ops import get_schema
from support import inferred_shapes, run_single


# --------------------------------------------------------------------- SoftMax
def test_softmax_defaults_and_stats_shape():
    assert get_schema("SoftMax").attr_spec("axis").default == 1
    assert get_schema("LogSoftmax").attr_spec("axis").default == -1
    assert inferred_shapes("SoftMax", [("f32", [2, 3, 4])], [("f32", [-1] * 3), ("f32", [-1] * 3)]) == \
        [(2, 3, 4), (2, 1, 4)]
    assert inferred_shapes("SoftMax", [("f32", [2, 3, 4])], [("f32", [-1] * 3), ("f32", [-1] * 3)], {"axis": -1}) == \
        [(2, 3, 4), (2, 3, 1)]


@pytest.mark.parametrize("kind", ["SoftMax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [2, -3])
def test_axis_out_of_range(kind, axis):
    with pytest.raises(InvalidGraphOp):
        single_op_graph(kind, [("f32", [2, 3])], [("f32", [2, 3])], {"axis": axis})


def test_softmax_mode_choices():
    with pytest.raises(InvalidGraphOp):
        single_op_graph("SoftMax", [("f32", [2, 3])], [("f32", [2, 3])], {"mode": "inf"})


@pytest.mark.parametrize("src, dst, stats, ok", [
    ("f32", "bf16", "f32", True), ("f32", "f16", "f32", True), ("bf16", "f32", "f32", True),
    ("f16", "f32", "f32", True), ("bf16", "f16", "f32", False), ("f16", "bf16", "f32", False),
    ("bf16", "bf16", "bf16", False)])
def test_softmax_dtype_table(src, dst, stats, ok):
    args = ("SoftMax", [(src, [2, 3])], [(dst, [2, 3]), (stats, [2, 1])])
    if ok:
        single_op_graph(*args)
    else:
        with pytest.raises(InvalidDataType):
            single_op_graph(*args)


@pytest.mark.parametrize("dst, diff_dst, diff_src, ok", [
    ("bf16", "bf16", "f32", True), ("f16", "f16", "f32", True), ("f32", "f32", "bf16", False),
    ("bf16", "f32", "f32", False), ("f16", "f16", "bf16", False)])
def test_softmax_backward_dtype_table(dst, diff_dst, diff_src, ok):
    args = ("SoftMaxBackward", [(diff_dst, [2, 3]), (dst, [2, 3])], [(diff_src, [2, 3])])
    if ok:
        single_op_graph(*args)
    else:
        with pytest.raises(InvalidDataType):
            single_op_graph(*args)


def test_logsoftmax_same_dtype():
    with pytest.raises(InvalidDataType):
        single_op_graph("LogSoftmax", [("bf16", [2, 3])], [("f32", [2, 3])])
    with pytest.raises(InvalidDataType):
        single_op_graph("LogSoftmaxBackward", [("f32", [2, 3]), ("f32", [2, 3])], [("bf16", [2, 3])])


@pytest.mark.parametrize("kind", ["SoftMaxBackward", "LogSoftmaxBackward"])
def test_backward_shapes(kind):
    assert inferred_shapes(kind, [("f32", [2, -1]), ("f32", [-1, 3])], [("f32", [-1, -1])]) == [(2, 3)]
    with pytest.raises(InvalidShape):
        single_op_graph(kind, [("f32", [2, 3]), ("f32", [2, 4])], [("f32", [2, 3])])


def test_softmax_values_and_stats():
    x = np.array([[0.0, np.log(3.0)], [5.0, 5.0]], np.float32)
    y, stats = run_single("SoftMax", [x], [("f32", [2, 2]), ("f32", [2, 1])])
    np.testing.assert_allclose(y, [[0.25, 0.75], [0.5, 0.5]], rtol=1e-6)
    np.testing.assert_allclose(stats, [[np.log(4.0)], [5.0 + np.log(2.0)]], rtol=1e-6)


def test_softmax_all_minus_inf_rows():
    x = np.array([[-np.inf, -np.inf], [0.0, -np.inf]], np.float32)
    y, stats = run_single("SoftMax", [x], [("f32", [2, 2]), ("f32", [2, 1])], {"mode": "inf_as_zero"})
    np.testing.assert_array_equal(y, [[0.0, 0.0], [1.0, 0.0]])
    np.testing.assert_array_equal(stats, [[-np.inf], [0.0]])
    (y,) = run_single("SoftMax", [x], [("f32", [2, 2])])
    assert np.isnan(y[0]).all() and np.array_equal(y[1], [1.0, 0.0])


def test_logsoftmax_backward_values():
    dst = np.log(np.array([[0.25, 0.75]], np.float32))
    dy = np.array([[1.0, 3.0]], np.float32)
    (dx,) = run_single("LogSoftmaxBackward", [dy, dst], [("f32", [1, 2])])
    np.testing.assert_allclose(dx, [[1 - 0.25 * 4, 3 - 0.75 * 4]], atol=1e-6)
