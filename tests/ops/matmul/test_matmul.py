"""Validation, shape inference and reference values of MatMul."""
import numpy as np
import pytest

from graphc import InvalidDataType, InvalidGraphOp, InvalidShape
from graphc.builder import single_op_graph
from support import inferred_shape, run_one

RNG = np.random.default_rng(7)


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
