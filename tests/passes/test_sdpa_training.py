"""SDPA for training (sdpa.md): the forward exporting the SoftMax's stats, with
and without a Dropout on the probabilities, is one partition and one
flash-style kernel whose outputs (attention and stats) equal graphc's
reference; the kernel drops exactly the elements the Dropout reference drops;
empty scores leave the attention kernel for kernels of their own."""
import numpy as np
import pytest

from graphc import reference
from graphc.codegen.rules import can_lower
from graphc.passes.catalog import catalog
from graphc.passes.legality import accept
from graphc.passes.pattern import match_all
from support import check_compiled
from support.sdpa import (check_sdpa, check_sdpa_backward, sdpa_backward_graph, sdpa_backward_inputs, sdpa_graph,
                          sdpa_inputs)
from support.sdpa_gqa import check_gqa_backward, gqa_backward_graph, gqa_backward_inputs


@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("mask", [None, "add", "causal_tl"])
def test_forward_exports_stats(dt, mask):
    g, ids = sdpa_graph(dt, mask=mask, stats=True, sq=70, skv=150)
    out = check_sdpa(g, ids)
    assert out[ids["stats"]].shape == (2, 2, 70, 1)


@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("mask", [None, "causal_br"])
def test_forward_dropout_and_stats(dt, mask):
    g, ids = sdpa_graph(dt, mask=mask, stats=True, dropout=True, sq=70, skv=150)
    check_sdpa(g, ids)


def test_dropout_drops_the_reference_elements():
    """With V the identity the output rows are the dropped probabilities
    themselves: zeros exactly where the reference's Dropout mask is 0."""
    g, ids = sdpa_graph("f32", n=1, hq=2, sq=40, skv=16, d=16, stats=True, dropout=True)
    ins = sdpa_inputs(g, ids)
    ins[ids["v"]] = np.broadcast_to(np.eye(16, dtype=np.float32), (1, 2, 16, 16)).copy()
    got = check_compiled(g, ins)[ids["out"]]
    want = reference.run(g, ins)[ids["out"]]
    assert ((got == 0) == (want == 0)).all() and (want == 0).mean() > 0.2


def test_dropout_bad_probability_is_a_fault_naming_the_dropout():
    from graphc.errors import RuntimeFault
    g, ids = sdpa_graph("f32", n=1, hq=1, sq=8, skv=8, d=8, dropout=True)
    ins = sdpa_inputs(g, ids)
    ins[ids["prob"]] = np.array([1.5], np.float32)
    cp = g.get_partitions("fusion")[0].compile()
    with pytest.raises(RuntimeFault, match="Dropout|probability"):
        cp.execute(ins)


def test_training_forward_gqa_layout():
    g, ids = sdpa_graph("f32", hq=4, hkv=2, gqa=True, layout="bshd", mask="add", stats=True, dropout=True,
                        sq=40, skv=72)
    check_sdpa(g, ids)


# -- backward ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("dropout", [False, True])
def test_backward_one_kernel(dt, dropout):
    g, ids = sdpa_backward_graph(dt, mask="add", dropout=dropout)
    check_sdpa_backward(g, ids)


def test_bf16_backward_multiplies_in_bf16():
    """bf16 Q, K, V, dO and the graph's bf16 P and dS (its TypeCasts): on graphc's
    tile each of the backward kernel's seven GEMMs multiplies bf16 values with
    f32 sums (not widened to f32 for sgemm), sweep 1's S and dP from K^T and V^T
    packed once for a key block's query blocks, P^T and dS^T as bf16 bits
    transposed 16 x 16 in registers; the gradients against the reference."""
    from graphc.codegen.blas_import import bf16_tile_gemm
    g, ids = sdpa_backward_graph("bf16", mask="add")
    check_sdpa_backward(g, ids)
    part = next(p for p in g.get_partitions("fusion") if any(o.kind != "End" for o in p.ops))
    loop = str(part.compile().source).split("\ndef ", 1)[1]   # (past the imports)
    if bf16_tile_gemm():
        assert "gemm_f32(" not in loop
        assert loop.count("gemm_bf16(") == 5 and loop.count("gemm_bf16_packed(") == 2
        assert loop.count("pack_panels_bf16(") == 2 and loop.count("transpose_u16(") == 2
    # the one-element scale read once a tile, before the element loops (a load of it beside the
    # loops' stores kept LLVM from vectorizing them: GPT-2's backward ran 4x slower)
    assert "sc0 = " in loop and loop.index("sc0 = ") < loop.index("for jj")


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_backward_with_dmask_output(dt):
    g, ids = sdpa_backward_graph(dt, scale="div", mask="add", dropout=True, dmask=True, sq=40, skv=72)
    out = check_sdpa_backward(g, ids)
    assert out[ids["dm"]].shape == (2, 2, 40, 72)


@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_backward_implicit_causal_mask(dt):
    """torchbench's backward: the scores under the implicit causal mask (GenIndex,
    GreaterEqual, Select with a -inf fill), one kernel reading GenIndex as its index."""
    g, ids = sdpa_backward_graph(dt, mask="causal_tl", sq=40, skv=40)
    check_sdpa_backward(g, ids)


def test_backward_no_scale_no_mask_odd_sizes():
    g, ids = sdpa_backward_graph("f32", n=1, h=3, sq=130, skv=67, d=24, scale=None)
    check_sdpa_backward(g, ids)


def test_backward_gradients_match_forward_dropout_mask():
    """The backward's dV is zero in exactly the key rows no query keeps: with every
    query dropping key 0 the gradient of V's row 0 is 0 (p = 1 drops all: dV = 0)."""
    g, ids = sdpa_backward_graph("f32", n=1, h=1, sq=16, skv=16, d=8, dropout=True)
    ins = sdpa_backward_inputs(g, ids)
    ins[ids["prob"]] = np.array([1.0], np.float32)
    got = check_compiled(g, ins)
    assert (got[ids["dv"]] == 0).all()


