"""Loading and validating a graph is linear in its ops: no step copies or scans
what the graph already holds per op added.  Counted, never timed (the scaling
benchmark, benchmarks/bench_scaling.py, times it up to 100k ops)."""
import pytest

from graphc import Graph, LogicalTensor, Op, load_graph
from graphc import graph as core

from support.scaling import calls, chain_json, fanout_json


class CountingDict(dict):
    """A dict that counts every way of walking or copying it."""

    walks = 0

    def _walk(self, name):
        CountingDict.walks += 1
        return getattr(super(), name)()

    def __iter__(self):
        return self._walk("__iter__")

    def keys(self):
        return self._walk("keys")

    def items(self):
        return self._walk("items")

    def values(self):
        return self._walk("values")

    def copy(self):
        return self._walk("copy")


def test_add_op_does_not_copy_or_walk_the_tensors():
    """Graph.add_op copied the whole tensor dict on every op (100k ops: 137 s):
    it notes an op's tensors apart and merges them in."""
    g = Graph()
    g.tensors = CountingDict()
    CountingDict.walks = 0
    for i in range(200):
        g.add_op(Op(i, "ReLU", [LogicalTensor(i, "f32", [2, 3])], [LogicalTensor(i + 1, "f32", [2, 3])]))
    assert CountingDict.walks == 0 and type(g.tensors) is CountingDict and len(g.tensors) == 201


def test_a_refused_op_leaves_the_tensors_as_they_were():
    g = Graph()
    g.add_op(Op(0, "ReLU", [LogicalTensor(0, "f32", [2, 3])], [LogicalTensor(1, "f32", [2, 3])]))
    before = dict(g.tensors)
    with pytest.raises(Exception, match="different data types"):   # the output is fine, input 1 is not
        g.add_op(Op(1, "Add", [LogicalTensor(5, "f32", [2, 3]), LogicalTensor(1, "f16", [2, 3])],
                    [LogicalTensor(6, "f32", [2, 3])]))
    assert g.tensors == before and 1 not in g.ops


def test_port_sets_are_kept_once_finalized():
    g = load_graph(fanout_json(50))
    assert g.input_port_set is g.input_port_set and g.output_port_set is g.output_port_set
    assert g.input_port_set == frozenset(g.input_ports) and g.output_port_set == frozenset(g.output_ports)
    assert len(g.output_ports) == 49


@pytest.mark.parametrize("make", [chain_json, fanout_json])
def test_load_and_validate_grow_linearly(make):
    """Twice the ops, twice the calls (to within 2%): loading (each op checked on
    adding it) and finalizing (the whole graph checked, shapes inferred)."""
    counts = []
    for n in (400, 800):
        d = make(n)
        finalize = core.Graph.finalize
        core.Graph.finalize = lambda self: self   # load without finalizing, then finalize alone
        try:
            load, g = calls(load_graph, d)
        finally:
            core.Graph.finalize = finalize
        validate, _ = calls(g.finalize)
        ports, _ = calls(lambda: (g.input_ports, g.output_ports))
        counts.append((load, validate, ports))
    for small, large in zip(*counts):
        assert 1.9 * small < large < 2.04 * small, counts
