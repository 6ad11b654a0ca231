"""Fusion legality: the one place that decides whether a set of ops may become
one fused partition, and what its kernel does with each tensor.  Code
generation follows the plan and never refuses one accepted here.

A fused partition lowers to one kernel of one of six shapes; a pattern
declares which (``Pattern.kernel``), and a match whose ops make another is
refused:

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
  scores in a tile (graphc/codegen/attention.py); planned from the roles the
  pattern bound (passes/attention_plan.py).
* ``views``: reshapes and transposes only: a view of the input when the strides
  allow, else copies.
* ``conv_depthwise``: a 1x1 Convolution -> post-ops -> depthwise Convolution ->
  post-ops, the first one's dst kept in a tile per block of rows
  (graphc/codegen/conv_depthwise.py); planned from the roles the pattern bound
  (passes/conv_depthwise_plan.py).

Tensor roles (:class:`FusionPlan.roles`): ``register`` (computed and consumed
inside the kernel, never stored), ``written`` (leaves the partition: a graph
output or read by an op outside), ``scratch`` (materialised between stages),
``view`` (a folded view's dst: a buffer seen with other strides).

A set of ops is legal when every op lowers, the set is convex (no path leaves
it and comes back, else the partitions could not be ordered), no prologue
value must be written (it is computed inside the anchor's loads, maybe in
several passes), the anchor's other outputs do not feed its epilogue and are
read only from their buffers, written epilogue values have the anchor's output
shape, and fusing moves no more bytes than not fusing (a prologue re-read by
an anchor making several passes over its input may cost more than its
intermediate tensor: then it stays apart).  What a flat elementwise loop, a
per-group scale and a folded view can do is checked by passes/kernel_rules.py.

Indexed ops (per-channel Quantize/Dequantize, ``ops.common.is_indexed``) are
not pointwise, but are computed in registers like pointwise ops where the
kernel knows the multi-index (see ``_indexed_in_registers``); elsewhere they
are anchors.

A plan lowers one op at a time (through scratch buffers) only when it says so
(``FusionPlan.one_at_a_time``: a chain of views that are no views of their
input's buffer, copied one after another); the pass log shows it.
"""
from __future__ import annotations

from ..ops.common import is_indexed, is_pointwise
from .attention_plan import attention_plan
from .conv_depthwise_plan import conv_depthwise_plan
from .catalog.pieces import one_frame
from .kernel_plan import FusionPlan, Illegal
from .kernel_rules import check_flat_loop, check_grouped_params, check_views_fold, fold_failure
from .pattern import DERIVED

#: anchors whose lowering loads every input through ``load_nd`` at its full
#: multi-index (the GEMM packing loops of MatMul and the convolutions): an
#: indexed op (per-channel Dequantize) feeding one is computed while packing
INDEXED_LOADS = frozenset({"MatMul", "Convolution", "ConvTranspose"})


def plan(graph, ops, can_lower, kernel=DERIVED, roles=None) -> FusionPlan:
    """The kernel plan of ``ops`` fused, or raise :class:`Illegal`.
    ``can_lower(op)`` says whether this build has a kernel for an op (code
    generation's answer, handed down by the compile step).  ``kernel``: the
    kernel shapes the pattern declares (``Pattern.kernel``); ``roles``: the ops
    it bound to its labelled nodes (``Match.roles``), which the attention plan
    starts from.  Without a pattern, the plan is whichever shape the ops make
    (never attention)."""
    ids = {o.id for o in ops}
    for o in ops:
        if o.kind == "End" or o.schema.family == "collective":
            raise Illegal(f"op {o.id} ({o.kind}) is not computation")
        if not can_lower(o):
            raise Illegal(f"op {o.id} ({o.kind}) has no kernel in this build")
    if not convex(graph, ids):
        raise Illegal("a path leaves the ops and comes back")
    produced = {t.id: o for o in ops for t in o.outputs}
    outs = graph.output_port_set
    leaving = {tid for tid in produced
               if tid in outs or not graph.consumers.get(tid)
               or any(c not in ids for c, _ in graph.consumers.get(tid, []))}
    if "attention" in kernel:
        return attention_plan(graph, ops, roles or {}, produced, leaving)
    if "conv_depthwise" in kernel:
        return conv_depthwise_plan(graph, ops, roles or {}, produced, leaving)
    p = _derived_plan(graph, ops, can_lower, produced, leaving)
    if p.shape not in kernel:
        raise Illegal(f"the ops make {'an' if p.shape[0] in 'ae' else 'a'} {p.shape} kernel, not the "
                      f"{' or '.join(kernel)} kernel the pattern declares")
    return p


