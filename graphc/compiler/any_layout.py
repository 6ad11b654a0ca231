"""The strides graphc chooses for tensors of layout ``any``.

* An output of a partition: the strides its compute op writes fastest
  (``OpSchema.preferred_strides``), else dense (:func:`chosen_layout`).
* An output of a partition of views (or of one StaticSlice, a window of its
  src): the view's strides, so that no data moves (:func:`view_of`).
* Across a graph: a tensor that leaves one partition for a chain of views into
  a tensor of known strides gets the strides that make the views free
  (:func:`any_layouts`).
"""
from __future__ import annotations

from ..types import LogicalTensor
from ..views import chain_strides, is_view_chain, same_layout


def chosen_layout(ops, lt: LogicalTensor) -> LogicalTensor:
    """Output ``lt`` of layout ``any``: in the strides the partition's compute op
    writes fastest (``OpSchema.preferred_strides``, e.g. channels last for an NCX
    convolution) when its output 0 has lt's shape (post-ops keep it), else dense.
    (A partition of views gives its view's strides instead: view_of.)"""
    for op in reversed(ops):
        st = op.schema.preferred_strides(op) if op.outputs and op.outputs[0].shape == lt.shape else None
        if st is not None:
            return LogicalTensor(lt.id, lt.dtype, lt.shape, st, "strided", lt.property_type)
    return lt


def view_of(ops, in_lts, out_lts, asked_outs, wanted):
    """(input index, output LogicalTensor[, window]) when the partition is a
    chain of views (graphc.views) from one input to its one output, or one
    StaticSlice (its window: a numpy index), whose strides the output takes: an
    output with layout ``any`` takes the view's strides; one with strides of its
    own must have the view's.  Else None (a kernel copies)."""
    if len(out_lts) == 1 and len(ops) == 1 and ops[0].kind == "StaticSlice" and in_lts[0].strides is not None:
        op, out = ops[0], out_lts[0]
        asked = wanted.get(out.id) or next(t for t in asked_outs if t.id == out.id)
        strides = tuple(in_lts[0].strides)          # a step-1 window keeps src's strides
        if asked.strides is not None and not same_layout(out.shape, out.strides, strides):
            return None
        window = tuple(slice(b, e) for b, e in op.schema.bounds(op, tuple(in_lts[0].shape)))
        return 0, LogicalTensor(out.id, out.dtype, out.shape, strides, "strided", out.property_type), window
    if len(out_lts) != 1 or not is_view_chain(ops):
        return None
    src = next((i for i, lt in enumerate(in_lts) if lt.id == ops[0].inputs[0].id), None)
    out = out_lts[0]
    if src is None or ops[-1].outputs[0].id != out.id:
        return None
    strides = chain_strides(ops, in_lts[src].strides)
    if strides is None:
        return None
    asked = wanted.get(out.id) or next(t for t in asked_outs if t.id == out.id)
    if asked.strides is not None and not same_layout(out.shape, out.strides, strides):
        return None
    return src, LogicalTensor(out.id, out.dtype, out.shape, strides, "strided", out.property_type)


def any_layouts(graph, partitions) -> dict[int, tuple]:
    """{tensor id: strides} for the tensors with layout ``any`` that leave one
    partition for a chain of views into a tensor of known strides: the strides
    that make the views free (the producer writes the layout the views read).
    Other ``any`` tensors take the dense layout their partition compiles them
    with.  Consumers are visited last first, so a chain of view partitions
    passes the strides back."""
    chosen: dict[int, tuple] = {}
    for p in reversed(partitions):
        ops = p.ops
        if not is_view_chain(ops) or len(p.outputs) != 1:
            continue
        src, dst = ops[0].inputs[0], ops[-1].outputs[0]
        src = graph.tensors.get(src.id, src)
        dst = graph.tensors.get(dst.id, dst)
        strides = chosen.get(dst.id, dst.strides)
        if src.strides is not None or strides is None or not src.is_complete or not dst.is_complete \
                or src.id in graph.input_port_set:
            continue
        back = chain_strides(ops, tuple(strides), forward=False)
        if back is not None and all(s >= 0 for s in back):
            chosen[src.id] = tuple(back)
    return chosen
