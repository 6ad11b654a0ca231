"""Lowering of the data movement ops (graphc/ops/shuffle.py).

Kernels copy through the tensors' ArrayRefs (load_nd widens, store_nd narrows
with RNE), looping in dst's memory order, so StaticTranspose and Concat can
anchor fusion; StaticSlice reads its window the same way; StaticReshape moves runs of elements by flat offsets.  Reorder
and TypeCast are elementwise (the identity expression): fused into a chain,
the value rounds once, where it is stored."""
from __future__ import annotations

import math

from ...ops.schema import norm_axis
from ..elementwise import collapse
from ..kernel import as_stored, worth_parallel
from ..loops import linear, memory_order_nest, unravel
from . import ElementwiseRule, Rule


class Concat(Rule):
    kinds = ("Concat",)

    def lower(self, op, kb, ins, outs, values):
        """Each src in turn, walked in dst's memory order, lands at its offset on axis."""
        dst = outs[0]
        axis = norm_axis(op, op.attr("axis"), len(dst.shape))
        start = 0
        for src in ins:
            with memory_order_nest(kb, src.shape, dst.strides, worth_parallel(src.lt.nelems)) as ivars:
                at = list(ivars)
                if start:
                    at[axis] = ivars[axis] + start if ivars[axis] is not None else start
                kb.emit(dst.store_nd(at, src.load_nd(ivars)))
            start += src.shape[axis]


def _run_start(kb, flat, dims, strides):
    """(the offset of element ``flat``, bound to a name, and the stride of the innermost merged dim)."""
    return kb.let(linear(unravel(kb, flat, dims), strides), "b"), strides[-1]


class StaticReshape(Rule):
    kinds = ("StaticReshape",)

    def lower(self, op, kb, ins, outs, values):
        """Both tensors walk the same row-major element order.  On each side, dims
        that step evenly through memory merge; a run of ``m`` elements (m divides
        the innermost merged dim of both sides) then moves with one stride each."""
        (src,), (dst,) = ins, outs
        n = dst.lt.nelems
        if n == 0:
            return
        sides = []
        for ref in (src, dst):
            dims, (strides,) = collapse(ref.shape, [ref.strides])
            sides.append((dims or [1], strides or [0]))
        m = math.gcd(sides[0][0][-1], sides[1][0][-1])
        runs = n // m
        par = worth_parallel(n)
        with kb.for_(runs, "c", par and runs > 1) as c:
            (sb, ss), (db, ds) = (_run_start(kb, c * m, dims, strides) for dims, strides in sides)
            with kb.for_(m, "j", par and runs == 1) as j:
                kb.emit(dst.store(linear([j], [ds], db), src.load(linear([j], [ss], sb))))


class StaticTranspose(Rule):
    kinds = ("StaticTranspose",)

    def lower(self, op, kb, ins, outs, values):
        (src,), (dst,) = ins, outs
        with memory_order_nest(kb, dst.shape, dst.strides, worth_parallel(dst.lt.nelems)) as ivars:
            src_vars = [None] * len(ivars)
            for v, o in zip(ivars, op.schema.order(op)):
                src_vars[o] = v
            kb.emit(dst.store_nd(ivars, src.load_nd(src_vars)))


class StaticSlice(Rule):
    kinds = ("StaticSlice",)

    def lower(self, op, kb, ins, outs, values):
        """dst walked in its memory order, each element read from src at the
        window's start plus its index (where the compile step cannot make it a
        view: dst's strides are not src's)."""
        (src,), (dst,) = ins, outs
        window = op.schema.bounds(op, src.shape)
        with memory_order_nest(kb, dst.shape, dst.strides, worth_parallel(dst.lt.nelems)) as ivars:
            at = [(b or None) if v is None else (v + b if b else v) for v, (b, _) in zip(ivars, window)]
            kb.emit(dst.store_nd(ivars, src.load_nd(at)))


class SameShape(ElementwiseRule):
    """Reorder and TypeCast: the identity, dst's strides or dtype aside."""

    kinds = ("Reorder", "TypeCast")

    def expr(self, op, x):
        """The value as dst holds it (a narrowing TypeCast rounds here, so a fused
        consumer sees what the reference's TypeCast gives)."""
        return as_stored(x, op.outputs[0].dtype)
