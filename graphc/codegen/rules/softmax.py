"""Lowering of SoftMax, LogSoftmax and their backward ops
(graphc/ops/softmax.py): grouped reductions along the op's axis
(graphc/codegen/grouped.py), one group per position of the other dims."""
from __future__ import annotations

import math

from ...types import DataType
from .. import ir
from ..helpers import use_helper
from ..grouped import Nest
from ..kernel import ArrayRef
from ..merged_views import merged_views
from ..reduce_plan import tensor_vdims
from . import Rule


class AlongAxis(Rule):
    """An op along one axis of input 0 (the schema's ``axis(op)``)."""

    def nest(self, kb, ref, axis) -> Nest:
        """Groups over every dim of ``ref`` but the axis."""
        return Nest(kb, tensor_vdims(ref, set(range(len(ref.shape))) - {axis}))

    def views(self, op, ins, outs):
        """(ins, outs, axis) with the dims around the axis merged where every
        tensor is contiguous across them (see merged_views.merged_views)."""
        axis = op.schema.axis(op)
        refs, where = merged_views(list(ins) + list(outs), {axis})
        return refs[:len(ins)], refs[len(ins):], where[axis]


def max_and_sum_exp(kb, nest, src, mx, m, se, inf_as_zero=False, keep=None):
    """The passes giving each group's max ``mx`` of src (as the stat ``m``) and sum
    ``se`` of exp(src - max) (with ``inf_as_zero``, a max of -inf counts as 0),
    storing exp(src - max) in ``keep`` too when given.  src - max <= 0:
    exp_le0_f32 computes it vectorized."""
    use_helper(kb, "exp_le0_f32")
    with nest.pass_(mx) as iv:
        mx.add(src.load_nd(iv))
    with nest.per_group():
        m.set(mx.value)
        if inf_as_zero:
            with kb.if_(m.ref.eq(-math.inf)):
                m.set(0.0)
    with nest.pass_(se) as iv:
        e = ir.call("exp_le0_f32", src.load_nd(iv) - m.ref)
        if keep is not None:
            e = kb.let(e, "e")
            kb.emit(keep.store_nd(iv, e))
        se.add(e)


def exp_keeper(se, dst):
    """Where a SoftMax keeps exp(src - max) between its sum and its last pass:
    None when the sum's buffer of terms holds it (a sum along the lane alone),
    else dst itself when it is a plain f32 argument (the last pass scales it in
    place, from cache, instead of computing exp again; a fused dst would apply
    its post-ops twice), else None (computed again)."""
    if se.buffered or not isinstance(dst, ArrayRef) or dst.dtype is not DataType.f32:
        return None
    return dst


def exp_again(nest, src, iv, se, m, keep) -> ir.Expr:
    """exp(src - max) in a later pass: read back from the sum's buffer of terms
    or from ``keep`` (see exp_keeper), else computed again."""
    if se.buffered:
        return ir.f32(se.terms[nest.lv])
    if keep is not None:
        return keep.load_nd(iv)
    return ir.call("exp_le0_f32", src.load_nd(iv) - m.ref)


class SoftMax(AlongAxis):
    kinds = ("SoftMax",)

    def lower(self, op, kb, ins, outs, values):
        ins, outs, axis = self.views(op, ins, outs)
        src = ins[0]
        inf_as_zero = op.attr("mode") == "inf_as_zero"
        nest = self.nest(kb, src, axis)
        mx, se = nest.acc("max"), nest.acc()
        m, rs = nest.stat(), nest.stat()
        keep = exp_keeper(se, outs[0])
        with nest.groups():
            max_and_sum_exp(kb, nest, src, mx, m, se, inf_as_zero, keep)
            with nest.per_group():
                s = se.value
                rs.set(ir.select(s.eq(0), 0.0, 1.0 / s) if inf_as_zero else 1.0 / s)
                if len(outs) == 2:
                    stats_iv = list(nest.iv)
                    stats_iv[axis] = None
                    kb.emit(outs[1].store_nd(stats_iv, m.ref + ir.call("np.log", s)))
            with nest.pass_() as iv:
                kb.emit(outs[0].store_nd(iv, exp_again(nest, src, iv, se, m, keep) * rs.ref))


class _BackwardAlongAxis(AlongAxis):
    """diff_src from diff_dst and dst with one sum along the axis: ``term`` is
    what each element adds, ``result`` the element's value from the sum."""

    def term(self, dy, y):
        raise NotImplementedError

    def result(self, dy, y, s):
        raise NotImplementedError

    def lower(self, op, kb, ins, outs, values):
        (diff_dst, dst), outs, axis = self.views(op, ins, outs)
        nest = self.nest(kb, dst, axis)
        s = nest.acc()
        s32 = nest.stat()
        with nest.groups():
            with nest.pass_(s) as iv:
                s.add(self.term(diff_dst.load_nd(iv), dst.load_nd(iv)))
            with nest.per_group():
                s32.set(s.value)
            with nest.pass_() as iv:
                kb.emit(outs[0].store_nd(iv, self.result(diff_dst.load_nd(iv), dst.load_nd(iv), s32.ref)))


class SoftMaxBackward(_BackwardAlongAxis):
    kinds = ("SoftMaxBackward",)

    def term(self, dy, y):
        return dy * y

    def result(self, dy, y, s):
        return y * (dy - s)


class LogSoftmax(AlongAxis):
    kinds = ("LogSoftmax",)

    def lower(self, op, kb, ins, outs, values):
        (src,), outs, axis = self.views(op, ins, outs)
        nest = self.nest(kb, src, axis)
        mx, se = nest.acc("max"), nest.acc()
        m, lse = nest.stat(), nest.stat()
        with nest.groups():
            max_and_sum_exp(kb, nest, src, mx, m, se)
            with nest.per_group():
                lse.set(ir.call("np.log", se.value))
            with nest.pass_() as iv:
                kb.emit(outs[0].store_nd(iv, src.load_nd(iv) - m.ref - lse.ref))


class LogSoftmaxBackward(_BackwardAlongAxis):
    kinds = ("LogSoftmaxBackward",)

    def term(self, dy, y):
        return dy

    def result(self, dy, y, s):
        return dy - ir.call("np.exp", y) * s
