"""Legality from the match: a pattern declares its kernel shape, legality plans
from the roles the match bound, refuses with a reason what code generation could
not lower, and code generation never refuses a plan legality accepted (a kernel
lowering one op at a time is planned, logged, and an error in tests)."""
import warnings

import pytest

import graphc.lowering as lowering
from graphc import reference
from graphc.builder import GraphBuilder
from graphc.codegen.fused_values import NotFusable
from graphc.codegen.rules import can_lower
from graphc.errors import InternalError
from graphc.fill import make_inputs
from graphc.partition import run_passes
from graphc.passes.catalog import UNARY
from graphc.passes.legality import Illegal, accept, plan
from graphc.passes.pattern import Pattern, match_all
from graphc.types import LogicalTensor
from support import assert_outputs, check_compiled
from support.sdpa import sdpa_graph


def _fusion_log(g) -> list[str]:
    return [c for name, changes in run_passes(g, "fusion").log if name == "fusion" for c in changes]


def test_a_pattern_declares_its_kernel_shape():
    with pytest.raises(ValueError, match="kernel shapes"):
        Pattern("bad", kernel="loop")
    b = GraphBuilder()
    s = b.op("SoftMax", [b.tensor("f32", [4, 8])], attrs={"axis": -1})[0]
    b.op("ReLU", [s])
    g = b.finalize()
    for kernel, fused in (("eltwise", False), ("anchor", True)):
        p = Pattern("softmax_relu", kernel=kernel)
        p.op("ReLU", p.op("SoftMax", p.input()))
        rejected = []
        found = match_all(g, [p], accept(g, can_lower, rejected=rejected))
        assert bool(found) == fused
        if fused:
            assert found[0].plan.shape == "anchor"
        else:
            assert rejected[0][1] == "the ops make an anchor kernel, not the eltwise kernel the pattern declares"


def test_a_match_binds_roles_in_blocks_and_every_round():
    b = GraphBuilder()
    t = b.tensor("f32", [4, 8])
    for kind in ("ReLU", "Exp", "Tanh"):
        t = b.op(kind, [t])[0]
    g = b.finalize()
    p = Pattern("unary_chain", kernel="eltwise")
    first = p.op(UNARY, p.input(), label="first")
    p.repeat(lambda q, x: q.op(UNARY, x, label="next"), first, 1, 4)
    (m,) = match_all(g, [p], accept(g, can_lower))
    assert m.role("first").kind == "ReLU"
    assert [o.kind for o in m.roles["next"]] == ["Exp", "Tanh"]
    with pytest.raises(ValueError, match="2 ops bound"):
        m.role("next")


def test_attention_is_planned_from_the_bound_roles():
    """The sdpa pattern binds Q@K^T, the scale (in a block), the mask, SoftMax,
    @V and the reorders; the plan's anchors and prologue are those ops."""
    g, _ = sdpa_graph(sq=16, skv=32, scale="mul", mask="add", layout="bshd")
    (m,) = run_passes(g, "fusion").matches
    assert m.pattern.name == "sdpa" and m.pattern.kernel == ("attention",)
    qk, sm, pv = m.role("qk"), m.role("softmax"), m.role("pv")
    assert (qk.kind, sm.kind, pv.kind) == ("MatMul", "SoftMax", "MatMul") and qk.outputs[0].id != pv.outputs[0].id
    assert m.role("scale").kind == "Multiply" and m.role("mask").kind == "Add"
    assert m.roles["reorder"] and {o.kind for o in m.roles["reorder"]} <= {"StaticReshape", "StaticTranspose"}
    assert m.plan.shape == "attention" and m.plan.anchors == [qk.id, sm.id, pv.id]
    assert m.plan.prologue == {o.id for o in m.roles["reorder"]}
    # without a pattern no attention is found by counting op kinds; without its roles none is planned
    assert plan(g, m.ops, can_lower).shape == "staged"
    with pytest.raises(Illegal, match="binds 0 ops as 'qk'"):
        plan(g, m.ops, can_lower, ("attention",), {})


