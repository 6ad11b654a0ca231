"""The graph users build in Python (:class:`Graph`, ``graphc.Graph``), and small
helpers to build graphs without bookkeeping ids by hand."""
from __future__ import annotations

from . import graph
from .op import Op
from .partition import Partition, partition_graph
from .types import LogicalTensor


class Graph(graph.Graph):
    """``Graph(engine_kind="cpu", fpmath_mode="strict")``: the core graph
    (graphc.graph.Graph: ops, tensors, checks, shape inference) with oneDNN's
    ``get_partitions``, which runs the pass pipeline: the core graph knows no
    partitions."""

    def get_partitions(self, policy: str = "fusion") -> list[Partition]:
        """The partitions of the finalized graph: fused patterns under policy
        "fusion", one op per partition under "debug"."""
        return partition_graph(self, policy)


class GraphBuilder:
    """``b = GraphBuilder(); x = b.tensor('f32', [2, 3]); y = b.op('ReLU', [x])[0]; g = b.finalize()``.

    ``op`` creates its outputs from ``out`` specs ((dtype, shape) pairs; shape
    -1 dims or None to infer) or, by default, one output like input 0.
    """

    def __init__(self, **graph_kw):
        self.graph = Graph(**graph_kw)
        self._next_tensor = 0
        self._next_op = 0

    def tensor(self, dtype, shape, strides=None, property_type="undef") -> LogicalTensor:
        t = LogicalTensor(self._next_tensor, dtype, shape, strides, property_type=property_type)
        self._next_tensor += 1
        return t

    def op(self, kind, inputs, out=None, attrs=None, name=None) -> list[LogicalTensor]:
        if out is None:
            out = [(inputs[0].dtype, [-1] * len(inputs[0].shape))]
        outs = [self.tensor(dt, shape if shape is not None else []) for dt, shape in out]
        op = Op(self._next_op, kind, inputs, outs, attrs or {}, name)
        self._next_op += 1
        self.graph.add_op(op)
        return op.outputs

    def finalize(self) -> Graph:
        return self.graph.finalize()


def single_op_graph(kind, inputs, outputs, attrs=None) -> Graph:
    """A finalized one-op graph; ``inputs``/``outputs`` are (dtype, shape) pairs
    (an entry None leaves an optional input out is not supported: pass fewer)."""
    b = GraphBuilder()
    ins = [b.tensor(dt, shape) for dt, shape in inputs]
    b.op(kind, ins, outputs, attrs)
    return b.finalize()
