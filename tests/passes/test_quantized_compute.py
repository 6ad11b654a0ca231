"""Quantized MatMul and Convolution as one partition (quantized_matmul_fusion_patterns.md,
quantized_convolution_fusion_patterns.md): Dequantize on src and weights (per
tensor or per channel, with zero points) computed while the GEMM packs its
operands, post-ops and a Quantize (per tensor or per channel) where the
kernel stores, compared with graphc's reference.

With static s8/u8 Dequantizes on both operands the kernel multiplies the
integers and scales the exact sums, as oneDNN's s32 accumulation does (long
sums: tests/passes/test_int8_accumulation.py); with power-of-two scales the
compiled u8 outputs equal the reference bit for bit."""
import pytest

from graphc.codegen.rules import can_lower
from graphc.codegen.blas_import import int8_gemm, int8_tile_gemm

from graphc.builder import GraphBuilder
from graphc.fill import make_inputs
from graphc.partition import Partition
from graphc.passes.legality import plan
from support import check_compiled
from support.fusion import dequantize, one_partition


# K * (255 + 3) * 129 < 2^24 for every K below (u8 src, zp 3; s8 weights, |zp| <= 1)
assert 72 * 258 * 129 < 2 ** 24


def _pow2(n, first=-6):
    """n per-channel scales, powers of two (products and sums of int8 values stay exact)."""
    return [2.0 ** (first - i % 4) for i in range(n)]


def _per_channel(n, axis, scales=None, zps=True):
    a = {"qtype": "per_channel", "axis": axis, "scales": scales or _pow2(n)}
    if zps:
        a["zps"] = [i % 3 - 1 for i in range(n)]
    return a


SRC_Q = {"qtype": "per_tensor", "scales": [2.0 ** -5], "zps": [3]}


def _qmatmul(M=24, K=64, N=40, w_attrs=None, out_q=None, out_dt="u8", post="ReLU", batch=()):
    b = GraphBuilder()
    x, w = b.tensor("u8", [*batch, M, K]), b.tensor("s8", [K, N])
    dx = dequantize(b, x, SRC_Q)
    dw = dequantize(b, w, w_attrs or _per_channel(N, 1))
    y = b.op("MatMul", [dx, dw], out=[("f32", [*batch, M, N])])[0]
    if post:
        y = b.op(post, [y])[0]
    if out_q is not None:
        b.op("Quantize", [y], out=[(out_dt, [*batch, M, N])], attrs=out_q)
    return b.finalize()


@pytest.mark.parametrize("out_q", [{"qtype": "per_tensor", "scales": [0.37], "zps": [2]},
                                   {"qtype": "per_channel", "axis": 1, "scales": [0.3 + 0.01 * i for i in range(40)],
                                    "zps": [i % 5 for i in range(40)]}], ids=["q_tensor", "q_channel"])
def test_int8_matmul_per_channel_weights_relu_quantize(out_q):
    """u8 src (zero point 3) and s8 weights with per-channel scales and zero
    points -> MatMul -> ReLU -> Quantize: one anchor kernel, equal to the reference
    bit for bit (exact integer sums: graphc's VNNI tile or MKL's u8 x s8 GEMM, or
    exact f32 runs), the weights' scales a constant table."""
    g = _qmatmul(out_q=out_q)
    p = one_partition(g, "quantized_compute")
    src = p.compile().source
    gemm = "gemm_u8s8_packed(" if int8_tile_gemm() else "gemm_u8s8(" if int8_gemm() else "gemm_f32("
    assert "consts" in src and gemm in src
    check_compiled(g, seed=1)


def test_int8_matmul_f32_output_exact_and_batched():
    """The f32 dst of an int8 MatMul (no post-op) is the exact integer sum scaled:
    bit for bit, also with a batch dim and a per-channel Dequantize along K."""
    g = _qmatmul(post=None, batch=(2,), w_attrs=_per_channel(64, 0))
    one_partition(g, "quantized_compute")
    check_compiled(g, exact=True, seed=2)


