"""Executables: a compiled partition holds one, chosen when it compiles (a
kernel, a view, a collective, a kernel compiled per values, the numpy
reference); values a kernel is specialised on reach schemas and lowering as
arguments, never as attributes of ops."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import graphc
from graphc import FallbackWarning, Graph, LogicalTensor as LT, Op, reference
from graphc.builder import single_op_graph
from graphc.compiler.executables import (AllGatherExecutable, Executable, KernelExecutable, PerValuesExecutable,
                                         ReferenceExecutable, ViewExecutable)
from graphc.compiler.specialize import specialize
from graphc.fill import make_inputs
from graphc.ops.schema import get_schema

from support import assert_outputs, one_op

GRAPHC = Path(graphc.__file__).resolve().parent


def _only(g):
    (p,) = g.get_partitions()
    return p, p.compile()


def _reduce_axes():
    return one_op("ReduceSum", [("f32", [3, 4, 5]), ("s32", [1])], [("f32", [-1, -1])], {})


@pytest.mark.parametrize("make,kind", [
    (lambda: one_op("ReLU", [("f32", [4, 5])], [("f32", [4, 5])]), KernelExecutable),
    (lambda: one_op("StaticReshape", [("f32", [4, 6])], [("f32", [2, 12])], {"shape": [2, 12],
                                                                            "special_zero": False}), ViewExecutable),
    (lambda: single_op_graph("AllGather", [("f32", [2, 3])], [("f32", [2, 3])]), AllGatherExecutable),
    (_reduce_axes, PerValuesExecutable),
])
def test_each_partition_holds_one_executable_of_its_kind(make, kind):
    _, cp = _only(make())
    assert type(cp.executable) is kind and isinstance(cp.executable, Executable)
    assert (cp.kernel is not None) == (kind is KernelExecutable)
    assert cp.is_view == (kind is ViewExecutable)
    assert cp.per_values == (kind is PerValuesExecutable)


def test_values_compile_a_kernel_executable_per_values():
    g = _reduce_axes()
    _, cp = _only(g)
    ins = make_inputs(g, seed=0)
    ins[1] = np.array([1], np.int32)
    assert_outputs(cp.execute(ins), reference.run(g, ins))
    (spec,) = cp.specializations.values()
    assert type(spec.executable) is KernelExecutable and spec.outputs[0].shape == (3, 5)


def _relu_abs():
    g = Graph()
    g.add_op(Op(0, "ReLU", [LT(0, "f32", [2, 3])], [LT(1, "f32", [2, 3])]))
    g.add_op(Op(1, "Abs", [LT(1, "f32", [2, 3])], [LT(2, "f32", [2, 3])]))
    return g.finalize()


def test_reference_fallback_is_a_compiled_partition_taking_lists(monkeypatch):
    """A partition without a kernel runs in the reference; with every shape known
    at compile the graph runs its partitions in order on lists of arrays."""
    from graphc.codegen.rules.eltwise import Abs
    monkeypatch.setattr(Abs, "supports", lambda self, op: False)
    g = _relu_abs()
    with pytest.warns(FallbackWarning):
        cg = graphc.compile(g, policy="debug", fallback="reference")
    fallback = cg.compiled[1]
    assert isinstance(fallback, graphc.ReferencePartition) and isinstance(fallback, graphc.CompiledPartition)
    assert type(fallback.executable) is ReferenceExecutable and fallback.source is None
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(cg.run({0: x})[2], np.maximum(x, 0))
    out = np.zeros((2, 3), np.float32)
    assert fallback.execute([x], outputs=[out])[2] is out      # the caller's output, written
    np.testing.assert_array_equal(out, np.abs(x))


def test_check_values_receives_the_values_and_gives_the_shapes(monkeypatch):
    """A schema that overrides check_values gets the values as an argument and
    its op copy no attribute; the shapes it returns are the outputs'."""
    calls = []

    def check_values(self, op, values):
        calls.append(values)
        return [(3, 5)]
    monkeypatch.setattr(type(get_schema("ReduceSum")), "check_values", check_values, raising=False)
    g = _reduce_axes()
    (p,) = g.get_partitions()
    ops, known = specialize(p, list(p.inputs), {p.ops[0].id: {"axes": (1,)}})
    assert calls == [{"axes": (1,)}]
    assert not hasattr(ops[0], "input_values")
    assert ops[0].outputs[0].shape == (3, 5) and known[ops[0].outputs[0].id].shape == (3, 5)


def test_reduce_takes_its_axes_as_an_argument():
    """ReduceX's axes input: the values give the output shape through check_values,
    and neither the op copy nor the graph's op carries them."""
    g = _reduce_axes()
    (p,) = g.get_partitions()
    ops, _ = specialize(p, list(p.inputs), {p.ops[0].id: {"axes": (1,)}})
    assert ops[0].outputs[0].shape == (3, 5)
    assert not hasattr(ops[0], "input_values") and not hasattr(p.ops[0], "input_values")


