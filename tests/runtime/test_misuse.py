"""API misuse gives a GraphcError or works: a communicator that is none,
pickling and copying compiled graphs and partitions (they compile again on
load), numba's compiler turned off."""
from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import graphc
from graphc import LogicalTensor, Op, reference
from graphc.compiler import CompiledPartition, ReferencePartition
from graphc.errors import InvalidArguments, Unimplemented

from support import assert_same, graph_of, one_op

X = np.array([[-1.5, 2.0, -3.0], [4.0, -5.0, 6.5]], np.float32)


def relu_sigmoid():
    """ReLU -> Sigmoid: one fused partition."""
    return graph_of(Op(0, "ReLU", [LogicalTensor(0, "f32", [2, 3])], [LogicalTensor(1, "f32", [2, 3])]),
                    Op(1, "Sigmoid", [LogicalTensor(1, "f32", [2, 3])], [LogicalTensor(2, "f32", [2, 3])]))


def all_gather():
    return one_op("AllGather", [("f32", [2, 3])], [("f32", [-1, 3])], {"axis": 0})


# ------------------------------------------------------------------ communicators
class OnlySize:
    def Get_size(self):
        return 1


class BadRank:
    def Get_rank(self):
        return 3

    def Get_size(self):
        return 2

    def allgather(self, x):
        return [x, x]

    def Allgather(self, a, b):
        pass


@pytest.mark.parametrize("comm", ["abc", 3, object(), OnlySize()])
@pytest.mark.parametrize("make", [relu_sigmoid, all_gather])
def test_a_communicator_that_is_none_is_invalid_arguments(make, comm):
    g = make()
    cg = graphc.compile(g)
    with pytest.raises(InvalidArguments, match="comm must be None or a communicator") as e:
        cg.run({0: X}, comm=comm)
    assert "Get_rank" in str(e.value) and type(comm).__name__ in str(e.value)
    with pytest.raises(InvalidArguments, match="comm must be None or a communicator"):
        cg.compiled[0].execute({0: X}, comm=comm)
    if not isinstance(comm, OnlySize):   # the reference asks for Get_size and allgather only
        with pytest.raises(InvalidArguments, match="comm must be None or a communicator"):
            reference.run(g, {0: X}, comm=comm)


def test_a_communicator_whose_rank_is_outside_its_group():
    with pytest.raises(InvalidArguments, match="rank and size") as e:
        graphc.compile(all_gather()).run({0: X}, comm=BadRank())
    assert "Get_rank() 3, Get_size() 2" in str(e.value)


# ------------------------------------------------------------ pickling and copies
def test_a_compiled_graph_pickles_and_compiles_again_on_load():
    cg = graphc.compile(relu_sigmoid())
    want = cg.run({0: X})[2]
    back = pickle.loads(pickle.dumps(cg))
    assert type(back) is graphc.CompiledGraph and back is not cg and back.graph is not cg.graph
    assert (back.policy, back.fallback) == ("fusion", None)
    assert back.source == cg.source
    assert [p.get_ops() for p in back.partitions] == [p.get_ops() for p in cg.partitions]
    assert_same(back.run({0: X})[2], want)
    # the ops of the loaded graph share the registry's schemas
    assert all(op.schema is graphc.ops.get_schema(op.kind) for op in back.graph.ops.values())


def test_a_compiled_graph_deep_copies_with_its_own_graph():
    cg = graphc.compile(relu_sigmoid(), policy="debug")
    twin = copy.deepcopy(cg)
    assert twin.graph is not cg.graph and twin.policy == "debug" and len(twin.compiled) == 2
    assert_same(twin.run({0: X})[2], cg.run({0: X})[2])


