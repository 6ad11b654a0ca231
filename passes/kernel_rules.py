"""Legality rules that follow from how fused kernels are generated: what a flat
elementwise loop, a value computed in registers and a folded view can do.
Each rule refuses (:class:`Illegal`, with the reason the pass log prints) what
code generation (graphc/codegen/fusion.py, graphc/lowering.py) could not
lower, so that it never refuses a plan legality accepted."""
from __future__ import annotations

from ..ops.common import is_pointwise
from .kernel_plan import Illegal


def check_flat_loop(ops, stored, produced, buffers) -> None:
    """A flat elementwise loop (an ``eltwise`` kernel, or a pointwise value a
    ``staged`` kernel stores) storing the tensors ``stored`` loads each tensor it
    reads once per element, from a buffer (a partition input, or an output of
    one of the ``buffers`` ops: the stages), and computes the others where they
    are read:

    * no indexed op (per-channel or grouped quantization) is computed there: it
      needs a multi-index, and a flat loop has one offset;
    * a value read along some of its consumer's dims (BiasAdd's bias along the
      channel dim: ``input_dims``) is loaded, not computed: a computed value is
      bound to the loop's frame;
    * a tensor is read one way only (all by numpy broadcasting, or all along the
      same dims of frames of one rank): it is loaded once."""
    seen: dict = {}

    def walk(tid, view) -> None:
        if tid in seen:
            if seen[tid] != view:
                raise Illegal(f"tensor {tid} is read two ways in one elementwise loop "
                              f"({_how(seen[tid])} and {_how(view)}): no one loaded value")
            return
        seen[tid] = view
        op = produced.get(tid)
        if op is None or op.id in buffers:
            return
        if not is_pointwise(op):
            raise Illegal(f"op {op.id} ({op.kind}) needs the multi-index an elementwise loop lacks")
        if view is not None:
            raise Illegal(f"tensor {tid}, computed by op {op.id} ({op.kind}), is read {_how(view)} in an "
                          "elementwise loop: a computed value is one per element of the loop")
        for port, t in enumerate(op.inputs):
            dims = op.schema.input_dims(op, port)
            walk(t.id, None if dims is None else (len(op.outputs[0].shape), tuple(dims)))

    for t in stored:
        walk(t.id, None)


def _how(view) -> str:
    return "by broadcasting" if view is None else f"along dims {list(view[1])} of rank {view[0]}"


def check_grouped_params(ops, produced, in_registers) -> None:
    """A per-group indexed op (DynamicDequantize of int4/int8 weights or K/V with
    grouped scales) computed in registers moves the load of its scales and zero
    points to the group of each index: they are tensors the kernel loads (a
    partition input, a scratch buffer), never values computed in registers (the
    ops of ``in_registers``)."""
    for o in ops:
        if o.id not in in_registers or o.attr("qtype", "per_tensor") != "per_group":
            continue
        for name, t in list(zip(o.input_names, o.inputs))[1:]:
            p = produced.get(t.id)
            if p is not None and p.id in in_registers:
                raise Illegal(f"the {name} of op {o.id} ({o.kind}, per group) are computed by op {p.id} "
                              f"({p.kind}) in registers: the kernel loads them at the group of each index")


def known_strides(t):
    """``t``'s strides when the graph fixes them (known dims, strided layout), else None."""
    if t.strides is None or any(d < 0 for d in t.shape) or any(s < 0 for s in t.strides):
        return None
    return tuple(t.strides)


def fold_failure(graph, views_in, views_out) -> str:
    """Why the views a plan folds (``views_in`` read through strides of an input's
    buffer, ``views_out`` a value stored through the inverse strides of an
    output's: graphc/lowering.py's ``fold_views``) are not views of those buffers
    as the graph lays them out; "" when they are (or the strides are known only
    at compile: a layout ``any``)."""
    from ..views import view_strides
    strides: dict = {}
    for o in views_in:
        src = graph.tensors[o.inputs[0].id]
        st = strides[src.id] if src.id in strides else known_strides(src)
        if st is None:
            continue
        v = view_strides(o, tuple(src.shape), st)
        if v is None:
            return f"{o.kind} {o.id} is no view of the buffer of tensor {src.id} (strides {list(st)})"
        strides[o.outputs[0].id] = v
    for o in reversed(views_out):
        dst = graph.tensors[o.outputs[0].id]
        st = strides[dst.id] if dst.id in strides else known_strides(dst)
        if st is None:
            continue
        v = view_strides(o, tuple(dst.shape), st, forward=False)
        if v is None:
            return f"{o.kind} {o.id} cannot store into the buffer of tensor {dst.id} (strides {list(st)})"
        strides[o.inputs[0].id] = v
    return ""


def check_views_fold(graph, views_in, views_out) -> None:
    """Folded views are views of the buffers they read or store through (see
    :func:`fold_failure`)."""
    why = fold_failure(graph, views_in, views_out)
    if why:
        raise Illegal(why)


__all__ = ["check_flat_loop", "check_grouped_params", "known_strides", "fold_failure", "check_views_fold"]
