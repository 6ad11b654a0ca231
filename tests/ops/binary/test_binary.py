"""Binary ops (Add ... SquaredDifference, GreaterEqual, Select): schema rules, shape
inference, reference values."""
import numpy as np
import pytest

from graphc.builder import single_op_graph
from graphc.errors import InvalidDataType, InvalidGraphOp, InvalidShape
from support import inferred_shape, run_single

BINARY = ["Add", "Subtract", "Multiply", "Divide", "Maximum", "Minimum", "SquaredDifference"]


# ----------------------------------------------------------------------- dtypes
@pytest.mark.parametrize("kind", ["Add", "Subtract"])
def test_add_subtract_accept_s32(kind):
    assert inferred_shape(kind, [("s32", [2]), ("s32", [2])], ("s32", [-1])) == (2,)


@pytest.mark.parametrize("kind", ["Multiply", "Divide", "Maximum", "Minimum", "SquaredDifference"])
def test_s32_only_for_add_and_subtract(kind):
    with pytest.raises(InvalidDataType):
        single_op_graph(kind, [("s32", [2]), ("s32", [2])], [("s32", [2])])


@pytest.mark.parametrize("kind", ["Add", "Subtract", "Multiply", "Divide"])
def test_mixed_precision_rows(kind):
    """oneDNN's schemas: src_0, src_1 and dst each of any floating type (bf16 * bf16 -> f32 is
    training's O * dO, bf16 / f32 -> bf16 a scale kept in f32); never s32 with a float."""
    for a, b, d in [("f32", "bf16", "f32"), ("f16", "f32", "f32"), ("bf16", "bf16", "f32"), ("f16", "f16", "f32"),
                    ("bf16", "f32", "bf16"), ("f32", "f32", "f16"), ("bf16", "f16", "f32")]:
        single_op_graph(kind, [(a, [2]), (b, [2])], [(d, [2])])
    with pytest.raises(InvalidDataType):
        single_op_graph(kind, [("f32", [2]), ("s32", [2])], [("f32", [2])])
    with pytest.raises(InvalidDataType):
        single_op_graph(kind, [("s32", [2]), ("s32", [2])], [("f32", [2])])


@pytest.mark.parametrize("kind", ["Maximum", "Minimum", "SquaredDifference"])
def test_same_dtype_only(kind):
    single_op_graph(kind, [("bf16", [2]), ("bf16", [2])], [("bf16", [2])])
    with pytest.raises(InvalidDataType):
        single_op_graph(kind, [("f32", [2]), ("bf16", [2])], [("f32", [2])])


def test_greater_equal_dtypes():
    for dt in ("f32", "bf16", "f16", "s32"):
        single_op_graph("GreaterEqual", [(dt, [2]), (dt, [2])], [("boolean", [2])])
    with pytest.raises(InvalidDataType):
        single_op_graph("GreaterEqual", [("f32", [2]), ("f32", [2])], [("f32", [2])])
    with pytest.raises(InvalidDataType):
        single_op_graph("GreaterEqual", [("f32", [2]), ("bf16", [2])], [("boolean", [2])])


def test_select_dtypes():
    single_op_graph("Select", [("boolean", [2]), ("f16", [2]), ("f16", [2])], [("f16", [2])])
    with pytest.raises(InvalidDataType):
        single_op_graph("Select", [("f32", [2]), ("f32", [2]), ("f32", [2])], [("f32", [2])])
    with pytest.raises(InvalidDataType):
        single_op_graph("Select", [("boolean", [2]), ("f32", [2]), ("bf16", [2])], [("f32", [2])])


# ----------------------------------------------------------------------- shapes
@pytest.mark.parametrize("kind", BINARY)
def test_binary_broadcast_inference(kind):
    assert inferred_shape(kind, [("f32", [2, 1, 4]), ("f32", [3, 1])], ("f32", [-1, -1, -1])) == (2, 3, 4)
    assert inferred_shape(kind, [("f32", [5]), ("f32", [2, 3, 5])], ("f32", [-1, -1, -1])) == (2, 3, 5)
    # unknown dims stay unknown unless the other side fixes them
    assert inferred_shape(kind, [("f32", [-1, 4]), ("f32", [3, -1])], ("f32", [-1, -1])) == (3, 4)
    assert inferred_shape(kind, [("f32", [-1, 4]), ("f32", [1, 4])], ("f32", [-1, -1])) == (-1, 4)


