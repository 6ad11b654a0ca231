"""Compiled MatMul against the reference: dtypes, transposes, batch broadcast,
vectors, bias, strided operands (in place and packed), fused post-ops, empty
dims (M, N, K, batch of 0; quantized too)."""
import numpy as np
import pytest

import graphc
from graphc.builder import GraphBuilder
from graphc.fill import make_inputs
from support.compiled import bf16_matmul_bias_gelu, check_compiled, compiled_vs_reference
from support.fusion import dequantize
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


@pytest.mark.parametrize("dtype,ddt", [("bf16", "bf16"), ("f16", "f16"), ("bf16", "f32")])
@pytest.mark.parametrize("src,wei,bias,dst", [([1, 1030], [1030, 600], [600], [1, 600]), ([7], [7, 257], None, [257]),
                                              ([1, 1, 3], [3, 40], None, [1, 1, 40]),
                                              ([3, 1030], [1030, 600], [600], [3, 600]),
                                              ([1, 4, 9], [9, 300], None, [1, 4, 300])], ids=str)
def test_rows_times_narrow_weights(dtype, ddt, src, wei, bias, dst):
    """One to four rows of src times bf16/f16 weights: the weights read in place, no
    GEMM call (graphc.codegen.gemv): K not a multiple of its 4 rows a step (1030, 7,
    3, 9), N of its 256 columns a task (600, 257, 40, 300), bias, a batch of one."""
    ins = [(dtype, src), (dtype, wei)] + ([(dtype, bias)] if bias else [])
    g = one_op("MatMul", ins, [(ddt, dst)], {})
    (p,) = g.get_partitions()
    src_text = p.compile().source
    assert "gacc" in src_text and "gemm_bf16(" not in src_text and "gemm_f32(" not in src_text
    check_compiled(g, what=f"{dtype} {src}@{wei}")


def test_row_times_every_f16():
    """1 x [1, 65536] f16 weights holding every f16 bit pattern (subnormals, the
    infinities, NaNs): the row product (graphc.codegen.gemv) widens each exactly."""
    g = one_op("MatMul", [("f16", [1, 1]), ("f16", [1, 65536])], [("f32", [1, 65536])], {})
    (x, w), (out,) = g.input_ports, g.output_ports
    weights = np.arange(65536, dtype=np.uint16).view(np.float16).reshape(1, -1)
    got = graphc.compile(g).run({x: np.ones((1, 1), np.float16), w: weights})[out]
    np.testing.assert_array_equal(got, weights.astype(np.float32))


@pytest.mark.parametrize("order_a,order_b,order_d", [((1, 0), (0, 1), (0, 1)), ((0, 1), (1, 0), (1, 0))])
@pytest.mark.parametrize("pad", [1, 2])
def test_matmul_layouts(order_a, order_b, order_d, pad):
    """Column-major and padded operands go to BLAS as they lie; a column-major dst through the store loop."""
    a, b, d = [70, 50], [50, 90], [70, 90]
    g = one_op("MatMul", [("f32", a, strides(a, order_a, pad)), ("f32", b, strides(b, order_b, pad))],
               [("f32", d, strides(d, order_d, pad))])
    check_compiled(g, what=f"{order_a} {order_b} {order_d} pad {pad}")


@pytest.mark.parametrize("order_b", [(0, 1), (1, 0)])
@pytest.mark.parametrize("n", [90, 700])
def test_bf16_matmul_column_blocks(order_b, n):
    """bf16 on graphc's tile: one GEMM cut in column blocks (one per thread), each
    packing its own panels of B (row-major or stored transposed, padded), N not a
    multiple of the tile's 32 columns; with a bias, through a scratch tile."""
    a, b, d = [70, 50], [50, n], [70, n]
    for bias in ([], [("bf16", [n])]):
        g = one_op("MatMul", [("bf16", a), ("bf16", b, strides(b, order_b, 1))] + bias, [("bf16", d)])
        check_compiled(g, what=f"{order_b} {n} {bias}")


# (src, weights, bias, dst): M, N, K, a batch dim of 0; a vector of 0
EMPTY = [([0, 4], [4, 5], [5], [0, 5]), ([3, 4], [4, 0], [0], [3, 0]), ([3, 0], [0, 5], [5], [3, 5]),
         ([2, 0, 3, 4], [4, 5], None, [2, 0, 3, 5]), ([2, 3, 0], [2, 0, 6], [6], [2, 3, 6]), ([0], [0, 5], None, [5]),
         ([0, 0], [0, 0], None, [0, 0])]


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("src,wei,bias,dst", EMPTY, ids=str)
def test_matmul_empty(dtype, src, wei, bias, dst):
    """M, N or a batch dim of 0: an empty dst (a ZeroDivisionError before); K of 0:
    every element a sum of no products, 0 plus the bias, through a fused ReLU."""
    b = GraphBuilder()
    ins = [b.tensor(dtype, src), b.tensor(dtype, wei)] + ([b.tensor(dtype, bias)] if bias else [])
    (y,) = b.op("MatMul", ins, out=[(dtype, dst)])
    b.op("ReLU", [y])
    g = b.finalize()
    inputs = make_inputs(g, 0)
    cg, got = compiled_vs_reference(g, inputs, what=f"{dtype} {src}@{wei}")
    assert len(cg.compiled) == 1
    (out,) = got.values()
    if 0 in (src[-1], wei[-2]) and out.size:
        want = np.maximum(inputs[ins[2].id].astype(np.float32), 0) if bias else np.zeros(dst[-1], np.float32)
        np.testing.assert_array_equal(out.astype(np.float32), np.broadcast_to(want, out.shape))


