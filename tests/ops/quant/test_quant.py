"""Validation, shape inference and reference values of the quantization ops
(Quantize, Dequantize, DynamicQuantize, DynamicDequantize), MatMul,
Interpolate and InterpolateBackward; the corpus graphs that use them load and
run; InterpolateBackward matches finite differences of Interpolate."""
import re

import ml_dtypes
import numpy as np
import pytest

import graphc
from graphc import InvalidDataType, InvalidGraphOp, InvalidShape, RuntimeFault
from graphc.builder import single_op_graph
from graphc.reference import run
from support import assert_grad_close, inferred_shape, numeric_grad, run_one

RNG = np.random.default_rng(7)


# ======================================================================= corpus
CORPUS_RE = re.compile(r"^(quantize|dequantize|dynamicdq|dynamicq|matmul|interpolate).*\.json$")


def _random_input(lt):
    if lt.dtype.is_float:
        return (RNG.standard_normal(lt.shape) * 3).astype(lt.dtype.np)
    lo, hi = {"s8": (-128, 128), "u8": (0, 256), "s4": (-8, 8), "u4": (0, 16), "s32": (-100, 100)}[lt.dtype.value]
    return RNG.integers(lo, hi, lt.shape).astype(lt.dtype.np)


def test_corpus_graphs_load_and_run(corpus):
    files = sorted(p for d in ("f32", "bf16", "f16") for p in (corpus / d).glob("*.json") if CORPUS_RE.match(p.name))
    assert len(files) >= 20
    for path in files:
        g = graphc.load_graph(path)
        ins = {tid: _random_input(g.tensors[tid]) for tid in g.input_ports}
        outs = run(g, ins)
        for tid, arr in outs.items():
            assert arr.shape == g.tensors[tid].shape, path.name


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
    ("DynamicDequantize", [("s4", [2, 3]), ("f32", [1]), ("u8", [1])], [("f32", [2, 3])], {},
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


# ======================================================================== MatMul
@pytest.mark.parametrize("src, wei, attrs, dst", [
    ([3, 4], [4, 5], {}, (3, 5)),
    ([2, 1, 3, 4], [5, 4, 6], {}, (2, 5, 3, 6)),
    ([4, 3], [5, 4], {"transpose_a": True, "transpose_b": True}, (3, 5)),
    ([4], [4, 5], {}, (5,)),
    ([2, 3, 4], [4], {}, (2, 3)),
    ([4], [4], {}, ()),
    ([4], [5, 4], {"transpose_a": True, "transpose_b": True}, (5,)),   # transpose_a has no effect on 1-D
    ([-1, 3, 4], [4, -1], {}, (-1, 3, -1)),
    ([-1, 4], [7, 1, 4, 2], {}, (7, 1, -1, 2)),
])
def test_matmul_shape_inference(src, wei, attrs, dst):
    assert inferred_shape("MatMul", [("f32", src), ("f32", wei)], ("f32", [-1] * len(dst)), attrs) == dst


def test_matmul_values_with_bias_and_transposes():
    a = RNG.integers(-5, 5, (2, 3, 4)).astype(np.float32)
    b = RNG.integers(-5, 5, (5, 4)).astype(np.float32)
    bias = RNG.integers(-5, 5, (5,)).astype(np.float32)
    got = run_one("MatMul", [("f32", [2, 3, 4]), ("f32", [5, 4]), ("f32", [5])], [("f32", [2, 3, 5])],
               {"transpose_b": True}, a, b, bias)
    want = np.zeros((2, 3, 5))
    for i, m, n in np.ndindex(2, 3, 5):
        want[i, m, n] = sum(float(a[i, m, k]) * float(b[n, k]) for k in range(4)) + bias[n]
    np.testing.assert_array_equal(got, want)


def test_matmul_accumulates_exactly():
    # summed in f32, 1 + 2^-24 rounds back to 1 twice; the exact sum 1 + 2^-23 is an f32 value
    a = np.array([[1.0, 2.0 ** -24, 2.0 ** -24]], np.float32)
    got = run_one("MatMul", [("f32", [1, 3]), ("f32", [3, 1])], [("f32", [1, 1])], {}, a, np.ones((3, 1), np.float32))
    assert got[0, 0] == np.float32(1 + 2.0 ** -23)


@pytest.mark.parametrize("ins, outs, attrs, err, match", [
    ([("f32", [3, 4]), ("f32", [5, 6])], [("f32", [3, 6])], {}, InvalidShape, "contracting"),
    ([("f32", [4, 3]), ("f32", [4, 6])], [("f32", [4, 4])], {"transpose_b": True}, InvalidShape, "contracting"),
    ([("f32", [2, 3, 4]), ("f32", [5, 4, 6])], [("f32", [2, 3, 6])], {}, InvalidShape, "broadcast"),
    ([("f32", [3, 4]), ("f32", [4, 6]), ("f32", [3, 1, 6])], [("f32", [3, 6])], {}, InvalidShape, "bias"),
    ([("f32", [3, 4]), ("f32", [4, 6]), ("f32", [5])], [("f32", [3, 6])], {}, InvalidShape, "bias"),
    ([("f32", []), ("f32", [4, 6])], [("f32", [6])], {}, InvalidShape, "at least one dim"),
    ([("f32", [3, 4]), ("f32", [4, 6])], [("f32", [3, 5])], {}, InvalidShape, "differs"),
    ([("f32", [3, 4]), ("bf16", [4, 6])], [("f32", [3, 6])], {}, InvalidDataType, "data type"),
    ([("bf16", [3, 4]), ("bf16", [4, 6])], [("f16", [3, 6])], {}, InvalidDataType, "data type"),
    ([("f16", [3, 4]), ("f16", [4, 6]), ("f32", [6])], [("f16", [3, 6])], {}, InvalidDataType, "data type"),
    ([("f32", [3, 4]), ("f32", [4, 6])], [("f32", [3, 6])], {"accumulation_mode": "f64"}, InvalidGraphOp,
     "not supported"),
    ([("f32", [3, 4])], [("f32", [3, 6])], {}, InvalidGraphOp, "number of inputs"),
])
def test_matmul_validation(ins, outs, attrs, err, match):
    with pytest.raises(err, match=match):
        single_op_graph("MatMul", ins, outs, attrs)


# =================================================================== Interpolate
@pytest.mark.parametrize("src, attrs, dst", [
    ([2, 3, 4, 5], {"sizes": [8, 2], "data_format": "NCX"}, (2, 3, 8, 2)),
    ([2, 4, 5, 3], {"sizes": [8, 2]}, (2, 8, 2, 3)),                                   # NXC by default
    ([2, 3, 3, 11], {"scales": [1.66667, 1.0], "data_format": "NCX"}, (2, 3, 5, 11)),  # floor(3 * 1.66667) = 5
    ([2, 3, 12], {"scales": [0.583333], "data_format": "NCX"}, (2, 3, 6)),             # floor(6.999996) = 6
    ([2, 3, 4], {"sizes": [6], "scales": [0.5], "data_format": "NCX"}, (2, 3, 6)),      # sizes win over scales
    ([-1, 3, -1, 4], {"scales": [2.0, 0.5], "data_format": "NCX"}, (-1, 3, -1, 2)),
])
def test_interpolate_shape_inference(src, attrs, dst):
    attrs = dict(mode="linear", **attrs)
    assert inferred_shape("Interpolate", [("f32", src)], ("f32", [-1] * len(src)), attrs) == dst


def test_interpolate_sizes_input_leaves_spatial_dims_to_run_time():
    g = single_op_graph("Interpolate", [("f32", [1, 2, 3]), ("s32", [1])], [("f32", [-1, -1, -1])],
                        {"mode": "nearest", "data_format": "NCX"})
    assert g.ops[0].outputs[0].shape == (1, 2, -1)
    g = single_op_graph("Interpolate", [("f32", [1, 2, 3]), ("s32", [1])], [("f32", [1, 2, 5])],
                        {"mode": "nearest", "data_format": "NCX"})
    src = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    got = run(g, {0: src, 1: np.array([5], np.int32)})[2]
    np.testing.assert_array_equal(got, src[:, :, [0, 0, 1, 2, 2]])
    with pytest.raises(RuntimeFault):
        run(g, {0: src, 1: np.array([4], np.int32)})


# src of 3 resized to 5 along the one spatial axis; the expected indices and
# weights are the doc's coordinate formulas worked by hand.
@pytest.mark.parametrize("mode, ctm, want", [
    # half_pixel: c = (x + 0.5) * 3/5 - 0.5 = -0.2, 0.4, 1.0, 1.6, 2.2 -> nearest (half up) 0, 0, 1, 2, 2
    ("nearest", "half_pixel", [10, 10, 20, 40, 40]),
    # align_corners: c = x * 2/4 = 0, 0.5, 1, 1.5, 2 -> ties round up: 0, 1, 1, 2, 2
    ("nearest", "align_corners", [10, 20, 20, 40, 40]),
    # clamped to [0, 2]: 0, 0.4, 1.0, 1.6, 2 -> 10, 14, 20, 32, 40
    ("linear", "half_pixel", [10, 14, 20, 32, 40]),
    ("linear", "align_corners", [10, 15, 20, 30, 40]),
])
def test_interpolate_hand_values(mode, ctm, want):
    src = np.array([[[10, 20, 40]]], np.float32)
    for fmt in ("NCX", "NXC"):
        x = src if fmt == "NCX" else src.transpose(0, 2, 1)
        got = run_one("Interpolate", [("f32", list(x.shape))], [("f32", [-1, -1, -1])],
                   {"mode": mode, "coordinate_transformation_mode": ctm, "sizes": [5], "data_format": fmt}, x)
        np.testing.assert_allclose(got.reshape(-1), want, rtol=1e-6)


def test_interpolate_bilinear_is_separable():
    src = RNG.standard_normal((1, 1, 3, 4)).astype(np.float32)
    attrs = {"mode": "bilinear", "coordinate_transformation_mode": "align_corners", "data_format": "NCX"}
    both = run_one("Interpolate", [("f32", [1, 1, 3, 4])], [("f32", [1, 1, 5, 7])], dict(attrs, sizes=[5, 7]), src)
    # align_corners 3 -> 5 and 4 -> 7 sample exactly halfway: average neighbours along each axis in turn
    rows = np.empty((5, 4))
    rows[0::2], rows[1::2] = src[0, 0], (src[0, 0, :-1] + src[0, 0, 1:]) / 2
    want = np.empty((5, 7))
    want[:, 0::2], want[:, 1::2] = rows, (rows[:, :-1] + rows[:, 1:]) / 2
    np.testing.assert_allclose(both[0, 0], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind, ins, outs, attrs, err, match", [
    ("Interpolate", [("f32", [1, 2, 3])], [("f32", [1, 2, 6])], {"mode": "linear"}, InvalidGraphOp,
     "sizes or scales"),
    ("Interpolate", [("f32", [1, 2, 3])], [("f32", [1, 2, 6])], {"mode": "linear", "sizes": [6, 6]},
     InvalidGraphOp, "one value per spatial dim"),
    ("Interpolate", [("f32", [1, 2, 3])], [("f32", [1, 2, 6])], {"mode": "linear", "scales": [2.0, 1.0]},
     InvalidGraphOp, "one value per spatial dim"),
    ("Interpolate", [("f32", [1, 2, 3])], [("f32", [1, 2, 6])], {"mode": "linear", "sizes": [0]},
     InvalidGraphOp, "positive"),
    ("Interpolate", [("f32", [1, 2, 3])], [("f32", [1, 2, 6])], {"mode": "linear", "scales": [-2.0]},
     InvalidGraphOp, "positive"),
    ("Interpolate", [("f32", [1, 2, 3])], [("f32", [1, 2, 6])], {"mode": "cubic", "sizes": [6]},
     InvalidGraphOp, "not supported"),
    ("Interpolate", [("f32", [1, 2, 3])], [("f32", [1, 2, 6])], {"sizes": [6]}, InvalidGraphOp, "missing"),
    ("Interpolate", [("f32", [2, 3])], [("f32", [2, 6])], {"mode": "linear", "sizes": []}, InvalidShape, "rank"),
    ("Interpolate", [("f32", [1, 2, 0])], [("f32", [1, 2, 6])], {"mode": "linear", "sizes": [6],
                                                                  "data_format": "NCX"}, InvalidShape, "empty"),
    ("Interpolate", [("f32", [1, 2, 3])], [("f32", [1, 2, 5])], {"mode": "linear", "sizes": [6],
                                                                  "data_format": "NCX"}, InvalidShape, "differs"),
    ("Interpolate", [("f32", [1, 2, 3])], [("f32", [1, 2, 6])], {"mode": "linear", "sizes": [6]},
     InvalidShape, "differs"),   # NXC: the spatial dim is 2, channels 3
    ("Interpolate", [("f32", [1, 2, 3])], [("bf16", [1, 2, 6])], {"mode": "linear", "sizes": [6],
                                                                   "data_format": "NCX"}, InvalidDataType, "data type"),
    ("Interpolate", [("f32", [1, 2, 3]), ("s64", [1])], [("f32", [1, 2, 6])], {"mode": "linear"},
     InvalidDataType, "data type"),
    ("Interpolate", [("f32", [1, 2, 3]), ("s32", [2])], [("f32", [1, 2, 6])], {"mode": "linear"},
     InvalidShape, "sizes input"),
    ("Interpolate", [("f32", [1, 2, 3])], [("f32", [1, 2, 6])], {"mode": "linear", "scales": [1e38],
                                                                  "data_format": "NCX"}, InvalidShape, "out of range"),
    ("InterpolateBackward", [("f32", [1, 2, 3]), ("f32", [1, 2, 5, 1])], [("f32", [1, 2, 3])],
     {"mode": "linear", "sizes": [6], "data_format": "NCX"}, InvalidShape, "diff_dst"),
    ("InterpolateBackward", [("f32", [1, 2, 3]), ("f32", [1, 2, 5])], [("f32", [1, 2, 3])],
     {"mode": "linear", "data_format": "NCX"}, InvalidGraphOp, "sizes or scales"),
    ("InterpolateBackward", [("f32", [1, 2, 3]), ("f32", [1, 3, 6])], [("f32", [1, 2, 3])],
     {"mode": "linear", "sizes": [6], "data_format": "NCX"}, InvalidShape, "diff_dst"),
    ("InterpolateBackward", [("f32", [1, 2, 3]), ("f32", [1, 2, 6])], [("f32", [1, 2, 6])],
     {"mode": "linear", "sizes": [6], "data_format": "NCX"}, InvalidShape, "differs"),
    ("InterpolateBackward", [("f32", [1, 2, 3]), ("f16", [1, 2, 6])], [("f32", [1, 2, 3])],
     {"mode": "linear", "sizes": [6], "data_format": "NCX"}, InvalidDataType, "data type"),
])
def test_interpolate_validation(kind, ins, outs, attrs, err, match):
    with pytest.raises(err, match=match):
        single_op_graph(kind, ins, outs, attrs)


