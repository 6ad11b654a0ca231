"""Graph: ops connected by logical tensor ids.

The op-to-op edges are kept in plain dicts (networkx, about 50 ms to import,
is imported only when a caller asks for :attr:`Graph.nx` or a graph has a
cycle to report)."""
from __future__ import annotations

import heapq

import numpy as np

from .errors import GraphcError, InvalidArguments, InvalidGraph, InvalidShape, describe_op, short
from .op import Op
from .types import INT64_MAX, LogicalTensor, overlaps

ENGINE_KINDS = ("cpu",)
FPMATH_MODES = ("strict", "bf16", "f16", "tf32", "any")


class Graph:
    """``Graph(engine_kind="cpu", fpmath_mode="strict", deterministic=False)``.

    ``deterministic`` (oneDNN's deterministic mode): every kernel compiled from
    the graph gives bitwise-identical results from run to run and for any numba
    thread count (docs/design.md, "Determinism").

    ``add_op`` checks each op against its schema at once; ``finalize`` checks
    the graph as a whole (unique ids, one producer per tensor, consistent
    tensors, no cycles) and infers every shape it can.  The graph knows no
    partitions: the public ``graphc.Graph`` (graphc.builder) adds oneDNN's
    ``get_partitions``, and the compile step partitions any graph
    (graphc.partition.partition_graph).
    """

    def __init__(self, engine_kind: str = "cpu", fpmath_mode: str = "strict",
                 fpmath_mode_apply_to_int: bool = False, deterministic: bool = False):
        if engine_kind not in ENGINE_KINDS:
            raise InvalidArguments("unsupported engine kind", expected=" or ".join(ENGINE_KINDS),
                                   found=short(engine_kind))
        if fpmath_mode not in FPMATH_MODES:
            raise InvalidArguments("unsupported fpmath mode", expected=", ".join(FPMATH_MODES),
                                   found=short(fpmath_mode))
        self.engine_kind = engine_kind
        self.fpmath_mode = fpmath_mode
        self.ignored_output_ports: list[int] = []   # declared output_ports the graph has no tensor for
        self.fpmath_mode_apply_to_int = bool(fpmath_mode_apply_to_int)
        if not isinstance(deterministic, (bool, np.bool_)):
            raise InvalidArguments("deterministic must be a boolean", expected="True or False",
                                   found=short(deterministic))
        self.deterministic = bool(deterministic)
        self.ops: dict[int, Op] = {}
        #: op id -> {consumer op id: tensor id}: the edges, in the order they were added
        self._succ: dict[int, dict[int, int]] = {}
        self.producer: dict[int, tuple[int, int]] = {}       # tensor id -> (op id, output index)
        self.consumers: dict[int, list[tuple[int, int]]] = {}  # tensor id -> [(op id, input index)]
        self.tensors: dict[int, LogicalTensor] = {}
        self._declared_inputs: list[int] | None = None
        self._declared_outputs: list[int] | None = None
        self.finalized = False
        self._cache: dict = {}   # topological order and ports, once finalized (the graph no longer changes)
        #: ops that read a tensor of unknown rank no op produces (a graph input of unknown rank, or what
        #: such ops produce): checked and their shapes inferred when the rank is known (with_input_ranks)
        self._rank_pending: set[int] = set()

    # ------------------------------------------------------------------ building
    def add_op(self, op: Op) -> Op:
        if self.finalized:
            raise InvalidGraph("graph is finalized; ops can no longer be added", found=repr(op))
        if not isinstance(op, Op):
            raise InvalidArguments("add_op expects an Op", found=type(op).__name__)
        if op.id > INT64_MAX:
            raise InvalidArguments("op id must fit in int64", op=op, expected=f"0 to {INT64_MAX}", found=op.id)
        if op.id in self.ops:
            raise InvalidGraph("duplicate op id", op=op, expected="a unique id",
                               found=f"{op.id}, already used by {self.ops[op.id]!r}")
        if self._resolve_unknown_ranks(op):
            self._rank_pending.add(op.id)   # checked once the rank is known (with_input_ranks)
        else:
            op.validate()
            for i, t in enumerate(op.outputs):
                check_output_layout(op, i, t)
        seen_out = set()
        for i, t in enumerate(op.outputs):
            if t.id in self.producer or t.id in seen_out:
                who = self.producer.get(t.id, (op.id, None))[0]
                raise InvalidGraph("tensor is produced twice", op=op, where=f"output {i} (tensor {t.id})",
                                   expected="each tensor produced by one op",
                                   found=f"already produced by op {who}")
            seen_out.add(t.id)
        noted: dict = {}   # this op's tensors, merged in once all are consistent (the graph stays as it was if not)
        for i, t in enumerate(op.inputs):
            self._note_tensor(noted, op, f"input {i}", t)
        for i, t in enumerate(op.outputs):
            self._note_tensor(noted, op, f"output {i}", t)
        self.tensors.update(noted)
        self.ops[op.id] = op
        self._succ[op.id] = {}
        for i, t in enumerate(op.outputs):
            self.producer[t.id] = (op.id, i)
            for cid, _ in self.consumers.get(t.id, []):
                self._succ[op.id][cid] = t.id
        for i, t in enumerate(op.inputs):
            self.consumers.setdefault(t.id, []).append((op.id, i))
            if t.id in self.producer:
                self._succ[self.producer[t.id][0]][op.id] = t.id
        return op

    @property
    def nx(self):
        """The op graph as a networkx DiGraph (op ids; each edge's ``tensor`` is
        the id of a tensor it carries), built on each call."""
        import networkx as nx
        g = nx.DiGraph()
        g.add_nodes_from(self.ops)
        for a, outs in self._succ.items():
            for b, tid in outs.items():
                g.add_edge(a, b, tensor=tid)
        return g

    def edges(self) -> list[tuple[int, int]]:
        """The (producer op id, consumer op id) pairs, as ``nx.edges()`` gives them."""
        return [(a, b) for a, outs in self._succ.items() for b in outs]

    def _resolve_unknown_ranks(self, op: Op) -> bool:
        """Inputs of unknown rank (ndims -1) take the tensor their producer,
        added before, resolved.  True when an input's rank is known nowhere
        yet (a graph input of unknown rank, oneDNN's DNNL_GRAPH_UNKNOWN_NDIMS,
        or a tensor computed from one): the op is then checked once the rank
        is (:meth:`with_input_ranks`, which compiling and running do)."""
        pending = False
        for i, t in enumerate(op.inputs):
            if not t.unknown_rank:
                continue
            known = self.tensors.get(t.id)
            if known is not None and known.dtype != t.dtype:
                raise InvalidGraph("tensor appears with different data types", op=op,
                                   where=f"input {i} (tensor {t.id})", expected=str(known.dtype), found=str(t.dtype))
            if known is None or known.unknown_rank:
                pending = True
            else:
                op.inputs[i] = known
        return pending

    @property
    def rank_pending(self) -> bool:
        """Some tensor's rank is known only from the arrays (a graph input of
        unknown rank): partitions come from :meth:`with_input_ranks`."""
        return bool(self._rank_pending)

    def unknown_rank_inputs(self) -> list[int]:
        """The graph inputs of unknown rank, in input-port order."""
        return [tid for tid in self.input_ports if self.tensors[tid].unknown_rank]

    def with_input_ranks(self, ranks: dict) -> "Graph":
        """This graph with each input of unknown rank given the rank ``ranks``
        says ({tensor id: ndim}; its dims -1, known when compiled for arrays),
        every op then checked and its shapes inferred: a finalized graph of the
        same class and settings."""
        missing = [tid for tid in self.unknown_rank_inputs() if tid not in ranks]
        if missing:
            raise InvalidArguments("the rank of a graph input of unknown rank is needed", where=f"tensor {missing[0]}",
                                   expected="its array (or ndim)", found="none given")
        g = type(self)(self.engine_kind, self.fpmath_mode, self.fpmath_mode_apply_to_int,
                       deterministic=getattr(self, "deterministic", False))

        def given(t: LogicalTensor) -> LogicalTensor:
            if not t.unknown_rank or t.id in self.producer or t.id not in ranks:
                return t
            return LogicalTensor(t.id, t.dtype, [-1] * int(ranks[t.id]), None, t.layout_type, t.property_type)

        for op in (self.ops[i] for i in topological_order(self.ops, self._succ) or self.ops):
            g.add_op(Op(op.id, op.kind, [given(t) for t in op.inputs], list(op.outputs), op.raw_attrs, op.name))
        g.set_ports(self._declared_inputs, self._declared_outputs)
        return g.finalize()

    def _note_tensor(self, noted: dict, op, where, t: LogicalTensor):
        """Note ``t`` in ``noted`` (tensor id -> LogicalTensor), checked against
        what ``noted`` or the graph already knows of it: a few dict look-ups,
        whatever the size of the graph."""
        old = noted.get(t.id) or self.tensors.get(t.id)
        if old is None or (old.unknown_rank and old.dtype == t.dtype):
            noted[t.id] = t
            return
        if t.unknown_rank and old.dtype == t.dtype:
            return
        if old.dtype != t.dtype:
            raise InvalidGraph("tensor appears with different data types", op=op, where=f"{where} (tensor {t.id})",
                               expected=str(old.dtype), found=str(t.dtype))
        if len(old.shape) != len(t.shape) or any(a != b and a != -1 and b != -1
                                                 for a, b in zip(old.shape, t.shape)):
            raise InvalidShape("tensor appears with different shapes", op=op, where=f"{where} (tensor {t.id})",
                               expected=list(old.shape), found=list(t.shape))
        if old.strides and t.strides and old.is_complete and t.is_complete and old.strides != t.strides \
                and old.nelems > 1:
            raise InvalidGraph("tensor appears with different strides", op=op, where=f"{where} (tensor {t.id})",
                               expected=list(old.strides), found=list(t.strides))
        merged = tuple(b if a == -1 else a for a, b in zip(old.shape, t.shape))
        if merged != old.shape:
            noted[t.id] = t if merged == t.shape else old.with_shape(merged)

    def set_ports(self, inputs=None, outputs=None):
        """Declare the graph's input and output tensor ids (as JSON dumps do)."""
        ins = None if inputs is None else _port_ids(inputs, "input_ports")
        outs = None if outputs is None else _port_ids(outputs, "output_ports")
        self._cache.clear()
        if ins is not None:
            self._declared_inputs = ins
        if outs is not None:
            self._declared_outputs = outs

    # ---------------------------------------------------------------- finalizing
    def finalize(self) -> "Graph":
        if self.finalized:
            return self
        if not self.ops:
            raise InvalidGraph("graph has no ops")
        order = topological_order(self.ops, self._succ)
        if order is None:
            import networkx as nx
            cycle = nx.find_cycle(self.nx)
            ops = " -> ".join(repr(self.ops[a]) for a, _ in cycle)
            raise InvalidGraph("graph has a cycle", found=ops, expected="an acyclic graph")
        for tid, (pid, idx) in self.producer.items():
            self.tensors[tid] = self.ops[pid].outputs[idx]
        for oid in order:
            op = self.ops[oid]
            op.fpmath_mode = self.fpmath_mode     # the ops it concerns read it (graphc.numerics.fpmath_down)
            if op.id not in self._rank_pending:   # (a pending op is checked once its ranks are known)
                op.rebind_inputs([self._known(op, i, t) for i, t in enumerate(op.inputs)])
            for i, t in enumerate(op.outputs):
                if op.id not in self._rank_pending:
                    check_output_layout(op, i, t)
                self.tensors[t.id] = t
        self._check_declared_inputs()
        if self._declared_outputs is not None:
            # as benchdnn: a declared output the graph does not have is left out
            # (the ports are kept in ``ignored_output_ports``); none left: every
            # tensor no op consumes is an output
            self.ignored_output_ports = [tid for tid in self._declared_outputs if tid not in self.tensors]
            kept = [tid for tid in self._declared_outputs if tid in self.tensors]
            self._declared_outputs = kept or None
        self.finalized = True
        return self

    def _check_declared_inputs(self) -> None:
        """A declared input port is a tensor the caller feeds: one some op
        consumes and no op produces (a produced one would be demanded as an
        input and its value ignored)."""
        for tid in self._declared_inputs or []:
            if tid in self.producer:
                pid, idx = self.producer[tid]
                op = self.ops[pid]
                name = op.output_names[idx] if idx < len(op.output_names) else "output"
                raise InvalidGraph("declared input port names a tensor an op produces", where=f"input_ports ({tid})",
                                   expected="a tensor no op produces (an input is given, not computed)",
                                   found=f"output {idx} ({name}) of {describe_op(op)}")
            if tid not in self.consumers:
                raise InvalidGraph("declared input port is not consumed by any op", where=f"input_ports ({tid})")

    def _known(self, op, i, t: LogicalTensor) -> LogicalTensor:
        """Input ``i`` of ``op`` with every dim known anywhere in the graph."""
        best = self.tensors.get(t.id, t)
        if best.unknown_rank or t.unknown_rank or best.shape == t.shape or len(best.shape) != len(t.shape):
            return best
        for a, b in zip(best.shape, t.shape):
            if a != -1 and b != -1 and a != b:
                raise InvalidShape("tensor inferred with a different shape than declared", op=op,
                                   where=f"input {i} (tensor {t.id})", expected=list(best.shape),
                                   found=list(t.shape))
        merged = tuple(b if a == -1 else a for a, b in zip(best.shape, t.shape))
        if merged != best.shape:
            best = self.tensors[t.id] = best.with_shape(merged)
        return best

    # ------------------------------------------------------------------- queries
    def _cached(self, key, compute):
        """``compute()``, kept once the graph is finalized (it no longer changes)."""
        if not self.finalized:
            return compute()
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def topo_ops(self) -> list[Op]:
        """Ops in topological order (ties by op id)."""
        return list(self._cached("topo", self._topo_ops))

    def _topo_ops(self) -> list[Op]:
        order = topological_order(self.ops, self._succ)
        if order is None:
            raise InvalidGraph("graph has a cycle", expected="an acyclic graph")
        return [self.ops[i] for i in order]

    @property
    def input_ports(self) -> list[int]:
        return list(self._cached("inputs", self._input_ports))

    @property
    def output_ports(self) -> list[int]:
        return list(self._cached("outputs", self._output_ports))

    @property
    def input_port_set(self) -> frozenset:
        """The input ports as a set (kept once finalized): membership in one look-up."""
        return self._cached("input_set", lambda: frozenset(self._cached("inputs", self._input_ports)))

    @property
    def output_port_set(self) -> frozenset:
        """The output ports as a set (kept once finalized): membership in one look-up."""
        return self._cached("output_set", lambda: frozenset(self._cached("outputs", self._output_ports)))

    def _input_ports(self) -> list[int]:
        """Tensor ids consumed but produced by no op: the declared ones (JSON
        input_ports) first, then any other such tensor in first-use order (dumps
        may leave weights out of input_ports)."""
        out = list(self._declared_inputs or [])
        seen = set(out)
        for op in self.topo_ops():
            for t in op.inputs:
                if t.id not in self.producer and t.id not in seen:
                    seen.add(t.id)
                    out.append(t.id)
        return out

    def _output_ports(self) -> list[int]:
        """Tensor ids produced and consumed by no op (or consumed only by End)."""
        if self._declared_outputs is not None:
            return list(self._declared_outputs)
        out = []
        for op in self.topo_ops():
            for t in op.outputs:
                cons = self.consumers.get(t.id, [])
                if all(self.ops[c].kind == "End" for c, _ in cons):
                    out.append(t.id)
        return out

    def tensor(self, tid: int) -> LogicalTensor:
        try:
            return self.tensors[tid]
        except KeyError:
            raise InvalidArguments("no such tensor in the graph", found=tid) from None

    # oneDNN's accessor names
    def get_engine_kind(self) -> str:
        return self.engine_kind

    def get_deterministic(self) -> bool:
        """Whether the graph's kernels are bitwise reproducible (any run, any thread count)."""
        return self.deterministic

    def set_deterministic(self, flag: bool) -> None:
        """Turn deterministic mode on or off (before compiling: it shapes the kernels)."""
        if not isinstance(flag, (bool, np.bool_)):
            raise InvalidArguments("deterministic must be a boolean", expected="True or False", found=short(flag))
        self.deterministic = bool(flag)

    def get_fpmath_mode(self) -> tuple[str, bool]:
        """(fpmath mode, whether it applies to integral types), as oneDNN's graph::get_fpmath_mode."""
        return self.fpmath_mode, self.fpmath_mode_apply_to_int

    def __repr__(self) -> str:
        return f"Graph({len(self.ops)} ops, inputs={self.input_ports}, outputs={self.output_ports})"


