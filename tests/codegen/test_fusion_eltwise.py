"""Fused eltwise chains: one partition under policy "fusion" (one per op under
"debug"), one kernel with a single loop nest that reads each input once and
writes only the chain's output (no scratch buffers), matching the reference."""
import re

import numpy as np
import pytest

from graphc.builder import GraphBuilder
from graphc.codegen.kernel import PARALLEL_THRESHOLD
from graphc.fill import make_inputs
from graphc.codegen.outline import LOOP, runs_parallel

from support import check_compiled, compiled_vs_reference

KINDS = ["ReLU", "Add", "GELU", "Multiply", "Tanh"]


def chain(dt="f32", shape=(2, 3, 8), bias_shape=(8,), scale_shape=(1, 8), strides=None):
    """x -> ReLU -> Add(bias, broadcast) -> GELU -> Multiply(scale, broadcast) -> Tanh."""
    b = GraphBuilder()
    x = b.tensor(dt, shape, strides)
    bias, scale = b.tensor(dt, bias_shape), b.tensor(dt, scale_shape)
    (y,) = b.op("ReLU", [x])
    (y,) = b.op("Add", [y, bias])
    (y,) = b.op("GELU", [y])
    (y,) = b.op("Multiply", [y, scale])
    b.op("Tanh", [y])
    return b.finalize()


def assert_one_loop_nest(cg):
    """One kernel whose arguments are the partition's inputs and its one output
    (no scratch tensors), with one outermost loop and no allocation."""
    (cp,) = cg.compiled
    src = cp.source
    assert src.count("def kernel(") == 1
    args = re.search(r"def kernel\((.*)\):", src).group(1).split(", ")
    n = len(cp.inputs)
    assert len(cp.outputs) == 1
    assert args == [f"a{i}" for i in range(n)] + [f"o{n}"]
    outlined = f"def {LOOP}0(" in src   # its parallel loop in a function of its own
    body = src.split(f"def {LOOP}0(" if outlined else "def kernel(")[1].split("\n\n")[0].splitlines()[1:]
    assert len([ln for ln in body if re.match(r"    for ", ln)]) == 1, src
    assert "np.empty" not in src and "np.zeros" not in src
    for i in range(n):  # each input read at one place
        assert src.count(f"a{i}[") == 1, src
    return src


@pytest.mark.parametrize("policy, groups", [("fusion", [KINDS]), ("debug", [[k] for k in KINDS])])
def test_partitions(policy, groups):
    g = chain()
    parts = g.get_partitions(policy)
    assert [[op.kind for op in p.ops] for p in parts] == groups
    assert all(p.is_supported() for p in parts)
    if policy == "fusion":
        (p,) = parts
        assert [t.id for t in p.inputs] == g.input_ports
        assert [t.id for t in p.outputs] == g.output_ports


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
def test_fused_chain(dt):
    src = assert_one_loop_nest(compiled_vs_reference(chain(dt))[0])
    body = src.split("def kernel")[1]
    for fn in ["np.maximum(", "gelu_erf_f32(", "tanh_f32("]:  # every op inlined once into the one loop
        assert body.count(fn) == 1, fn


def test_debug_policy_runs_each_op():
    cg = compiled_vs_reference(chain(), policy="debug")[0]
    assert len(cg.compiled) == len(KINDS)


def test_fused_chain_strided_input():
    """x laid out transposed (LogicalTensor strides (1, 4)) with a broadcast row of bias."""
    g = chain(shape=(4, 8), bias_shape=(8,), scale_shape=(4, 8), strides=(1, 4))
    rng = np.random.default_rng(0)
    inputs = make_inputs(g)
    inputs[g.input_ports[0]] = rng.uniform(-3, 3, (8, 4)).astype(np.float32).T
    assert_one_loop_nest(compiled_vs_reference(g, inputs=inputs)[0])


def test_fused_chain_rank0():
    assert_one_loop_nest(compiled_vs_reference(chain(shape=(), bias_shape=(), scale_shape=()))[0])


@pytest.mark.parametrize("bias_shape, scale_shape", [
    ((32,), (1, 32)),  # channels last: collapses to one outer dim
    ((16, 1), (16, 1)),  # per channel on (N, C, HW): two outer dims in the prange row loop
])
def test_fused_chain_parallel(bias_shape, scale_shape):
    """Enough work for prange: still one loop nest, one kernel."""
    shape = (PARALLEL_THRESHOLD // (16 * 32), 16, 32)
    g = chain(shape=shape, bias_shape=bias_shape, scale_shape=scale_shape)
    src = assert_one_loop_nest(compiled_vs_reference(g)[0])
    assert runs_parallel(src)


def _swish():
    b = GraphBuilder()
    x = b.tensor("f32", (5, 7))
    (s,) = b.op("Sigmoid", [x])
    (y,) = b.op("Multiply", [x, s])
    b.op("Tanh", [y])
    return b.finalize()


def _backward_start():
    b = GraphBuilder()
    x, dy, c = b.tensor("f32", (5, 7)), b.tensor("f32", (5, 7)), b.tensor("f32", (7,))
    (y,) = b.op("ReLUBackward", [x, dy], attrs={"use_dst": False})
    (y,) = b.op("Multiply", [y, c])
    b.op("Sigmoid", [y])
    return b.finalize()


def _broadcast_first():
    b = GraphBuilder()
    x, c = b.tensor("f32", (5, 7)), b.tensor("f32", (1, 7))
    (y,) = b.op("Abs", [x])
    (y,) = b.op("Subtract", [c, y], [("f32", (5, 7))])
    (y,) = b.op("Exp", [y])
    b.op("Clamp", [y], attrs={"min": 0.1, "max": 0.9})
    return b.finalize()


@pytest.mark.parametrize("make, kinds", [
    (_swish, ["Sigmoid", "Multiply", "Tanh"]),
    (_backward_start, ["ReLUBackward", "Multiply", "Sigmoid"]),
    (_broadcast_first, ["Abs", "Subtract", "Exp", "Clamp"]),
])
def test_other_chains(make, kinds):
    g = make()
    (p,) = g.get_partitions("fusion")
    assert [op.kind for op in p.ops] == kinds
    assert_one_loop_nest(compiled_vs_reference(g)[0])


def test_intermediate_used_outside_is_written_by_the_chain():
    """ReLU's output also feeds a Sigmoid outside the chain: the fused kernel
    writes it as a partition output (no second pass over x), and both results
    are right."""
    b = GraphBuilder()
    x, c = b.tensor("f32", (4, 8)), b.tensor("f32", (8,))
    (r,) = b.op("ReLU", [x])
    (y,) = b.op("Add", [r, c])
    b.op("Tanh", [y])
    b.op("Sigmoid", [r])
    g = b.finalize()
    parts = g.get_partitions("fusion")
    assert sorted(p.kind for p in parts) == ["ReLU+Add+Tanh", "Sigmoid"]
    chain = next(p for p in parts if len(p.ops) == 3)
    assert sorted(t.id for t in chain.outputs) == [r.id, 4] and chain.plan.roles[r.id] == "written"
    check_compiled(g)


def test_growing_binary_is_not_a_post_op():
    """A binary op whose output is larger than the chain operand starts a new chain."""
    b = GraphBuilder()
    x, c = b.tensor("f32", (1, 8)), b.tensor("f32", (4, 1))
    (r,) = b.op("ReLU", [x])
    (y,) = b.op("Add", [r, c], [("f32", (4, 8))])
    b.op("Tanh", [y])
    g = b.finalize()
    assert [p.kind for p in g.get_partitions("fusion")] == ["ReLU", "Add+Tanh"]
    check_compiled(g)
