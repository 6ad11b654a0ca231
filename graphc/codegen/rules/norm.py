"""Lowering of the normalization ops (graphc/ops/norm.py) on the reduction
planner (graphc.codegen.grouped): a Nest whose groups are what one mean and
variance cover (a channel for BatchNorm, a row of the trailing dims for LayerNorm
and RMSNorm, a batch item's channel group for GroupNorm), with the statistics in
two passes (graphc.codegen.moments) and the normalizing pass after.  GroupNorm
over channels-last memory has a planner of its own (graphc.codegen.channels_last)."""
from __future__ import annotations

from .. import ir
from ..channels_last import ChannelsLast, channels_innermost
from ..grouped import Nest, each_element
from ..merged_views import merged_views
from ..moments import Moments, inv_std
from ..reduce_plan import VDim, tensor_vdims
from ...ops.norm import DEFAULT_MOMENTUM, channel_dim
from . import Rule


def aligned_ivars(iv, shape) -> list:
    """The index expressions of a tensor of ``shape`` broadcasting (numpy) against
    one indexed by ``iv``: its dims align with the trailing ones, size-1 dims at 0."""
    lead = len(iv) - len(shape)
    return [None if d == 1 else iv[lead + j] for j, d in enumerate(shape)]


def trailing_nest(kb, ref, begin: int) -> Nest:
    """Groups over dims ..begin-1 of ``ref``, reduced over begin.. (LayerNorm style);
    short rows go together (the lowerings emit code only in passes and per_group)."""
    return Nest(kb, tensor_vdims(ref, set(range(begin))), rows_together=True)


def merged(b: int, rows, stats=()):
    """LayerNorm style (normalized over dims b..): ``rows`` (kernel arguments of
    src's shape) and ``stats`` (of its leading shape [:b]) as views whose leading
    dims are one where contiguous in all (merged_views: a row's offset
    from one index, not from each dim's); returns (rows, stats, begin in the
    views).  Unchanged unless the leading dims of both merge alike."""
    nd = len(rows[0].shape)
    views, where = merged_views(rows, set(range(b, nd)))
    svs, swhere = merged_views(stats, set()) if stats else (list(stats), where[:b])
    if where == list(range(nd)) or swhere != where[:b]:
        return list(rows), list(stats), b
    return views, svs, (where[b] if b < nd else len(views[0].shape))


class BatchNormInference(Rule):
    kinds = ("BatchNormInference",)

    def lower(self, op, kb, ins, outs, values):
        # dst = (src - mean) * scale + beta, scale = gamma / sqrt(variance + epsilon) first
        src, gamma, beta, mean, variance = ins
        ca = channel_dim(op)
        scale = kb.alloc(src.shape[ca], "f32", prefix="scale")
        with kb.for_(src.shape[ca], "c") as c:
            kb.store(scale, c, gamma.load_nd([c]) * inv_std(ir.f64(variance.load_nd([c])), op.attr("epsilon")))
        with each_element(kb, src) as iv:
            c = [iv[ca]]
            at = iv[ca] if iv[ca] is not None else 0
            kb.emit(outs[0].store_nd(iv, (src.load_nd(iv) - mean.load_nd(c)) * scale[at] + beta.load_nd(c)))


class BatchNormForwardTraining(Rule):
    kinds = ("BatchNormForwardTraining",)

    def lower(self, op, kb, ins, outs, values):
        src, mean, variance = ins[:3]
        gamma, beta = ins[3:] if len(ins) == 5 else (None, None)
        dst, running_mean, running_var, batch_mean, batch_var = outs
        ca = channel_dim(op)
        (src, dst), where = merged_views([src, dst], {ca})   # the other dims as one where contiguous
        ca = where[ca]
        nest = Nest(kb, tensor_vdims(src, {ca}))
        mom = Moments(nest)
        scale, shift = nest.stat(), nest.stat()
        m = float(op.attr("momentum", DEFAULT_MOMENTUM))
        with nest.groups():
            mom.emit(kb, src)
            with nest.per_group():
                c = [nest.iv[ca]]
                inv = inv_std(mom.var.ref, op.attr("epsilon"))
                if gamma is not None:
                    inv = inv * gamma.load_nd(c)
                inv = kb.let(inv, "inv")
                scale.set(inv)
                sh = mom.shift(inv)
                shift.set(sh + beta.load_nd(c) if beta is not None else sh)
                kb.emit(running_mean.store_nd(c, m * ir.f64(mean.load_nd(c)) + (1 - m) * mom.mean.ref))
                kb.emit(running_var.store_nd(c, m * ir.f64(variance.load_nd(c)) + (1 - m) * mom.var.ref))
                kb.emit(batch_mean.store_nd(c, mom.mean.ref))
                kb.emit(batch_var.store_nd(c, mom.var.ref))
            with nest.pass_() as iv:
                kb.emit(dst.store_nd(iv, mom.normalized(src.load_nd(iv), scale, shift)))


