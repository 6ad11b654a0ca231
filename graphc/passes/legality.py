"""Fusion legality: the one place that decides whether a set of ops may become
one fused partition, and what its kernel does with each tensor.

A fused partition lowers to one kernel of one of four shapes:

* ``eltwise``: pointwise ops only (``Elementwise``: unary, binary, typecasts,
  ...), one loop over the frame (the shape every written tensor shares); each
  partition input is loaded once per element and every value in between stays
  in registers.
* ``anchor``: one op that is not pointwise (a norm, a softmax, a reduction,
  SwiGlu, Concat, Dropout, ...) with a *prologue* (pointwise ops whose values
  flow into the anchor's inputs: computed inside the anchor's loads) and an
  *epilogue* (pointwise ops downstream of the anchor's output 0: computed where
  the anchor stores, its value bound once).  Pointwise ops on partition inputs
  only (a residual branch) are computed where the epilogue needs them.
* ``staged``: several anchors, one after another in one kernel; anchor outputs
  that stay inside go through scratch buffers, pointwise values are computed
  where they are read.
* ``attention``: scaled dot-product attention (MatMul -> scale/mask ops ->
  SoftMax -> MatMul, reorders around), one flash-style kernel that keeps the
  scores in a tile (graphc/codegen/attention.py); see :func:`_attention_plan`.

Tensor roles (:class:`FusionPlan.roles`): ``register`` (computed and consumed
inside the kernel, never stored), ``written`` (leaves the partition: a graph
output or read by an op outside), ``scratch`` (materialised between stages).

A set of ops is legal when every op lowers, the set is convex (no path leaves
it and comes back, else the partitions could not be ordered), no prologue
value must be written (it is computed inside the anchor's loads, maybe in
several passes), the anchor's other outputs do not feed its epilogue, written
epilogue values have the anchor's output shape, and fusing moves no more bytes
than not fusing (a prologue re-read by an anchor making several passes over
its input may cost more than its intermediate tensor: then it stays apart).

Indexed ops (per-channel Quantize/Dequantize, ``ops.common.is_indexed``) are
not pointwise, but are computed in registers like pointwise ops where the
kernel knows the multi-index (see ``_indexed_in_registers``); elsewhere they
are anchors.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ops.common import is_indexed, is_pointwise

#: anchors whose lowering loads every input through ``load_nd`` at its full
#: multi-index (the GEMM packing loops of MatMul and the convolutions): an
#: indexed op (per-channel Dequantize) feeding one is computed while packing
INDEXED_LOADS = frozenset({"MatMul", "Convolution", "ConvTranspose"})


@dataclass
class FusionPlan:
    shape: str                                   # "eltwise", "anchor", "staged", "attention" or "views"
    anchors: list = field(default_factory=list)  # op ids of the non-pointwise ops, in order
    roles: dict = field(default_factory=dict)    # tensor id -> "register" | "written" | "scratch" | "view"
    prologue: set = field(default_factory=set)   # op ids (anchor shape)
    epilogue: set = field(default_factory=set)   # op ids (anchor shape)
    views_in: list = field(default_factory=list)   # view ops read as strides of an input (in order)
    views_out: list = field(default_factory=list)  # view ops a value is stored through (in order)

    def describe(self) -> str:
        kept = sorted(t for t, r in self.roles.items() if r == "register")
        written = sorted(t for t, r in self.roles.items() if r == "written")
        scratch = sorted(t for t, r in self.roles.items() if r == "scratch")
        return (f"{self.shape} kernel; in registers: {kept or 'none'}; written: {written or 'none'}"
                + (f"; scratch: {scratch}" if scratch else ""))


class Illegal(Exception):
    """Why a set of ops cannot fuse (a reason for the pass log)."""


def plan(graph, ops, can_lower) -> FusionPlan:
    """The kernel plan of ``ops`` fused, or raise :class:`Illegal`.
    ``can_lower(op)`` says whether this build has a kernel for an op (code
    generation's answer, handed down by the compile step)."""
    ids = {o.id for o in ops}
    for o in ops:
        if o.kind == "End" or hasattr(o.schema, "runner"):
            raise Illegal(f"op {o.id} ({o.kind}) is not computation")
        if not can_lower(o):
            raise Illegal(f"op {o.id} ({o.kind}) has no kernel in this build")
    if not convex(graph, ids):
        raise Illegal("a path leaves the ops and comes back")
    produced = {t.id: o for o in ops for t in o.outputs}
    outs = set(graph.output_ports)
    leaving = {tid for tid in produced
               if tid in outs or not graph.consumers.get(tid)
               or any(c not in ids for c, _ in graph.consumers.get(tid, []))}
    if _is_attention(ops):
        return _attention_plan(graph, ops, produced, leaving)
    if _view_chain(ops, leaving):
        return FusionPlan("views", [], {o.outputs[0].id: "view" for o in ops[:-1]} | {ops[-1].outputs[0].id: "written"},
                          views_in=list(ops))
    views_in, views_out = _folded_views(graph, ops, produced, leaving)
    if views_in or views_out:
        return _with_views(graph, ops, views_in, views_out, can_lower)
    core = [o for o in ops if not is_pointwise(o) and not is_indexed(o)]
    kept = _indexed_in_registers(graph, ops, core, leaving)
    anchors = [o for o in ops if not is_pointwise(o) and o.id not in kept]
    roles = {tid: ("written" if tid in leaving else "register") for tid in produced}
    if not anchors:
        frame = {tuple(graph.tensors[t].shape) for t in leaving}
        if len(frame) != 1:
            raise Illegal(f"pointwise outputs of different shapes {sorted(frame)}")
        return FusionPlan("eltwise", [], roles)
    if len(anchors) == 1:
        return _anchor_plan(graph, ops, anchors[0], roles, produced)
    for a in anchors:   # what one stage computes and a later one reads goes through memory
        for t in a.outputs:
            if roles[t.id] == "register":
                roles[t.id] = "scratch"
    return FusionPlan("staged", [a.id for a in anchors], roles)


def _indexed_in_registers(graph, ops, core, leaving) -> set:
    """Ids of the indexed ops (per-channel Quantize/Dequantize, see
    ops.common.is_indexed) computed in registers where their value is read,
    which needs a multi-index: every anchor their value reaches through
    computed ops must load it at its full index (INDEXED_LOADS: the GEMM
    packing loop indexes every dim, so any channel axis is one it indexes);
    with one anchor, its epilogue stores at the anchor's index; with several
    (staged), nothing their value reaches may be written, as pointwise values
    a staged kernel stores go through a flat loop.  The others are anchors
    (and when one is, a plan of one anchor becomes staged: judged again so)."""
    if not core:
        return set()
    indexed = [o for o in ops if is_indexed(o)]
    kept = _kept_indexed(graph, ops, indexed, core, leaving, len(core) > 1)
    if len(core) == 1 and len(kept) < len(indexed):
        kept = _kept_indexed(graph, ops, indexed, core, leaving, True)
    return kept


def _kept_indexed(graph, ops, indexed, core, leaving, staged: bool) -> set:
    ids = {o.id for o in ops}
    computed = {o.id for o in ops if is_pointwise(o) or is_indexed(o)}
    kept = set()
    for o in indexed:
        ok, frontier, seen = True, [t.id for t in o.outputs], set()
        while frontier and ok:
            tid = frontier.pop()
            if tid in seen:
                continue
            seen.add(tid)
            ok = not (staged and tid in leaving)
            for c, _ in graph.consumers.get(tid, []):
                if c not in ids:
                    continue
                if c in computed:
                    frontier.extend(t.id for t in graph.ops[c].outputs)
                elif graph.ops[c].kind not in INDEXED_LOADS:
                    ok = False
        if ok:
            kept.add(o.id)
    return kept


# ==== attention (issue 14: SDPA forward and training, MHA/MQA/GQA) =======================
ATTENTION_REORDERS = ("StaticReshape", "StaticTranspose")


def _is_attention(ops) -> bool:
    return sum(o.kind == "SoftMax" for o in ops) == 1 and sum(o.kind == "MatMul" for o in ops) == 2 or \
        _is_attention_backward(ops)


def _is_attention_backward(ops) -> bool:
    kinds = [o.kind for o in ops]
    return kinds.count("MatMul") == 5 and kinds.count("Exp") == 1 and 1 <= kinds.count("ReduceSum") <= 3 and \
        "SoftMax" not in kinds


def _broadcasts_into(lead, batch) -> bool:
    """Batch dims ``lead`` broadcast (numpy rules) into ``batch``."""
    return len(lead) <= len(batch) and all(d in (1, b) for d, b in zip(reversed(lead), reversed(batch)))


def _attention_backward_plan(graph, ops, produced, leaving) -> FusionPlan:
    """The ``attention`` plan of sdpa.md's backward graph (one flash-style backward
    kernel, graphc/codegen/attention.py): S = Q@K^T -> pointwise ops (scale, mask,
    Subtract stats, Exp = P) ...; dV = f(P)^T @ dO, dP = dO @ V^T, dS from P, dP and
    ReduceSum(O * dO) (pointwise ops and Dropouts of the scores' shape), dQ = g(dS) @ K,
    dK = g(dS)^T @ Q.  anchors: [QK, dP, dV, dQ, dK MatMuls, ReduceSum]; written: the
    three gradients and pointwise values of the scores' shape that leave (dM).
    GQA/MQA (gqa.md's backward): K and V broadcast over the query heads of their group
    into the Q@K^T, dO@V^T and dS@K MatMuls, and dK, dV are ReduceSums of the dK and dV
    MatMuls over those batch axes (the same for both): anchors then end with them.
    Reorders of partition inputs (gqa.md's 4-D GQA: Q [N, H, S, D] reshaped to
    [N, G, H/G, S, D], ...) are read as views of their buffers (prologue), and
    reorders after dQ, dK, dV are stored through (epilogue)."""
    from ..numerics import fpmath_down
    reorders = set()
    for o in ops:
        if o.kind in ATTENTION_REORDERS and all(t.id not in produced or produced[t.id].id in reorders
                                                for t in o.inputs):
            reorders.add(o.id)
    _input_views(ops, produced, reorders)
    computed = {tid: o for tid, o in produced.items() if o.id not in reorders}
    mms = [o for o in ops if o.kind == "MatMul"]
    sums = [o for o in ops if o.kind == "ReduceSum"]
    heads = {computed[o.inputs[0].id].id: o for o in sums
             if o.inputs[0].id in computed and computed[o.inputs[0].id].kind == "MatMul"}
    rsums = [o for o in sums if o not in heads.values()]
    if len(rsums) != 1:
        raise Illegal("no one ReduceSum(O * dO) in the attention backward")
    rsum = rsums[0]
    exp = next(o for o in ops if o.kind == "Exp")
    for mm in mms:
        if len(mm.inputs) > 2 or any(t.ndim < 2 for t in mm.inputs) or fpmath_down(mm) is not None:
            raise Illegal(f"attention MatMul {mm.id} has a bias, a 1-D operand or rounds its inputs")
    outside = [m for m in mms if all(t.id not in computed for t in m.inputs)]
    qk = next((m for m in outside if exp.id in _downstream_ops(ops, {m.outputs[0].id})), None)
    if qk is None or len(outside) != 2:
        raise Illegal("no Q@K^T and dO@V^T MatMuls of partition inputs")
    dp = next(m for m in outside if m is not qk)
    from_p = _downstream_ops(ops, {exp.outputs[0].id})
    dv = [m for m in mms if m.id in from_p and dp.inputs[0].id in (t.id for t in m.inputs)
          and m.inputs[0].id in computed]
    grads = [m for m in mms if m not in outside and m not in dv]
    if len(dv) != 1 or len(grads) != 2 or grads[0].inputs[0].id != grads[1].inputs[0].id:
        raise Illegal("the dV, dQ and dK MatMuls are not as sdpa.md's backward graph has them")
    dv = dv[0]
    dq = next((m for m in grads if not m.attr("transpose_a")), None)
    dk = next((m for m in grads if m.attr("transpose_a")), None)
    score = qk.outputs[0]
    sshape = tuple(score.shape)
    batch = sshape[:-2]
    if dq is None or dk is None or not dv.attr("transpose_a") or dv.inputs[1].id != dp.inputs[0].id or \
            any(d < 0 for d in sshape) or tuple(dp.outputs[0].shape) != sshape:
        raise Illegal("the gradient MatMuls do not transpose as sdpa.md's backward graph")
    for m in mms:
        if tuple(m.outputs[0].shape[:-2]) != batch or \
                any(not _broadcasts_into(tuple(t.shape[:-2]), batch) for t in m.inputs):
            raise Illegal(f"MatMul {m.id}'s batch dims are not the scores' (its inputs broadcast into them)")
    if not set(heads) <= {dk.id, dv.id}:
        raise Illegal("a ReduceSum of a MatMul other than dK's or dV's in the attention backward")
    head_axes = {mid: sorted({a % len(sshape) for a in o.attr("axes")}) for mid, o in heads.items()}
    if heads and (len(heads) != 2 or head_axes[dk.id] != head_axes[dv.id] or
                  any(a >= len(batch) for a in head_axes[dk.id]) or any(len(o.inputs) > 1 for o in heads.values())):
        raise Illegal("dK and dV are not both ReduceSums over the same batch (head) axes")
    red = rsum.inputs[0]
    axes = [a % red.ndim for a in rsum.attr("axes")]
    if axes != [red.ndim - 1] or not rsum.attr("keep_dims") or red.id not in computed:
        raise Illegal("the ReduceSum is not over the last axis (kept) of a computed O * dO")
    row_ops = {computed[red.id].id}
    anchors = {m.id for m in mms} | {o.id for o in sums}
    grads_out = [(heads.get(m.id) or m).outputs[0] for m in (dq, dk, dv)]
    epi, finals = [], []   # the reorders after each gradient, its last tensor (written)
    for t in grads_out:
        chain = []
        while True:
            cons = [o for o in ops if any(x.id == t.id for x in o.inputs)]
            if len(cons) != 1 or cons[0].kind not in ATTENTION_REORDERS or t.id in leaving:
                break
            chain.append(cons[0])
            t = cons[0].outputs[0]
        _output_strides(t, chain)
        epi += chain
        finals.append(t.id)
    skip = anchors | row_ops | reorders | {o.id for o in epi}
    for o in ops:
        if o.id in skip:
            continue
        if o.kind == "Dropout":
            if len(o.outputs) > 1 or any(t.id in computed for t in o.inputs[1:]):
                raise Illegal("a Dropout in attention backward has a mask output or computed seeds")
        elif not is_pointwise(o) or any(tuple(t.shape) != sshape for t in o.outputs):
            raise Illegal(f"op {o.id} ({o.kind}) is not a pointwise op of the scores' shape")
    if not is_pointwise(computed[red.id]) or any(t.id in computed for t in computed[red.id].inputs):
        raise Illegal("O * dO is not one pointwise op of partition inputs")
    roles = {}
    for tid in produced:
        if tid in finals:
            roles[tid] = "written"
        elif tid in leaving:
            o = produced[tid]
            if o.id in skip or o.kind == "Dropout":
                raise Illegal(f"tensor {tid} inside the attention backward leaves the partition")
            roles[tid] = "written"
        else:
            roles[tid] = "register"
    return FusionPlan("attention", [qk.id, dp.id, dv.id, dq.id, dk.id, rsum.id] +
                      ([heads[dv.id].id, heads[dk.id].id] if heads else []), roles, reorders, {o.id for o in epi})


def _input_views(ops, produced, reorders) -> dict:
    """{dst id: (shape, strides)}: the views of their buffers the ``reorders`` of
    partition inputs (or of computed values, read through their index as if dense)
    make; Illegal if one is none."""
    from ..types import dense_strides
    from ..views import view_strides
    views = {}
    for o in ops:
        if o.id in reorders:
            src = o.inputs[0]
            own = tuple(src.strides) if src.id not in produced else dense_strides(src.shape)
            shape, strides = views.get(src.id, (tuple(src.shape), own))
            st = view_strides(o, shape, strides)
            if st is None:
                raise Illegal(f"{o.kind} {o.id} of an attention input is no view of its buffer")
            views[o.outputs[0].id] = (tuple(o.outputs[0].shape), st)
    return views


def _output_strides(final, chain):
    """The strides the value before the ops ``chain`` (reorders and pointwise ops of
    one input) is stored with into ``final``'s buffer; Illegal if a reorder is no view."""
    from ..views import view_strides
    shape, strides = tuple(final.shape), tuple(final.strides)
    for o in reversed(chain):
        if o.kind in ATTENTION_REORDERS:
            strides = view_strides(o, shape, strides, forward=False)
            if strides is None:
                raise Illegal(f"{o.kind} {o.id} of an attention output is no view of its buffer")
            shape = tuple(o.inputs[0].shape)
    return strides


def _attention_plan(graph, ops, produced, leaving) -> FusionPlan:
    """The ``attention`` plan (graphc/codegen/attention.py: one flash-style kernel):
    MatMul (Q@K^T) -> pointwise ops and GenIndex (scale, masks) -> SoftMax over the
    last axis (its stats written when exported: training forward) -> [Dropout, its
    seed/offset/probability from outside] -> [pointwise ops of the probabilities:
    quantized SDPA's Quantize -> Dequantize] -> MatMul (@V) -> reorders, TypeCasts
    and a Quantize; reorders (StaticReshape, StaticTranspose) of partition inputs
    are read as views of their buffers.  Q, K and V may be computed by pointwise
    or indexed ops (sdpa_with_compressed_kv.md's DynamicDequantize of int8/int4
    K/V with grouped scales, sdpa_quantized.md's Dequantize of fp8/int8 Q/K/V,
    TypeCasts) and reorders after them: the kernel computes them while it packs
    the K/V tiles (a reorder of a computed value reads it at the index its view
    maps to), so no dequantized copy exists.
    anchors: [first MatMul, SoftMax, second MatMul]; prologue: the reorders of
    the operands; epilogue: the chain after the second MatMul (its last tensor
    the only one written)."""
    if _is_attention_backward(ops):
        return _attention_backward_plan(graph, ops, produced, leaving)
    sm = next(o for o in ops if o.kind == "SoftMax")
    mms = [o for o in ops if o.kind == "MatMul"]
    drop = [o for o in ops if o.kind == "Dropout"]
    if len(drop) > 1 or drop and (drop[0].inputs[0].id != sm.outputs[0].id or len(drop[0].outputs) > 1):
        raise Illegal("a Dropout in attention must take the SoftMax's dst and have no mask output")
    probs = (drop[0] if drop else sm).outputs[0].id
    from_probs = _downstream_ops(ops, {probs})
    mm2 = next((o for o in mms if o.id in from_probs and
                (o.inputs[0].id == probs or produced.get(o.inputs[0].id) is not None
                 and produced[o.inputs[0].id].id in from_probs)), None)
    if mm2 is None:
        raise Illegal("the SoftMax's dst (after a Dropout) is not the second MatMul's src")
    mm1 = next(o for o in mms if o is not mm2)
    for mm in mms:   # (fpmath_mode's rounding of f32 inputs: the kernel rounds as it packs)
        if len(mm.inputs) > 2 or any(t.ndim < 2 for t in mm.inputs):
            raise Illegal(f"attention MatMul {mm.id} has a bias or a 1-D operand")
    if mm2.attr("transpose_a"):
        raise Illegal("the probabilities are transposed into the second MatMul")
    score = mm1.outputs[0]
    sshape = tuple(score.shape)
    if any(d < 0 for d in sshape) or sm.schema.axis(sm) != len(sshape) - 1:
        raise Illegal("the SoftMax is not over the last axis of known scores")
    if any(d.id in produced for o in drop for d in o.inputs[1:]):
        raise Illegal("the Dropout's seed, offset or probability is computed in the partition")
    if tuple(mm2.outputs[0].shape[:-2]) != sshape[:-2]:
        raise Illegal("V's batch dims broadcast the output beyond the scores'")
    chain = _downstream_ops(ops, {score.id}) - {sm.id, mm2.id} - {o.id for o in drop}
    after = _downstream_ops(ops, {mm2.outputs[0].id}) - {mm2.id}
    # the probabilities' chain (quantized SDPA: Quantize -> Dequantize) and the
    # operands' chains (compressed K/V, fp8 Q/K/V: [Dynamic]Dequantize -> [TypeCast] -> reorders)
    p_chain = from_probs & _upstream_ops(produced, [mm2.inputs[0]])
    operand = _upstream_ops(produced, [mm1.inputs[0], mm1.inputs[1], mm2.inputs[1]])
    if operand & (chain | {sm.id} | {o.id for o in drop}):
        raise Illegal("Q, K or V is computed from the scores")
    reorders = set()
    for o in ops:
        if o.id in (mm1.id, sm.id, mm2.id) or o.id in after or o in drop:
            continue
        if o.id in p_chain:
            if not is_pointwise(o) or any(tuple(t.shape) != sshape for t in o.outputs) or \
                    any(t.id in produced and produced[t.id].id not in p_chain | {sm.id} | {d.id for d in drop}
                        for t in o.inputs):
                raise Illegal(f"op {o.id} ({o.kind}) between the SoftMax and the second MatMul is not a "
                              "pointwise op of the probabilities")
        elif o.kind in ATTENTION_REORDERS and (o.id in operand or all(t.id not in produced or produced[t.id].id
                                                                      in reorders for t in o.inputs)):
            reorders.add(o.id)
        elif o.id in operand:
            if not (is_pointwise(o) or is_indexed(o)) or len(o.outputs) != 1:
                raise Illegal(f"op {o.id} ({o.kind}) computing Q, K or V is not pointwise or indexed "
                              "(dequantized while the kernel packs the operand)")
        elif o.id in chain or o.kind == "GenIndex":
            if not (is_pointwise(o) or o.kind == "GenIndex") or any(tuple(t.shape) != sshape for t in o.outputs):
                raise Illegal(f"op {o.id} ({o.kind}) between the MatMul and the SoftMax is not a pointwise "
                              "op of the scores' shape")
        else:
            raise Illegal(f"op {o.id} ({o.kind}) has no place in an attention kernel")
    _input_views(ops, produced, reorders)
    epi = [o for o in ops if o.id in after]
    for prev, o in zip([mm2] + epi, epi):
        if not (o.kind in ATTENTION_REORDERS or is_pointwise(o) and len(o.inputs) == 1) or \
                o.inputs[0].id != prev.outputs[0].id:
            raise Illegal(f"op {o.id} ({o.kind}) after the second MatMul is not a chain of reorders and "
                          "pointwise ops of one input (TypeCast, Quantize)")
    final = (epi[-1] if epi else mm2).outputs[0]
    _output_strides(final, epi)
    roles = {}
    stats = {t.id for t in sm.outputs[1:]}   # training forward: the SoftMax's stats, one per row
    for tid in produced:
        roles[tid] = "written" if tid == final.id or tid in stats else "register"
        if tid in leaving and roles[tid] != "written":
            raise Illegal(f"tensor {tid} inside the attention leaves the partition")
    return FusionPlan("attention", [mm1.id, sm.id, mm2.id], roles, reorders, {o.id for o in epi})


def _upstream_ops(produced, tensors) -> set:
    """Ids of the ops (of ``produced``: tensor id -> op) that ``tensors`` are computed from."""
    out, stack = set(), [t.id for t in tensors]
    while stack:
        o = produced.get(stack.pop())
        if o is not None and o.id not in out:
            out.add(o.id)
            stack.extend(t.id for t in o.inputs)
    return out


def _downstream_ops(ops, tids) -> set:
    seen, out = set(tids), set()
    for o in ops:
        if any(t.id in seen for t in o.inputs):
            out.add(o.id)
            seen.update(t.id for t in o.outputs)
    return out
# ==== end of the attention block ============================================================


# ==== views folded into a fused kernel (issue 19) ==========================================
def _folded_views(graph, ops, produced, leaving) -> tuple[list, list]:
    """The view ops (graphc.views) a kernel folds away: those reading a partition
    input (or such a view of one), whose dst the kernel reads through strides of
    the input's buffer (``views_in``); and those whose dst leaves the partition
    (or goes on through such views) taking a value computed inside that nothing
    else reads, which the kernel stores through the inverse strides of the
    output's buffer (``views_out``).  Whether the strides allow it is known at
    compile (graphc/lowering.py): a view that cannot be one there is a copy."""
    from ..views import may_be_view
    views_in, seen = [], set()
    for o in ops:
        src = o.inputs[0].id if o.inputs else None
        if may_be_view(o) and (src not in produced or src in seen) and o.outputs[0].id not in leaving:
            views_in.append(o)
            seen.add(o.outputs[0].id)
    views_out, through = [], set(leaving)
    for o in reversed(ops):
        if o in views_in or not may_be_view(o) or o.outputs[0].id not in through:
            continue
        src = o.inputs[0].id
        readers = graph.consumers.get(src, [])
        if src in produced and src not in seen and src not in graph.output_ports \
                and [c for c, _ in readers] == [o.id]:
            views_out.insert(0, o)
            through.add(src)
    return views_in, views_out


def _view_chain(ops, leaving) -> bool:
    """The ops are views one after another, only the last one's dst leaving: at
    compile, the partition's output is a view of its input when the strides
    allow (graphc/compiled.py), else the views are copies one after another."""
    from ..views import is_view_chain
    return is_view_chain(ops) and all(o.outputs[0].id not in leaving for o in ops[:-1])


def _with_views(graph, ops, views_in, views_out, can_lower) -> FusionPlan:
    """The plan of the ops left once the views fold away, which carries the views."""
    folded = {o.id for o in views_in + views_out}
    p = plan(graph, [o for o in ops if o.id not in folded], can_lower)
    for o in views_in:
        p.roles[o.outputs[0].id] = "view"
    for o in views_out:
        p.roles[o.outputs[0].id] = "written" if o is views_out[-1] or o.outputs[0].id in graph.output_ports \
            else "view"
    p.views_in, p.views_out = views_in, views_out
    return p
# ==== end of the views block =================================================================


def _anchor_plan(graph, ops, anchor, roles, produced) -> FusionPlan:
    ids = {o.id for o in ops}
    out0 = anchor.outputs[0].id
    after = {out0}
    epi = set()
    for o in ops:   # ops are in topological order
        if o.id != anchor.id and any(t.id in after for t in o.inputs):
            epi.add(o.id)
            after.update(t.id for t in o.outputs)
    upstream = set()
    frontier = [t.id for t in anchor.inputs if t.id in produced]
    while frontier:
        tid = frontier.pop()
        o = produced[tid]
        if o.id in upstream:
            continue
        upstream.add(o.id)
        frontier.extend(t.id for t in o.inputs if t.id in produced)
    if upstream & epi:
        raise Illegal("a value computed after the anchor flows back into it")
    for o in ops:
        if o.id in upstream:
            for t in o.outputs:
                if roles[t.id] == "written":
                    raise Illegal(f"prologue tensor {t.id} leaves the partition "
                                  "(it is computed inside the anchor's loads)")
    others = {t.id for t in anchor.outputs[1:]}
    for o in ops:
        if o.id in epi and any(t.id in others for t in o.inputs):
            raise Illegal("the epilogue reads an anchor output other than output 0")
    shape0 = tuple(anchor.outputs[0].shape)
    for o in ops:
        if o.id in epi:
            for t in o.outputs:
                if roles[t.id] == "written" and tuple(t.shape) != shape0:
                    raise Illegal(f"epilogue tensor {t.id} has shape {list(t.shape)}, "
                                  f"not the anchor's {list(shape0)}")
    side = ids - upstream - epi - {anchor.id}
    for o in ops:
        if o.id in side:
            for t in o.outputs:
                if roles[t.id] == "written":
                    raise Illegal(f"tensor {t.id} of a side branch leaves the partition")
    _check_profit(graph, anchor, produced, upstream)
    return FusionPlan("anchor", [anchor.id], roles, upstream, epi)


def _check_profit(graph, anchor, produced, upstream) -> None:
    """A prologue read ``p`` times by the anchor (``OpSchema.input_passes(op, port)``
    where an anchor declares it, as BatchNormTrainingBackward does; else once)
    re-reads its inputs ``p`` times: fuse only if that moves no more bytes than
    writing the intermediate once and reading it ``p`` times."""
    passes = getattr(anchor.schema, "input_passes", None)
    for port, t in enumerate(anchor.inputs):
        if t.id not in produced:
            continue
        p = passes(anchor, port) if passes else 1
        if p <= 1:
            continue
        leaves = _leaf_inputs(t.id, produced)
        fused = p * sum(_nbytes(graph.tensors[x]) for x in leaves)
        apart = sum(_nbytes(graph.tensors[x]) for x in leaves) + (1 + p) * _nbytes(t)
        if fused > apart:
            raise Illegal(f"the anchor reads input {port} {p} times: its prologue would re-read "
                          f"{fused} bytes against {apart} apart")


def _leaf_inputs(tid, produced) -> set:
    out, stack, seen = set(), [tid], set()
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        o = produced.get(x)
        if o is None:
            out.add(x)
        else:
            stack.extend(t.id for t in o.inputs)
    return out


def _nbytes(t) -> int:
    n = 1
    for d in t.shape:
        n *= max(d, 1)
    return n * t.dtype.np.itemsize


def convex(graph, ids: set) -> bool:
    """No path from an op of ``ids`` through an op outside back into ``ids``."""
    topo = graph._cached("topo_pos", lambda: {o.id: i for i, o in enumerate(graph.topo_ops())})
    last = max(topo[i] for i in ids)
    stack = [c for i in ids for t in graph.ops[i].outputs for c, _ in graph.consumers.get(t.id, [])
             if c not in ids]
    seen = set()
    while stack:
        c = stack.pop()
        if c in seen or topo[c] > last:
            continue
        seen.add(c)
        for t in graph.ops[c].outputs:
            for d, _ in graph.consumers.get(t.id, []):
                if d in ids:
                    return False
                stack.append(d)
    return True


def accept(graph, can_lower, live=None, constant=(), rejected=None):
    """The engine's ``accept``: a match is taken when its ops are live, not
    folded constants, and legal together (``can_lower`` as in :func:`plan`); the
    plan is kept on the match, and why a match was refused appended to
    ``rejected`` (a list) if given."""
    def judge(m) -> bool:
        if any((live is not None and o.id not in live) or o.id in constant for o in m.ops):
            return False
        try:
            m.plan = plan(graph, m.ops, can_lower)
        except Illegal as e:
            if rejected is not None:
                rejected.append((m, str(e)))
            return False
        return True
    return judge


__all__ = ["FusionPlan", "Illegal", "plan", "convex", "accept"]