def test_interpolate_bwd_dst_dims_come_from_diff_dst():
    # as in oneDNN, diff_dst's spatial dims are the dst dims; the sizes input is not read
    g = single_op_graph("InterpolateBackward", [("f32", [1, 2, 3]), ("f32", [1, 2, 6]), ("s32", [1])],
                        [("f32", [1, 2, 3])], {"mode": "linear", "data_format": "NCX"})
    dy = np.ones((1, 2, 6), np.float32)
    got = run(g, {0: np.zeros((1, 2, 3), np.float32), 1: dy, 2: np.array([6], np.int32)})[3]
    np.testing.assert_allclose(got.sum(), dy.sum())   # linear weights of each dst element sum to 1
    again = run(g, {0: np.zeros((1, 2, 3), np.float32), 1: dy, 2: np.array([5], np.int32)})[3]
    np.testing.assert_array_equal(again, got)


@pytest.mark.parametrize("src_shape, sizes, mode, ctm, fmt", [
    ([1, 2, 4], [7], "linear", "half_pixel", "NCX"),
    ([1, 5, 2], [3], "linear", "align_corners", "NXC"),
    ([1, 1, 3, 4], [5, 2], "bilinear", "half_pixel", "NCX"),
    ([1, 4, 3, 2], [2, 5], "nearest", "half_pixel", "NXC"),
    ([1, 1, 2, 3, 2], [3, 2, 4], "trilinear", "align_corners", "NCX"),
    ([1, 1, 3, 2, 2], [1, 3, 3], "nearest", "align_corners", "NCX"),
])
def test_interpolate_bwd_gradcheck(src_shape, sizes, mode, ctm, fmt):
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm, "sizes": sizes, "data_format": fmt}
    n = len(src_shape)
    fwd = single_op_graph("Interpolate", [("f32", src_shape)], [("f32", [-1] * n)], attrs).ops[0]
    dst_shape = fwd.outputs[0].shape
    bwd = single_op_graph("InterpolateBackward", [("f32", src_shape), ("f32", dst_shape)], [("f32", [-1] * n)],
                          attrs).ops[0]
    x = RNG.standard_normal(src_shape)
    dy = RNG.standard_normal(dst_shape)
    analytic = bwd.schema.reference(bwd, x, dy)[0]
    numeric = numeric_grad(lambda v: fwd.schema.reference(fwd, v)[0], x, dy)
    assert_grad_close(analytic, numeric, what=f"InterpolateBackward {mode} {ctm} {fmt}")