def test_int8_matmul_arbitrary_scales_within_tolerance():
    """Scales that are not powers of two: the f32 GEMM rounds, the f32 output
    stays within the compiled tolerance of the float64 reference."""
    g = _qmatmul(post="GELU", w_attrs=_per_channel(40, 1, scales=[0.013 * (i + 1) for i in range(40)]))
    one_partition(g, "quantized_compute")
    check_compiled(g, seed=3)


def test_f32_weights_quantized_in_the_graph_and_bias():
    """Weights given in f32, Quantize -> Dequantize per channel in the graph (oneDNN's
    Q2F subgraph for weights), src s8 per tensor, BiasAdd and a per-channel Quantize to s8."""
    b = GraphBuilder()
    M, K, N = 16, 32, 24
    x, w, bias = b.tensor("s8", [M, K]), b.tensor("f32", [K, N]), b.tensor("f32", [N])
    dx = dequantize(b, x, {"qtype": "per_tensor", "scales": [0.25]})
    qa = _per_channel(N, 1, scales=[0.02 * (i + 1) for i in range(N)], zps=False)
    qw = b.op("Quantize", [w], out=[("s8", [K, N])], attrs=qa)[0]
    dw = dequantize(b, qw, qa)
    y = b.op("MatMul", [dx, dw], out=[("f32", [M, N])])[0]
    y = b.op("BiasAdd", [y, bias])[0]
    b.op("Quantize", [y], out=[("s8", [M, N])], attrs=_per_channel(N, 1, scales=[0.5] * N))
    g = b.finalize()
    one_partition(g, "quantized_compute")
    check_compiled(g, seed=4)


def test_f8_weights_per_channel():
    """f8_e4m3 weights with per-channel scales (no zero points for f8) into MatMul."""
    b = GraphBuilder()
    x, w = b.tensor("f32", [8, 16]), b.tensor("f8_e4m3", [16, 12])
    dw = dequantize(b, w, _per_channel(12, 1, zps=False))
    b.op("MatMul", [x, dw], out=[("f32", [8, 12])])
    g = b.finalize()
    one_partition(g, "quantized_compute")
    check_compiled(g, seed=5)


