"""Scaled dot-product attention (sdpa.md, gqa.md): every SDPA graph is one
partition whose kernel is the flash-style attention kernel (scores in a tile,
never S x S), equal to graphc's reference within the compiled tolerances."""
import numpy as np
import pytest

from graphc.codegen.attention import BM_WIDE, BN_WIDE
from graphc.codegen.kernel import NUM_THREADS
from support import check_compiled
from support.sdpa import check_sdpa, sdpa_graph, sdpa_inputs


@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("mask", [None, "add", "select", "causal_tl", "causal_br"])
def test_mha_masks(dt, mask):
    g, ids = sdpa_graph(dt, mask=mask)
    check_sdpa(g, ids)


@pytest.mark.parametrize("scale", ["mul_swapped", "div", None])
def test_mha_scale_forms(scale):
    g, ids = sdpa_graph("f32", scale=scale, sq=40, skv=40)
    check_sdpa(g, ids)


def test_long_sequence_keeps_scores_in_tiles():
    """Scores of one head (600 x 600) are larger than all of the kernel's workspaces."""
    g, ids = sdpa_graph("f32", n=1, hq=2, sq=600, skv=600, d=32, mask="causal_tl")
    check_sdpa(g, ids)
    assert 600 * 600 > NUM_THREADS * BM_WIDE * BN_WIDE


@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_keys_past_one_wide_block(dt):
    """Without a causal mask the keys go in wide blocks (BN_WIDE): more keys than
    one block walks several with the online softmax's rescaling, the last one short."""
    skv = 2 * BN_WIDE + 50
    g, ids = sdpa_graph(dt, n=1, hq=2, sq=BM_WIDE + 30, skv=skv, d=32, mask="add")
    check_sdpa(g, ids)


@pytest.mark.parametrize("dt, mask", [("f32", "add"), ("f32", "causal_br"), ("bf16", None)])
def test_few_keys_take_tall_query_blocks(dt, mask):
    """Every key in one block (Stable Diffusion's 77-token cross attention): query
    blocks grow past BM_WIDE while each thread keeps two tasks; a row of 37 keys
    runs its exps over whole vectors (the tile's row out to 48 with -inf)."""
    g, ids = sdpa_graph(dt, n=2, hq=2, sq=1000, skv=37, d=16, mask=mask)
    check_sdpa(g, ids)
    (part,) = g.get_partitions("fusion")
    assert f"min({4 * BM_WIDE}, 1000 - " in part.compile().source


def test_reshape_transpose_in_and_out():
    g, ids = sdpa_graph("f32", layout="bshd", hq=3, mask="add")
    kinds = sorted(o.kind for o in g.ops.values())
    assert kinds.count("StaticReshape") == 4 and kinds.count("StaticTranspose") == 4
    check_sdpa(g, ids)


@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_gqa_4d_through_reshapes(dt):
    g, ids = sdpa_graph(dt, hq=4, hkv=2, gqa=True, mask="add")
    check_sdpa(g, ids)


def test_gqa_bshd_layout():
    g, ids = sdpa_graph("f32", hq=4, hkv=2, gqa=True, layout="bshd", mask="causal_br", sq=40, skv=72)
    check_sdpa(g, ids)


def test_mqa_broadcast_kv():
    g, ids = sdpa_graph("f32", hq=3, hkv=1, mask="causal_tl")
    check_sdpa(g, ids)


def test_output_typecast():
    g, ids = sdpa_graph("f32", out_cast="bf16", sq=40, skv=40)
    check_sdpa(g, ids)


def test_fully_masked_rows_are_nan_as_in_the_reference():
    """Row 0 masked everywhere (NaN, as the reference's softmax of -inf); row 1 masked
    over the whole first key block (its running sum starts from 0 later, no NaN)."""
    g, ids = sdpa_graph("f32", n=1, hq=1, mask="select")
    ins = sdpa_inputs(g, ids)
    m = np.ones((1, 1, 70, 300), bool)
    m[0, 0, 0] = False
    m[0, 0, 1, :280] = False
    ins[ids["mask"]] = m
    out = check_compiled(g, ins)[ids["out"]]
    assert np.isnan(out[0, 0, 0]).all() and np.isfinite(out[0, 0, 1:]).all()


def test_finite_fill_value():
    """A mask fill that is not -inf is an ordinary value (the kernel does not assume -inf)."""
    g, ids = sdpa_graph("f32", mask="causal_tl", sq=40, skv=40)
    check_sdpa(g, ids, fill=-3.0)


