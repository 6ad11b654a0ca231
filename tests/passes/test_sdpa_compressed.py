"""SDPA with a compressed KV cache (sdpa_with_compressed_kv.md) and quantized
SDPA (sdpa_quantized.md): the (Dynamic)Dequantize of K/V (int8/int4, grouped
scales along the head or the sequence dim, with or without zero points) or of
fp8/int8 Q/K/V, and the Quantize -> Dequantize of the probabilities and the
output Quantize, are one partition with the attention plan; the kernel
dequantizes K/V while it packs their tiles (no dequantized copy, no S x S
buffer: check_sdpa), equal to graphc's reference within the compiled tolerances."""
import numpy as np
import pytest

from graphc.codegen.attention import BM_PACKED, BN
from graphc.codegen.kernel import NUM_THREADS
from support import check_compiled
from support.sdpa import check_sdpa, sdpa_graph, sdpa_inputs

#: (compressed, dtype, group, axis, zero points, activations, dequantize to f32 then TypeCast)
CASES = [
    ("k", "s8", 32, "d", False, "f32", False),
    ("k", "u8", 128, "d", True, "bf16", False),
    ("k", "s4", 32, "d", True, "f32", False),
    ("k", "u4", 128, "s", False, "bf16", False),
    ("k", "s8", 32, "s", True, "bf16", True),
    ("v", "s8", 128, "s", True, "f32", False),
    ("v", "u8", 32, "d", False, "bf16", False),
    ("v", "s4", 128, "d", False, "bf16", True),
    ("v", "u4", 32, "s", True, "f32", False),
    ("kv", "s4", 32, "d", True, "bf16", False),
    ("kv", "u8", 128, "s", True, "f32", False),
    ("kv", "s4", 32, "d", True, "f16", False),
]


def _compressed(which, spec, **kw):
    return sdpa_graph(k_quant=spec if "k" in which else None, v_quant=spec if "v" in which else None, **kw)


def _dequantized_in_registers(g):
    """The dequantized K/V stay in registers (the plan's role of every DynamicDequantize dst)."""
    (part,) = g.get_partitions("fusion")
    assert part.plan.shape == "attention"
    deq = [o for o in part.ops if o.kind == "DynamicDequantize"]
    assert deq and all(part.plan.roles[o.outputs[0].id] == "register" for o in deq)


@pytest.mark.parametrize("which,qdt,group,axis,zps,dt,cast", CASES)
def test_compressed_kv(which, qdt, group, axis, zps, dt, cast):
    d = 128 if group == 128 and axis == "d" else 64
    g, ids = _compressed(which, (qdt, group, axis, zps, cast), dt=dt, n=2, hq=2, sq=24, skv=384, d=d)
    _dequantized_in_registers(g)
    out = check_sdpa(g, ids)[ids["out"]]
    # a dequantized copy of K (or V) would not fit the workspaces check_sdpa bounds
    assert 2 * 2 * 384 * d > NUM_THREADS * BM_PACKED * BN and np.isfinite(out.astype(np.float32)).all()


def test_compressed_k_transposed_layout():
    """K stored [n, h, d, s] (GPU's layout in the doc), grouped along the head dim."""
    g, ids = sdpa_graph(k_quant=("s4", 32, "d", True, False), v_quant=("s8", 32, "d", False, False),
                        k_dhs=True, n=1, hq=2, sq=40, skv=160, d=64, mask="causal_br")
    check_sdpa(g, ids)


def test_compressed_kv_reordered_after_dequantize():
    """bshd: K/V [n, s, h * d] dequantized, then reshaped and transposed (read at the
    index each view maps to), the output transposed back."""
    g, ids = sdpa_graph(k_quant=("u4", 32, "d", True, False), v_quant=("s8", 32, "s", True, False),
                        layout="bshd", n=2, hq=2, sq=30, skv=96, d=32, mask="add")
    assert sum(o.kind == "StaticReshape" for o in g.ops.values()) == 4
    check_sdpa(g, ids)


@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_compressed_kv_gqa(dt):
    """GQA: the dequantized K/V reshaped to 5-D and broadcast over the head group."""
    g, ids = sdpa_graph(dt, k_quant=("s8", 32, "d", True, False), v_quant=("u4", 32, "d", False, False),
                        hq=4, hkv=2, gqa=True, sq=20, skv=80, d=32, mask="causal_tl")
    check_sdpa(g, ids)


def test_paged_compressed_kv():
    """K/V stored as pages [n, h * pages, page, d], dequantized, then reshaped to
    [n, h, s, d]: a key's page and row within it come from its index (// and %)."""
    g, ids = sdpa_graph(k_quant=("s8", 32, "s", True, False), v_quant=("u4", 32, "d", True, False),
                        kv_pages=3, n=1, hq=2, sq=20, skv=96, d=32, mask="causal_br")
    check_sdpa(g, ids)


