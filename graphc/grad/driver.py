"""``graphc.grad(graph, wrt, outputs=None)``: the training graph of a forward graph.

The forward ops are kept (each value computed once); for every op on a path
from a ``wrt`` tensor to a chosen output, in reverse topological order, its
schema's rule (``vjp``) emits the backward ops through an
:class:`~graphc.grad.emitter.Emitter`.  Gradients reaching one tensor from
several readers are summed with Add.  Ops off those paths get no backward; an
op on one without a rule is Unimplemented.
"""
from __future__ import annotations

from collections.abc import Iterable

from ..errors import InvalidArguments, Unimplemented, describe_op, short
from ..graph import Graph, ensure_graph
from ..op import Op
from ..types import INT64_MAX
from .emitter import Emitter, is_float


class TrainingGraph:
    """A forward graph with its backward: ``graph`` (finalized; the forward
    outputs stay outputs), ``grad_in(out_id)`` the seed input dL/d(out) of each
    forward output a gradient flows from, ``grad_out(in_id)`` the output
    dL/d(in) of each ``wrt`` tensor."""

    def __init__(self, graph: Graph, seeds: dict[int, int], grads: dict[int, int]):
        self.graph = graph
        self.seeds = dict(seeds)
        self.grads = dict(grads)

    def grad_in(self, out_id: int) -> int:
        if out_id not in self.seeds:
            raise InvalidArguments("no gradient flows from this tensor to a wrt tensor", where=f"tensor {short(out_id)}",
                                   expected=f"one of {sorted(self.seeds)}")
        return self.seeds[out_id]

    def grad_out(self, in_id: int) -> int:
        if in_id not in self.grads:
            raise InvalidArguments("not a wrt tensor", where=f"tensor {short(in_id)}", expected=f"one of {list(self.grads)}")
        return self.grads[in_id]

    def __repr__(self) -> str:
        return f"TrainingGraph({len(self.graph.ops)} ops, seeds={self.seeds}, grads={self.grads})"


def _ids(ids, what, graph) -> list[int]:
    if isinstance(ids, (str, bytes, dict)) or not hasattr(ids, "__iter__"):
        raise InvalidArguments(f"{what} must be a list of tensor ids", found=short(ids))
    out = []
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, int) or i not in graph.tensors:
            raise InvalidArguments(f"{what} names no tensor of the graph", where=f"{what} ({short(i, 60)})",
                                   expected="ids of the graph's tensors")
        out.append(i)
    return out


def grad_ports(op: Op) -> list:
    """The outputs of ``op`` a gradient flows back through (of any dtype: an
    integer tensor on a path makes its op one without a derivative)."""
    names = op.schema.grad_outputs
    return [t for n, t in zip(op.output_names, op.outputs) if not names or n in names]


def grad_inputs(op: Op) -> list[tuple[int, object]]:
    """(index, tensor) of the inputs of ``op`` its grad ports depend on differentiably."""
    names, values = op.schema.grad_inputs, op.schema.value_inputs
    return [(i, t) for i, (n, t) in enumerate(zip(op.input_names, op.inputs))
            if (not names or n in names) and n not in values]


def paths(graph: Graph, wrt, outputs):
    """(active tensor ids: those depending on a wrt tensor; the ops on a path
    from a wrt tensor to an output, in topological order; the floating-point
    outputs on one)."""
    active = set(wrt)
    order = graph.topo_ops()
    for op in order:
        if any(t.id in active for _, t in grad_inputs(op)):
            active.update(t.id for t in grad_ports(op))
    check_no_blocked_path(graph, order, set(wrt), outputs)
    needed = {o for o in outputs if o in active and is_float(graph.tensors[o])}
    reached = sorted(needed, key=outputs.index)
    on_path = []
    for op in reversed(order):
        if any(t.id in needed for t in grad_ports(op)) and any(t.id in active for _, t in grad_inputs(op)):
            on_path.append(op)
            needed.update(t.id for _, t in grad_inputs(op) if t.id in active)
    return active, on_path[::-1], reached


