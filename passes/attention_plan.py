"""Legality of the ``attention`` kernel shape (issue 14: SDPA forward and
training, MHA/MQA/GQA): one flash-style kernel (graphc/codegen/attention.py).

The patterns declaring it (passes/catalog/attention.py: ``sdpa``, ``sdpa_backward``) bind
every op the kernel gives a part to a role, and the plan starts from those roles
(``roles``: label -> [ops], the match's ``Match.roles``):

* forward: ``qk`` (Q@K^T MatMul), ``softmax``, [``dropout``], ``pv`` (@V MatMul),
  ``reorder`` (reshapes/transposes of the kernel's inputs and of computed Q/K/V);
  scale, masks and the probabilities' Quantize -> Dequantize are the ops
  between them;
* backward: ``qk``, ``p`` (Exp of the scores minus the stats), ``dv``, ``dp``,
  ``dq``, ``dk`` (MatMuls), ``rowsum`` (ReduceSum(O * dO)), [``dv heads``,
  ``dk heads``] (GQA's ReduceSums over the query heads), ``reorder``.

What the kernel cannot do is refused here with a reason (:class:`Illegal`),
so that code generation never refuses a plan accepted.
"""
from __future__ import annotations

from ..ops.common import is_indexed, is_pointwise
from .kernel_plan import FusionPlan, Illegal, bound_once
from .kernel_rules import check_grouped_params

ATTENTION_REORDERS = ("StaticReshape", "StaticTranspose")


def attention_plan(graph, ops, roles, produced, leaving) -> FusionPlan:
    """The ``attention`` plan of a match binding the roles of the module doc."""
    if "softmax" in roles:
        return _forward_plan(ops, roles, produced, leaving)
    return _backward_plan(ops, roles, produced, leaving)


def _one(roles, label):
    return bound_once(roles, label, "attention")


def _nonempty(sshape) -> None:
    """The kernel's blocks need scores: empty ones (a dim of 0: no query, key or
    head) leave the ops to kernels of their own, which handle empty tensors."""
    if 0 in sshape:
        raise Illegal(f"the scores {list(sshape)} are empty")


def _broadcasts_into(lead, batch) -> bool:
    """Batch dims ``lead`` broadcast (numpy rules) into ``batch``."""
    return len(lead) <= len(batch) and all(d in (1, b) for d, b in zip(reversed(lead), reversed(batch)))


