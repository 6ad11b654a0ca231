"""Compiled MatMul against the reference: dtypes, transposes, batch broadcast,
vectors, bias, strided operands (in place and packed), fused post-ops."""
import pytest

from support.compiled import check_compiled
from support.graphs import one_op, strides

CASES = [
    # (src, weights, bias, dst, attrs)
    ([3, 4], [4, 5], None, [3, 5], {}),
    ([64, 96], [96, 80], [80], [64, 80], {}),
    ([2, 3, 33, 17], [17, 29], None, [2, 3, 33, 29], {}),
    ([2, 1, 9, 17], [3, 9, 17], [1, 9], [2, 3, 9, 9], {"transpose_a": False, "transpose_b": True}),
    ([17, 9], [3, 17, 9], None, [3, 9, 9], {"transpose_a": True}),
    ([7, 300, 64], [7, 64, 300], None, [7, 300, 300], {}),
    ([13], [13, 6], None, [6], {}),
    ([4, 13], [13], None, [4], {}),
    ([13], [2, 13, 1], None, [2, 1], {}),
    ([600, 40], [40, 700], [700], [600, 700], {}),
]


@pytest.mark.parametrize("dtype,ddt", [("f32", "f32"), ("bf16", "bf16"), ("f16", "f16"), ("bf16", "f32")])
@pytest.mark.parametrize("src,wei,bias,dst,attrs", CASES)
def test_matmul(dtype, ddt, src, wei, bias, dst, attrs):
    ins = [(dtype, src), (dtype, wei)] + ([(dtype, bias)] if bias else [])
    g = one_op("MatMul", ins, [(ddt, dst)], attrs)
    check_compiled(g, what=f"{dtype} {src}@{wei}")


@pytest.mark.parametrize("order_a,order_b,order_d", [((1, 0), (0, 1), (0, 1)), ((0, 1), (1, 0), (1, 0))])
@pytest.mark.parametrize("pad", [1, 2])
def test_matmul_layouts(order_a, order_b, order_d, pad):
    """Column-major and padded operands go to BLAS as they lie; a column-major dst through the store loop."""
    a, b, d = [70, 50], [50, 90], [70, 90]
    g = one_op("MatMul", [("f32", a, strides(a, order_a, pad)), ("f32", b, strides(b, order_b, pad))],
               [("f32", d, strides(d, order_d, pad))])
    check_compiled(g, what=f"{order_a} {order_b} {order_d} pad {pad}")
