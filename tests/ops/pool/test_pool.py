"""AvgPool, MaxPool and their backward ops: shape inference, validation rules,
hand-computed reference values and finite-difference gradchecks of the backward ops
against their forward references."""
import numpy as np
import pytest

from graphc import InvalidDataType, InvalidGraphOp, InvalidShape
from graphc.builder import single_op_graph

from support import assert_grad_close, grads_match, inferred_shape, numeric_grad, reference64, run_graph

rng = np.random.default_rng(3)


def pool(nsp, **kw):
    return {"kernel": (2,) * nsp, "strides": (1,) * nsp, "pads_begin": (0,) * nsp, "pads_end": (0,) * nsp, **kw}


# ------------------------------------------------------------------ shape inference
@pytest.mark.parametrize("kind, shapes, attrs, expected", [
    ("MaxPool", [(1, 3, 7, 8)], pool(2, kernel=(3, 3), strides=(2, 2), rounding_type="ceil", data_format="NCX"),
     (1, 3, 3, 4)),
    ("MaxPool", [(1, 7, 8, 3)], pool(2, kernel=(3, 3), dilations=(2, 3)), (1, 3, 2, 3)),
    ("AvgPool", [(1, 3, 7, -1)], pool(2, strides=(2, 2), exclude_pad=False, auto_pad="SAME_LOWER",
                                      data_format="NCX"), (1, 3, 4, -1)),
    ("AvgPoolBackward", [(1, 3, 3, 4)],   # the ceil size of the forward output
     pool(2, kernel=(3, 3), strides=(2, 2), exclude_pad=True, src_shape=(1, 3, 7, 8), data_format="NCX"),
     (1, 3, 7, 8)),
    ("MaxPoolBackward", [(1, 3, 7, -1), (1, 3, 3, 3)], pool(2, kernel=(3, 3), strides=(2, 2), data_format="NCX"),
     (1, 3, 7, -1)),
])
def test_inferred_shapes(kind, shapes, attrs, expected):
    assert inferred_shape(kind, shapes, attrs=attrs) == expected


# ------------------------------------------------------------------------ validation
@pytest.mark.parametrize("kind, ins, attrs, error, match", [
    ("AvgPool", [("f32", (1, 3, 5, 5))], dict(kernel=(2, 2), strides=(1, 1), pads_begin=(0, 0), pads_end=(0, 0)),
     InvalidGraphOp, "exclude_pad"),
    ("AvgPool", [("f32", (1, 3, 5, 5))], pool(2, exclude_pad=True, rounding_type="round"), InvalidGraphOp,
     "rounding_type"),
    ("AvgPool", [("f32", (1, 3, 5, 5))], pool(2, exclude_pad=True, kernel=(2,)), InvalidGraphOp, "kernel"),
    ("AvgPool", [("f32", (1, 3, 5, 5))], pool(2, exclude_pad=True, kernel=(0, 2)), InvalidGraphOp, "kernel"),
    ("AvgPoolBackward", [("f32", (1, 3, 4, 4))], pool(2, exclude_pad=True), InvalidGraphOp, "src_shape"),
    ("AvgPoolBackward", [("f32", (1, 3, 4, 4))], pool(2, exclude_pad=True, src_shape=(1, 3, 7, 7),
                                                       data_format="NCX"), InvalidShape, "pooling of src"),
    ("MaxPool", [("f32", (1, 3, 5, 5))], pool(2, dilations=(1, 1, 1)), InvalidGraphOp, "dilations"),
    ("MaxPoolBackward", [("f32", (1, 3, 5, 5)), ("f32", (1, 3, 3, 4))], pool(2, data_format="NCX"), InvalidShape,
     "pooling of src"),
    ("MaxPoolBackward", [("f32", (1, 3, 5, 5)), ("f16", (1, 3, 4, 4))], pool(2, data_format="NCX"), InvalidDataType,
     "data type"),
])
def test_validation(kind, ins, attrs, error, match):
    with pytest.raises(error, match=match):
        single_op_graph(kind, ins, [(ins[0][0], [-1] * len(ins[0][1]))], attrs)


# --------------------------------------------------------------- hand-computed values
@pytest.mark.parametrize("exclude_pad, expected", [(True, [1.5, 3.0, 4.5]), (False, [1.0, 3.0, 3.0])])
def test_avg_pool_ceil_divisor(exclude_pad, expected):
    # x = 1..5, kernel 3, stride 2, pads 1/0, ceil: windows [pad,1,2], [2,3,4], [4,5,overhang]
    y = run_graph("AvgPool", [np.arange(1.0, 6.0)[None, None]],
                  dict(kernel=(3,), strides=(2,), pads_begin=(1,), pads_end=(0,), exclude_pad=exclude_pad,
                       rounding_type="ceil", data_format="NCX"))
    np.testing.assert_allclose(y[0, 0], expected, rtol=1e-6)


def test_max_pool_backward_routes_ties_to_the_first_max():
    x, dy = np.array([[[2.0, 2.0, 1.0]]]), np.array([[[5.0, 7.0]]])
    dx = run_graph("MaxPoolBackward", [x, dy], pool(1, data_format="NCX"))
    np.testing.assert_array_equal(dx, [[[5.0, 7.0, 0.0]]])


def test_max_pool_dilated_window():
    x = np.array([[[3.0, 9.0, 1.0, 4.0, 2.0]]])
    y = run_graph("MaxPool", [x], pool(1, dilations=(2,), data_format="NCX"))
    np.testing.assert_array_equal(y, [[[3.0, 9.0, 2.0]]])      # max(x0, x2), max(x1, x3), max(x2, x4)


# ----------------------------------------------------------------------- gradchecks
def r(*shape):
    return rng.standard_normal(shape)


@pytest.mark.parametrize("exclude_pad", [True, False])
@pytest.mark.parametrize("rounding_type", ["floor", "ceil"])
def test_avg_pool_gradient(exclude_pad, rounding_type):
    x = r(1, 2, 6, 5)
    attrs = dict(kernel=(3, 2), strides=(2, 2), pads_begin=(1, 0), pads_end=(0, 1), exclude_pad=exclude_pad,
                 data_format="NCX")
    y = reference64("AvgPool", [x], attrs=dict(attrs, rounding_type=rounding_type))
    dy = r(*y.shape)
    numeric = numeric_grad(lambda v: reference64("AvgPool", [v], attrs=dict(attrs, rounding_type=rounding_type)), x, dy)
    assert_grad_close(reference64("AvgPoolBackward", [dy], attrs=dict(attrs, src_shape=x.shape)), numeric,
                      what="AvgPoolBackward")


@pytest.mark.parametrize("auto_pad", ["none", "same_upper"])
def test_max_pool_gradient(auto_pad):
    x = r(1, 4, 6, 2)
    attrs = dict(kernel=(2, 3), strides=(1, 2), dilations=(2, 1), pads_begin=(1, 1), pads_end=(0, 1),
                 auto_pad=auto_pad)
    grads_match("MaxPool", [x], 0, "MaxPoolBackward", lambda dy: [x, dy], attrs)