@pytest.mark.parametrize("m,k,n", [(0, 8, 5), (3, 0, 5), (3, 8, 0)])
def test_int8_matmul_empty(m, k, n):
    """The same through a quantized MatMul (u8 x s8 Dequantizes -> MatMul -> Quantize, one partition)."""
    b = GraphBuilder()
    a = dequantize(b, b.tensor("u8", [m, k]), {"qtype": "per_tensor", "scales": [0.5], "zps": [3]})
    w = dequantize(b, b.tensor("s8", [k, n]), {"qtype": "per_channel", "axis": 1, "scales": [0.25] * n,
                                               "zps": [0] * n})
    (y,) = b.op("MatMul", [a, w, b.tensor("f32", [n])], out=[("f32", [m, n])])
    b.op("Quantize", [y], out=[("u8", [m, n])], attrs={"qtype": "per_tensor", "scales": [0.1], "zps": [2]})
    cg, _ = compiled_vs_reference(b.finalize())
    assert len(cg.compiled) == 1


# (src, src strides order, weights, dst, attrs): batch dims that fold into the
# rows of one GEMM (B the same for the whole batch), in full or in part
FOLDS = [([3, 5, 7, 33], None, [33, 40], [3, 5, 7, 40], {}),
         ([2, 1, 5, 8], None, [1, 1, 8, 7], [2, 1, 5, 7], {}),
         ([2, 3, 5, 8], (0, 2, 1, 3), [8, 7], [2, 3, 5, 7], {}),       # heads interleaved: no fold
         ([2, 3, 5, 8], (1, 0, 2, 3), [8, 7], [2, 3, 5, 7], {}),       # the inner batch dim folds
         ([4, 6, 9], None, [11, 9], [4, 6, 11], {"transpose_b": True}),
         ([4, 1, 9], None, [9, 11], [4, 1, 11], {})]


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("src,order,wei,dst,attrs", FOLDS, ids=str)
def test_batch_folded_into_rows(dtype, src, order, wei, dst, attrs):
    """Batch dims laid out above A's and C's rows fold into M (one GEMM): with a
    bias, a post-op broadcast over the batch and the rows, and a ReLU, each
    element stored where its batch index says."""
    b = GraphBuilder()
    x = b.tensor(dtype, src, strides(src, order) if order else None)
    w, bias = b.tensor(dtype, wei), b.tensor(dtype, [dst[-1]])
    (y,) = b.op("MatMul", [x, w, bias], out=[(dtype, dst)], attrs=attrs)
    (z,) = b.op("Add", [y, b.tensor(dtype, dst[:-2] + [1, dst[-1]])])
    b.op("ReLU", [z])
    g = b.finalize()
    cg, _ = compiled_vs_reference(g, make_inputs(g, 0), what=f"{dtype} {src} {order}")
    assert len(cg.compiled) == 1


@pytest.mark.parametrize("m,k,n", [(64, 40, 96), (3, 1, 5), (130, 257, 70)])
def test_f16_products_keep_f16_precision(m, k, n):
    """f16 x f16 into f32 sums the products as f32 arithmetic does: within a few
    f32 roundings of the exact sum, far inside f16's own rounding (a road that
    lost part of each value, such as products of bf16 parts missing a cross term,
    would be off by about 2^-9)."""
    rng = np.random.default_rng(7)
    x = rng.uniform(-2, 2, (m, k)).astype(np.float16)
    w = rng.uniform(-2, 2, (k, n)).astype(np.float16)
    g = one_op("MatMul", [("f16", [m, k]), ("f16", [k, n])], [("f32", [m, n])])
    (got,) = graphc.compile(g).run({g.input_ports[0]: x, g.input_ports[1]: w}).values()
    exact = x.astype(np.float64) @ w.astype(np.float64)
    scale = np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64))
    assert np.all(np.abs(got - exact) <= 2.0 ** -16 * scale + 1e-30)


@pytest.mark.parametrize("transpose_a", [False, True])
def test_bf16_gemm_tiles_of_l2_under_an_epilogue_on_mkls_road(transpose_a):
    """On MKL's bf16 GEMM (the road where the CPU has AMX-BF16), a thread's block
    of C larger than OWN_TILE_ELEMS is computed a block of columns, then of rows,
    at a time, each stored through the epilogue (bias, GELU) while it is in L2:
    uneven last blocks both ways, A read transposed too."""
    from graphc.codegen import blas
    from graphc.codegen.blas_import import bf16_gemm
    if blas.OWN_BF16 or not bf16_gemm():
        pytest.skip("bf16 GEMMs do not take MKL's road here")
    cg = bf16_matmul_bias_gelu(520, 136, 1100, transpose_a)     # (K over SHORT_K: whole row blocks per thread)
    src = cg.compiled[0].source
    assert len(cg.compiled) == 1 and "for rbk" in src and "for cbk" in src and "gemm_bf16(" in src
    assert "/mkl_gemm_bf16bf16f32" in cg.compiled[0].get_impl_info()     # the library that runs it
