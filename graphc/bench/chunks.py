"""The reference of a case too large for memory, computed minibatch by minibatch.

graphc's reference runs op by op and keeps every value: attention's scores of a
128 x 12 x 1370 x 1370 case are 23 GB in float64, where the compiled kernel keeps
tiles.  When :func:`graphc.reference.reference_bytes` exceeds the budget and the
graph is separable along dim 0 (no op mixes the elements of two minibatch rows:
batched MatMuls, pointwise ops, SoftMax and reductions over other axes, reorders
keeping dim 0), the case is rebuilt for smaller minibatches (benchdnn's ``--mb`` rewrite),
the reference run on the matching slices of the inputs and the slices of its
outputs joined: memory stays bounded and the comparison is the same.  A graph
that is not separable is refused by the reference before it allocates."""
from __future__ import annotations

import numpy as np

from .. import reference
from ..ops.common import is_indexed, is_pointwise


def _axis_not_0(op, name, rank) -> bool:
    a = op.attr(name)
    return a is not None and a % max(rank, 1) != 0


def _separable_op(op, batched) -> bool:
    """Whether ``op`` computes each dim-0 row of its outputs from the same rows of its
    inputs whose dim 0 is the minibatch (``batched``: tensor ids)."""
    k, rank = op.kind, len(op.inputs[0].shape) if op.inputs else 0
    if k == "End":
        return True
    if k == "MatMul":   # batch dims, or the rows of a 2-D src; never K of 2-D weights
        return not (len(op.inputs) > 1 and op.inputs[1].id in batched and len(op.inputs[1].shape) < 3) and \
            not (op.inputs[0].id in batched and len(op.inputs[0].shape) == 2 and op.attr("transpose_a"))
    if k in ("SoftMax", "LogSoftMax"):
        return _axis_not_0(op, "axis", rank)
    if k == "StaticTranspose":
        return list(op.attr("order"))[0] % max(rank, 1) == 0
    if k in ("StaticReshape", "Reorder", "TypeCast"):
        return True
    if k == "GenIndex":
        return _axis_not_0(op, "axis", len(op.outputs[0].shape))
    if k.startswith("Reduce"):   # (training backward's ReduceSum(O * dO) over the last axis)
        return all(a % max(rank, 1) != 0 for a in op.attr("axes") or ())
    if k in ("Dropout", "DynamicDequantize", "DynamicQuantize"):
        return False
    if is_pointwise(op):
        return True
    return is_indexed(op) and k in ("Quantize", "Dequantize") and _axis_not_0(op, "axis", rank)


def batched_ids(full, part, n, c) -> set | None:
    """The tensors whose dim 0 is the minibatch (``n`` in ``full``, ``c`` in ``part``), or
    None if the two graphs differ otherwise (the rewrite changed another dim)."""
    out = set()
    if set(full.tensors) != set(part.tensors):
        return None
    for tid, t in full.tensors.items():
        a, b = tuple(t.shape), tuple(part.tensors[tid].shape)
        if a == b:
            continue
        if len(a) != len(b) or a[1:] != b[1:] or (a[0], b[0]) != (n, c):
            return None
        out.add(tid)
    return out


def chunked_reference(graph, rebuild, inputs, budget):
    """{output id: array} of the reference computed minibatch by minibatch, or None if
    ``graph`` is not separable along dim 0 (``rebuild(mb)``: the case's graph for
    minibatch ``mb``, or None)."""
    n = next((graph.tensors[t].shape[0] for t in graph.input_ports if graph.tensors[t].shape), None)
    if not n or n < 2 or rebuild is None:
        return None
    c = n
    while True:   # halve the minibatch until its reference fits (or is one row: then it refuses)
        c = (c + 1) // 2
        part = rebuild(c)
        batched = None if part is None else batched_ids(graph, part, n, c)
        if batched is None or not all(_separable_op(o, batched) for o in graph.ops.values()):
            return None
        if c == 1 or reference.reference_bytes(part) <= budget:
            break
    graphs = {c: part}
    pieces: dict = {tid: [] for tid in graph.output_ports}
    for lo in range(0, n, c):
        m = min(c, n - lo)
        if m not in graphs:
            graphs[m] = rebuild(m)
        g = graphs[m]
        ins = {tid: a[lo:lo + m] if tid in batched else a for tid, a in inputs.items() if tid in g.input_ports}
        want = reference.run(g, ins)
        for tid in graph.output_ports:
            pieces[tid].append(want[tid])
    return {tid: np.concatenate(p, axis=0) if tid in batched else p[0] for tid, p in pieces.items()}


def reference_outputs(graph, inputs, rebuild=None, unrounded: dict | None = None) -> dict:
    """The reference's outputs: whole when they fit the memory budget, else minibatch by
    minibatch (:func:`chunked_reference`); a graph that neither fits nor separates is
    refused by the reference before it allocates.  ``unrounded`` is filled as
    reference.run fills it, by a whole run only (a chunked one compares integers exactly)."""
    avail = reference.available_bytes()
    budget = None if avail is None else int(avail * reference.MEMORY_SHARE)
    if budget is not None and reference.reference_bytes(graph) > budget:
        got = chunked_reference(graph, rebuild, inputs, budget)
        if got is not None:
            return got
    return reference.run(graph, inputs, unrounded=unrounded)


__all__ = ["reference_outputs", "chunked_reference", "batched_ids"]
