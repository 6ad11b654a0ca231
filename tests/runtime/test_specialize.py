"""Kernels specialised on the values of a small input: ReduceX with its axes given
as an input tensor compiles, at its first run, once per distinct axes value, and
each specialisation agrees with the reference; bad axes values are an error
naming the op, raised before any kernel runs."""
import re

import numpy as np
import pytest

import graphc
from graphc import reference
from graphc.builder import GraphBuilder
from graphc.errors import GraphcError, InvalidArguments, RuntimeFault
from graphc.fill import make_inputs

from support import assert_outputs, one_op

SHAPE = (3, 4, 5)


def _axes_graph(kind, dt="f32", keep=False, n_axes=2, out=None):
    """One ReduceX op of src SHAPE and an s32 axes input of n_axes values."""
    rank = len(SHAPE) if keep else len(SHAPE) - n_axes
    return one_op(kind, [(dt, SHAPE), ("s32", [n_axes])], [(dt, out or [-1] * rank)], {"keep_dims": keep})


def _inputs(g, axes, seed=0):
    ins = make_inputs(g, seed)
    ins[g.input_ports[1]] = np.array(axes, np.int32)
    return ins


def _check(cg, g, ins, what):
    """cg's outputs on ins against the reference's (shapes too), within the dtype's tolerance."""
    got, want = cg.run(ins), reference.run(g, ins)
    assert_outputs(got, want, {t: g.tensors[t].dtype for t in want}, what=what)
    return got


@pytest.mark.parametrize("kind,dt,keep", [("ReduceSum", "f32", False), ("ReduceMean", "f32", True),
                                          ("ReduceMax", "bf16", False), ("ReduceL2", "f16", True),
                                          ("ReduceProd", "f32", True)])
def test_two_axes_values_two_specialisations(kind, dt, keep):
    g = _axes_graph(kind, dt, keep)
    cg = graphc.compile(g)
    (cp,) = cg.compiled
    assert cp.kernel is None and not cp.specializations  # nothing compiled before the values are known
    shapes = []
    for axes in ([0, 2], [-1, 1]):
        got = _check(cg, g, _inputs(g, axes), f"{kind} {dt} axes {axes}")
        shapes.append(got[2].shape)
    if keep:
        assert shapes == [(1, 4, 1), (3, 1, 1)]
    else:
        assert shapes == [(4,), (3,)]
    assert sorted(v for ((_, v),) in cp.specializations) == [(-1, 1), (0, 2)]
    _check(cg, g, _inputs(g, [0, 2], seed=1), f"{kind} again")  # the same values: the same kernel
    assert len(cp.specializations) == 2


def test_specialised_kernel_is_the_attribute_forms():
    """The axes-input kernel loops as the attribute form's does (one lowering)."""
    g = _axes_graph("ReduceMin", keep=True, n_axes=1)
    cg = graphc.compile(g)
    _check(cg, g, _inputs(g, [1]), "ReduceMin [1]")
    (spec,) = cg.compiled[0].specializations.values()
    attr = graphc.compile(one_op("ReduceMin", [("f32", SHAPE)], [("f32", [3, 1, 5])],
                                 {"axes": [1], "keep_dims": True}))
    # the same code but for the arguments: (a0 src, a1 axes, o2 dst) against (a0 src, o1 dst)
    body = [re.sub(r"\bo2\b", "o1", line) for line in spec.source.splitlines() if "def kernel(" not in line]
    assert body == [line for line in attr.source.splitlines() if "def kernel(" not in line]


@pytest.mark.parametrize("axes,message", [([0, 3], "out of range"), ([-4, 0], "out of range"),
                                          ([1, -2], "unique")])
def test_bad_axes_values_name_the_op(axes, message):
    g = _axes_graph("ReduceSum")
    cg = graphc.compile(g)
    with pytest.raises(RuntimeFault, match=message) as e:
        cg.run(_inputs(g, axes))
    assert e.value.op.kind == "ReduceSum" and e.value.where == "input 'axes'"
    assert "op 0 (ReduceSum)" in str(e.value)
    assert not cg.compiled[0].specializations
    with pytest.raises(RuntimeFault):  # the reference agrees
        reference.run(g, _inputs(g, axes))


def test_axes_array_of_the_wrong_dtype():
    g = _axes_graph("ReduceSum")
    ins = _inputs(g, [0, 1])
    ins[1] = ins[1].astype(np.int64)
    with pytest.raises(InvalidArguments, match="dtype"):
        graphc.compile(g).run(ins)


def test_declared_output_shape_must_fit_the_axes():
    g = _axes_graph("ReduceSum", out=[4])
    cg = graphc.compile(g)
    _check(cg, g, _inputs(g, [2, 0]), "ReduceSum into [4]")
    with pytest.raises(GraphcError, match="ReduceSum"):
        cg.run(_inputs(g, [0, 1]))  # a dst of shape [5]


def test_empty_axes_is_the_identity():
    g = _axes_graph("ReduceMean", keep=True, n_axes=0)
    got = _check(graphc.compile(g), g, _inputs(g, []), "ReduceMean []")
    assert got[2].shape == SHAPE


def test_ops_after_the_reduction_compile_for_its_shape():
    """A consumer of the reduction's data-dependent shape compiles at run too."""
    b = GraphBuilder()
    x, y, ax = b.tensor("f32", list(SHAPE)), b.tensor("f32", [3, 1, 5]), b.tensor("s32", [1])
    t = b.op("ReduceMax", [x, ax], [("f32", [-1, -1, -1])], {"keep_dims": True})[0]
    b.op("ReLU", [b.op("Subtract", [t, y])[0]])
    g = b.finalize()
    cg = graphc.compile(g)
    for axes in ([1], [-2]):
        ins = make_inputs(g, 3)
        ins[ax.id] = np.array(axes, np.int32)
        got = _check(cg, g, ins, f"ReduceMax {axes} -> Subtract -> ReLU")
        assert next(iter(got.values())).shape == (3, 1, 5)


