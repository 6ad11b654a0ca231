"""Reduction ops (ReduceL1 ... ReduceSum): schema rules, shape inference, reference values."""
import math

import numpy as np
import pytest

from graphc.builder import single_op_graph
from graphc.errors import InvalidDataType, InvalidGraphOp, InvalidShape, RuntimeFault
from support import inferred_shape, run_single

REDUCE = ["ReduceL1", "ReduceL2", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum"]


# ------------------------------------------------------------------- reductions
X = np.array([[1.0, -2.0], [3.0, -4.0]], np.float32)
REDUCED_OVER_1 = {"ReduceL1": [3, 7], "ReduceL2": [math.sqrt(5), 5], "ReduceMax": [1, 3], "ReduceMean": [-0.5, -0.5],
                  "ReduceMin": [-2, -4], "ReduceProd": [-2, -12], "ReduceSum": [-1, -1]}
REDUCED_ALL = {"ReduceL1": 10, "ReduceL2": math.sqrt(30), "ReduceMax": 3, "ReduceMean": -0.5, "ReduceMin": -4,
               "ReduceProd": 24, "ReduceSum": -2}


@pytest.mark.parametrize("kind", REDUCE)
def test_reduce_values(kind):
    (y,) = run_single(kind, [X], [("f32", [-1])], {"axes": [-1]})
    np.testing.assert_allclose(y, np.array(REDUCED_OVER_1[kind], np.float32), rtol=1e-7)
    (y,) = run_single(kind, [X], [("f32", [-1, -1])], {"axes": [1, 0], "keep_dims": True})
    np.testing.assert_allclose(y, np.full((1, 1), REDUCED_ALL[kind], np.float32), rtol=1e-7)


@pytest.mark.parametrize("kind", REDUCE)
def test_reduce_empty_axes_is_identity(kind):
    src = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    for keep in (False, True):
        (y,) = run_single(kind, [src], [("f32", [-1, -1])], {"keep_dims": keep})
        np.testing.assert_array_equal(y, src)


def test_reduce_shape_inference():
    src = ("f32", [2, -1, 4, 5])
    assert inferred_shape("ReduceSum", [src], ("f32", [-1, -1]), {"axes": [0, -2]}) == (-1, 5)
    assert inferred_shape("ReduceSum", [src], ("f32", [-1] * 4), {"axes": [0, -2], "keep_dims": True}) == (1, -1, 1, 5)
    assert inferred_shape("ReduceMax", [src], ("f32", [-1] * 4)) == (2, -1, 4, 5)


@pytest.mark.parametrize("axes", [[2], [-3], [0, 0], [1, -1]])
def test_reduce_bad_axes_attribute(axes):
    with pytest.raises(InvalidGraphOp):
        single_op_graph("ReduceSum", [("f32", [2, 3])], [("f32", [-1])], {"axes": axes})


def test_reduce_axes_input():
    src = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    # the output shape depends on the data: only the rank and the 1-dims are known
    assert inferred_shape("ReduceSum", [("f32", [2, 3, 4]), ("s32", [2])], ("f32", [-1])) == (-1,)
    assert inferred_shape("ReduceSum", [("f32", [2, 1, 4]), ("s32", [2])], ("f32", [-1] * 3),
                    {"keep_dims": True}) == (-1, 1, -1)
    (y,) = run_single("ReduceSum", [src, np.array([2, -3], np.int32)], [("f32", [-1])])
    np.testing.assert_array_equal(y, src.sum(axis=(0, 2)))
    (y,) = run_single("ReduceMax", [src, np.array([1], np.int32)], [("f32", [-1, -1, -1])], {"keep_dims": True})
    np.testing.assert_array_equal(y, src.max(axis=1, keepdims=True))
    (y,) = run_single("ReduceMean", [src, np.zeros(0, np.int32)], [("f32", [-1, -1, -1])])
    np.testing.assert_array_equal(y, src)
    for bad in ([3], [1, -2]):
        with pytest.raises(RuntimeFault):
            run_single("ReduceSum", [src, np.array(bad, np.int32)], [("f32", [-1] * (3 - len(bad)))])


def test_reduce_axes_input_rules():
    with pytest.raises(InvalidGraphOp):  # both the attribute and the input
        single_op_graph("ReduceSum", [("f32", [2, 3]), ("s32", [1])], [("f32", [-1])], {"axes": [0]})
    with pytest.raises(InvalidShape):
        single_op_graph("ReduceSum", [("f32", [2, 3]), ("s32", [1, 1])], [("f32", [-1])])
    with pytest.raises(InvalidDataType):
        single_op_graph("ReduceSum", [("f32", [2, 3]), ("f32", [1])], [("f32", [-1])])
    with pytest.raises(InvalidDataType):
        single_op_graph("ReduceSum", [("f32", [2, 3])], [("bf16", [-1])], {"axes": [0]})


def test_reduce_over_zero_elements():
    src = np.zeros((0, 3), np.float32)
    (mx,) = run_single("ReduceMax", [src], [("f32", [-1])], {"axes": [0]})
    (s,) = run_single("ReduceSum", [src], [("f32", [-1])], {"axes": [0]})
    (p,) = run_single("ReduceProd", [src], [("f32", [-1])], {"axes": [0]})
    np.testing.assert_array_equal(mx, [-np.inf] * 3)
    np.testing.assert_array_equal(s, [0, 0, 0])
    np.testing.assert_array_equal(p, [1, 1, 1])
