"""Validation, shape inference and reference values of Interpolate and
InterpolateBackward; InterpolateBackward matches finite differences of Interpolate."""
import numpy as np
import pytest

from graphc import InvalidDataType, InvalidGraphOp, InvalidShape, RuntimeFault
from graphc.builder import single_op_graph
from graphc.reference import run
from support import assert_grad_close, inferred_shape, numeric_grad, run_one

RNG = np.random.default_rng(7)


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
