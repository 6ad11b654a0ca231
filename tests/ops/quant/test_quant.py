"""Validation, shape inference and reference values of the quantization ops (Quantize,
Dequantize, DynamicQuantize, DynamicDequantize)."""
import ml_dtypes
import numpy as np
import pytest

from graphc import InvalidDataType, InvalidGraphOp, InvalidShape, RuntimeFault
from graphc.builder import single_op_graph
from graphc.reference import run
from support import run_one

RNG = np.random.default_rng(7)


# ================================================================== quantization
def test_quantize_rounds_half_to_even_and_saturates():
    src = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 127.4, 200.0, -200.0], np.float32)
    got = run_one("Quantize", [("f32", [9])], [("s8", [9])], {"scales": [1.0]}, src)
    np.testing.assert_array_equal(got, [0, 2, 2, 0, -2, -2, 127, 127, -128])
    # u8 with a zero point: src / 0.5 + 10
    src = np.array([-5.25, -4.75, 0.25, 0.75, 122.25, 200.0], np.float32)
    got = run_one("Quantize", [("f32", [6])], [("u8", [6])], {"scales": [0.5], "zps": [10]}, src)
    np.testing.assert_array_equal(got, [0, 0, 10, 12, 254, 255])


def test_quantize_per_channel_negative_axis():
    src = RNG.uniform(-40, 40, (2, 3, 4)).astype(np.float32)
    scales, zps = [0.5, 0.25, 2.0], [1, -3, 0]
    got = run_one("Quantize", [("f32", [2, 3, 4])], [("s8", [2, 3, 4])],
               {"qtype": "per_channel", "axis": -2, "scales": scales, "zps": zps}, src)
    want = np.empty((2, 3, 4), np.int64)
    for n, c, w in np.ndindex(2, 3, 4):
        want[n, c, w] = min(127, max(-128, round(float(src[n, c, w]) / scales[c] + zps[c])))  # round(): half even
    np.testing.assert_array_equal(got, want)


def test_quantize_f8_rounds_to_nearest_even():
    # src / 0.5: 2.125 lies halfway between e4m3 neighbours 2 and 2.25 (ties to even: 2),
    # 2.375 halfway between 2.25 and 2.5 (to 2.5)
    src = np.array([1.0625, 1.1875, 3.0, -0.0390625], np.float32)
    got = run_one("Quantize", [("f32", [4])], [("f8_e4m3", [4])], {"scales": [0.5]}, src)
    np.testing.assert_array_equal(got.astype(np.float32), [2.0, 2.5, 6.0, -0.078125])


def test_dequantize_per_channel():
    src = np.array([[-128, 0, 127], [5, 6, 7]], np.int8)
    got = run_one("Dequantize", [("s8", [2, 3])], [("f32", [2, 3])],
               {"qtype": "per_channel", "axis": 0, "scales": [0.5, 2.0], "zps": [-1, 4]}, src)
    np.testing.assert_array_equal(got, [[-63.5, 0.5, 64.0], [2.0, 4.0, 6.0]])


def test_dequantize_f8():
    src = np.array([1.5, -448.0, 0.0], ml_dtypes.float8_e4m3fn)
    got = run_one("Dequantize", [("f8_e4m3", [3])], [("f32", [3])], {"scales": [0.25]}, src)
    np.testing.assert_array_equal(got, [0.375, -112.0, 0.0])


def test_dynamic_quantize_per_tensor_and_channel():
    src = np.array([[1.0, -2.5, 300.0], [0.5, 0.75, -1.0]], np.float32)
    got = run_one("DynamicQuantize", [("f32", [2, 3]), ("f32", [1]), ("s32", [1])], [("u8", [2, 3])], {},
               src, np.array([0.5], np.float32), np.array([128], np.int32))
    np.testing.assert_array_equal(got, [[130, 123, 255], [129, 130, 126]])
    got = run_one("DynamicQuantize", [("f32", [2, 3]), ("f32", [3])], [("s8", [2, 3])],
               {"qtype": "per_channel", "axis": 1}, src, np.array([1.0, 0.5, 4.0], np.float32))
    np.testing.assert_array_equal(got, [[1, -5, 75], [0, 2, 0]])