# -- GQA / MQA backward (gqa.md): dK and dV summed over the query heads of a group -----------
@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("mask", [None, "causal"])
@pytest.mark.parametrize("dmask", [False, True])
def test_gqa_backward_one_kernel(dt, mask, dmask):
    """gqa.md's 5-D shapes: Q [N, G, H/G, S, D], K/V [N, G, 1, S, D]; dM [N, G, H/G, S, S]."""
    g, ids = gqa_backward_graph(dt, hkv=2, rep=3, mask=mask, dropout=dmask, dmask=dmask)
    out = check_gqa_backward(g, ids)
    assert out[ids["dk"]].shape == out[ids["dv"]].shape == (2, 2, 1, 72, 16)
    if dmask:
        assert out[ids["dm"]].shape == (2, 2, 3, 40, 72)


@pytest.mark.parametrize("form", ["5d", "mqa4d"])
@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_mqa_backward_one_kernel(form, dt):
    """MQA: one K/V head, 5-D [N, 1, H, S, D] or 4-D with K/V [N, 1, S, D] broadcast."""
    g, ids = gqa_backward_graph(dt, n=1, hkv=1, rep=4, form=form, sq=33, skv=70, mask="add", scale="div")
    check_gqa_backward(g, ids)


@pytest.mark.parametrize("dt,mask,keep_dims", [("f32", "add", True), ("bf16", "causal", False)])
def test_gqa_backward_4d_through_reshapes(dt, mask, keep_dims):
    """gqa.md's 4-D GQA: Q, O, dO, Stats [N, H, S, .], K/V [N, G, S, D] and the mask
    reshaped to 5-D (views of their buffers), dQ and dK/dV reshaped back (stored
    through the views): still one partition and one kernel."""
    g, ids = gqa_backward_graph(dt, hkv=2, rep=2, form="gqa4d", mask=mask, keep_dims=keep_dims, dropout=True)
    assert sum(o.kind == "StaticReshape" for o in g.ops.values()) >= 7
    out = check_gqa_backward(g, ids)
    assert out[ids["dq"]].shape == (2, 4, 40, 16) and out[ids["dk"]].shape == out[ids["dv"]].shape == (2, 2, 72, 16)


def test_gqa_backward_4d_gradients_without_kept_dims():
    """ReduceSum without keep_dims: dK/dV [N, G, S, D] stored from the group's sum."""
    g, ids = gqa_backward_graph("f32", hkv=2, rep=2, sq=24, skv=40, keep_dims=False, dropout=True)
    out = check_gqa_backward(g, ids)
    assert out[ids["dk"]].shape == (2, 2, 40, 16)


@pytest.mark.parametrize("hkv,rep,skv,d", [(2, 4, 200, 32), (1, 8, 64, 64)])
def test_gqa_backward_parallel(hkv, rep, skv, d):
    """Enough work for the parallel sweeps: tasks of (batch, K/V head, key block) each
    sum their group's query heads, so no two threads write one dK/dV row (MQA with
    few keys: smaller key blocks, so that every thread has one)."""
    from support import compiled_vs_reference
    g, ids = gqa_backward_graph("f32", n=1, hkv=hkv, rep=rep, sq=96, skv=skv, d=d, mask="causal")
    check_gqa_backward(g, ids)
    compiled_vs_reference(g, gqa_backward_inputs(g, ids, 3), parallel=True, what="gqa backward")


def test_gqa_backward_only_dk_reduced_keeps_the_reduction_apart():
    """dK summed over the heads but dV not: the attention kernel writes the per-head
    dK MatMul and the ReduceSum is a partition of its own; the results stay right."""
    g, ids = gqa_backward_graph("f32", n=1, hkv=2, rep=2, sq=16, skv=24, sum_dv=False)
    parts = g.get_partitions("fusion")
    (attn,) = [p for p in parts if p.pattern == "sdpa_backward"]
    assert all(o.outputs[0].id != ids["dk"] for o in attn.ops)
    assert any(o.kind == "ReduceSum" and o.outputs[0].id == ids["dk"] for p in parts for o in p.ops)
    out = check_compiled(g, gqa_backward_inputs(g, ids))
    assert out[ids["dv"]].shape == (1, 2, 2, 24, 16)


@pytest.mark.parametrize("dim", ["sq", "skv", "n"])
def test_empty_scores_leave_the_attention_kernel(dim):
    """Scores with a dim of 0 (no query, key or batch): legality refuses the
    attention plan with its reason (its blocks had a ZeroDivisionError) and the
    ops run in kernels of their own, equal to the reference: forward with stats,
    and backward."""
    for g, ids, inputs in _empty_sdpa(dim):
        parts = g.get_partitions("fusion")
        assert all(p.plan is None or p.plan.shape != "attention" for p in parts)
        rejected = []
        match_all(g, list(catalog()), accept(g, can_lower, rejected=rejected))
        assert any(m.pattern.kernel == ("attention",) and "are empty" in why for m, why in rejected)
        check_compiled(g, inputs, what=dim)


def _empty_sdpa(dim):
    """The forward (with stats) and backward SDPA graphs with ``dim`` 0, and their inputs."""
    g, ids = sdpa_graph("f32", stats=True, **{"n": 2, "hq": 2, "sq": 8, "skv": 12, "d": 4, dim: 0})
    yield g, ids, sdpa_inputs(g, ids)
    g, ids = sdpa_backward_graph("f32", **{"n": 2, "h": 2, "sq": 8, "skv": 12, "d": 4, dim: 0})
    yield g, ids, sdpa_backward_inputs(g, ids)
