"""DynamicDequantize (scales and zero points as tensors: per tensor, per channel,
per group along K) on MatMul weights as one partition: the weight-only-quantized
MatMul (int8 / int4 weights, f32 / bf16 / f16 activations).  The dequantized
weights are computed while the GEMM packs them (never stored), and the result
equals graphc's reference; the reference's grouped dequantization is checked
against a formula written here element by element."""
import numpy as np
import pytest

from graphc.codegen.blas_import import bf16_gemm, bf16_tile_gemm

from graphc import reference
from graphc.builder import GraphBuilder
from graphc.fill import make_inputs

from support import assert_same, check_compiled
from support.fusion import one_partition

M, K, N = 6, 64, 24
INT_RANGE = {"s8": (-128, 127), "u8": (0, 255), "s4": (-8, 7), "u4": (0, 15)}
ZP_DT = {"s8": "s8", "u8": "u8", "s4": "s4", "u4": "u4"}


def _params_shape(qtype, w_shape, group, k_axis):
    if qtype == "per_tensor":
        return [1]
    if qtype == "per_channel":
        return [w_shape[1 - k_axis]]
    return [d // group if i == k_axis else d for i, d in enumerate(w_shape)]


def _attrs(qtype, group, k_axis, rank=2):
    a = {"qtype": qtype}
    if qtype == "per_channel":
        a["axis"] = 1 - k_axis
    if qtype == "per_group":
        a["group_shape"] = [group if i == k_axis else 1 for i in range(rank)]
    return a


def woq_matmul(w_dt="s4", act="f32", qtype="per_group", group=32, zps=True, transpose_b=False, k=K,
               post=None, batch=(2,)):
    """x [*batch, M, k] (act) @ DynamicDequantize(w) -> [post-op]: weights [k, N],
    or [N, k] with transpose_b; scales in the activation dtype."""
    b = GraphBuilder()
    k_axis = 1 if transpose_b else 0
    w_shape = [N, k] if transpose_b else [k, N]
    x = b.tensor(act, [*batch, M, k])
    w = b.tensor(w_dt, w_shape)
    p_shape = _params_shape(qtype, w_shape, group, k_axis)
    ins = [w, b.tensor(act, p_shape)] + ([b.tensor(ZP_DT[w_dt], p_shape)] if zps else [])
    dw = b.op("DynamicDequantize", ins, out=[(act, w_shape)], attrs=_attrs(qtype, group, k_axis))[0]
    y = b.op("MatMul", [x, dw], out=[(act, [*batch, M, N])], attrs={"transpose_b": transpose_b})[0]
    if post:
        b.op(post, [y])
    return b.finalize()


def _gemm(act):
    """The GEMM a MatMul of ``act`` activations calls: the bf16 GEMM for bf16 values on
    both sides (the dequantized weights take the activations' dtype; on graphc's
    tile, packed once for it: gemm_bf16_packed)."""
    if act != "bf16" or not bf16_gemm():
        return "gemm_f32"
    return "gemm_bf16_packed" if bf16_tile_gemm() else "gemm_bf16"


@pytest.mark.parametrize("act", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("w_dt", ["s8", "u8", "s4", "u4"])
def test_grouped_weights_one_partition(w_dt, act):
    """Groups of 32 along K with zero points: one partition, equal to the reference."""
    g = woq_matmul(w_dt, act)
    one_partition(g, "quantized_compute", registers=["DynamicDequantize"], calls=[_gemm(act)])
    check_compiled(g, seed=1)


@pytest.mark.parametrize("qtype,zps", [("per_tensor", True), ("per_tensor", False), ("per_channel", True),
                                       ("per_channel", False), ("per_group", False)])
def test_per_tensor_channel_group_one_partition(qtype, zps):
    g = woq_matmul("u4", "f32", qtype, zps=zps, post="ReLU")
    one_partition(g, "quantized_compute", registers=["DynamicDequantize"], calls=[_gemm("f32")])
    check_compiled(g, seed=2)


@pytest.mark.parametrize("act", ["f32", "bf16"])
def test_transposed_weights_group_128(act):
    """Weights [N, K] (transpose_b) in groups of 128 along K (their dim 1)."""
    g = woq_matmul("s4", act, group=128, k=256, transpose_b=True, batch=())
    one_partition(g, "quantized_compute", registers=["DynamicDequantize"], calls=[_gemm(act)])
    check_compiled(g, seed=3)


def _grouped_formula(w, scales, zps, group, k_axis):
    """(w - zp) * scale element by element, the scale of w[i, j] at the group of
    its index along k_axis: an oracle independent of graphc's ``expand``."""
    out = np.empty(w.shape, np.float64)
    for i in range(w.shape[0]):
        for j in range(w.shape[1]):
            gi, gj = (i // group, j) if k_axis == 0 else (i, j // group)
            z = 0.0 if zps is None else float(zps[gi, gj])
            out[i, j] = (float(w[i, j]) - z) * float(scales[gi, gj])
    return out


@pytest.mark.parametrize("k_axis", [0, 1])
@pytest.mark.parametrize("w_dt", ["s4", "u8"])
def test_reference_grouped_dequantize_matches_formula(w_dt, k_axis):
    """The reference of a grouped DynamicDequantize is (w - zp) * scale per group
    (f32 out: products of small integers and f32 scales round once)."""
    w_shape = [K, N] if k_axis == 0 else [N, K]
    b = GraphBuilder()
    p_shape = _params_shape("per_group", w_shape, 32, k_axis)
    ins = [b.tensor(w_dt, w_shape), b.tensor("f32", p_shape), b.tensor(ZP_DT[w_dt], p_shape)]
    out = b.op("DynamicDequantize", ins, out=[("f32", w_shape)], attrs=_attrs("per_group", 32, k_axis))[0]
    g = b.finalize()
    data = make_inputs(g, seed=4)
    w, s, z = (data[t.id] for t in ins)
    got = reference.run(g, data)[out.id]
    assert_same(got, _grouped_formula(w, s, z, 32, k_axis).astype(np.float32))
    # and the compiled kernel of the op alone, bit for bit
    check_compiled(g, data, exact=True)


def test_woq_matmul_against_float_matmul():
    """The fused partition equals an f32 MatMul of the weights dequantized by
    the independent formula (f32 GEMM tolerances)."""
    g = woq_matmul("u4", "f32", batch=())
    data = make_inputs(g, seed=5)
    (dq,) = [o for o in g.ops.values() if o.kind == "DynamicDequantize"]
    (mm,) = [o for o in g.ops.values() if o.kind == "MatMul"]
    x_id = mm.inputs[0].id
    w_id, s_id, z_id = (t.id for t in dq.inputs)
    w = _grouped_formula(data[w_id], data[s_id], data[z_id], 32, 0)
    got = check_compiled(g, data)
    want = data[x_id].astype(np.float64) @ w
    (out,) = got.values()
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("q_qtype", ["per_tensor", "per_channel"])
def test_dynamic_int8_matmul_with_dynamic_quantize(q_qtype):
    """u8 src and s8 weights both through DynamicDequantize (per tensor, per
    channel), MatMul, ReLU, DynamicQuantize to u8 where the GEMM stores: one
    anchor kernel, equal to the reference bit for bit (power-of-two scales keep
    the f32 accumulation exact: K * 258 * 129 < 2^24)."""
    b = GraphBuilder()
    x, w = b.tensor("u8", [M, K]), b.tensor("s8", [K, N])
    xs, xz = b.tensor("f32", [1]), b.tensor("u8", [1])
    ws, wz = b.tensor("f32", [N]), b.tensor("s8", [N])
    dx = b.op("DynamicDequantize", [x, xs, xz], out=[("f32", [M, K])])[0]
    dw = b.op("DynamicDequantize", [w, ws, wz], out=[("f32", [K, N])], attrs={"qtype": "per_channel", "axis": 1})[0]
    y = b.op("ReLU", [b.op("MatMul", [dx, dw], out=[("f32", [M, N])])[0]])[0]
    q_shape = [1] if q_qtype == "per_tensor" else [N]
    qs, qz = b.tensor("f32", q_shape), b.tensor("s32", q_shape)
    b.op("DynamicQuantize", [y, qs, qz], out=[("u8", [M, N])], attrs={"qtype": q_qtype, "axis": 1})
    g = b.finalize()
    (p,) = g.get_partitions("fusion")
    assert p.pattern == "quantized_compute" and len(p.ops) == len(g.ops) and p.plan.shape == "anchor"
    assert [r for r in p.plan.roles.values()].count("written") == 1, p.plan.describe()
    data = make_inputs(g, seed=6)
    pow2 = lambda shape, lo: np.ldexp(1.0, np.random.default_rng(7).integers(lo, lo + 3, shape)).astype(np.float32)
    data[xs.id], data[ws.id], data[qs.id] = pow2([1], -5), pow2([N], -7), pow2(q_shape, -3)
    data[xz.id] = np.array([3], np.uint8)
    data[wz.id] = (np.arange(N) % 3 - 1).astype(np.int8)
    data[qz.id] = (np.arange(q_shape[0]) % 5).astype(np.int32)
    check_compiled(g, data, exact=True)