def test_dynamic_dequantize_per_group():
    src = RNG.integers(-8, 8, (2, 8, 3)).astype(ml_dtypes.int4)
    scales = RNG.uniform(0.1, 2, (2, 2, 3)).astype(np.float32)
    zps = RNG.integers(0, 16, (2, 2, 3)).astype(ml_dtypes.uint4)
    got = run_one("DynamicDequantize", [("s4", [2, 8, 3]), ("f32", [2, 2, 3]), ("u4", [2, 2, 3])], [("f32", [2, 8, 3])],
               {"qtype": "per_group", "group_shape": [1, 4, 1]}, src, scales, zps)
    want = np.empty((2, 8, 3))
    for i, j, k in np.ndindex(2, 8, 3):
        want[i, j, k] = (int(src[i, j, k]) - int(zps[i, j // 4, k])) * float(scales[i, j // 4, k])
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-7)


def test_dynamic_dequantize_per_channel_bf16():
    src = np.array([[3, -4], [100, 0]], np.int8)
    scales = np.array([0.5, 0.25], ml_dtypes.bfloat16)
    got = run_one("DynamicDequantize", [("s8", [2, 2]), ("bf16", [2])], [("bf16", [2, 2])],
               {"qtype": "per_channel", "axis": 1}, src, scales)
    np.testing.assert_array_equal(got.astype(np.float32), [[1.5, -1.0], [50.0, 0.0]])


def test_dynamic_dequantize_per_channel_one_zero_point():
    """oneDNN's per_channel zps may be one value for every channel ("zps should be 1 or equals
    to scales size"): the corpus's compressed-K SDPA with --in-shapes=1:32+2:1."""
    src = np.array([[3, -4, 7], [100, 0, -9]], np.int8)
    scales = np.array([0.5, 0.25, 2.0], np.float32)
    got = run_one("DynamicDequantize", [("s8", [2, 3]), ("f32", [3]), ("s8", [1])], [("f32", [2, 3])],
                  {"qtype": "per_channel", "axis": 1}, src, scales, np.array([2], np.int8))
    np.testing.assert_array_equal(got, [[0.5, -1.5, 10.0], [49.0, -0.5, -22.0]])
    with pytest.raises(InvalidShape, match="wrong shape"):   # two zero points for three channels
        single_op_graph("DynamicDequantize", [("s8", [2, 3]), ("f32", [3]), ("s8", [2])], [("f32", [2, 3])],
                        {"qtype": "per_channel", "axis": 1})
    with pytest.raises(InvalidShape, match="wrong shape"):   # the scales stay one per channel
        single_op_graph("DynamicDequantize", [("s8", [2, 3]), ("f32", [1]), ("s8", [1])], [("f32", [2, 3])],
                        {"qtype": "per_channel", "axis": 1})


def test_quant_params_mismatch_at_run_time():
    g = single_op_graph("Quantize", [("f32", [2, -1])], [("s8", [2, -1])],
                        {"qtype": "per_channel", "axis": 1, "scales": [1.0, 2.0, 3.0]})
    with pytest.raises(RuntimeFault, match="scales or zero points"):
        run(g, {0: np.zeros((2, 4), np.float32)})


def test_dynamic_dequantize_groups_checked_at_run_time():
    g = single_op_graph("DynamicDequantize", [("u8", [2, -1]), ("f32", [2, 2])], [("f32", [2, -1])],
                        {"qtype": "per_group", "group_shape": [1, 3]})
    with pytest.raises(RuntimeFault, match="group sizes"):
        run(g, {0: np.zeros((2, 7), np.uint8), 1: np.ones((2, 2), np.float32)})


@pytest.mark.parametrize("kind, ins, outs, attrs, err, match", [
    ("Quantize", [("f32", [2, 3])], [("s8", [2, 3])], {"scales": [1.0, 2.0]}, InvalidShape, "wrong shape"),
    ("Quantize", [("f32", [2, 3])], [("s8", [2, 3])], {"scales": [1.0], "zps": [0, 1]}, InvalidShape, "wrong shape"),
    ("Quantize", [("f32", [2, 3])], [("s8", [2, 3])], {"qtype": "per_channel", "scales": [1.0, 2.0]},
     InvalidShape, "wrong shape"),
    ("Quantize", [("f32", [2, 3])], [("s8", [2, 3])], {"qtype": "per_channel", "axis": 2, "scales": [1.0] * 3},
     InvalidGraphOp, "axis out of range"),
    ("Quantize", [("f32", [2, 3])], [("s8", [2, 3])], {"qtype": "per_group", "scales": [1.0]},
     InvalidGraphOp, "not supported"),
    ("Quantize", [("f32", [2, 3])], [("s8", [2, 3])], {}, InvalidGraphOp, "missing required attribute"),
    ("Quantize", [("f32", [2, 3])], [("f8_e4m3", [2, 3])], {"scales": [1.0], "zps": [3]},
     InvalidGraphOp, "f8"),
    ("Dequantize", [("f8_e5m2", [2, 3])], [("f32", [2, 3])], {"scales": [1.0], "zps": [1]}, InvalidGraphOp, "f8"),
    ("Quantize", [("bf16", [2, 3])], [("s8", [2, 3])], {"scales": [1.0]}, InvalidDataType, "data type"),
    ("Quantize", [("f32", [2, 3])], [("s32", [2, 3])], {"scales": [1.0]}, InvalidDataType, "data type"),
    ("Dequantize", [("s8", [2, 3])], [("bf16", [2, 3])], {"scales": [1.0]}, InvalidDataType, "data type"),
    ("Dequantize", [("s8", [2, 3])], [("f32", [3, 2])], {"scales": [1.0]}, InvalidShape, "differs"),
    ("DynamicQuantize", [("f32", [2, 3]), ("f32", [2])], [("s8", [2, 3])], {}, InvalidShape, "wrong shape"),
    ("DynamicQuantize", [("f32", [2, 3]), ("f32", [1, 3])], [("s8", [2, 3])], {"qtype": "per_channel"},
     InvalidShape, "wrong shape"),
    ("DynamicQuantize", [("f32", [2, 3]), ("f32", [3]), ("s32", [2])], [("u8", [2, 3])], {"qtype": "per_channel"},
     InvalidShape, "port 'zps'"),
    ("DynamicQuantize", [("f32", [2, 3]), ("f32", [1]), ("s4", [1])], [("s8", [2, 3])], {},
     InvalidDataType, "data type"),
    ("DynamicQuantize", [("f32", [2, 3]), ("f32", [1])], [("s4", [2, 3])], {}, InvalidDataType, "data type"),
    ("DynamicDequantize", [("s8", [2, 3]), ("f16", [1])], [("f32", [2, 3])], {}, InvalidDataType, "data type"),
    ("DynamicDequantize", [("s4", [2, 3]), ("f32", [1]), ("f32", [1])], [("f32", [2, 3])], {},
     InvalidDataType, "data type"),
    ("DynamicDequantize", [("u8", [4, 6]), ("f32", [4, 2])], [("f32", [4, 6])], {"qtype": "per_group"},
     InvalidGraphOp, "group shape"),
    ("DynamicDequantize", [("u8", [4, 6]), ("f32", [4, 2])], [("f32", [4, 6])],
     {"qtype": "per_group", "group_shape": [3]}, InvalidGraphOp, "one entry per src dim"),
    ("DynamicDequantize", [("u8", [4, 6]), ("f32", [4, 2])], [("f32", [4, 6])],
     {"qtype": "per_group", "group_shape": [1, 4]}, InvalidShape, "divide"),
    ("DynamicDequantize", [("u8", [4, 6]), ("f32", [4, 3])], [("f32", [4, 6])],
     {"qtype": "per_group", "group_shape": [1, 3]}, InvalidShape, "wrong shape"),
    ("DynamicDequantize", [("u8", [4, 6]), ("f32", [4, 2]), ("u8", [2, 2])], [("f32", [4, 6])],
     {"qtype": "per_group", "group_shape": [1, 3]}, InvalidShape, "port 'zps'"),
    ("DynamicDequantize", [("u8", [4, 6]), ("f32", [4, 2])], [("f32", [4, 6])],
     {"qtype": "per_group", "group_shape": [0, 3]}, InvalidGraphOp, "positive"),
])
def test_quant_validation(kind, ins, outs, attrs, err, match):
    with pytest.raises(err, match=match):
        single_op_graph(kind, ins, outs, attrs)


def test_dynamic_quant_unknown_dims_pass_validation():
    g = single_op_graph("DynamicDequantize", [("u4", [-1, 6]), ("f32", [-1, 2]), ("u4", [4, -1])], [("f32", [-1, -1])],
                        {"qtype": "per_group", "group_shape": [1, 3]})
    assert g.ops[0].outputs[0].shape == (-1, 6)
