"""Lowering fused partitions to one kernel.

* Elementwise chains: one loop (graphc.codegen.elementwise) evaluating the whole
  chain per element; every tensor is read once.
* Anchor patterns: one non-elementwise op (norm, softmax, reduction, SwiGlu,
  BatchNormTrainingBackward, ...) whose input is produced by an elementwise
  prologue and/or whose output 0 feeds an elementwise epilogue.  The anchor
  lowers as usual, but the ArrayRef it reads that input through computes the
  prologue in ``load_nd`` and the one it writes output 0 through applies the
  epilogue in ``store_nd``: no intermediate tensor is materialised.

``lower_fused`` returns False when a partition is not such a shape; the ops then
lower one after another into the same kernel through scratch buffers.
"""
from __future__ import annotations

from graphc.codegen.elementwise import emit_elementwise
from graphc.codegen.kernel import ArrayRef
from graphc.ops.common import Elementwise


def _is_eltwise(op) -> bool:
    return isinstance(op.schema, Elementwise) and op.schema.supports_lowering(op)


def _right_aligned(ivars, shape, ref_shape):
    """Index variables of a chain position for an operand of ``ref_shape``
    broadcast into ``shape`` (None for broadcast dims)."""
    lead = len(shape) - len(ref_shape)
    return [None if d == 1 else ivars[lead + k] for k, d in enumerate(ref_shape)]


class _ChainExpr:
    """Evaluates elementwise ops in order, as source lines with fresh temporaries."""

    def __init__(self, kb, ops, refs):
        self.kb, self.ops, self.refs = kb, ops, refs

    def statements(self, known: dict, load) -> tuple[list[str], str]:
        """``known``: tensor id -> value text; ``load(ref)`` gives a value text for an
        external input.  Returns (statements, final value text)."""
        stmts = []
        val = None
        for op in self.ops:
            args = []
            for t in op.inputs:
                if t.id in known:
                    args.append(known[t.id])
                else:
                    v = self.kb.fresh("e")
                    stmts.append(f"{v} = {load(self.refs[t.id])}")
                    args.append(v)
            v = self.kb.fresh("e")
            stmts.append(f"{v} = {op.schema.source(op, *args)}")
            known[op.outputs[0].id] = v
            val = v
        return stmts, val


#: name of the virtual refs: an anchor that indexes a ref by its name instead of
#: going through load_nd / store_nd leaves it in the source, and fusion backs off
SENTINEL = "__graphc_fused_ref__"


class EpilogueRef(ArrayRef):
    """Stands for an anchor's output: ``store_nd`` runs the post-op chain and stores
    into the partition output."""

    def __init__(self, lt, chain: _ChainExpr, final: ArrayRef):
        super().__init__(SENTINEL, lt)
        self.chain, self.final = chain, final

    def store_nd(self, ivars, value: str) -> str:
        shape = self.lt.shape
        stmts, out = self.chain.statements(
            {self.lt.id: f"({value})"},
            lambda r: r.load_nd(_right_aligned(ivars, shape, r.shape)))
        return "; ".join(stmts + [self.final.store_nd(ivars, out)])

    def store(self, idx, value):
        raise _NotFusable

    def load(self, idx):
        raise _NotFusable


class PrologueRef(ArrayRef):
    """Stands for an anchor's input: ``load_nd`` computes it from the prologue chain."""

    def __init__(self, lt, ops, refs):
        super().__init__(SENTINEL, lt)
        self.ops, self.refs = ops, refs

    def load_nd(self, ivars) -> str:
        shape = self.lt.shape
        known = {}
        for op in self.ops:
            args = [known[t.id] if t.id in known else
                    self.refs[t.id].load_nd(_right_aligned(ivars, shape, self.refs[t.id].shape))
                    for t in op.inputs]
            known[op.outputs[0].id] = f"({op.schema.source(op, *args)})"
        return known[self.lt.id]

    def load(self, idx):
        raise _NotFusable

    def store(self, idx, value):
        raise _NotFusable


class _NotFusable(Exception):
    pass


def lower_fused(kb, ops, refs) -> bool:
    if len(ops) < 2:
        return False
    if all(_is_eltwise(o) for o in ops):
        return _lower_chain(kb, ops, refs)
    anchors = [o for o in ops if not _is_eltwise(o)]
    if len(anchors) != 1 or not all(_is_eltwise(o) for o in ops if o is not anchors[0]):
        return False
    anchor = anchors[0]
    i = ops.index(anchor)
    pro, epi = ops[:i], ops[i + 1:]
    local = dict(refs)
    if pro:
        fed = pro[-1].outputs[0]
        local[fed.id] = PrologueRef(fed, pro, refs)
    if epi:
        out0 = anchor.outputs[0]
        local[out0.id] = EpilogueRef(out0, _ChainExpr(kb, epi, refs), refs[epi[-1].outputs[0].id])
    for t in anchor.outputs:
        if t.id not in local:
            return False
    saved = (list(kb.lines), dict(kb._names), kb.parallel)
    try:
        anchor.schema.lower(anchor, kb, [local[t.id] for t in anchor.inputs], [local[t.id] for t in anchor.outputs])
    except _NotFusable:
        kb.lines, kb._names, kb.parallel = saved
        return False
    if any(SENTINEL in ln for ln in kb.lines):
        kb.lines, kb._names, kb.parallel = saved
        return False
    kb.line("return -1")
    return True


def _lower_chain(kb, ops, refs) -> bool:
    last = ops[-1].outputs[0]
    produced = {t.id for o in ops for t in o.outputs}
    ext = []
    for o in ops:
        for t in o.inputs:
            if t.id not in produced and t.id not in [r.lt.id for r in ext]:
                ext.append(refs[t.id])
    chain = _ChainExpr(kb, ops, refs)

    def compute(kb_, vals):
        known = {r.lt.id: v for r, v in zip(ext, vals)}
        stmts, out = chain.statements(known, lambda r: (_ for _ in ()).throw(_NotFusable()))
        for s in stmts:
            kb_.line(s)
        return [out]

    emit_elementwise(kb, [refs[last.id]], ext, compute)
    kb.line("return -1")
    return True
