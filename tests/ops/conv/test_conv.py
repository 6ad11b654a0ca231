"""Convolution and ConvTranspose ops (forward, backward data, backward weights): shape
inference (a shape input leaves the spatial dims unknown, as AvgPoolBackward's does),
validation rules, hand-computed reference values and finite-difference gradchecks of
every backward op against its forward reference."""
import numpy as np
import pytest

from graphc import InvalidDataType, InvalidGraphOp, InvalidShape, RuntimeFault
from graphc.builder import single_op_graph
from graphc.reference import run
from support import grads_match, inferred_shape, run_graph

rng = np.random.default_rng(3)

NCX_OIX = dict(data_format="NCX", weights_format="OIX")


def win(nsp, **kw):
    """Window attributes: unit strides/dilations and no pads unless given."""
    return {"strides": (1,) * nsp, "dilations": (1,) * nsp, "pads_begin": (0,) * nsp, "pads_end": (0,) * nsp, **kw}


def pool(nsp, **kw):
    return {"kernel": (2,) * nsp, "strides": (1,) * nsp, "pads_begin": (0,) * nsp, "pads_end": (0,) * nsp, **kw}


# ------------------------------------------------------------------ shape inference
@pytest.mark.parametrize("kind, shapes, attrs, expected", [
    # defaults: NXC data, XIO weights
    ("Convolution", [(2, 5, 6, 3), (3, 2, 3, 8)], win(2), (2, 3, 5, 8)),
    ("Convolution", [(-1, 4, -1, 9), (6, 2, 3, 3)], win(2, groups=2, **NCX_OIX), (-1, 6, -1, 7)),
    ("Convolution", [(1, 2, 7, 10), (4, 2, 3, 3)], win(2, strides=(2, 3), auto_pad="SAME_UPPER", **NCX_OIX),
     (1, 4, 4, 4)),
    ("Convolution", [(1, 2, 7, 10), (4, 2, 3, 3)], win(2, strides=(2, 3), auto_pad="valid", **NCX_OIX),
     (1, 4, 3, 3)),
    ("Convolution", [(1, 2, 9), (4, 2, 3), (4,)], win(1, dilations=(3,), pads_begin=(1,), pads_end=(2,), **NCX_OIX),
     (1, 4, 6)),
    # grouped IOX/XOI: I holds every group's input channels, O one group's outputs (oneDNN's corpus, torch's order)
    ("ConvTranspose", [(1, 4, 5, 6), (4, 3, 3, 3)],
     win(2, strides=(2, 2), output_padding=(1,) + (0,) * 11, groups=2, data_format="NCX", weights_format="IOX"),
     (1, 6, 12, 13)),
    ("ConvTranspose", [(1, 5, 6, 4), (3, 3, 4, 8)], win(2, strides=(3, 2), auto_pad="same_lower"), (1, 15, 12, 8)),
    ("ConvTransposeBackwardData", [(1, 6, 12, 11), (4, 3, 3, 3)],
     win(2, strides=(2, 2), groups=2, data_format="NCX", weights_format="IOX"), (1, 4, 5, 5)),
    ("ConvolutionBackwardData", [(1, 8, 3, 3), (8, 4, 3, 3)], win(2, dst_shape=(1, 4, 5, 5), **NCX_OIX),
     (1, 4, 5, 5)),
    ("ConvolutionBackwardWeights", [(1, 4, 5, 5), (1, 8, 3, 3)],
     win(2, weights_shape=(3, 3, 2, 8), groups=2, data_format="NCX"), (3, 3, 2, 8)),
    ("ConvTransposeBackwardWeights", [(1, 4, 5, 5), (1, 6, 12, 11)],
     win(2, strides=(2, 2), output_padding=(1, 0), groups=2, weights_shape=(3, 3, 3, 4), data_format="NCX",
         weights_format="XOI"), (3, 3, 3, 4)),
])
def test_inferred_shapes(kind, shapes, attrs, expected):
    assert inferred_shape(kind, shapes, attrs=attrs) == expected