def test_a_compiled_partition_pickles_and_deep_copies():
    g = relu_sigmoid()
    (p,) = g.get_partitions()
    ins = [LogicalTensor(0, "f32", [2, 3], [1, 2])]   # compiled for column-major input
    cp = p.compile(ins)
    for twin in (pickle.loads(pickle.dumps(cp)), copy.deepcopy(cp)):
        assert isinstance(twin, CompiledPartition) and twin is not cp
        assert twin.inputs == cp.inputs and twin.source == cp.source
        assert_same(twin.execute({0: np.asfortranarray(X)})[2], cp.execute({0: np.asfortranarray(X)})[2])
    ref = ReferencePartition(p)
    back = pickle.loads(pickle.dumps(ref))
    assert type(back) is ReferencePartition
    assert_same(back.execute({0: X})[2], reference.run(g, {0: X})[2])


def test_a_compiled_partition_made_by_hand_says_it_cannot_be_pickled():
    (p,) = relu_sigmoid().get_partitions()
    cp = p.compile()
    by_hand = CompiledPartition(p, cp.inputs, cp.outputs, cp.ops, cp.executable)
    with pytest.raises(InvalidArguments, match="cannot be pickled or copied"):
        pickle.dumps(by_hand)


def test_a_compiled_graph_loads_in_another_process():
    """Pickled here, loaded and run in a fresh interpreter: it compiles again (from
    the kernel cache) and gives the same result."""
    cg = graphc.compile(relu_sigmoid())
    code = ("import pickle, sys, numpy as np; cg = pickle.loads(sys.stdin.buffer.read()); "
            "sys.stdout.buffer.write(pickle.dumps(cg.run({0: np.array(%r, np.float32)})[2]))" % X.tolist())
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(cg), capture_output=True, check=True)
    assert_same(pickle.loads(out.stdout), cg.run({0: X})[2])


# ------------------------------------------------------------ numba's compiler off
def test_numba_disable_jit_is_named():
    """NUMBA_DISABLE_JIT=1 turns numba's compiler off: partitioning and compiling
    raise Unimplemented naming the setting (not an AttributeError from code
    generation), and the reference still runs."""
    code = """
import numpy as np, graphc
from graphc import Graph, LogicalTensor, Op
g = Graph(); g.add_op(Op(0, "ReLU", [LogicalTensor(0, "f32", [2])], [LogicalTensor(1, "f32", [2])])); g.finalize()
print(graphc.reference.run(g, {0: np.array([-1, 2], np.float32)})[1].tolist())
for f in (g.get_partitions, lambda: graphc.compile(g), lambda: graphc.compile(g)):
    try:
        f()
    except graphc.GraphcError as e:
        print(type(e).__name__, "|", e)
"""
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == "[0.0, 2.0]" and len(lines) == 4
    for line in lines[1:]:
        kind, text = line.split(" | ")
        assert kind == Unimplemented.__name__
        assert "NUMBA_DISABLE_JIT turns numba's compiler off" in text and "found NUMBA_DISABLE_JIT=1" in text


# ------------------------------------------------- compiling for other dims
def test_partition_compile_keeps_the_dims_the_graph_knows():
    """Decided (docs/design.md): Partition.compile takes the graph's dims where the
    graph knows them (it compiled a MatMul for K = 5 of a graph declaring K = 3:
    fusion and the kernel plan were judged for the graph's dims); dims the graph
    leaves -1 take any value, and strides are the caller's."""
    g = graph_of(Op(0, "MatMul", [LogicalTensor(0, "f32", [2, 3]), LogicalTensor(1, "f32", [3, 4])],
                    [LogicalTensor(2, "f32", [2, 4])]),
                 Op(1, "Add", [LogicalTensor(2, "f32", [2, 4]), LogicalTensor(3, "f32", [1, 4])],
                    [LogicalTensor(4, "f32", [2, 4])]))
    (p,) = g.get_partitions()
    with pytest.raises(InvalidArguments, match="the input's dims differ from the graph's") as e:
        p.compile([LogicalTensor(0, "f32", [2, 5]), LogicalTensor(1, "f32", [5, 4]), LogicalTensor(3, "f32", [1, 4])])
    assert "input tensor 0, dim 1" in str(e.value) and "expected [2, 3] (-1: any), found [2, 5]" in str(e.value)
    cp = p.compile([LogicalTensor(0, "f32", [2, 3], [1, 2])])   # other strides: the caller's
    assert cp.inputs[0].strides == (1, 2)

    loose = graph_of(Op(0, "ReLU", [LogicalTensor(0, "f32", [-1, 3])], [LogicalTensor(1, "f32", [-1, 3])]))
    (p,) = loose.get_partitions()
    for rows in (1, 7):
        assert p.compile([LogicalTensor(0, "f32", [rows, 3])]).outputs[0].shape == (rows, 3)
    with pytest.raises(InvalidArguments, match="dim 1"):
        p.compile([LogicalTensor(0, "f32", [7, 4])])


