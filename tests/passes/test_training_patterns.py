"""The training patterns (passes/catalog/training.py) on graphs graphc.grad
derives: attention's backward fuses its dP MatMul with SoftMaxBackward into
one staged kernel, which computes what the reference does."""
import numpy as np
import pytest

import graphc
from support import check_compiled
from support.training import chain, training_inputs


def test_matmul_then_softmax_backward_is_one_staged_kernel():
    g, ts = chain([("f32", (2, 4, 8)), ("f32", (2, 8, 4))],
                  [("MatMul", [0, 1], {}), ("SoftMax", [2], {"axis": -1}), ("MatMul", [3, 1], {"transpose_b": True})])
    tr = graphc.grad(g, [ts[0].id, ts[1].id])
    parts = [p for p in tr.graph.get_partitions() if p.pattern == "matmul_softmax_bwd"]
    assert len(parts) == 1 and [op.kind for op in parts[0].ops] == ["MatMul", "SoftMaxBackward"]
    assert parts[0].plan.shape == "staged"
    got = check_compiled(tr.graph, training_inputs(g, tr))
    assert np.isfinite(got[tr.grad_out(ts[0].id)]).all()


@pytest.mark.parametrize("kind", ["ReLU", "Sigmoid", "Tanh"])
def test_eltwise_and_its_backward_reading_dst_are_one_loop(kind):
    """x -> ReLU -> y, then ReLUBackward(y, dy) and the gradient's Add with the
    other reader's: one eltwise kernel writing y and the gradient."""
    g, ts = chain([("f32", (3, 16))], [(kind, [0], {}), ("Multiply", [1, 0], {})])
    tr = graphc.grad(g, [ts[0].id])
    parts = [p for p in tr.graph.get_partitions() if p.pattern == "eltwise_fwd_bwd"]
    assert len(parts) == 1 and [op.kind for op in parts[0].ops][:2] == [kind, f"{kind}Backward"]
    check_compiled(tr.graph, training_inputs(g, tr))


@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_layer_norm_backward_with_the_residual_gradient_added_where_it_stores(dt):
    """x -> LayerNorm -> + x: x's gradient is LayerNormBackward's diff_src plus
    the residual's, added in LayerNormBackward's kernel (diff_src stays in
    registers)."""
    g, ts = chain([(dt, (4, 8)), ("f32", (8,)), ("f32", (8,))],
                  [("LayerNorm", [0, 1, 2], {"keep_stats": False}), ("Add", [3, 0], {})])
    tr = graphc.grad(g, [ts[0].id, ts[1].id, ts[2].id])
    parts = [p for p in tr.graph.get_partitions() if p.pattern == "norm_bwd_post_ops"]
    assert len(parts) == 1 and [op.kind for op in parts[0].ops] == ["LayerNormBackward", "Add"]
    bwd = parts[0].ops[0]
    assert bwd.outputs[0].id not in {t.id for t in parts[0].outputs}   # diff_src in registers
    check_compiled(tr.graph, training_inputs(g, tr))