class BatchNormTrainingBackward(Rule):
    kinds = ("BatchNormTrainingBackward",)

    def lower(self, op, kb, ins, outs, values):
        # dx = a * dy + b * (x - mean) + k per channel, from the sums of dy and dy * (x - mean)
        src, diff_dst, mean, variance = ins[:4]
        with_affine = len(outs) == 3
        gamma = ins[4] if with_affine and len(ins) == 5 else None
        ca = channel_dim(op)
        (src, diff_dst, diff_src), where = merged_views([src, diff_dst, outs[0]], {ca})
        ca = where[ca]
        nest = Nest(kb, tensor_vdims(src, {ca}))
        s_dy, s_dyx = nest.acc(), nest.acc()
        m, a, b, k = (nest.stat() for _ in range(4))
        count = nest.reduced_count
        with nest.groups():
            c = [nest.iv[ca]]
            with nest.per_group():
                m.set(mean.load_nd(c))
            with nest.pass_(s_dy, s_dyx) as iv:
                d = kb.let(diff_dst.load_nd(iv), "d")
                s_dy.add(d)
                s_dyx.add(d * (src.load_nd(iv) - m.ref))
            with nest.per_group():
                inv = kb.let(inv_std(ir.f64(variance.load_nd(c)), op.attr("epsilon")), "inv")
                g = inv if gamma is None else kb.let(gamma.load_nd(c) * inv, "g")
                a.set(g)
                b.set(-g * inv * inv * s_dyx.value / count)
                k.set(-g * s_dy.value / count)
                if with_affine:
                    kb.emit(outs[1].store_nd(c, s_dyx.value * inv))
                    kb.emit(outs[2].store_nd(c, s_dy.value))
            with nest.pass_() as iv:
                kb.emit(diff_src.store_nd(iv, a.ref * diff_dst.load_nd(iv) + b.ref * (src.load_nd(iv) - m.ref) + k.ref))


class LayerNorm(Rule):
    kinds = ("LayerNorm",)

    def lower(self, op, kb, ins, outs, values):
        gamma, beta = ins[1:] if len(ins) == 3 and op.attr("use_affine") else (None, None)
        (src, dst), stats, b = merged(op.schema.begin(op), [ins[0], outs[0]], outs[1:])
        nest = trailing_nest(kb, src, b)
        mom = Moments(nest)
        inv, shift = nest.stat(), nest.stat()
        with nest.groups():
            mom.emit(kb, src)
            with nest.per_group():
                inv.set(inv_std(mom.var.ref, op.attr("epsilon")))
                shift.set(mom.shift(inv.ref))
                for out, v in zip(stats, (mom.mean, mom.var)):
                    kb.emit(out.store_nd(nest.iv[:b], v.ref))
            with nest.pass_() as iv:
                y = mom.normalized(src.load_nd(iv), inv, shift)
                if gamma is not None:
                    y = y * gamma.load_nd(iv[b:]) + beta.load_nd(iv[b:])
                kb.emit(dst.store_nd(iv, y))