def _qconv(fmt, groups=1):
    b = GraphBuilder()
    N, C, H, W, O = 2, 8, 6, 5, 12
    xs, ys = ([N, C, H, W], [N, O, H, W]) if fmt == "NCX" else ([N, H, W, C], [N, H, W, O])
    x, w = b.tensor("u8", xs), b.tensor("s8", [O, C // groups, 3, 3])
    dx = dequantize(b, x, SRC_Q)
    dw = dequantize(b, w, _per_channel(O, 0))
    y = b.op("Convolution", [dx, dw], out=[("f32", ys)],
             attrs={"strides": [1, 1], "pads_begin": [1, 1], "pads_end": [1, 1], "dilations": [1, 1],
                    "groups": groups, "data_format": fmt, "weights_format": "OIX"})[0]
    y = b.op("ReLU", [y])[0]
    b.op("Quantize", [y], out=[("u8", ys)],
         attrs={"qtype": "per_channel", "axis": 1 if fmt == "NCX" else 3,
                "scales": [0.2 + 0.01 * i for i in range(O)], "zps": [i % 4 for i in range(O)]})
    return b.finalize()


@pytest.mark.parametrize("fmt,groups", [("NCX", 1), ("NXC", 1), ("NCX", 2)])
def test_int8_convolution_per_channel_weights_relu_quantize(fmt, groups):
    """u8 src (zero point) and s8 OIX weights with per-output-channel scales and zero
    points -> Convolution -> ReLU -> per-channel Quantize: one anchor kernel, bit
    for bit (K = C * 3 * 3 = 72 keeps the f32 sums exact)."""
    g = _qconv(fmt, groups)
    one_partition(g, "quantized_compute")
    check_compiled(g, seed=6)


def _dq_into(kind_after):
    """A per-channel Dequantize into SoftMax (whose lowering is no GEMM packing loop)."""
    b = GraphBuilder()
    x = b.tensor("s8", [4, 8])
    d = dequantize(b, x, _per_channel(8, 1, scales=[0.1 * (i + 1) for i in range(8)]))
    b.op(kind_after, [d], attrs={"axis": -1})
    return b.finalize()


def test_legality_keeps_a_per_channel_dequantize_apart_from_other_anchors():
    """Legality computes a per-channel Dequantize in registers only where its
    reader loads it at its full multi-index (MatMul / convolution packing); in
    front of SoftMax it stays an anchor of its own (staged through scratch)."""
    g = _dq_into("SoftMax")
    fp = plan(g, g.topo_ops(), can_lower)
    assert fp.shape == "staged" and fp.anchors == [0, 1]
    cp = Partition(0, g, g.topo_ops(), "staged", fp).compile()
    inputs = make_inputs(g, seed=7)
    from graphc import reference
    want = reference.run(g, inputs)
    got = cp.execute(inputs)
    from support import assert_outputs
    assert_outputs({k: got[k] for k in want}, want, {k: g.tensors[k].dtype for k in want})
    g = _qmatmul(out_q=None, post=None)
    assert plan(g, g.topo_ops(), can_lower).anchors == [2]          # only the MatMul


def test_legality_staged_plan_writes_no_indexed_value():
    """Two GEMMs (staged): a per-channel Dequantize whose value leaves the
    partition is an anchor (a staged kernel stores pointwise values through a
    flat loop, which knows no channel); one that only feeds a MatMul is not."""
    b = GraphBuilder()
    x, w, w2 = b.tensor("f32", [8, 16]), b.tensor("s8", [16, 12]), b.tensor("f32", [12, 4])
    dw = dequantize(b, w, _per_channel(12, 1))
    y = b.op("MatMul", [x, dw], out=[("f32", [8, 12])])[0]
    b.op("MatMul", [y, w2], out=[("f32", [8, 4])])
    g = b.finalize()
    assert plan(g, g.topo_ops(), can_lower).anchors == [1, 2]
    g.set_ports(outputs=[dw.id, 5])
    assert plan(g, g.topo_ops(), can_lower).anchors == [0, 1, 2]


def test_dequantize_typecast_into_bf16_matmul():
    """Q2F as Dequantize -> TypeCast to bf16 on both inputs, a bf16 MatMul, TypeCast
    back to f32 and a per-channel Quantize: one anchor kernel."""
    b = GraphBuilder()
    M, K, N = 8, 32, 16
    x, w = b.tensor("u8", [M, K]), b.tensor("s8", [K, N])
    xs = b.op("TypeCast", [dequantize(b, x, SRC_Q)], out=[("bf16", [M, K])])[0]
    ws = b.op("TypeCast", [dequantize(b, w, _per_channel(N, 1))], out=[("bf16", [K, N])])[0]
    y = b.op("MatMul", [xs, ws], out=[("bf16", [M, N])])[0]
    y = b.op("TypeCast", [y], out=[("f32", [M, N])])[0]
    b.op("Quantize", [y], out=[("s8", [M, N])], attrs=_per_channel(N, 1, scales=[0.05 * (i + 1) for i in range(N)]))
    g = b.finalize()
    one_partition(g, "quantized_compute")
    check_compiled(g, seed=8)


def test_int8_conv_transpose_per_channel_weights():
    b = GraphBuilder()
    x, w = b.tensor("u8", [1, 8, 4, 4]), b.tensor("s8", [6, 8, 3, 3])
    dx = dequantize(b, x, SRC_Q)
    dw = dequantize(b, w, _per_channel(6, 0))
    y = b.op("ConvTranspose", [dx, dw], out=[("f32", [1, 6, 6, 6])],
             attrs={"strides": [1, 1], "pads_begin": [0, 0], "pads_end": [0, 0], "dilations": [1, 1],
                    "data_format": "NCX", "weights_format": "OIX"})[0]
    b.op("Quantize", [b.op("ReLU", [y])[0]], out=[("u8", [1, 6, 6, 6])],
         attrs={"qtype": "per_tensor", "scales": [0.125], "zps": [1]})
    g = b.finalize()
    one_partition(g, "quantized_compute")
    check_compiled(g, seed=9)