def test_partition_execute_takes_a_list():
    g = _axes_graph("ReduceL1", n_axes=1)
    (cp,) = graphc.compile(g).compiled
    ins = _inputs(g, [2])
    got = cp.execute([ins[0], ins[1]])
    assert_outputs(got, reference.run(g, ins), what="ReduceL1 [2]")
    assert cp.query_logical_tensor(2).shape == (-1, -1)  # known per run only


def test_lowering_rules_receive_the_values(monkeypatch):
    """The values of the value inputs reach each op's lowering rule as the
    ``values`` argument ({port name: tuple}), per compiled specialisation."""
    from graphc.codegen import rules
    seen = []
    real = rules.lower

    def lower(op, kb, ins, outs, values=None):
        seen.append((op.kind, values))
        return real(op, kb, ins, outs, values)
    monkeypatch.setattr(rules, "lower", lower)
    g = _axes_graph("ReduceSum")
    cg = graphc.compile(g)
    assert seen == []   # nothing lowered before the values are known
    _check(cg, g, _inputs(g, [0, 2]), "ReduceSum [0, 2]")
    _check(cg, g, _inputs(g, [-1, 1]), "ReduceSum [-1, 1]")
    assert seen == [("ReduceSum", {"axes": (0, 2)}), ("ReduceSum", {"axes": (-1, 1)})]


# ------------------------------------------------- bounded like the kernel cache

def test_specialisations_are_bounded_like_the_kernel_cache(monkeypatch):
    """Distinct axes values past GRAPHC_KERNEL_CACHE_SIZE drop the least recently
    used specialisation, whose kernel is then freed; values that come back compile
    again (counted, not timed)."""
    import gc
    import weakref
    from graphc.codegen import cache
    monkeypatch.setenv("GRAPHC_KERNEL_CACHE_SIZE", "3")
    g = one_op("ReduceSum", [("f32", [2, 3, 2, 3, 2]), ("s32", [2])], [("f32", [-1, -1, -1])], {"keep_dims": False})
    cg = graphc.compile(g)
    (cp,) = cg.compiled
    pairs = [(a, b) for a in range(5) for b in range(a + 1, 5)]   # 10 values, 10 distinct kernels
    dropped = []
    for n, axes in enumerate(pairs, 1):
        _check(cg, g, _inputs(g, axes), f"ReduceSum {axes}")
        assert cp.executable.compiles == n and len(cp.specializations) == min(n, 3)
        if n <= 7:                                 # dropped by the end
            dropped.append(weakref.ref(cp.specializations[((1, axes),)].kernel.dispatcher))
    assert [v for ((_, v),) in cp.specializations] == pairs[-3:]
    assert len(cache._mem) <= 3
    gc.collect()
    assert [r() is None for r in dropped] == [True] * 7   # their kernels freed
    _check(cg, g, _inputs(g, pairs[-2]), f"ReduceSum {pairs[-2]} again")    # kept: no compile
    assert cp.executable.compiles == 10
    _check(cg, g, _inputs(g, pairs[0]), f"ReduceSum {pairs[0]} again")      # dropped: compiled again
    assert cp.executable.compiles == 11 and len(cp.specializations) == 3
    # least recently used first
    assert [v for ((_, v),) in cp.specializations] == [pairs[-1], pairs[-2], pairs[0]]


def test_partitions_compiled_for_shapes_at_run_are_bounded(monkeypatch):
    """A partition compiled at run per input shapes (after a reduction whose shape
    its axes values give) is kept as the kernel cache is: at most
    GRAPHC_KERNEL_CACHE_SIZE shapes."""
    monkeypatch.setenv("GRAPHC_KERNEL_CACHE_SIZE", "2")
    b = GraphBuilder()
    x, y, ax = b.tensor("f32", [3, 4, 5]), b.tensor("f32", [1, 1, 5]), b.tensor("s32", [1])
    t = b.op("ReduceSum", [x, ax], [("f32", [-1, -1, -1])], {"keep_dims": True})[0]
    b.op("ReLU", [b.op("Subtract", [t, y])[0]])
    g = b.finalize()
    cg = graphc.compile(g)
    assert cg.compiled[1] is None                 # its input shape is known only at run
    for axes in ([0], [1], [2], [0]):
        ins = make_inputs(g, 5)
        ins[ax.id] = np.array(axes, np.int32)
        _check(cg, g, ins, f"ReduceSum {axes} -> Subtract -> ReLU")
        assert len(cg._at_run) <= 2
    assert cg._at_run.made == 4                   # [0] was dropped and compiled again
    assert [shapes for (_, shapes), _ in cg._at_run.items()] == [((3, 4, 1), (1, 1, 5)), ((1, 4, 5), (1, 1, 5))]


def test_bounded_cache_copies_and_pickles_empty():
    import copy
    import pickle
    from graphc.compiler.bounded import BoundedCache
    kept = BoundedCache(lambda: 0)
    assert kept.get("a", lambda: [1]) == [1] and len(kept) == 0     # size 0: made, not kept
    kept = BoundedCache()
    kept.get("a", lambda: [1])
    assert len(kept) == 1
    for again in (copy.deepcopy(kept), pickle.loads(pickle.dumps(kept))):
        assert len(again) == 0 and again.get("a", lambda: [2]) == [2]