def test_shape_inputs_leave_the_spatial_dims_unknown():
    attrs = win(2, **NCX_OIX)
    g = single_op_graph("ConvolutionBackwardData", [("f32", (1, 8, 3, 3)), ("f32", (8, 2, 3, 3)), ("s32", (4,))],
                        [("f32", (-1,) * 4)], dict(attrs, groups=2))
    assert g.ops[0].outputs[0].shape == (1, 4, -1, -1)
    g = single_op_graph("ConvolutionBackwardWeights", [("f32", (1, 4, 5, 5)), ("f32", (1, 8, 3, 3)), ("s32", (4,))],
                        [("f32", (-1,) * 4)], dict(attrs, groups=2))
    assert g.ops[0].outputs[0].shape == (8, 2, -1, -1)
    g = single_op_graph("AvgPoolBackward", [("f32", (1, 2, 3, 3)), ("s32", (4,))], [("f32", (-1,) * 4)],
                        pool(2, exclude_pad=True, data_format="NCX"))
    assert g.ops[0].outputs[0].shape == (1, 2, -1, -1)


# ------------------------------------------------------------------------ validation
CONV_SHAPES = [("f32", (1, 4, 5, 5)), ("f32", (6, 4, 3, 3))]


@pytest.mark.parametrize("kind, ins, attrs, error, match", [
    ("Convolution", [("f32", (1, 4, 5, 5)), ("f32", (6, 3, 3, 3))], win(2, **NCX_OIX), InvalidShape, "groups"),
    ("Convolution", [("f32", (1, 4, 5, 5)), ("f32", (6, 2, 3, 3))], win(2, groups=4, **NCX_OIX), InvalidShape,
     "divisible by groups"),
    ("Convolution", CONV_SHAPES + [("f32", (5,))], win(2, **NCX_OIX), InvalidShape, "bias"),
    ("Convolution", [("f32", (1, 4, 2, 5)), ("f32", (6, 4, 3, 3))], win(2, **NCX_OIX), InvalidShape,
     "larger than the padded input"),
    ("Convolution", [("f32", (4, 5)), ("f32", (6, 4))], win(0, **NCX_OIX), InvalidShape, "spatial dims"),
    ("Convolution", [("f32", (1, 4, 5, 5)), ("f32", (6, 4, 3))], win(2, **NCX_OIX), InvalidShape, "rank"),
    ("Convolution", [("f32", (1, 4, 5, 5, 5, 5)), ("f32", (6, 4, 3, 3, 3, 3))], win(4, **NCX_OIX), InvalidShape,
     "spatial dims"),
    ("Convolution", [("f32", (1, 4, 5, 5)), ("f32", (6, 4, 0, 3))], win(2, **NCX_OIX), InvalidShape, "no taps"),
    ("ConvolutionBackwardWeights", [("f32", (1, 4, 5, 5)), ("f32", (1, 6, 5, 3))],
     win(2, weights_shape=(6, 4, 1, 0), **NCX_OIX), InvalidShape, "no taps"),
    ("Convolution", CONV_SHAPES, win(2, strides=(1,), **NCX_OIX), InvalidGraphOp, "strides"),
    ("Convolution", CONV_SHAPES, win(2, strides=(1, 0), **NCX_OIX), InvalidGraphOp, "strides"),
    ("Convolution", CONV_SHAPES, win(2, pads_end=(0, -1), **NCX_OIX), InvalidGraphOp, "pads_end"),
    ("Convolution", CONV_SHAPES, win(2, auto_pad="same", **NCX_OIX), InvalidGraphOp, "auto_pad"),
    ("Convolution", CONV_SHAPES, win(2, data_format="NCHW", weights_format="OIX"), InvalidGraphOp, "data_format"),
    ("Convolution", CONV_SHAPES, win(2, data_format="NCX", weights_format="IOX"), InvalidGraphOp, "weights_format"),
    ("Convolution", CONV_SHAPES, win(2, groups=0, **NCX_OIX), InvalidGraphOp, "groups"),
    ("Convolution", [("f32", (1, 4, 5, 5)), ("bf16", (6, 4, 3, 3))], win(2, **NCX_OIX), InvalidDataType, "data type"),
    ("Convolution", CONV_SHAPES, dict(strides=(1, 1), pads_begin=(0, 0), pads_end=(0, 0)), InvalidGraphOp,
     "dilations"),
    ("ConvolutionBackwardData", [("f32", (1, 6, 3, 3)), ("f32", (6, 4, 3, 3))], win(2, **NCX_OIX), InvalidGraphOp,
     "dst_shape"),
    ("ConvolutionBackwardData", [("f32", (1, 6, 3, 3)), ("f32", (6, 4, 3, 3))],
     win(2, dst_shape=(1, 4, 5), **NCX_OIX), InvalidGraphOp, "dst_shape"),
    ("ConvolutionBackwardData", [("f32", (1, 6, 3, 3)), ("f32", (6, 4, 3, 3))],
     win(2, dst_shape=(1, 4, 6, 5), **NCX_OIX), InvalidShape, "diff_dst"),
    ("ConvolutionBackwardData", [("f32", (1, 6, 3, 3)), ("f32", (6, 4, 3, 3)), ("s32", (3,))], win(2, **NCX_OIX),
     InvalidShape, "dst_shape"),
    ("ConvolutionBackwardData", [("f32", (1, 6, 3, 3)), ("f32", (6, 4, 3, 3))],
     win(2, dst_shape=(1, 4, 5, 5), output_padding=(0, 0, 1), **NCX_OIX), InvalidGraphOp, "output_padding"),
    ("ConvolutionBackwardWeights", [("f32", (1, 4, 5, 5)), ("f32", (1, 6, 3, 3))], win(2, **NCX_OIX),
     InvalidGraphOp, "weights_shape"),
    ("ConvolutionBackwardWeights", [("f32", (1, 4, 5, 5)), ("f32", (1, 6, 3, 3))],
     win(2, weights_shape=(6, 4, 2, 3), **NCX_OIX), InvalidShape, "spatial dims"),
    ("ConvolutionBackwardWeights", [("f32", (1, 4, 5, 5)), ("f32", (2, 6, 3, 3))],
     win(2, weights_shape=(6, 4, 3, 3), **NCX_OIX), InvalidShape, "batch"),
    ("ConvTranspose", [("f32", (1, 4, 5, 5)), ("f32", (3, 6, 3, 3))], win(2, data_format="NCX", weights_format="IOX"),
     InvalidShape, "groups"),
    ("ConvTransposeBackwardData", [("f32", (1, 5, 7, 7)), ("f32", (4, 6, 3, 3))],
     win(2, data_format="NCX", weights_format="IOX"), InvalidShape, "O dim"),
    ("ConvTransposeBackwardWeights", [("f32", (1, 4, 5, 5)), ("f32", (1, 6, 8, 7))],
     win(2, weights_shape=(4, 6, 3, 3), data_format="NCX", weights_format="IOX"), InvalidShape, "spatial dims"),
])
def test_validation(kind, ins, attrs, error, match):
    with pytest.raises(error, match=match):
        single_op_graph(kind, ins, [(ins[0][0], [-1] * len(ins[0][1]))], attrs)