def _bias_graph(computed_bias=False):
    """BiasAdd over the channel dim (NXC), then an Add broadcasting the same bias
    along the last dim; or (``computed_bias``) BiasAdd of a bias computed in the graph."""
    b = GraphBuilder()
    x, bias = b.tensor("f32", [2, 4, 5, 3]), b.tensor("f32", [3])
    if computed_bias:
        bias = b.op("Exp", [bias])[0]
    y = b.op("BiasAdd", [x, bias], attrs={"data_format": "NXC"})[0]
    if not computed_bias:
        b.op("Add", [y, bias])
    return b.finalize()


def test_an_elementwise_loop_reads_a_tensor_one_way():
    g = _bias_graph()
    with pytest.raises(Illegal, match=r"tensor 1 is read two ways in one elementwise loop \(along dims \[3\] of "
                                      r"rank 4 and by broadcasting\)"):
        plan(g, g.topo_ops(), can_lower)
    p = Pattern("bias_add", kernel="eltwise")
    p.op("Add", p.op("BiasAdd", p.input()))
    rejected = []
    assert not match_all(g, [p], accept(g, can_lower, rejected=rejected))
    assert rejected[0][1].startswith("tensor 1 is read two ways")
    check_compiled(g, seed=2)
    g = _bias_graph(computed_bias=True)
    with pytest.raises(Illegal, match=r"computed by op 0 \(Exp\), is read along dims \[3\] of rank 4"):
        plan(g, g.topo_ops(), can_lower)


def test_grouped_scales_are_loaded_not_computed():
    """A per-group DynamicDequantize computed while the GEMM packs its weights
    reads each scale at the group of the index: scales computed in the kernel are refused."""
    b = GraphBuilder()
    x, w, s = b.tensor("f32", [6, 64]), b.tensor("s8", [64, 24]), b.tensor("f32", [2, 24])
    s2 = b.op("Abs", [s])[0]
    dw = b.op("DynamicDequantize", [w, s2], out=[("f32", [64, 24])],
              attrs={"qtype": "per_group", "group_shape": [32, 1]})[0]
    b.op("MatMul", [x, dw], out=[("f32", [6, 24])])
    g = b.finalize()
    with pytest.raises(Illegal, match=r"the scales of op 1 \(DynamicDequantize, per group\) are computed by op 0"):
        plan(g, g.topo_ops(), can_lower)
    assert plan(g, g.topo_ops()[1:], can_lower).shape == "anchor"   # scales from outside: in registers


def test_an_anchor_output_kept_in_registers_is_read_by_no_op():
    """LayerNorm's mean, read by an op whose value the epilogue needs, has no
    buffer in an anchor kernel (only output 0 is bound where the anchor stores)."""
    b = GraphBuilder()
    dst, mean, _ = b.op("LayerNorm", [b.tensor("f32", [4, 4])], out=[("f32", [4, 4]), ("f32", [4]), ("f32", [4])],
                        attrs={"use_affine": False, "keep_stats": True})
    b.op("Add", [dst, b.op("Exp", [mean])[0]])
    g = b.finalize()
    with pytest.raises(Illegal, match=f"op 1 \\(Exp\\) reads anchor output {mean.id}, which is neither output 0"):
        plan(g, g.topo_ops(), can_lower)


def _matmul_head_merge():
    """MatMul [2, 6, 8] -> reshape [2, 6, 2, 4] -> transpose [2, 2, 6, 4] (the output):
    the reshape cannot store into the transposed output's buffer (dims 2 and 4 are
    not adjacent there)."""
    b = GraphBuilder()
    y = b.op("MatMul", [b.tensor("f32", [2, 6, 3]), b.tensor("f32", [3, 8])], out=[("f32", [2, 6, 8])])[0]
    r = b.op("StaticReshape", [y], out=[("f32", [2, 6, 2, 4])], attrs={"shape": [2, 6, 2, 4], "special_zero": False})[0]
    b.op("StaticTranspose", [r], out=[("f32", [2, 2, 6, 4])], attrs={"order": [0, 2, 1, 3]})
    return b.finalize()