def test_compressed_kv_mqa_many_query_rows():
    """One K/V head for all query heads; enough query rows for several (grown) query blocks."""
    g, ids = sdpa_graph(k_quant=("s4", 32, "s", False, False), v_quant=("s4", 32, "s", False, False),
                        n=1, hq=3, hkv=1, sq=300, skv=128, d=32)
    check_sdpa(g, ids)


def test_dequantized_k_that_leaves_is_computed_apart():
    """A dequantized K that is also a graph output cannot stay in registers: the
    attention partition reads it, computed by a partition of its own."""
    g, ids = sdpa_graph(k_quant=("s8", 32, "d", True, False), n=1, hq=2, sq=16, skv=64, d=32, k_out=True)
    parts = [p for p in g.get_partitions("fusion") if any(o.kind != "End" for o in p.ops)]
    att = [p for p in parts if p.pattern == "sdpa"]
    assert len(att) == 1 and att[0].plan.shape == "attention"
    assert not any(o.kind == "DynamicDequantize" for o in att[0].ops)
    check_compiled(g, sdpa_inputs(g, ids))


@pytest.mark.parametrize("fpmath", ["bf16", "tf32"])
def test_fpmath_mode_rounds_f32_operands(fpmath):
    """Under fpmath_mode bf16/tf32 (as the compressed-KV doc asks to set) the f32 Q, the
    dequantized K/V and the f32 probabilities are rounded as the MatMuls read them,
    as the reference rounds them."""
    g, ids = sdpa_graph(k_quant=("s4", 32, "d", True, False), v_quant=("s8", 32, "s", True, False),
                        n=1, hq=2, sq=20, skv=64, d=32, mask="causal_tl", fpmath=fpmath)
    check_sdpa(g, ids)


def test_zero_points_matter():
    """The kernel reads the zero points: moving them moves the output as in the reference."""
    g, ids = sdpa_graph(k_quant=("u8", 32, "d", True, False), v_quant=("u8", 32, "d", True, False),
                        n=1, hq=1, sq=8, skv=64, d=32)
    ins = sdpa_inputs(g, ids)
    base = check_compiled(g, ins)[ids["out"]]
    ins[ids["v_zps"]] = (ins[ids["v_zps"]].astype(np.int64) + 3).astype(ins[ids["v_zps"]].dtype)
    moved = check_compiled(g, ins)[ids["out"]]
    assert not np.allclose(base, moved)


@pytest.mark.parametrize("qdt", ["f8_e4m3", "f8_e5m2"])
@pytest.mark.parametrize("out_quant", [False, True])
def test_fp8_sdpa(qdt, out_quant):
    """sdpa_quantized.md with fp8 Q/K/V: Dequantize each, Quantize -> Dequantize the
    probabilities, [Quantize the output to fp8]."""
    g, ids = sdpa_graph(quant=qdt, out_quant=out_quant, n=1, hq=2, sq=16, skv=64, d=32, mask="causal_tl")
    kinds = [o.kind for o in g.ops.values()]
    assert kinds.count("Dequantize") == 4 and kinds.count("Quantize") == 1 + out_quant
    check_sdpa(g, ids)


@pytest.mark.parametrize("qdt", ["s8", "u8"])
def test_int8_quantized_sdpa(qdt):
    """sdpa_quantized.md with int8 Q/K/V (u8 with a zero point), f32 output."""
    g, ids = sdpa_graph(quant=qdt, n=1, hq=2, sq=16, skv=64, d=32, mask="add")
    check_sdpa(g, ids)


@pytest.mark.parametrize("qdt,axis,zps", [("s4", "d", True), ("u8", "s", False)])
def test_compressed_reference_vs_torch(qdt, axis, zps):
    """The reference of a compressed-KV graph against torch's scaled_dot_product_attention
    on K/V dequantized independently here ((x - zp) * scale per group, float64)."""
    torch = pytest.importorskip("torch")
    from graphc import reference
    from graphc.tolerances import ORACLE
    from support import assert_close, n64, t64
    spec = (qdt, 32, axis, zps, False)
    g, ids = sdpa_graph(k_quant=spec, v_quant=spec, n=1, hq=2, sq=16, skv=64, d=64, mask="causal_tl")
    ins = sdpa_inputs(g, ids, seed=3)
    got = reference.run(g, ins)[ids["out"]]

    def dequantized(name):
        x = ins[ids[name]].astype(np.float64)
        ax = -1 if axis == "d" else -2
        s = np.repeat(ins[ids[f"{name}_scales"]].astype(np.float64), 32, axis=ax)
        z = np.repeat(ins[ids[f"{name}_zps"]].astype(np.float64), 32, axis=ax) if zps else 0.0
        return t64((x - z) * s)
    q = t64(ins[ids["q"]])
    want = torch.nn.functional.scaled_dot_product_attention(q, dequantized("k"), dequantized("v"), is_causal=True,
                                                            scale=float(ins[ids["scale"]][0]))
    assert_close(got, n64(want), "f32", ORACLE, f"compressed {qdt}")