def test_declared_output_shape_must_match():
    with pytest.raises(InvalidShape, match="output shape differs"):
        single_op_graph("Convolution", CONV_SHAPES, [("f32", (1, 6, 3, 4))], win(2, **NCX_OIX))


def test_shape_input_values_are_checked_at_run_time():
    g = single_op_graph("ConvolutionBackwardData", [("f32", (1, 6, 3, 3)), ("f32", (6, 4, 3, 3)), ("s32", (4,))],
                        [("f32", (-1,) * 4)], win(2, **NCX_OIX))
    dy, w = np.ones((1, 6, 3, 3), np.float32), np.ones((6, 4, 3, 3), np.float32)
    for bad in ([1, 4, 7, 7], [1, 5, 5, 5], [1, 4, 5, 0], [1, 4, -5, 5]):
        with pytest.raises(RuntimeFault, match="dst_shape"):
            run(g, dict(zip(g.input_ports, [dy, w, np.array(bad, np.int32)])))


# --------------------------------------------------------------- hand-computed values
@pytest.mark.parametrize("n, c, oc", [(0, 4, 6), (2, 0, 6), (2, 4, 0)])
def test_empty_batch_or_channels(n, c, oc):
    """A batch, input or output channel count of 0: the reference answers (an empty
    dst, or sums of no products: zeros) for the three convolution ops."""
    x, w = rng.standard_normal((n, c, 5, 5)), rng.standard_normal((oc, c, 3, 3))
    y = run_graph("Convolution", [x, w], win(2, **NCX_OIX))
    assert y.shape == (n, oc, 3, 3) and not y.any()
    dy = rng.standard_normal((n, oc, 3, 3))
    dx = run_graph("ConvolutionBackwardData", [dy, w], win(2, dst_shape=(n, c, 5, 5), **NCX_OIX))
    dw = run_graph("ConvolutionBackwardWeights", [x, dy], win(2, weights_shape=(oc, c, 3, 3), **NCX_OIX))
    assert dx.shape == x.shape and not dx.any() and dw.shape == w.shape and not dw.any()