def check_no_blocked_path(graph: Graph, order, wrt: set, outputs) -> None:
    """Unimplemented when an output depends on a wrt tensor through an output
    that carries no gradient (a LayerNorm's mean read by another op): the
    gradient would miss that path.  Such an output that is only a graph output
    is fine (it gets no seed)."""
    depends = set(wrt)
    for op in order:
        if any(t.id in depends for _, t in grad_inputs(op)):
            depends.update(t.id for t in op.outputs)
    needed = {o for o in outputs if o in depends}
    for op in reversed(order):
        if not any(t.id in needed for t in op.outputs):
            continue
        for _, t in grad_inputs(op):
            if t.id not in depends:
                continue
            needed.add(t.id)
            producer = graph.ops[graph.producer[t.id][0]] if t.id in graph.producer else None
            if producer is not None and is_float(t) and all(t.id != u.id for u in grad_ports(producer)):
                name = producer.output_names[graph.producer[t.id][1]]
                raise Unimplemented("an output depends on a wrt tensor through an output that carries no gradient",
                                    op=producer, where=f"output '{name}' (tensor {t.id}), read by {describe_op(op)}")


def grad(graph: Graph, wrt: Iterable[int], outputs: Iterable[int] | None = None) -> TrainingGraph:
    """The training graph of ``graph`` for the gradients of the tensors ``wrt``
    (ids) from the forward ``outputs`` (ids; the graph's outputs by default)."""
    graph = ensure_graph(graph, "graphc.grad").finalize()
    wrt = _ids(wrt, "wrt", graph)
    outputs = _ids(graph.output_ports if outputs is None else outputs, "outputs", graph)
    for tid in wrt:
        if not is_float(graph.tensors[tid]):
            raise InvalidArguments("a gradient is taken of floating-point tensors only", where=f"wrt ({tid})",
                                   expected="f32, bf16 or f16", found=str(graph.tensors[tid].dtype))
    active, on_path, reached = paths(graph, wrt, outputs)
    for op in on_path:
        if not op.schema.has_vjp():
            raise Unimplemented("this op has no derivative, and it lies on a path from a wrt tensor to an output",
                                op=op, expected="ops with a vjp rule (graphc/ops/<family>.py)")
    em = Emitter(max(graph.tensors) + 1, max(graph.ops) + 1)
    if em.next_tensor > INT64_MAX or em.next_op > INT64_MAX:
        raise InvalidArguments("the graph's ids leave no room for new ones", expected=f"ids below {INT64_MAX}")
    forward = graph.topo_ops()
    em.forward = {op.id: Op(op.id, op.kind, op.inputs, op.outputs, dict(op.raw_attrs), op.name) for op in forward}
    for op in em.forward.values():
        op.validate()
    em.active = active
    seeds = {}
    for tid in reached:
        t = graph.tensors[tid]
        seeds[tid] = em.grads[tid] = em.tensor(t.dtype, t.shape)
    _run_rules(em, on_path)
    grads = _grad_outputs(em, graph, wrt, set(s.id for s in seeds.values()))
    read = {t.id for op in em.ops for t in op.inputs}
    seeds = {k: s.id for k, s in seeds.items() if s.id in read}   # (a rule may give zeros without reading its seed)
    out = type(graph)(engine_kind=graph.engine_kind, fpmath_mode=graph.fpmath_mode,
                      fpmath_mode_apply_to_int=graph.fpmath_mode_apply_to_int)
    for op in [em.forward[op.id] for op in forward] + em.ops:
        out.add_op(op)
    out.set_ports(inputs=graph.input_ports + list(seeds.values()), outputs=graph.output_ports + list(grads.values()))
    return TrainingGraph(out.finalize(), seeds, grads)


def _run_rules(em: Emitter, on_path) -> None:
    """Each op's rule, last op first; the gradients it gives summed into its inputs'."""
    for op in reversed(on_path):
        em.current = op
        fwd = em.forward[op.id]
        given = list(fwd.schema.vjp(fwd, em))
        given += [None] * (len(op.inputs) - len(given))
        for i, t in grad_inputs(op):
            if given[i] is None and em.wants(t):
                raise Unimplemented("the op's rule gives no gradient for an input that needs one", op=op,
                                    where=f"input {i} ({op.input_names[i]}, tensor {t.id})")
        for t, g in zip(op.inputs, given):
            if g is not None and em.wants(t):
                em.accumulate(t, g)
    em.current = None


def _grad_outputs(em: Emitter, graph: Graph, wrt, seed_ids: set) -> dict:
    """{wrt id: its gradient's tensor id}: zeros where no gradient reaches it; a copy
    (Reorder) where the gradient is a seed, a forward tensor or another wrt
    tensor's."""
    out, taken = {}, set(seed_ids) | set(graph.tensors)
    for tid in wrt:
        if tid in out:
            continue
        t = graph.tensors[tid]
        g = em.grad(t)
        if g is None:
            g = em.zeros_like(t)
        elif g.id in taken:
            g = em.one("Reorder", [g])
        taken.add(g.id)
        out[tid] = g.id
    return out


__all__ = ["TrainingGraph", "grad", "paths"]
