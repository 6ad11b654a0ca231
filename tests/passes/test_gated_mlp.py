"""Gated MLP (gated_mlp.md) as one partition: FC up and FC gate MatMuls of one
src, swish (Sigmoid and Multiply) or another activation on the gate, Multiply,
[TypeCast], FC down MatMul.  A staged kernel: up and gate into scratch, the
gated product computed while the down MatMul packs its src.  The reference
is checked against torch's formula, the compiled kernel against the reference.
Also binary -> MatMul -> binary chains as one anchor kernel."""
import numpy as np
import pytest
import torch

from graphc import reference
from graphc.builder import GraphBuilder
from graphc.fill import make_inputs
from graphc.tolerances import ORACLE
from support import assert_outputs, check_compiled
from support.fusion import one_partition

M, H, F = 12, 32, 48


def gated_mlp(dt="f32", act="swish", mid=None, m=M, h=H, f=F):
    """src [m, h] -> up, gate [m, f] (``mid``: their dtype, f32 for bf16 as the doc
    asks) -> act(gate) * up -> [TypeCast to dt] -> down [m, h] in ``dt``."""
    mid = mid or "f32"
    M, H, F = m, h, f
    b = GraphBuilder()
    x, w1, w2, w3 = b.tensor(dt, [M, H]), b.tensor(dt, [H, F]), b.tensor(dt, [H, F]), b.tensor(dt, [F, H])
    up = b.op("MatMul", [x, w1], out=[(mid, [M, F])])[0]
    gate = b.op("MatMul", [x, w2], out=[(mid, [M, F])])[0]
    if act == "swish":
        a = b.op("Multiply", [b.op("Sigmoid", [gate])[0], gate])[0]
    elif act is None:
        a = gate
    else:
        a = b.op(act, [gate])[0]
    y = b.op("Multiply", [a, up])[0]
    if mid != dt:
        y = b.op("TypeCast", [y], out=[(dt, [M, F])])[0]
    b.op("MatMul", [y, w3], out=[(dt, [M, H])])
    return b.finalize()


TORCH_ACT = {"swish": torch.nn.functional.silu, "GELU": torch.nn.functional.gelu, "Sigmoid": torch.sigmoid,
             "ReLU": torch.relu, None: lambda t: t}


def _up_and_gate(g):
    """The outputs of the up and gate MatMuls: the only tensors the staged kernel writes
    to memory (the gated product stays in registers)."""
    return [o.outputs[0].id for o in g.topo_ops()[:2]]


@pytest.mark.parametrize("act", ["swish", "GELU", "Sigmoid", "ReLU", None])
def test_f32_gated_mlp_is_one_partition(act):
    g = gated_mlp("f32", act)
    p = one_partition(g, "gated_mlp", "staged", anchors=["MatMul"] * 3, scratch=_up_and_gate(g))
    assert p.compile().source.count("gemm_f32(") == 3
    check_compiled(g, seed=1)


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_low_precision_gated_mlp_with_f32_intermediates(dt):
    """bf16/f16 src and weights, up and gate in f32, TypeCast before down (the doc's form)."""
    g = gated_mlp(dt, "swish")
    one_partition(g, "gated_mlp", "staged", anchors=["MatMul"] * 3, scratch=_up_and_gate(g))
    check_compiled(g, seed=2)


def test_all_bf16_gated_mlp():
    """Every tensor bf16 (no TypeCast): the gated product rounds to bf16 in registers as stored."""
    g = gated_mlp("bf16", "swish", mid="bf16")
    one_partition(g, "gated_mlp", "staged", anchors=["MatMul"] * 3, scratch=_up_and_gate(g))
    check_compiled(g, seed=3)


@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("dt,mid", [("bf16", None), ("bf16", "bf16"), ("f16", None)])
def test_few_tokens_read_the_weights_in_place(dt, mid, m):
    """One or three rows of src (decoded tokens, complex_fusion's [1, 4096] cases):
    each of the three MatMuls multiplies the rows by its weights read in place
    (graphc.codegen.gemv), no GEMM packing them; sizes no multiple of its 4 rows a
    step or 256 columns a task."""
    g = gated_mlp(dt, "swish", mid=mid, m=m, h=262, f=301)
    p = one_partition(g, "gated_mlp", "staged", anchors=["MatMul"] * 3, scratch=_up_and_gate(g))
    src = p.compile().source
    assert src.count("gacc") >= 3 and "gemm_bf16(" not in src and "gemm_f32(" not in src
    check_compiled(g, seed=6)


@pytest.mark.parametrize("act", ["swish", "GELU"])
def test_reference_against_torch(act):
    """graphc's reference of the pattern equals torch's (x @ W1) * act(x @ W2) @ V."""
    g = gated_mlp("f32", act)
    inputs = make_inputs(g, seed=4)
    x, w1, w2, w3 = (torch.from_numpy(inputs[t].astype(np.float64)) for t in g.input_ports)
    want = ((x @ w1) * TORCH_ACT[act](x @ w2)) @ w3
    got = reference.run(g, inputs)
    (out,) = got.values()
    assert_outputs([out], [want], [g.tensors[g.output_ports[0]].dtype], table=ORACLE, what=act)


def test_binary_matmul_binary():
    """Add on MatMul's src (a prologue computed while packing) -> MatMul -> Multiply:
    one anchor kernel."""
    b = GraphBuilder()
    x, r, w, s = b.tensor("f32", [2, 16, 24]), b.tensor("f32", [24]), b.tensor("f32", [24, 20]), b.tensor("f32", [20])
    a = b.op("Add", [x, r])[0]
    y = b.op("MatMul", [a, w], out=[("f32", [2, 16, 20])])[0]
    b.op("Multiply", [y, s])
    g = b.finalize()
    (p,) = g.get_partitions("fusion")
    assert p.pattern == "binary_matmul_binary" and len(p.ops) == 3 and p.plan.shape == "anchor"
    check_compiled(g, seed=5)
