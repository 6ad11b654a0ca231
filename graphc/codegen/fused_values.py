"""Fused values: the expressions of a fused partition's tensors, computed in
registers where they are read, and the references through which a kernel reads
and writes them.

* :class:`Values` -- a tensor's expression at a multi-index of a frame shape:
  a kernel argument loaded there, or its producer (a pointwise or indexed op)
  computed from its inputs' expressions (each as its dtype holds it).
* :class:`PrologueRef` -- an anchor's input computed from the partition's
  pointwise producers: ``load_nd`` builds their expression at the index.
* :class:`EpilogueRef` -- an anchor's output 0 consumed by pointwise ops:
  ``store_nd`` binds the value once and stores every partition output computed
  from it at that index.
* :class:`NotFusable` -- a rule read or wrote a fused tensor other than through
  ``load_nd`` / ``store_nd``, or a value was read where the kernel cannot compute
  it: a plan legality should have refused.

The fused lowering (graphc/codegen/fusion.py) and the attention kernels
(graphc/codegen/attention.py) build on these; neither imports the other's
kernel code for them.
"""
from __future__ import annotations

from contextlib import contextmanager

from . import ir, rules
from .kernel import as_stored, is_narrow_float
from .loops import aligned
from ..ops.common import is_indexed, is_pointwise as is_eltwise


class Values:
    """Expressions of the partition's tensors at an index of a frame shape."""

    def __init__(self, ops, refs, kb=None, anchors=()):
        self.producer = {t.id: o for o in ops for t in o.outputs}
        self.refs = refs
        self.kb = kb                 # for the constants of indexed ops
        self.anchors = set(anchors)  # op ids the plan lowers as anchors
        self.bound: dict = {}        # tensor id -> expression valid at the current store index

    def computed(self, op) -> bool:
        """Is ``op``'s value computed where it is read: pointwise, or indexed
        (per-channel quantization) and not one of the plan's anchors?"""
        return op.id not in self.anchors and (is_eltwise(op) or is_indexed(op))

    @contextmanager
    def binding(self, bound: dict):
        """Within the block, the tensors of ``bound`` ({tensor id: expression}) have
        those expressions (valid at the current index); none after it."""
        self.bound = bound
        try:
            yield self
        finally:
            self.bound = {}

    def at(self, tid, lt, ivars, shape) -> ir.Expr:
        if tid in self.bound:
            return self.bound[tid]
        op = self.producer.get(tid)
        if op is None or not self.computed(op):
            if tid not in self.refs or isinstance(self.refs[tid], _Virtual):
                raise NotFusable(f"tensor {tid} is neither computed in registers nor a kernel argument")
            return self.refs[tid].load_nd(aligned(ivars, shape, lt.shape))
        indexed = not is_eltwise(op)
        if indexed and (len(ivars) != len(shape) or len(shape) < len(lt.shape)):
            raise NotFusable(f"op {op.id} ({op.kind}) read where no multi-index is known")
        args = []
        for port, t in enumerate(op.inputs):
            dims = op.schema.input_dims(op, port)
            if dims is None:   # numpy broadcasting: the same frame
                args.append(self.at(t.id, t, ivars, shape))
            elif len(shape) < len(lt.shape):   # an elementwise loop bound every leaf: no index
                args.append(self.at(t.id, t, [], ()))
            else:              # the input runs along some of this op's dims: its own frame
                own = aligned(ivars, shape, lt.shape)
                args.append(self.at(t.id, t, [own[d] for d in dims], tuple(t.shape)))
        if indexed:
            value = rules.source_at(op, self.kb, aligned(ivars, shape, lt.shape), *args)
        else:
            value = rules.source(op, *args)
        if is_narrow_float(lt.dtype):
            # a bf16/f16/f8 tensor holds its values rounded, also when it stays in
            # registers: its consumers (a TypeCast to f32, an f32-output op) see them so
            value = as_stored(value, lt.dtype)
        return value


class NotFusable(Exception):
    """Code generation cannot lower a fusion plan: a rule read or wrote a fused
    tensor other than through load_nd / store_nd, or a value is read where the
    kernel cannot compute it.  Legality (passes/legality.py) refuses such
    plans, so this is a bug; graphc/lowering.py reports it as an InternalError."""


class _Virtual:
    """A tensor that is not a kernel argument: only ``load_nd`` / ``store_nd`` exist."""

    def __init__(self, lt):
        self.lt = lt

    dtype = property(lambda self: self.lt.dtype)
    shape = property(lambda self: self.lt.shape)
    strides = property(lambda self: self.lt.strides)

    def _no(self, *a, **k):
        raise NotFusable(f"a rule used fused tensor {self.lt.id} other than through load_nd / store_nd")

    name = property(_no)
    buf = property(_no)
    at = load = store = store_int = offset = _no

    def load_nd(self, ivars):
        raise NotFusable(f"a rule loaded fused tensor {self.lt.id}, which it can only store")

    def store_nd(self, ivars, value):
        raise NotFusable(f"a rule stored fused tensor {self.lt.id}, which it can only load")


class PrologueRef(_Virtual):
    """An anchor input computed from the partition's elementwise producers."""

    def __init__(self, lt, values: Values):
        super().__init__(lt)
        self.values = values

    def load_nd(self, ivars) -> ir.Expr:
        return self.values.at(self.lt.id, self.lt, list(ivars), self.lt.shape)


class EpilogueRef(_Virtual):
    """The anchor's output 0: ``store_nd`` stores every partition output computed
    from it at that index (and the value itself when it leaves the partition)."""

    def __init__(self, lt, values: Values, stored: list, kb):
        super().__init__(lt)
        self.values, self.stored, self.kb = values, stored, kb

    def store_nd(self, ivars, value) -> list:
        ivars = list(ivars)
        stmts = []
        if is_narrow_float(self.lt.dtype):
            value = as_stored(value, self.lt.dtype)   # what its consumers read, as for any narrow tensor
        if not value.is_leaf:
            # the anchor's value, once: its consumers read the name
            v = ir.var(self.kb.fresh("y"), value.dt)
            stmts.append(ir.Let(v, value))
            value = v
        with self.values.binding({self.lt.id: value}):
            for t in self.stored:
                val = self.values.at(t.id, t, ivars, self.lt.shape)
                stmts.append(self.values.refs[t.id].store_nd(aligned(ivars, self.lt.shape, t.shape), val))
        return stmts


__all__ = ["Values", "NotFusable", "PrologueRef", "EpilogueRef"]