def test_conv_backward_data_from_a_shape_input():
    # dx[i] = sum_o dy[o] w[i - o]: dy = [1, 2], w = [1, 10] -> [1, 12, 20]
    dx = run_graph("ConvolutionBackwardData", [np.array([[[1.0, 2.0]]]), np.array([[[1.0, 10.0]]]),
                                               np.array([1, 1, 3])], win(1, **NCX_OIX))
    np.testing.assert_array_equal(dx, [[[1, 12, 20]]])


def test_conv_transpose_groups_split_the_i_axis_of_iox():
    # IOX weights (IC=2, OC/G=1, K=1) with 2 groups: dst channel g reads src channel g only
    y = run_graph("ConvTranspose", [np.array([[[1.0], [2.0]]]), np.array([[[3.0]], [[5.0]]])],
                  win(1, groups=2, data_format="NCX", weights_format="IOX"))
    np.testing.assert_array_equal(y, [[[3.0], [10.0]]])


def test_conv_same_lower_puts_the_odd_pad_first():
    # size 4, kernel 2, stride 1: one pad; same_lower pads the front -> [x0, x0+x1, x1+x2, x2+x3]
    x, w = np.array([[[1.0, 2.0, 3.0, 4.0]]]), np.ones((1, 1, 2))
    y = run_graph("Convolution", [x, w], win(1, auto_pad="same_lower", **NCX_OIX))
    np.testing.assert_array_equal(y, [[[1, 3, 5, 7]]])
    y = run_graph("Convolution", [x, w], win(1, auto_pad="SAME_UPPER", **NCX_OIX))
    np.testing.assert_array_equal(y, [[[3, 5, 7, 4]]])


# ----------------------------------------------------------------------- gradchecks
def r(*shape):
    return rng.standard_normal(shape)


CONV_GRAD_ATTRS = [
    win(2, strides=(2, 1), dilations=(1, 2), pads_begin=(1, 0), pads_end=(0, 2), groups=2),
    win(2, strides=(2, 3), auto_pad="same_lower", data_format="NCX", weights_format="OIX"),
]


@pytest.mark.parametrize("attrs", CONV_GRAD_ATTRS, ids=["nxc_xio_groups", "same_lower"])
def test_convolution_gradients(attrs):
    ncx = attrs.get("data_format") == "NCX"
    x = r(1, 4, 5, 6) if ncx else r(1, 5, 6, 4)
    w = r(4, 4, 2, 3) if ncx else r(2, 3, 2, 4)
    grads_match("Convolution", [x, w], 0, "ConvolutionBackwardData", lambda dy: [dy, w], attrs,
                {"dst_shape": x.shape})
    grads_match("Convolution", [x, w], 1, "ConvolutionBackwardWeights", lambda dy: [x, dy], attrs,
                {"weights_shape": w.shape})


@pytest.mark.parametrize("attrs, x_shape, w_shape", [
    (win(2, strides=(2, 1), dilations=(1, 2), pads_begin=(1, 0), pads_end=(0, 1), output_padding=(1, 0), groups=2,
         data_format="NCX", weights_format="IOX"), (1, 4, 3, 3), (4, 3, 2, 3)),
    (win(1, strides=(3,), auto_pad="SAME_UPPER", output_padding=(2,), groups=3, weights_format="XOI"),
     (2, 3, 3), (4, 2, 3)),
], ids=["ncx_iox", "nxc_xoi_same"])
def test_conv_transpose_gradients(attrs, x_shape, w_shape):
    x, w = r(*x_shape), r(*w_shape)
    grads_match("ConvTranspose", [x, w], 0, "ConvTransposeBackwardData", lambda dy: [dy, w], attrs)
    grads_match("ConvTranspose", [x, w], 1, "ConvTransposeBackwardWeights", lambda dy: [x, dy], attrs,
                {"weights_shape": w.shape})
