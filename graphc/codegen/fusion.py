"""Lowering a fused partition to one kernel: elementwise producers are
substituted into their consumers as IR expressions.

* Only elementwise ops: one loop over the outputs' shape; every tensor the
  partition writes is stored from the expression of its producer, every
  partition input loaded once per element (the printer computes each common
  subexpression once, so a value used by several ops, as ``x`` in
  ``x * sigmoid(x)``, is computed once).
* One anchor (norm, softmax, reduction, SwiGlu, BatchNormTrainingBackward, ...)
  with elementwise ops around it: an anchor input produced inside the partition
  is a :class:`PrologueRef`, whose ``load_nd`` builds the producers' expression at
  the anchor's index; the anchor's output 0, when elementwise ops consume it, is
  an :class:`EpilogueRef`, whose ``store_nd`` binds the anchor's value once and
  stores every partition output computed from it at the same index.  Other
  elementwise ops (on partition inputs only, such as a residual branch) are
  computed wherever their value is needed.
* Indexed ops (per-channel Quantize/Dequantize: the value at a multi-index is
  an expression of the input there and of the index) are computed like
  elementwise ones wherever a multi-index is known (an anchor's ``load_nd`` /
  ``store_nd``), never in a flat elementwise loop; legality decides where.

* Several anchors (staged): each lowers itself in turn, anchor outputs read
  inside going through scratch buffers, pointwise values computed where read.

Which shape a partition has, and which tensors stay in registers, leave it or
go through scratch, is decided in one place, the legality pass
(passes/legality.py), whose plan the partition carries.  An ``attention`` plan
goes to its own kernel (graphc/codegen/attention.py), a ``conv_depthwise`` plan
to graphc/codegen/conv_depthwise.py.  The expressions of fused
tensors (``Values``) and the Prologue/EpilogueRefs are
graphc/codegen/fused_values.py, which that kernel builds on too.
"""
from __future__ import annotations

from . import rules
from .attention import lower_attention
from .attention_rows import lower_attention_rows
from .conv_depthwise import lower_conv_depthwise
from .elementwise import emit_elementwise
from .fused_values import EpilogueRef, NotFusable, PrologueRef, Values
from .kernel import ArrayRef
from ..types import LogicalTensor
from ..ops.common import is_pointwise as is_eltwise


def lower_fused(kb, ops, refs, plan, values_of: dict) -> None:
    """Emit the partition ``ops`` as one fused kernel into ``kb`` following its
    ``plan`` (passes.legality.FusionPlan: the kernel's shape, its anchors and which
    tensors stay in registers); ``refs`` maps tensor ids to kernel arguments
    (partition inputs and outputs, and scratch buffers of a staged plan);
    ``values_of`` ({op id: {port name: tuple}}) the values of value inputs each
    op's kernel is specialised on (graphc.lowering.build_kernel).
    Legality accepted the plan, so it lowers: :class:`NotFusable` (an anchor's
    rule reading or writing a fused tensor other than through load_nd / store_nd,
    a value read where the kernel cannot compute it) is a bug."""
    if plan.shape == "attention":
        lower_attention(kb, ops, refs, plan)
        return
    if plan.shape == "attention_rows":
        lower_attention_rows(kb, ops, refs, plan)
        return
    if plan.shape == "conv_depthwise":
        lower_conv_depthwise(kb, ops, refs, plan)
        return
    values = Values(ops, refs, kb, plan.anchors)
    if plan.shape == "eltwise":
        outs = [t for o in ops for t in o.outputs if t.id in refs]
        _lower_eltwise(kb, ops, refs, values, outs)
        return
    anchors = [o for o in ops if o.id in plan.anchors]
    if plan.shape == "anchor":
        _lower_anchor(kb, ops, anchors[0], refs, values, values_of.get(anchors[0].id, {}))
    else:
        _lower_staged(kb, ops, refs, values, values_of)


def _lower_eltwise(kb, ops, refs, values, outs) -> None:
    _emit_pointwise(kb, refs, values, outs)
    kb.ret(-1)


