"""BiasAdd, PReLU and their backward ops: schema rules, shape inference and hand-checked
values."""
import numpy as np
import pytest

from graphc.builder import single_op_graph
from graphc.errors import InvalidDataType, InvalidShape
from support import inferred_shapes, run_single


# --------------------------------------------------------------------- BiasAdd
@pytest.mark.parametrize("fmt, bias", [("NCX", [4]), ("NXC", [3]), ("NCX", [1, 3]), ("NXC", [])])
def test_bias_add_bias_shape(fmt, bias):
    with pytest.raises(InvalidShape):
        single_op_graph("BiasAdd", [("f32", [2, 3, 5, 4]), ("f32", bias)], [("f32", [2, 3, 5, 4])],
                        {"data_format": "NXC" if fmt == "NXC" else "NCX"})


def test_bias_add_needs_a_channel_dim():
    with pytest.raises(InvalidShape):
        single_op_graph("BiasAdd", [("f32", [3]), ("f32", [3])], [("f32", [3])])


def test_bias_add_dtypes():
    with pytest.raises(InvalidDataType):
        single_op_graph("BiasAdd", [("bf16", [2, 3]), ("f32", [3])], [("bf16", [2, 3])])


def test_bias_add_values_per_data_format():
    x = np.zeros((1, 2, 3), np.float32)
    (ncx,) = run_single("BiasAdd", [x, np.array([1.0, 2.0], np.float32)], [("f32", [1, 2, 3])],
                        {"data_format": "NCX"})
    (nxc,) = run_single("BiasAdd", [x, np.array([1.0, 2.0, 3.0], np.float32)], [("f32", [1, 2, 3])])
    np.testing.assert_array_equal(ncx, [[[1, 1, 1], [2, 2, 2]]])
    np.testing.assert_array_equal(nxc, [[[1, 2, 3], [1, 2, 3]]])


def test_bias_add_backward_alias_and_shapes():
    g = single_op_graph("BiasAddBackprop", [("f32", [2, 3, 5])], [("f32", [-1])], {"data_format": "NCX"})
    assert g.ops[0].kind == "BiasAddBackward" and g.ops[0].outputs[0].shape == (3,)
    assert inferred_shapes("BiasAddBackward", [("f32", [2, 3, 5])], [("f32", [-1])]) == [(5,)]
    with pytest.raises(InvalidShape):
        single_op_graph("BiasAddBackward", [("f32", [2, 3, 5])], [("f32", [3])])


def test_bias_add_backward_values():
    dy = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    (db,) = run_single("BiasAddBackward", [dy], [("f32", [3])], {"data_format": "NCX"})
    np.testing.assert_array_equal(db, [0 + 1 + 6 + 7, 2 + 3 + 8 + 9, 4 + 5 + 10 + 11])


# ----------------------------------------------------------------------- PReLU
@pytest.mark.parametrize("slope, attrs", [
    ([3], {"data_format": "NCX"}), ([5], {}), ([1], {}), ([5], {"per_channel_broadcast": False}),
    ([3, 1, 1], {}), ([2, 3, 4, 5], {}), ([1, 4, 5], {"data_format": "NCX"})])
def test_prelu_slope_broadcasts(slope, attrs):
    assert inferred_shapes("PReLU", [("f32", [2, 3, 4, 5]), ("f32", slope)], [("f32", [-1] * 4)], attrs) == \
        [(2, 3, 4, 5)]


@pytest.mark.parametrize("slope, attrs", [
    ([3], {}), ([4], {"data_format": "NCX"}), ([3], {"per_channel_broadcast": False, "data_format": "NCX"}),
    ([2, 4, 1], {}), ([1, 2, 3, 4, 5], {})])
def test_prelu_slope_must_broadcast(slope, attrs):
    with pytest.raises(InvalidShape):
        single_op_graph("PReLU", [("f32", [2, 3, 4, 5]), ("f32", slope)], [("f32", [2, 3, 4, 5])], attrs)


def test_prelu_dtypes():
    with pytest.raises(InvalidDataType):
        single_op_graph("PReLU", [("f16", [2, 3]), ("f32", [3])], [("f16", [2, 3])])
    with pytest.raises(InvalidDataType):
        single_op_graph("PReLUBackward", [("bf16", [2, 3])] * 3, [("bf16", [2, 3]), ("f32", [2, 3])])


def test_prelu_values_per_channel_and_per_last_dim():
    x = np.array([[-1.0, -2.0], [3.0, -4.0]], np.float32)
    slope = np.array([0.5, 0.25], np.float32)
    (per_channel,) = run_single("PReLU", [x, slope], [("f32", [2, 2])], {"data_format": "NCX"})
    (per_last,) = run_single("PReLU", [x, slope], [("f32", [2, 2])],
                             {"data_format": "NCX", "per_channel_broadcast": False})
    np.testing.assert_array_equal(per_channel, [[-0.5, -0.5], [3.0, -1.0]])
    np.testing.assert_array_equal(per_last, [[-0.5, -0.5], [3.0, -1.0]])
    x3 = np.array([[[-1.0, -2.0], [-3.0, -4.0]]], np.float32)      # [1, C=2, 2] NCX
    (y,) = run_single("PReLU", [x3, slope], [("f32", [1, 2, 2])], {"data_format": "NCX"})
    np.testing.assert_array_equal(y, [[[-0.5, -1.0], [-0.75, -1.0]]])


def test_prelu_backward_shapes():
    assert inferred_shapes("PReLUBackward", [("f32", [2, 3, 4]), ("f32", [3]), ("f32", [2, -1, 4])],
                  [("f32", [-1] * 3), ("f32", [-1])], {"data_format": "NCX"}) == [(2, 3, 4), (3,)]
    assert inferred_shapes("PReLUBackward", [("f32", [2, 3, 4]), ("f32", [3, 4]), ("f32", [2, 3, 4])],
                  [("f32", [-1] * 3), ("f32", [-1, -1])]) == [(2, 3, 4), (3, 4)]
    with pytest.raises(InvalidShape):        # a 1-D slope is per channel (NXC: last dim, 4)
        single_op_graph("PReLUBackward", [("f32", [2, 3, 4]), ("f32", [3]), ("f32", [2, 3, 4])],
                        [("f32", [2, 3, 4]), ("f32", [3])])
    with pytest.raises(InvalidShape):
        single_op_graph("PReLUBackward", [("f32", [2, 3, 4]), ("f32", [4]), ("f32", [2, 3, 5])],
                        [("f32", [2, 3, 4]), ("f32", [4])])


def test_prelu_backward_values():
    x = np.array([[-1.0, 2.0], [-3.0, 0.0]], np.float32)
    slope = np.array([0.5], np.float32)
    dy = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    dx, ds = run_single("PReLUBackward", [x, slope, dy], [("f32", [2, 2]), ("f32", [1])])
    np.testing.assert_array_equal(dx, [[0.5, 2.0], [1.5, 4.0]])
    np.testing.assert_array_equal(ds, [-1.0 * 1 + -3.0 * 3])