# -- forward -----------------------------------------------------------------------------------
def _forward_plan(ops, roles, produced, leaving) -> FusionPlan:
    """MatMul (Q@K^T) -> pointwise ops and GenIndex (scale, masks) -> SoftMax over the
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
    if "pv rows" in roles:
        return _rows_plan(ops, roles, produced, leaving)
    if roles.get("score view"):
        raise Illegal("the scores are split by heads before the SoftMax, which only the rows form takes "
                      "(O = V @ P over the queries, JAX MQA)")
    mm1, sm, mm2 = _one(roles, "qk"), _one(roles, "softmax"), _one(roles, "pv")
    drop = list(roles.get("dropout", ()))
    if len(drop) > 1 or drop and (drop[0].inputs[0].id != sm.outputs[0].id or len(drop[0].outputs) > 1):
        raise Illegal("a Dropout in attention must take the SoftMax's dst and have no mask output")
    probs = (drop[0] if drop else sm).outputs[0].id
    from_probs = _downstream_ops(ops, {probs})
    p_views = _transposed_probs(roles, probs, mm2)
    pin = 1 if p_views else 0   # the second MatMul's input the probabilities enter
    if mm2.id not in from_probs or not (mm2.inputs[pin].id == probs or produced.get(mm2.inputs[pin].id) is not None
                                        and produced[mm2.inputs[pin].id].id in from_probs):
        raise Illegal("the SoftMax's dst (after a Dropout) is not the second MatMul's src")
    for mm in (mm1, mm2):   # (fpmath_mode's rounding of f32 inputs: the kernel rounds as it packs)
        if len(mm.inputs) > 2 or any(t.ndim < 2 for t in mm.inputs):
            raise Illegal(f"attention MatMul {mm.id} has a bias or a 1-D operand")
    if mm2.attr("transpose_b" if pin else "transpose_a"):
        raise Illegal("the probabilities are transposed into the second MatMul")
    score = mm1.outputs[0]
    sshape = tuple(score.shape)
    if any(d < 0 for d in sshape) or sm.schema.axis(sm) != len(sshape) - 1:
        raise Illegal("the SoftMax is not over the last axis of known scores")
    _nonempty(sshape)
    if any(d.id in produced for o in drop for d in o.inputs[1:]):
        raise Illegal("the Dropout's seed, offset or probability is computed in the partition")
    if tuple(mm2.outputs[0].shape[:-2]) != sshape[:-2]:
        raise Illegal("V's batch dims broadcast the output beyond the scores'")
    reorders = {o.id for o in roles.get("reorder", ())}
    after = _downstream_ops(ops, {mm2.outputs[0].id}) - {mm2.id}
    _forward_middle(ops, (mm1, sm, mm2), drop, reorders | p_views, after, produced, from_probs, pin)
    _input_views(ops, produced, reorders)
    epi = _output_chain(ops, mm2, after)
    roles_of = _forward_roles(produced, leaving, epi[-1] if epi else mm2, sm)
    return FusionPlan("attention", [mm1.id, sm.id, mm2.id], roles_of, reorders, {o.id for o in epi})


def _output_chain(ops, mm2, after) -> list:
    """The ops ``after`` the second MatMul, a chain of reorders and pointwise ops of one
    input (TypeCast, Quantize) its result is stored through; Illegal otherwise."""
    epi = [o for o in ops if o.id in after]
    for prev, o in zip([mm2] + epi, epi):
        if not (o.kind in ATTENTION_REORDERS or is_pointwise(o) and len(o.inputs) == 1) or \
                o.inputs[0].id != prev.outputs[0].id:
            raise Illegal(f"op {o.id} ({o.kind}) after the second MatMul is not a chain of reorders and "
                          "pointwise ops of one input (TypeCast, Quantize)")
    _output_strides((epi[-1] if epi else mm2).outputs[0], epi)
    return epi


def _forward_roles(produced, leaving, last, sm) -> dict:
    """{tensor id: role}: the output (``last``'s) and the SoftMax's stats written, the rest in registers."""
    roles_of = {}
    written = {last.outputs[0].id} | {t.id for t in sm.outputs[1:]}   # training forward: stats, one per row
    for tid in produced:
        roles_of[tid] = "written" if tid in written else "register"
        if tid in leaving and roles_of[tid] != "written":
            raise Illegal(f"tensor {tid} inside the attention leaves the partition")
    return roles_of


#: the longest rows the ``attention_rows`` kernel takes (its tiles hold whole rows of scores)
MAX_ROW = 1 << 16


def _rows_plan(ops, roles, produced, leaving) -> FusionPlan:
    """JAX MQA (oneDNN's float_mqa_jax_fusion): MatMul Q@K [.., M, H*N] -> [StaticReshape
    splitting the columns by heads -> StaticTranspose: the scores [.., H, M, N]] -> score
    ops -> SoftMax (last axis) -> [the inverse views back to [.., M, H*N]] -> MatMul V @ P,
    contracted over the probabilities' rows (the queries) -> reorders and pointwise ops of
    one input.  The ``attention_rows`` kernel (graphc/codegen/attention_rows.py): per
    (batch, head), blocks of whole rows of scores, each row's softmax complete in its
    block, the blocks' V @ P summed into the output.  Q, K and V are read in place (views
    of the partition's inputs)."""
    mm1, sm, mm2 = _one(roles, "qk"), _one(roles, "softmax"), _one(roles, "pv rows")
    sviews, pviews = list(roles.get("score view", ())), list(roles.get("p rows", ()))
    if len(sviews) != len(pviews):
        raise Illegal("the scores are split by heads and the probabilities not merged back, or the reverse")
    if roles.get("dropout") or len(sm.outputs) > 1:
        raise Illegal("the rows form takes no Dropout and exports no SoftMax stats")
    for mm in (mm1, mm2):
        if len(mm.inputs) > 2 or any(t.ndim < 2 for t in mm.inputs):
            raise Illegal(f"attention MatMul {mm.id} has a bias or a 1-D operand")
    score = (sviews[-1] if sviews else mm1).outputs[0]
    sshape = tuple(score.shape)
    if any(d < 0 for d in sshape) or sm.schema.axis(sm) != len(sshape) - 1:
        raise Illegal("the SoftMax is not over the last axis of known scores")
    _nonempty(sshape)
    if sshape[-1] > MAX_ROW:
        raise Illegal(f"rows of {sshape[-1]} scores are longer than the rows kernel's tiles ({MAX_ROW})")
    p_in = (pviews[-1] if pviews else sm).outputs[0]
    if mm2.inputs[1].id != p_in.id or mm2.attr("transpose_b"):
        raise Illegal("the probabilities do not enter the second MatMul as its input 1, untransposed")
    batch = tuple(mm1.outputs[0].shape[:-2])
    if tuple(p_in.shape) != tuple(mm1.outputs[0].shape) or tuple(mm2.outputs[0].shape[:-2]) != batch or \
            not all(_broadcasts_into(tuple(t.shape[:-2]), batch) for t in (mm1.inputs[0], mm1.inputs[1], mm2.inputs[0])):
        raise Illegal("the probabilities are not merged back to the scores' shape, or the MatMuls' batch dims differ")
    reorders = {o.id for o in roles.get("reorder", ())}
    if _upstream_ops(produced, [mm1.inputs[0], mm1.inputs[1], mm2.inputs[0]]) - reorders:
        raise Illegal("the rows form reads Q, K and V in place: none is computed in the partition")
    views = {o.id for o in sviews + pviews}
    after = _downstream_ops(ops, {mm2.outputs[0].id}) - {mm2.id}
    from_probs = _downstream_ops(ops, {sm.outputs[0].id})
    _forward_middle(ops, (mm1, sm, mm2), [], reorders | views, after, produced, from_probs, 1, score)
    _input_views(ops, produced, reorders)
    epi = _output_chain(ops, mm2, after)
    roles_of = _forward_roles(produced, leaving, epi[-1] if epi else mm2, sm)
    return FusionPlan("attention_rows", [mm1.id, sm.id, mm2.id], roles_of, reorders, {o.id for o in epi})


def _transposed_probs(roles, probs, mm2) -> set:
    """The ops transposing the probabilities into the second MatMul's input 1 (JAX's
    O^T = V^T @ P^T: a StaticTranspose of the last two axes of the SoftMax's dst, then
    Reorders), or none; Illegal if they are not such a chain."""
    ops = list(roles.get("p transpose", ()))
    if not ops:
        return set()
    t = probs
    for o in ops:
        if o.inputs[0].id != t or len(o.outputs) != 1 or (o.kind == "StaticTranspose") != (o is ops[0]):
            raise Illegal("the probabilities are not transposed into the second MatMul by one StaticTranspose "
                          "of the SoftMax's dst and Reorders")
        t = o.outputs[0].id
    if mm2.inputs[1].id != t:
        raise Illegal("the transposed probabilities are not the second MatMul's input 1")
    return {o.id for o in ops}


def _forward_middle(ops, anchors, drop, reorders, after, produced, from_probs, pin=0, score=None) -> None:
    """Every op other than the anchors, the Dropout, the input reorders (and the
    probabilities' transpose into input ``pin`` 1 of the second MatMul) and the
    chain after the second MatMul has a place the kernel computes it in: on the
    score tile (pointwise ops and GenIndex of the scores' shape), on the
    probabilities (pointwise ops of them), or while packing Q/K/V (pointwise or
    indexed ops of one output)."""
    mm1, sm, mm2 = anchors
    score = score or mm1.outputs[0]   # (the scores split by heads: the views' dst)
    sshape = tuple(score.shape)
    chain = _downstream_ops(ops, {score.id}) - {sm.id, mm2.id} - {o.id for o in drop} - reorders
    # the probabilities' chain (quantized SDPA: Quantize -> Dequantize) and the
    # operands' chains (compressed K/V, fp8 Q/K/V: [Dynamic]Dequantize -> [TypeCast] -> reorders)
    p_chain = from_probs & _upstream_ops(produced, [mm2.inputs[pin]]) - reorders
    operand = _upstream_ops(produced, [mm1.inputs[0], mm1.inputs[1], mm2.inputs[1 - pin]])
    if operand & (chain | {sm.id} | {o.id for o in drop}):
        raise Illegal("Q, K or V is computed from the scores")
    fed_by_probs = p_chain | {sm.id} | {d.id for d in drop}
    for o in ops:
        if o.id in (mm1.id, sm.id, mm2.id) or o.id in after or o in drop or o.id in reorders:
            continue
        if o.id in p_chain:
            if not is_pointwise(o) or any(tuple(t.shape) != sshape for t in o.outputs) or \
                    any(t.id in produced and produced[t.id].id not in fed_by_probs for t in o.inputs):
                raise Illegal(f"op {o.id} ({o.kind}) between the SoftMax and the second MatMul is not a "
                              "pointwise op of the probabilities")
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
    check_grouped_params(ops, produced, {o.id for o in ops if is_pointwise(o) or is_indexed(o)})


# -- backward ----------------------------------------------------------------------------------
def _backward_plan(ops, roles, produced, leaving) -> FusionPlan:
    """sdpa.md's backward graph (one flash-style backward kernel): S = Q@K^T ->
    pointwise ops (scale, mask, Subtract stats, Exp = P) ...; dV = f(P)^T @ dO,
    dP = dO @ V^T, dS from P, dP and ReduceSum(O * dO) (pointwise ops and Dropouts
    of the scores' shape), dQ = g(dS) @ K, dK = g(dS)^T @ Q.  anchors: [QK, dP, dV,
    dQ, dK MatMuls, ReduceSum]; written: the three gradients and pointwise values
    of the scores' shape that leave (dM).
    GQA/MQA (gqa.md's backward): K and V broadcast over the query heads of their group
    into the Q@K^T, dO@V^T and dS@K MatMuls, and dK, dV are ReduceSums of the dK and dV
    MatMuls over those batch axes (the same for both): anchors then end with them.
    Reorders of partition inputs (gqa.md's 4-D GQA: Q [N, H, S, D] reshaped to
    [N, G, H/G, S, D], ...) are read as views of their buffers (prologue), and
    reorders after dQ, dK, dV are stored through (epilogue)."""
    qk, dp, dv, dq, dk = (_one(roles, label) for label in ("qk", "dp", "dv", "dq", "dk"))
    rsum = _one(roles, "rowsum")
    reorders = {o.id for o in roles.get("reorder", ())}
    _input_views(ops, produced, reorders)
    computed = {tid: o for tid, o in produced.items() if o.id not in reorders}
    heads = {m.id: h for m, h in ((dv, roles.get("dv heads")), (dk, roles.get("dk heads"))) if h}
    heads = {mid: h[0] for mid, h in heads.items()}
    sshape = _backward_matmuls((qk, dp, dv, dq, dk), heads, computed)
    _nonempty(sshape)
    red = rsum.inputs[0]
    axes = [a % red.ndim for a in rsum.attr("axes")]
    if axes != [red.ndim - 1] or not rsum.attr("keep_dims") or red.id not in computed:
        raise Illegal("the ReduceSum is not over the last axis (kept) of a computed O * dO")
    anchors = {m.id for m in (qk, dp, dv, dq, dk)} | {rsum.id} | {h.id for h in heads.values()}
    epi, finals = _gradient_stores(ops, [(heads.get(m.id) or m).outputs[0] for m in (dq, dk, dv)], leaving)
    skip = anchors | {computed[red.id].id} | reorders | {o.id for o in epi}
    for o in ops:
        if o.id in skip:
            continue
        if o.kind == "Dropout":
            if len(o.outputs) > 1 or any(t.id in computed for t in o.inputs[1:]):
                raise Illegal("a Dropout in attention backward has a mask output or computed seeds")
        elif not (is_pointwise(o) or o.kind == "GenIndex") or any(tuple(t.shape) != sshape for t in o.outputs):
            raise Illegal(f"op {o.id} ({o.kind}) is not a pointwise op (or GenIndex) of the scores' shape")
    if not is_pointwise(computed[red.id]) or any(t.id in computed for t in computed[red.id].inputs):
        raise Illegal("O * dO is not one pointwise op of partition inputs")
    roles_of = {}
    for tid in produced:
        if tid in finals:
            roles_of[tid] = "written"
        elif tid in leaving:
            o = produced[tid]
            if o.id in skip or o.kind == "Dropout":
                raise Illegal(f"tensor {tid} inside the attention backward leaves the partition")
            roles_of[tid] = "written"
        else:
            roles_of[tid] = "register"
    return FusionPlan("attention", [qk.id, dp.id, dv.id, dq.id, dk.id, rsum.id] +
                      ([heads[dv.id].id, heads[dk.id].id] if heads else []), roles_of, reorders, {o.id for o in epi})


def _backward_matmuls(mms, heads, computed) -> tuple:
    """The five MatMuls (QK, dP, dV, dQ, dK) and dK/dV's head ReduceSums as the
    kernel computes them; the scores' shape."""
    from ..numerics import fpmath_down
    qk, dp, dv, dq, dk = mms
    for mm in mms:
        if len(mm.inputs) > 2 or any(t.ndim < 2 for t in mm.inputs) or fpmath_down(mm) is not None:
            raise Illegal(f"attention MatMul {mm.id} has a bias, a 1-D operand or rounds its inputs")
    if any(t.id in computed for m in (qk, dp) for t in m.inputs):
        raise Illegal("no Q@K^T and dO@V^T MatMuls of partition inputs")
    if dv.inputs[0].id not in computed or dq.inputs[0].id != dk.inputs[0].id:
        raise Illegal("the dV, dQ and dK MatMuls are not as sdpa.md's backward graph has them")
    sshape = tuple(qk.outputs[0].shape)
    batch = sshape[:-2]
    if dq.attr("transpose_a") or not dk.attr("transpose_a") or not dv.attr("transpose_a") or \
            dv.inputs[1].id != dp.inputs[0].id or any(d < 0 for d in sshape) or tuple(dp.outputs[0].shape) != sshape:
        raise Illegal("the gradient MatMuls do not transpose as sdpa.md's backward graph")
    for m in mms:
        if tuple(m.outputs[0].shape[:-2]) != batch or \
                any(not _broadcasts_into(tuple(t.shape[:-2]), batch) for t in m.inputs):
            raise Illegal(f"MatMul {m.id}'s batch dims are not the scores' (its inputs broadcast into them)")
    head_axes = {mid: sorted({a % len(sshape) for a in o.attr("axes")}) for mid, o in heads.items()}
    if heads and (len(heads) != 2 or head_axes[dk.id] != head_axes[dv.id] or
                  any(a >= len(batch) for a in head_axes[dk.id]) or any(len(o.inputs) > 1 for o in heads.values())):
        raise Illegal("dK and dV are not both ReduceSums over the same batch (head) axes")
    return sshape


def _gradient_stores(ops, grads_out, leaving) -> tuple[list, list]:
    """(the reorders after dQ, dK and dV, the tensor each gradient is written as)."""
    epi, finals = [], []
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
    return epi, finals


# -- views and walks ---------------------------------------------------------------------------
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


__all__ = ["attention_plan", "ATTENTION_REORDERS"]