@pytest.mark.parametrize("mask", [None, "add", "causal_tl", "causal_br"])
@pytest.mark.parametrize("dt,layout,d,fpmath", [("bf16", "bhsd", 13, None), ("bf16", "bshd", 16, None),
                                                ("f32", "bhsd", 16, "bf16")])
def test_tiles_multiplied_in_bf16(monkeypatch, mask, dt, layout, d, fpmath):
    """Q @ K^T and P @ V in bf16 (attention.BF16_QK / BF16_PV, and without the tile BF16_UNPACKED) where both
    operands hold bf16 values (bf16 tensors, or f32 ones fpmath_mode rounds): sizes
    that are no multiple of the tile's 8 x 32 (70 queries, 301 keys: a last key
    block of 45, an odd k of P @ V; head dim 13: an odd k of Q @ K^T), masks,
    causal; P rounded to bf16 before P @ V as the reference rounds it."""
    from graphc.codegen import attention
    from graphc.codegen.blas_import import bf16_gemm
    if not bf16_gemm():
        pytest.skip("no bf16 GEMM in this build")
    monkeypatch.setattr(attention, "BF16_QK", True)
    monkeypatch.setattr(attention, "BF16_PV", True)
    monkeypatch.setattr(attention, "BF16_UNPACKED", True)
    g, ids = sdpa_graph(dt, skv=301, d=d, mask=mask, layout=layout, fpmath=fpmath)
    check_sdpa(g, ids)
    _assert_bf16_products(g)


def _assert_bf16_products(g):
    """Q @ K^T (in the first sweep; in the second too unless its scores are kept)
    and P @ V in the second multiply bf16: on graphc's tile with K^T and V packed
    into its panels once per head, else gemm_bf16."""
    from graphc.codegen.blas_import import bf16_tile_gemm
    loop = str(g.get_partitions("fusion")[0].compile().source).split("\ndef ", 1)[1]   # (past the imports)
    products = 2 if "scores0" in loop else 3     # (the kept scores' scratch)
    if bf16_tile_gemm():
        assert loop.count("gemm_bf16_packed(") == products and loop.count("pack_panels_bf16(") == 2
    else:
        assert loop.count("gemm_bf16(") == products
    assert "gemm_f32(" not in loop


@pytest.mark.parametrize("case", [
    dict(n=1, hq=1, sq=300, skv=333, d=40, mask="causal_tl"),      # one head: its query blocks split into tasks
    dict(n=2, hq=4, sq=200, skv=260, d=24, mask="causal_br"),      # several query blocks per task, one pack
    dict(hq=4, hkv=2, gqa=True, sq=130, d=34, mask="add"),         # GQA: K/V heads shared through reshapes
    dict(hq=3, hkv=1, sq=90, skv=129, d=7, mask="causal_tl"),      # MQA: K/V broadcast; odd head dim
    dict(hq=2, layout="bshd", sq=150, skv=257, d=64, mask="select"),   # bshd views; whole panels, 2 KV rows
    dict(k_quant=("s8", 8, "d", True, False), v_quant=("s8", 8, "d", True, False), sq=80, d=16),   # computed K/V
    dict(n=2, hq=2, sq=150, skv=301, d=13, mask="causal_tl", recompute=True),   # the second sweep's own scores
])
def test_tiles_on_head_panels(monkeypatch, case):
    """The bf16 products with K^T and V packed into the tile's panels once per head
    (per task: a head's run of query blocks), against the reference: key blocks
    that are no multiple of 32 or of 2 (a last one of 5, 4, 1 keys), head dims
    that are no multiple of 32 (or of 2), causal masks whose packing stops at the
    task's last row, GQA/MQA heads sharing K/V, bshd views, K/V dequantized while
    they are packed; the first sweep's scores kept for the second, or (past
    SCORES_MAX) computed again."""
    from graphc.codegen import attention
    from graphc.codegen.blas_import import bf16_gemm
    if not bf16_gemm():
        pytest.skip("no bf16 GEMM in this build")
    monkeypatch.setattr(attention, "BF16_QK", True)
    monkeypatch.setattr(attention, "BF16_PV", True)
    monkeypatch.setattr(attention, "BF16_UNPACKED", True)
    if case.pop("recompute", False):
        monkeypatch.setattr(attention, "SCORES_MAX", 0)
    g, ids = sdpa_graph("bf16", **case)
    check_sdpa(g, ids)
    _assert_bf16_products(g)