def _emit_pointwise(kb, refs, values, outs) -> None:
    """One elementwise loop (the one emitter) storing ``outs``, tensors computed by
    pointwise ops, from the tensors they are computed from (kernel arguments),
    each loaded once per element."""
    ins, seen = [], {}

    def leaves(tid, view=None):
        """``view``: (rank, dims) when the consumer reads tid along some of its
        dims (BiasAdd's bias along the channel dim), None for numpy broadcasting."""
        if tid in seen:
            if seen[tid] != view:
                raise NotFusable(f"tensor {tid} read two ways in one elementwise loop")
            return
        seen[tid] = view
        op = values.producer.get(tid)
        if op is not None and values.computed(op) and not is_eltwise(op):
            raise NotFusable(f"op {op.id} ({op.kind}) needs the multi-index an elementwise loop lacks")
        if op is None or not values.computed(op):
            ins.append(refs[tid] if view is None else _view(refs[tid], *view))
            return
        if view is not None:
            raise NotFusable(f"tensor {tid}, computed in registers, read along other dims in an elementwise loop")
        for port, t in enumerate(op.inputs):
            dims = op.schema.input_dims(op, port)
            leaves(t.id, None if dims is None else (len(op.outputs[0].shape), tuple(dims)))

    for t in outs:
        leaves(t.id)

    def compute(kb_, loaded):
        with values.binding({r.lt.id: v for r, v in zip(ins, loaded)}):
            return [values.at(t.id, t, [], ()) for t in outs]

    emit_elementwise(kb, [refs[t.id] for t in outs], ins, compute)


def _view(ref, rank: int, dims) -> ArrayRef:
    """``ref`` seen with ``rank`` dims, its own running along ``dims``, size 1 elsewhere."""
    shape, strides = [1] * rank, [0] * rank
    for d, n, st in zip(dims, ref.shape, ref.strides):
        shape[d], strides[d] = n, st
    return ArrayRef(ref.name, LogicalTensor(ref.lt.id, ref.dtype, tuple(shape), tuple(strides)))


def _downstream(ops, tids) -> set:
    """Tensor ids computed (transitively) from ``tids`` by ``ops`` (in order)."""
    seen = set(tids)
    for o in ops:
        if any(t.id in seen for t in o.inputs):
            seen.update(t.id for t in o.outputs)
    return seen


def _lower_anchor(kb, ops, anchor, refs, values, anchor_values) -> None:
    """The anchor lowers itself (its rule given ``anchor_values``, {port name:
    tuple}); its inputs computed in the partition are PrologueRefs, its output 0
    an EpilogueRef when pointwise ops consume it."""
    produced = {t.id for o in ops for t in o.outputs}
    local = dict(refs)
    for t in anchor.inputs:
        if t.id in produced:
            local[t.id] = PrologueRef(t, values)
    out0 = anchor.outputs[0]
    after = _downstream(ops, [out0.id]) - {out0.id}
    if after:
        stored = [t for o in ops for t in o.outputs if t.id in refs and (t.id in after or t.id == out0.id)]
        local[out0.id] = EpilogueRef(out0, values, stored, kb)
    rules.lower(anchor, kb, [local[t.id] for t in anchor.inputs], [local[t.id] for t in anchor.outputs],
                anchor_values)
    kb.ret(-1)


def _lower_staged(kb, ops, refs, values, values_of) -> None:
    """Ops in order: each anchor lowers itself (inputs computed in registers as
    PrologueRefs, outputs into scratch or partition outputs); a pointwise op whose
    value must be stored gets a loop over its shape; other pointwise values are
    computed where they are read."""
    produced = {t.id for o in ops for t in o.outputs}
    for op in ops:
        if values.computed(op):
            stored = [t for t in op.outputs if t.id in refs]
            if stored:
                _emit_pointwise(kb, refs, values, stored)
            continue
        ins = [refs[t.id] if t.id in refs or t.id not in produced else PrologueRef(t, values) for t in op.inputs]
        rules.lower(op, kb, ins, [refs[t.id] for t in op.outputs], values_of.get(op.id, {}))
    kb.ret(-1)