@pytest.mark.parametrize("kind", BINARY + ["GreaterEqual"])
def test_binary_incompatible_shapes(kind):
    out = "boolean" if kind == "GreaterEqual" else "f32"
    with pytest.raises(InvalidShape):
        single_op_graph(kind, [("f32", [2, 3]), ("f32", [4, 3])], [(out, [-1, -1])])
    with pytest.raises(InvalidShape):  # no broadcasting with auto_broadcast none
        single_op_graph(kind, [("f32", [2, 3]), ("f32", [1, 3])], [(out, [-1, -1])], {"auto_broadcast": "none"})
    with pytest.raises(InvalidShape):
        single_op_graph(kind, [("f32", [3]), ("f32", [1, 3])], [(out, [-1, -1])], {"auto_broadcast": "none"})
    with pytest.raises(InvalidShape):  # declared output disagrees
        single_op_graph(kind, [("f32", [2, 3]), ("f32", [3])], [(out, [3, 3])])
    with pytest.raises(InvalidGraphOp):
        single_op_graph(kind, [("f32", [2, 3]), ("f32", [3])], [(out, [-1, -1])], {"auto_broadcast": "bidirectional"})


def test_auto_broadcast_none_merges_unknown_dims():
    assert inferred_shape("Add", [("f32", [-1, 3]), ("f32", [2, -1])], ("f32", [-1, -1]),
                    {"auto_broadcast": "none"}) == (2, 3)


def test_select_one_way_broadcast():
    ins = [("boolean", [3, 1, 5]), ("f32", [2, 1, 4, 5]), ("f32", [3, 1, 5])]
    assert inferred_shape("Select", ins, ("f32", [-1] * 4)) == (2, 3, 4, 5)
    assert inferred_shape("Select", [("boolean", [4, 5]), ("f32", [2, 3, 4, 5]), ("f32", [1])],
                    ("f32", [-1] * 4)) == (2, 3, 4, 5)
    # a known cond dim fixes an unknown dst dim; an unknown cond dim is fine
    assert inferred_shape("Select", [("boolean", [3, 5]), ("f32", [-1, 5]), ("f32", [1])], ("f32", [-1, -1])) == (3, 5)
    assert inferred_shape("Select", [("boolean", [-1, 5]), ("f32", [3, 5]), ("f32", [1])], ("f32", [-1, -1])) == (3, 5)
    for cond in ([3, 5], [2, 2, 3, 4, 5], [1, 3, 4, 6]):  # doc example, cond rank too big, dim clash
        with pytest.raises(InvalidShape):
            single_op_graph("Select", [("boolean", cond), ("f32", [2, 3, 4, 5]), ("f32", [1])], [("f32", [-1] * 4)])


def test_select_auto_broadcast_none():
    ins = [("boolean", [2, 3]), ("f32", [2, 3]), ("f32", [2, 3])]
    assert inferred_shape("Select", ins, ("f32", [-1, -1]), {"auto_broadcast": "none"}) == (2, 3)
    for bad in (0, 1, 2):
        shapes = [[2, 3], [2, 3], [2, 3]]
        shapes[bad] = [1, 3]
        with pytest.raises(InvalidShape):
            single_op_graph("Select", [(dt, s) for (dt, _), s in zip(ins, shapes)], [("f32", [-1, -1])],
                            {"auto_broadcast": "none"})


# ---------------------------------------------------------------------- values
def test_binary_values():
    a = np.array([[1.0, -2.0, 6.0]], np.float32)
    b = np.array([[2.0], [-4.0]], np.float32)
    expect = {
        "Add": [[3, 0, 8], [-3, -6, 2]],
        "Subtract": [[-1, -4, 4], [5, 2, 10]],
        "Multiply": [[2, -4, 12], [-4, 8, -24]],
        "Divide": [[0.5, -1, 3], [-0.25, 0.5, -1.5]],
        "Maximum": [[2, 2, 6], [1, -2, 6]],
        "Minimum": [[1, -2, 2], [-4, -4, -4]],
        "SquaredDifference": [[1, 16, 16], [25, 4, 100]],
    }
    for kind, e in expect.items():
        (y,) = run_single(kind, [a, b], [("f32", [-1, -1])])
        np.testing.assert_array_equal(y, np.array(e, np.float32), err_msg=kind)


def test_add_s32_saturates():
    a = np.array([2 ** 31 - 1, -(2 ** 31), 5], np.int32)
    b = np.array([1, -1, -7], np.int32)
    (y,) = run_single("Add", [a, b], [("s32", [3])])
    np.testing.assert_array_equal(y, np.array([2 ** 31 - 1, -(2 ** 31), -2], np.int32))


def test_greater_equal_values():
    a = np.array([[1, 2, 3]], np.int32)
    b = np.array([[2], [3]], np.int32)
    (y,) = run_single("GreaterEqual", [a, b], [("boolean", [2, 3])])
    assert y.dtype == np.bool_
    np.testing.assert_array_equal(y, [[False, True, True], [False, False, True]])


def test_select_values():
    cond = np.array([True, False, True])
    a = np.array([[1.0], [2.0]], np.float32)
    b = np.array([10.0, 20.0, 30.0], np.float32)
    (y,) = run_single("Select", [cond, a, b], [("f32", [-1, -1])])
    np.testing.assert_array_equal(y, [[1, 20, 1], [2, 20, 2]])