def ensure_graph(obj, what: str):
    """``obj`` when it is a Graph; else InvalidArguments naming ``what`` expected
    one (not an AttributeError from the first method called on it)."""
    if not isinstance(obj, Graph):
        raise InvalidArguments(f"{what} expects a Graph", found=type(obj).__name__)
    return obj


def topological_order(nodes, succ) -> list | None:
    """``nodes`` (ids) in topological order of the edges ``succ`` (id -> its
    successors' ids), ties going to the smallest id, as networkx's
    lexicographical_topological_sort; None if the edges make a cycle."""
    indegree = dict.fromkeys(nodes, 0)
    for a in indegree:
        for b in succ.get(a, ()):
            indegree[b] += 1
    ready = [n for n, d in indegree.items() if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        n = heapq.heappop(ready)
        order.append(n)
        for b in succ.get(n, ()):
            indegree[b] -= 1
            if indegree[b] == 0:
                heapq.heappush(ready, b)
    return order if len(order) == len(indegree) else None


def _port_ids(ids, what) -> list[int]:
    if isinstance(ids, (str, bytes, dict)) or not hasattr(ids, "__iter__"):
        raise InvalidArguments(f"{what} must be a list of tensor ids", found=short(ids))
    ids = list(ids)
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i <= INT64_MAX:
            raise InvalidArguments(f"{what} must hold non-negative tensor ids that fit in int64", where=f"{what} ({short(i, 60)})",
                                   expected=f"integers from 0 to {INT64_MAX}", found=short(i, 60))
    return [int(i) for i in ids]


def check_output_layout(op, i, t: LogicalTensor) -> None:
    """An op's output may not have overlapping elements (oneDNN writes each
    element once; two elements in one place leave one of them wrong)."""
    if t.strides is None or not t.is_complete or any(s < 0 for s in t.strides):
        return
    if overlaps(t.shape, t.strides):
        name = op.output_names[i] if i < len(op.output_names) else "output"
        raise InvalidShape("output strides make distinct elements share memory", op=op,
                           where=f"output {i} ({name}, tensor {t.id})",
                           expected="strides that give every element its own place (no stride 0 on a dim > 1, "
                                    "each dim stepping past the dims inside it)",
                           found=f"shape {list(t.shape)}, strides {list(t.strides)}")


__all__ = ["Graph", "GraphcError", "check_output_layout", "ensure_graph", "topological_order"]