class LayerNormBackward(Rule):
    kinds = ("LayerNormBackward",)

    def lower(self, op, kb, ins, outs, values):
        # dx = inv * g + b * (x - mean) + k, g = dy * gamma, from the sums of g and g * (x - mean)
        gamma = ins[4] if op.attr("use_affine") else None
        (src, diff_dst, diff_src), (mean, variance), b = merged(op.schema.begin(op), [ins[0], ins[1], outs[0]],
                                                                     ins[2:4])
        nest = trailing_nest(kb, src, b)
        s_g, s_gx = nest.acc(), nest.acc()
        m, inv, bx, k = (nest.stat() for _ in range(4))
        d_gamma, d_beta = (nest.column_acc(), nest.column_acc()) if len(outs) == 3 else (None, None)
        count = nest.reduced_count
        with nest.groups():
            with nest.per_group():
                lead = nest.iv[:b]
                m.set(mean.load_nd(lead))
                inv.set(inv_std(ir.f64(variance.load_nd(lead)), op.attr("epsilon")))

            def g_and_x(iv):
                dy = kb.let(diff_dst.load_nd(iv), "dy")
                g = dy if gamma is None else kb.let(dy * gamma.load_nd(iv[b:]), "g")
                xm = kb.let(src.load_nd(iv) - m.ref, "xm")
                return dy, g, xm

            with nest.pass_(s_g, s_gx) as iv:
                dy, g, xm = g_and_x(iv)
                s_g.add(g)
                s_gx.add(g * xm)
                if d_gamma is not None:
                    d_gamma.add(dy * xm * inv.ref)
                    d_beta.add(dy)
            with nest.per_group():
                bx.set(-inv.ref * inv.ref * inv.ref * s_gx.value / count)
                k.set(-inv.ref * s_g.value / count)
            with nest.pass_() as iv:
                dy, g, xm = g_and_x(iv)
                kb.emit(diff_src.store_nd(iv, inv.ref * g + bx.ref * xm + k.ref))
        if d_gamma is not None:
            with nest.columns() as iv:
                kb.emit(outs[1].store_nd(iv[b:], d_gamma.value))
                kb.emit(outs[2].store_nd(iv[b:], d_beta.value))


class GroupNorm(Rule):
    kinds = ("GroupNorm",)

    def lower(self, op, kb, ins, outs, values):
        src, dst = ins[0], outs[0]
        gamma, beta = ins[1:] if len(ins) == 3 and op.attr("use_affine") else (None, None)
        ca, groups = channel_dim(op), op.attr("groups")
        (src, dst), where = merged_views([src, dst], {0, ca})   # the spatial dims as one where contiguous
        ca = where[ca]
        if channels_innermost(src, ca):
            ChannelsLast(kb, src, ca, groups).emit(op, dst, gamma, beta, outs[1:])
            return
        per = src.shape[ca] // groups
        # the channel dim as two loop dims: its group (kept) and the channel in the group
        vdims, pos = [], []
        for i, (d, st) in enumerate(zip(src.shape, src.strides)):
            pos.append(len(vdims))
            if i == ca:
                vdims += [VDim(groups, per * st, True), VDim(per, st, False)]
            else:
                vdims.append(VDim(d, st, i == 0))

        def to_real(names):
            real = [names[p] for p in pos]
            g, c = names[pos[ca]], names[pos[ca] + 1]
            if g is not None and c is not None:
                real[ca] = g * per + c
            else:
                real[ca] = g if g is not None else c
            return real

        nest = Nest(kb, vdims, to_real)
        mom = Moments(nest)
        inv, shift = nest.stat(), nest.stat()
        with nest.groups():
            mom.emit(kb, src)
            with nest.per_group():
                inv.set(inv_std(mom.var.ref, op.attr("epsilon")))
                shift.set(mom.shift(inv.ref))
                for out, v in zip(outs[1:], (mom.mean, mom.var)):
                    kb.emit(out.store_nd([nest.names[pos[0]], nest.names[pos[ca]]], v.ref))
            with nest.pass_() as iv:
                y = mom.normalized(src.load_nd(iv), inv, shift)
                if gamma is not None:
                    y = y * gamma.load_nd([iv[ca]]) + beta.load_nd([iv[ca]])
                kb.emit(dst.store_nd(iv, y))


class RMSNorm(Rule):
    kinds = ("RMSNorm",)

    def lower(self, op, kb, ins, outs, values):
        src, gamma, dst = ins[0], ins[1] if len(ins) == 2 else None, outs[0]
        b = op.schema.begin(op)
        if gamma is None or len(gamma.shape) <= len(src.shape) - b:   # gamma indexed by the trailing dims alone
            (src, dst), _, b = merged(b, [src, dst])
        nest = trailing_nest(kb, src, b)
        sq = nest.acc()
        inv = nest.stat()
        with nest.groups():
            with nest.pass_(sq) as iv:
                x = kb.let(src.load_nd(iv), "x")
                sq.add(x * x)
            with nest.per_group():
                inv.set(inv_std(sq.value / nest.reduced_count, op.attr("epsilon")))
            with nest.pass_() as iv:
                y = src.load_nd(iv) * inv.ref
                if gamma is not None:
                    y = y * gamma.load_nd(aligned_ivars(iv, gamma.shape))
                kb.emit(dst.store_nd(iv, y))