def _derived_plan(graph, ops, can_lower, produced, leaving) -> FusionPlan:
    """The plan of the shape the ops make: views, eltwise, anchor or staged."""
    if _view_chain(ops, leaving):
        return _view_chain_plan(graph, ops)
    views_in, views_out = _folded_views(graph, ops, produced, leaving)
    if views_in or views_out:
        return _with_views(graph, ops, views_in, views_out, can_lower)
    core = [o for o in ops if not is_pointwise(o) and not is_indexed(o)]
    kept = _indexed_in_registers(graph, ops, core, leaving)
    anchors = [o for o in ops if not is_pointwise(o) and o.id not in kept]
    roles = {tid: ("written" if tid in leaving else "register") for tid in produced}
    check_grouped_params(ops, produced, {o.id for o in ops if is_pointwise(o) or o.id in kept})
    if not anchors:
        frame = {tuple(graph.tensors[t].shape) for t in leaving}
        if len(frame) != 1:
            raise Illegal(f"pointwise outputs of different shapes {sorted(frame)}")
        check_flat_loop(ops, [t for o in ops for t in o.outputs if roles[t.id] == "written"], produced, set())
        return FusionPlan("eltwise", [], roles)
    if len(anchors) == 1:
        return _anchor_plan(graph, ops, anchors[0], roles, produced)
    for a in anchors:   # what one stage computes and a later one reads goes through memory
        for t in a.outputs:
            if roles[t.id] == "register":
                roles[t.id] = "scratch"
    stages = {a.id for a in anchors}
    for o in ops:
        if o.id not in stages:   # a pointwise value a staged kernel stores: a flat loop of its own
            check_flat_loop(ops, [t for t in o.outputs if roles[t.id] == "written"], produced, stages)
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
        if src in produced and src not in seen and src not in graph.output_port_set \
                and [c for c, _ in readers] == [o.id]:
            views_out.insert(0, o)
            through.add(src)
    return views_in, views_out


def _view_chain(ops, leaving) -> bool:
    """The ops are views one after another, only the last one's dst leaving: at
    compile, the partition's output is a view of its input when the strides
    allow (graphc/compiler/build.py), else the views are copies one after another."""
    from ..views import is_view_chain
    return is_view_chain(ops) and all(o.outputs[0].id not in leaving for o in ops[:-1])


def _view_chain_plan(graph, ops) -> FusionPlan:
    """A chain of views: at compile, a view of the input when the strides allow
    (graphc/compiler/build.py), else one copy (the last op, reading its input through
    the views before it), or, when those are no views of the input's buffer
    either, copies one op at a time (the plan says so: the pass log shows it)."""
    p = FusionPlan("views", [], {o.outputs[0].id: "view" for o in ops[:-1]} | {ops[-1].outputs[0].id: "written"},
                   views_in=list(ops))
    why = fold_failure(graph, ops[:-1], [])
    if why:
        p.one_at_a_time = why
    return p


def _with_views(graph, ops, views_in, views_out, can_lower) -> FusionPlan:
    """The plan of the ops left once the views fold away, which carries the views
    (Illegal when a view is none of the buffer it would be read or stored through)."""
    check_views_fold(graph, views_in, views_out)
    folded = {o.id for o in views_in + views_out}
    p = plan(graph, [o for o in ops if o.id not in folded], can_lower)
    for o in views_in:
        p.roles[o.outputs[0].id] = "view"
    for o in views_out:
        p.roles[o.outputs[0].id] = "written" if o is views_out[-1] or o.outputs[0].id in graph.output_port_set \
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
        kept = [t.id for t in o.inputs if t.id in others and roles[t.id] == "register"]
        if kept:   # only output 0 is bound where the anchor stores; the others have no buffer
            raise Illegal(f"op {o.id} ({o.kind}) reads anchor output {kept[0]}, which is neither output 0 "
                          "nor written")
    shape0 = tuple(anchor.outputs[0].shape)
    for o in ops:
        if o.id in epi:
            for t in o.outputs:
                if roles[t.id] == "written" and not one_frame(t.shape, shape0):
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


def _weight_prologue(graph, ops, folded) -> bool:
    """The constant ops of a match (``folded``: computable from constant tensors,
    which the constant tensor cache would compute once) join it only as the
    prologue of a GEMM or convolution (oneDNN's weight Quantize -> Dequantize ->
    TypeCast on constant weights: the kernel converts them while packing): every
    reader of their values inside the match is another of them or an op of
    INDEXED_LOADS, and the match computes something else too."""
    ids = {o.id for o in ops}
    fold = {o.id for o in folded}
    if fold == ids:
        return False
    for o in folded:
        for t in o.outputs:
            for c, _ in graph.consumers.get(t.id, []):
                if c in ids and c not in fold and graph.ops[c].kind not in INDEXED_LOADS:
                    return False
    return True


def accept(graph, can_lower, live=None, constant=(), rejected=None):
    """The engine's ``accept``: a match is taken when its ops are live, not
    folded constants (but for a GEMM's or convolution's constant weights:
    :func:`_weight_prologue`), and legal together (``can_lower`` as in :func:`plan`); the
    plan is kept on the match, and why a match was refused appended to
    ``rejected`` (a list) if given."""
    def judge(m) -> bool:
        if any(live is not None and o.id not in live for o in m.ops):
            return False
        folded = [o for o in m.ops if o.id in constant]
        if folded and not _weight_prologue(graph, m.ops, folded):
            return False
        try:
            m.plan = plan(graph, m.ops, can_lower, m.pattern.kernel, m.roles)
        except Illegal as e:
            if rejected is not None:
                rejected.append((m, str(e)))
            return False
        return True
    return judge


__all__ = ["FusionPlan", "Illegal", "plan", "convex", "accept"]