# ------------------------------------------------------------ the wrong objects
@pytest.mark.parametrize("call, words", [
    (lambda g, p: graphc.compile("abc"), "compile expects a Graph, found str"),
    (lambda g, p: graphc.run(None, {}), "compile expects a Graph, found NoneType"),
    (lambda g, p: reference.run({}, {}), "the reference's run expects a Graph, found dict"),
    (lambda g, p: graphc.dump_graph("abc"), "dump_graph expects a Graph, found str"),
    (lambda g, p: p.compile("abc"), "compile expects a list of LogicalTensors as inputs, found str"),
    (lambda g, p: p.compile([1, 2]), "inputs[0]: compile expects LogicalTensors as inputs, found int"),
    (lambda g, p: p.compile(None, [None]), "outputs[0]: compile expects LogicalTensors as outputs, found NoneType"),
    (lambda g, p: graphc.save_graph(g, "/nonexistent-folder/g.json"), "cannot write graph file"),
])
def test_the_wrong_objects_are_invalid_arguments(call, words):
    """Each raised AttributeError (or FileNotFoundError) from the first thing done with it."""
    g = relu_sigmoid()
    (p,) = g.get_partitions()
    with pytest.raises(InvalidArguments) as e:
        call(g, p)
    assert words in str(e.value)


def test_save_graph_leaves_no_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "g.json"

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(InvalidArguments, match="No space left on device"):
        graphc.save_graph(relu_sigmoid(), target)
    assert list(tmp_path.iterdir()) == []


def test_the_fallback_warning_lists_a_bounded_number_of_partitions(monkeypatch):
    from graphc.errors import MAX_ITEMS
    from graphc.partition import Partition
    monkeypatch.setattr(Partition, "is_supported", lambda self: False)
    n = MAX_ITEMS + 24
    g = graph_of(*[Op(i, "ReLU", [LogicalTensor(i, "f32", [2])], [LogicalTensor(i + 1, "f32", [2])]) for i in range(n)])
    with pytest.warns(graphc.FallbackWarning) as w:
        cg = graphc.compile(g, policy="debug", fallback="reference")
    text = str(w[0].message)
    assert f"cannot compile {n} of {n} partitions" in text and text.endswith("; ... (24 more)")
    assert text.count("partition ") == MAX_ITEMS and len(cg.fallback_partitions) == n   # ("partitions;" aside)


def test_run_refuses_input_ids_the_graph_does_not_have():
    import graphc
    from graphc import Graph, InvalidArguments, LogicalTensor as L, Op
    g = Graph()
    g.add_op(Op(0, "ReLU", [L(0, "f32", [4])], [L(1, "f32", [4])]))
    g.add_op(Op(1, "Abs", [L(1, "f32", [4])], [L(2, "f32", [4])]))
    cg = graphc.compile(g.finalize())
    x = np.ones(4, np.float32)
    assert np.array_equal(cg.run({0: x})[2], x)
    for extra in ({7: x}, {1: x}):   # an id of no tensor; an intermediate, not an input
        with pytest.raises(InvalidArguments, match="no input tensor of this id") as e:
            cg.run({0: x, **extra})
        assert f"tensor {next(iter(extra))}" in str(e.value)
    with pytest.raises(InvalidArguments, match="no input tensor of this id"):
        graphc.run(g, {0: x, 9: x})
