"""Graph inputs of unknown rank (LogicalTensor(id, dt, None): oneDNN's
DNNL_GRAPH_UNKNOWN_NDIMS) are accepted; the ranks come from the run's arrays
(graphc.run, CompiledGraph.run, the reference) or from with_input_ranks."""
from __future__ import annotations

import numpy as np
import pytest

import graphc
from graphc import Graph, InvalidArguments, InvalidShape, LogicalTensor as L, Op


def _graph():
    """ReLU of an input of unknown rank, plus a bias of rank 1."""
    g = Graph()
    g.add_op(Op(0, "ReLU", [L(0, "f32", None)], [L(1, "f32", None)]))
    g.add_op(Op(1, "Add", [L(1, "f32", None), L(2, "f32", [3])], [L(3, "f32", None)]))
    return g.finalize()


def test_accepted_and_pending():
    g = _graph()
    assert g.rank_pending and g.unknown_rank_inputs() == [0]
    assert g.input_ports == [0, 2] and g.output_ports == [3]
    with pytest.raises(InvalidArguments, match="unknown rank"):
        g.get_partitions()


@pytest.mark.parametrize("shape", [(3,), (2, 3), (4, 5, 3)])
def test_run_takes_the_rank_from_the_arrays(shape):
    g = _graph()
    rng = np.random.default_rng(0)
    x, b = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    want = np.maximum(x, 0) + b        # numpy, independently of graphc
    np.testing.assert_array_equal(graphc.run(g, {0: x, 2: b})[3], want)
    np.testing.assert_array_equal(graphc.reference.run(g, {0: x, 2: b})[3], want)


def test_one_compiled_graph_serves_every_rank():
    cg = graphc.compile(_graph())
    b = np.ones(3, np.float32)
    for shape in [(2, 3), (3,), (2, 3), (1, 2, 3)]:
        x = np.full(shape, -1.0, np.float32)
        np.testing.assert_array_equal(cg.run({0: x, 2: b})[3], np.ones(shape, np.float32))
    assert len(cg._by_ranks) == 3


def test_with_input_ranks_gives_partitions_and_checks():
    g = _graph()
    r = g.with_input_ranks({0: 2})
    assert not r.rank_pending and list(r.tensors[3].shape) == [-1, 3]
    assert [op.kind for p in r.get_partitions() for op in p.ops] == ["ReLU", "Add"]
    with pytest.raises(InvalidArguments, match="rank of a graph input"):
        g.with_input_ranks({})
    bad = Graph()   # MatMul needs rank >= 1 on both sides: checked once the rank is known
    bad.add_op(Op(0, "MatMul", [L(0, "f32", None), L(1, "f32", [3, 4])], [L(2, "f32", None)]))
    bad.finalize()
    with pytest.raises(graphc.GraphcError):
        bad.with_input_ranks({0: 0})


def test_json_round_trip_keeps_the_unknown_rank():
    doc = graphc.dump_graph(_graph())
    assert doc["graph"][0]["inputs"][0]["shape"] == [-2 ** 63]
    g = graphc.load_graph(doc)
    assert g.rank_pending and g.tensors[0].unknown_rank