def test_views_that_are_no_views_of_the_buffers_do_not_fold():
    g = _matmul_head_merge()
    with pytest.raises(Illegal, match="StaticReshape 1 cannot store into the buffer of tensor"):
        plan(g, g.topo_ops(), can_lower)
    parts = g.get_partitions()
    assert [[o.id for o in p.ops] for p in parts] == [[0, 1], [2]]   # the MatMul stores through the reshape
    check_compiled(g, seed=3)


def _gapped_view_chain():
    """A reshape of rows with gaps across them (a copy), then a transpose."""
    b = GraphBuilder()
    x = b.tensor("f32", [4, 12], strides=[16, 1])
    r = b.op("StaticReshape", [x], out=[("f32", [6, 4, 2])], attrs={"shape": [6, 4, 2], "special_zero": False})[0]
    b.op("StaticTranspose", [r], out=[("f32", [2, 6, 4])], attrs={"order": [2, 0, 1]})
    return b.finalize()


def test_a_kernel_one_op_at_a_time_is_in_the_pass_log_and_an_error_in_tests(monkeypatch):
    g = _gapped_view_chain()
    (p,) = g.get_partitions()
    assert p.pattern == "view_chain" and "StaticReshape 0 is no view" in p.plan.one_at_a_time
    assert any(c.startswith("view_chain: ops [0, 1] lower one op at a time: StaticReshape 0") for c in _fusion_log(g))
    with pytest.raises(InternalError, match="lowers one op at a time.*GRAPHC_STRICT_FUSION=1"):
        p.compile()
    monkeypatch.setenv(lowering.STRICT_FUSION, "0")
    cp = p.compile()
    assert [k for k, _ in cp.arg_plan] == ["in", "out", "tmp"]    # the reshape's copy, then the transpose's
    check_compiled(g, seed=4)


def test_code_generation_refusing_an_accepted_plan_is_an_internal_error(monkeypatch):
    b = GraphBuilder()
    b.op("Exp", [b.op("ReLU", [b.tensor("f32", [4, 8])])[0]])
    (p,) = b.finalize().get_partitions()

    def refuse(kb, ops, refs, plan_, values_of):
        raise NotFusable("a rule used fused tensor 1 other than through load_nd / store_nd")
    monkeypatch.setattr(lowering, "lower_fused", refuse)
    with pytest.raises(InternalError, match="code generation refused the eltwise plan legality accepted for "
                                            "partition 0 .*: a rule used fused tensor 1"):
        p.compile()


def test_folded_views_compiled_for_other_strides_fall_back_visibly(monkeypatch):
    """Views folded into an elementwise loop as the graph lays out its buffers;
    compiled for an output whose rows have gaps, the reshape is no view of it."""
    b = GraphBuilder()
    t = b.op("StaticTranspose", [b.tensor("f32", [24, 8])], out=[("f32", [8, 24])], attrs={"order": [1, 0]})[0]
    t = b.op("ReLU", [t])[0]
    b.op("StaticReshape", [t], out=[("f32", [8, 4, 6])], attrs={"shape": [8, 4, 6], "special_zero": False})
    g = b.finalize()
    (p,) = g.get_partitions()
    assert p.pattern == "eltwise_views" and p.plan.shape == "eltwise" and not p.plan.one_at_a_time
    gapped = [LogicalTensor(t.id, t.dtype, t.shape, (48, 8, 1)) for t in p.outputs]
    with pytest.raises(InternalError, match="its views are no views of the buffers as compiled"):
        p.compile(p.inputs, gapped)
    monkeypatch.setenv(lowering.STRICT_FUSION, "0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cp = p.compile(p.inputs, gapped)
    assert [w.category for w in caught] == [lowering.FusionFallbackWarning]
    inputs = make_inputs(g, seed=5)
    assert_outputs(cp.execute(inputs), reference.run(g, inputs))