def _imports(path: Path) -> set[str]:
    """Absolute names of the modules ``path`` imports (relative ones resolved)."""
    package = ".".join(path.relative_to(GRAPHC.parent).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            mod = ".".join(p for p in (base, node.module) if p)
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return out


def test_ops_know_no_mpi_and_no_executables():
    for path in sorted((GRAPHC / "ops").glob("*.py")):
        bad = {m for m in _imports(path) if m.startswith(("graphc.comm", "graphc.compiled", "graphc.compiler"))}
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_distributed_ops_import_no_code_generation():
    bad = {m for m in _imports(GRAPHC / "ops" / "distributed.py") if m.startswith("graphc.codegen")}
    assert not bad, sorted(bad)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_strided_arrays_run_where_they_lie(dtype):
    """A kernel takes a strided input and writes a strided output in place (its
    entry point flattens them: graphc.codegen.entry), on the fast path, with the
    reference's values; the output is laid out as its tensor says.  An array of
    other strides than the tensor's is copied into its layout first (the general
    path), with the same values."""
    x = LT(0, dtype, [2, 3, 4], [1, 2, 6])          # a column-major input with a gap-free span
    y = LT(1, dtype, [2, 3, 4], [16, 5, 1])         # a padded output (gaps between rows)
    g = Graph()
    g.add_op(Op(0, "ReLU", [x], [y]))
    g.finalize()
    cg = graphc.compile(g)
    base = np.random.default_rng(0).standard_normal(24).astype(x.dtype.np)
    item = base.itemsize
    given = np.lib.stride_tricks.as_strided(base, shape=(2, 3, 4), strides=(item, 2 * item, 6 * item))
    want = np.maximum(given.astype(np.float32), 0)
    cp = cg.compiled[0]
    fast = cp.fast_run([given], None)
    assert fast is not None                          # (the fast path took it as it lies)
    out = fast[1]
    assert out.strides == (16 * item, 5 * item, item)
    np.testing.assert_array_equal(out.astype(np.float32), want)
    dense = np.ascontiguousarray(given)              # other strides: copied into the tensor's layout
    assert cp.fast_run([dense], None) is None
    np.testing.assert_array_equal(cg.run({0: dense})[1].astype(np.float32), want)


def test_one_partition_graph_runs_its_kernel_directly():
    """A graph of one kernel partition runs it from ``CompiledGraph.run`` on the
    kernel's own fast path: fresh, writeable outputs every call; an input the fast
    path does not take (a transposed array, a wrong dtype, a list) runs the general
    path with the same values or its error; missing and extra ids are named."""
    g = one_op("Add", [("f32", [3, 5]), ("f32", [3, 5])], [("f32", [3, 5])])
    cg = graphc.compile(g)
    assert cg._one and cg._plain is type(cg)._one_run
    a, b = (np.random.default_rng(i).standard_normal((3, 5)).astype(np.float32) for i in range(2))
    first, second = cg.run({0: a, 1: b})[2], cg.run({0: a, 1: b})[2]
    assert first is not second and first.flags.writeable
    np.testing.assert_array_equal(first, a + b)
    a.flags.writeable = False
    np.testing.assert_array_equal(cg.run({0: a, 1: b})[2], a + b)
    with pytest.raises(graphc.InvalidArguments, match="must be a numpy array"):
        cg.run({0: a.tolist(), 1: b})
    t = np.ascontiguousarray(a.T).T
    np.testing.assert_array_equal(cg.run({0: t, 1: b})[2], a + b)
    with pytest.raises(graphc.GraphcError, match="dtype|data type"):
        cg.run({0: a.astype(np.float64), 1: b})
    with pytest.raises(graphc.InvalidArguments, match="missing input"):
        cg.run({0: a})
    with pytest.raises(graphc.InvalidArguments, match="no input tensor of this id"):
        cg.run({0: a, 7: b})
    with pytest.raises(graphc.InvalidArguments, match="no input tensor of this id"):
        cg.run({0: a, 1: b, 9: b})


def test_first_runs_from_several_threads_at_once():
    """The fast path's plan is made at the first run; threads making their first
    runs together all get the kernel's values (none sees half a plan)."""
    import threading
    for _ in range(5):
        cg = graphc.compile(one_op("Multiply", [("f32", [64]), ("f32", [64])], [("f32", [64])]))
        xs = [np.full(64, i, np.float32) for i in range(6)]
        got, errors = [None] * 6, []
        start = threading.Barrier(6)

        def work(i):
            try:
                start.wait()
                got[i] = cg.run({0: xs[i], 1: xs[i]})[2]
            except Exception as e:   # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for i, a in enumerate(got):
            np.testing.assert_array_equal(a, np.full(64, i * i, np.float32))
