"""Normalization ops (docs: BatchNormInference.md, BatchNormForwardTraining.md,
BatchNormTrainingBackward.md, LayerNorm.md, LayerNormBackward.md, GroupNorm.md,
RMSNorm.md).

All of them normalize ``x`` over some ``axes`` as ``(x - mean) / sqrt(var + eps)``
with the biased variance; the backward ops differentiate that through the
statistics (which were computed from ``x`` itself).
"""
from __future__ import annotations

import math

import numpy as np

from ..codegen import ir
from contextlib import contextmanager

from ..codegen.grouped import (FOLD_ROWS, MAX_CHUNKS, Nest, VDim, _clamp, _i64, _min, each_element, merged_views,
                               tensor_vdims)
from ..codegen.kernel import NUM_THREADS, worth_parallel
from ..codegen.loops import unravel
from ..errors import InvalidGraphOp
from .common import merged_shape
from .schema import (Attr, DtypeTable, In, OpSchema, Out, bad_shape, channel_axis, dims_equal, merge_dim,
                     norm_axis, positive)

DATA_FORMAT = Attr("data_format", "string", "NXC", choices=("NCX", "NXC"),
                   doc="NCX: channels at dim 1; NXC: channels last")
EPSILON = Attr("epsilon", "f32", check=positive, check_doc="positive")
EPSILON_1E5 = Attr("epsilon", "f32", 1e-5, check=positive, check_doc="positive")
BEGIN_NORM_AXIS = Attr("begin_norm_axis", "s64", -1, doc="normalize over dims begin_norm_axis..rank-1")
USE_AFFINE = Attr("use_affine", "bool", True, doc="scale by gamma and shift by beta")
KEEP_STATS = Attr("keep_stats", "bool", True, doc="output mean and variance")

#: the momentum BatchNormForwardTraining uses when the attribute is absent (as oneDNN)
DEFAULT_MOMENTUM = 0.5


# ------------------------------------------------------------------ shape helpers
def channel_dim(op, port="src") -> int:
    """The channel axis of ``port`` per data_format; the port needs rank >= 2."""
    t = op.input(port)
    if t.ndim < 2:
        raise bad_shape(op, "data_format needs a batch and a channel dim (rank >= 2)", where=f"port '{port}'",
                        found=list(t.shape))
    return channel_axis(op.attr("data_format"), t.ndim)


def expect_shape(op, name, shape):
    """Input ``name``, when present, must have ``shape`` (-1 dims match anything)."""
    t = op.input(name)
    if t is not None and (t.ndim != len(shape) or not all(dims_equal(a, b) for a, b in zip(t.shape, shape))):
        raise bad_shape(op, f"wrong shape for '{name}'", where=f"port '{name}'", expected=list(shape),
                        found=list(t.shape))


def per_channel(op, c: int, names) -> int:
    """Check the present inputs among ``names`` are [c]; return c resolved by them."""
    for name in names:
        expect_shape(op, name, (c,))
        if op.input(name) is not None:
            c = merge_dim(c, op.input(name).shape[0])
    return c


def expect_broadcastable(op, name, target):
    """Input ``name`` must broadcast (numpy, one-way) to ``target``."""
    shape = op.input(name).shape
    if len(shape) > len(target) or not all(
            d == 1 or dims_equal(d, t) for d, t in zip(shape[::-1], target[::-1])):
        raise bad_shape(op, f"'{name}' does not broadcast to src", where=f"port '{name}'",
                        expected=f"numpy-broadcastable to {list(target)}", found=list(shape))


def both_or_neither(op, a, b, required_by=None):
    """Ports ``a`` and ``b`` are given together; with ``required_by`` (an attribute
    name whose value is true) they must be given."""
    have = [n in op.input_names or n in op.output_names for n in (a, b)]
    if have[0] != have[1]:
        raise InvalidGraphOp(f"'{a}' and '{b}' must be given both or neither", op=op,
                             where=f"port '{b if have[0] else a}'", expected="both or neither",
                             found=f"only '{a if have[0] else b}'")
    if required_by and not have[0]:
        raise InvalidGraphOp(f"'{a}' and '{b}' are required when {required_by} is true", op=op,
                             where=f"attribute '{required_by}'", expected=f"ports '{a}' and '{b}'", found="absent")


def with_dim(shape, axis, d):
    s = list(shape)
    s[axis] = d
    return tuple(s)


# ------------------------------------------------------------------- the math
def stats(x, axes):
    """Mean and biased variance over ``axes`` (kept as size-1 dims)."""
    mean = x.mean(axis=axes, keepdims=True)
    return mean, ((x - mean) ** 2).mean(axis=axes, keepdims=True)


def normalize(x, mean, var, eps):
    return (x - mean) / np.sqrt(var + eps)


def norm_grad(x, dy, mean, var, eps, axes, gamma=None):
    """(diff_src, xhat) of y = gamma * xhat, xhat = (x - mean) / sqrt(var + eps),
    where mean and var are x's own statistics over ``axes`` (broadcast shapes)."""
    inv = 1.0 / np.sqrt(var + eps)
    xhat = (x - mean) * inv
    g = dy if gamma is None else dy * gamma
    dx = inv * (g - g.mean(axis=axes, keepdims=True) - xhat * (g * xhat).mean(axis=axes, keepdims=True))
    return dx, xhat


def channel_view(v, ndim, axis):
    """A [C] vector shaped to broadcast along dim ``axis`` of a rank-ndim tensor."""
    return v.reshape(with_dim((1,) * ndim, axis, -1))


def other_axes(ndim, axis):
    return tuple(i for i in range(ndim) if i != axis)


# ------------------------------------------------------------------ lowering
class Moments:
    """Each group's mean and biased variance, in two passes over ``x`` (the
    second about the mean rounded to f32, then corrected); declare before
    ``nest.groups()``, ``emit`` inside it."""

    def __init__(self, nest: Nest):
        self.nest = nest
        self.sum, self.sq = nest.acc(short_scalar=True), nest.acc(short_scalar=True)
        self.mean, self.var = nest.stat("f64"), nest.stat("f64")
        self.mean32 = nest.stat()

    def emit(self, kb, x):
        nest, n = self.nest, self.nest.reduced_count
        with nest.pass_(self.sum) as iv:
            self.sum.add(x.load_nd(iv))
        with nest.per_group():
            self.mean.set(self.sum.value / n)
            self.mean32.set(self.mean.ref)
        with nest.pass_(self.sq) as iv:
            d = kb.let(x.load_nd(iv) - self.mean32.ref, "d")
            self.sq.add(d * d)
        with nest.per_group():
            self.var.set(self.sq.value / n - (self.mean.ref - self.mean32.ref) ** 2)

    def normalized(self, x: ir.Expr, inv, shift) -> ir.Expr:
        """(x - mean) * inv as (x - mean32) * inv + shift, ``shift`` set by ``set_shift``."""
        return (x - self.mean32.ref) * inv.ref + shift.ref

    def shift(self, inv: ir.Expr) -> ir.Expr:
        """The value of the shift of ``normalized``, rounded to f32."""
        return ir.f32((self.mean32.ref - self.mean.ref) * inv)


def inv_std(var: ir.Expr, eps) -> ir.Expr:
    return 1.0 / ir.call("np.sqrt", var + float(eps))


def aligned_ivars(iv, shape) -> list:
    """The index expressions of a tensor of ``shape`` broadcasting (numpy) against
    one indexed by ``iv``: its dims align with the trailing ones, size-1 dims at 0."""
    lead = len(iv) - len(shape)
    return [None if d == 1 else iv[lead + j] for j, d in enumerate(shape)]


def trailing_nest(kb, ref, begin: int) -> Nest:
    """Groups over dims ..begin-1 of ``ref``, reduced over begin.. (LayerNorm style);
    short rows go together (the lowerings emit code only in passes and per_group)."""
    return Nest(kb, tensor_vdims(ref, set(range(begin))), rows_together=True)


# -------------------------------------------------------------------- BatchNorm
class _BatchNorm(OpSchema):
    family = "norm"
    #: the [C]-shaped inputs
    channel_inputs: tuple = ()

    def channels(self, op) -> int:
        return per_channel(op, op.input("src").shape[channel_dim(op)], self.channel_inputs)

    def check(self, op):
        self.channels(op)

    def dst_shape(self, op, *others):
        """src's shape (merged with the ``others`` inputs) with the channel dim resolved."""
        shape = merged_shape(op.input("src").shape, *(op.input(n).shape for n in others))
        return with_dim(shape, channel_dim(op), self.channels(op))


class BatchNormInference(_BatchNorm):
    kind = "BatchNormInference"
    doc = "dst = gamma * (src - mean) / sqrt(variance + epsilon) + beta, per channel, with given statistics."
    inputs = (In("src"), In("gamma"), In("beta"), In("mean"), In("variance"))
    outputs = (Out("dst"),)
    attrs = (EPSILON, DATA_FORMAT)
    dtypes = DtypeTable(["src|dst", "gamma|beta|mean|variance"], [("f32", "f32"), ("bf16", "f32,bf16"), ("f16", "f32")])
    channel_inputs = ("gamma", "beta", "mean", "variance")

    def infer(self, op):
        return [self.dst_shape(op)]

    def reference(self, op, src, gamma, beta, mean, variance):
        ca = channel_dim(op)
        gamma, beta, mean, variance = (channel_view(v, src.ndim, ca) for v in (gamma, beta, mean, variance))
        return (gamma * normalize(src, mean, variance, op.attr("epsilon")) + beta,)

    def lower(self, op, kb, ins, outs):
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


class BatchNormForwardTraining(_BatchNorm):
    kind = "BatchNormForwardTraining"
    doc = ("Batch norm with the batch's statistics; running_x = momentum * x + (1 - momentum) * batch_x "
           "(momentum 0.5 when absent).")
    inputs = (In("src"), In("mean", doc="the running mean so far"), In("variance", doc="the running variance so far"),
              In("gamma", optional=True), In("beta", optional=True))
    outputs = (Out("dst"), Out("running_mean"), Out("running_variance"), Out("batch_mean"), Out("batch_variance"))
    attrs = (EPSILON, Attr("momentum", "f32", None, check=positive, check_doc="positive"), DATA_FORMAT)
    dtypes = DtypeTable(["src|dst", "gamma|beta|mean|variance|batch_mean|batch_variance|running_mean|running_variance"],
                        [("f32", "f32"), ("bf16", "f32,bf16"), ("f16", "f32")])
    channel_inputs = ("mean", "variance", "gamma", "beta")

    def check(self, op):
        both_or_neither(op, "gamma", "beta")
        super().check(op)

    def infer(self, op):
        c = self.channels(op)
        return [self.dst_shape(op)] + [(c,)] * 4

    def reference(self, op, src, mean, variance, *affine):
        ca = channel_dim(op)
        axes = other_axes(src.ndim, ca)
        bmean, bvar = stats(src, axes)
        dst = normalize(src, bmean, bvar, op.attr("epsilon"))
        if affine:
            gamma, beta = (channel_view(v, src.ndim, ca) for v in affine)
            dst = gamma * dst + beta
        bmean, bvar = bmean.reshape(-1), bvar.reshape(-1)
        m = op.attr("momentum", DEFAULT_MOMENTUM)
        return dst, m * mean + (1 - m) * bmean, m * variance + (1 - m) * bvar, bmean, bvar

    def lower(self, op, kb, ins, outs):
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


class BatchNormTrainingBackward(_BatchNorm):
    kind = "BatchNormTrainingBackward"
    doc = "Gradients of BatchNormForwardTraining; gamma is ignored unless diff_gamma and diff_beta are requested."
    inputs = (In("src"), In("diff_dst"), In("mean"), In("variance"), In("gamma", optional=True))
    outputs = (Out("diff_src"), Out("diff_gamma", optional=True), Out("diff_beta", optional=True))
    attrs = (EPSILON, DATA_FORMAT)
    dtypes = DtypeTable(["src|diff_dst|diff_src", "mean|variance|gamma|diff_gamma|diff_beta"],
                        [("f32", "f32"), ("bf16", "f32,bf16"), ("f16", "f32")])
    channel_inputs = ("mean", "variance", "gamma")

    def input_passes(self, op, port) -> int:
        """Passes the kernel makes over an input (fusion legality weighs a prologue
        re-read per pass): src and diff_dst twice, the sums then diff_src."""
        return 2 if op.input_names[port] in ("src", "diff_dst") else 1

    def check(self, op):
        both_or_neither(op, "diff_gamma", "diff_beta")
        expect_shape(op, "diff_dst", op.input("src").shape)
        super().check(op)

    def infer(self, op):
        c = self.channels(op)
        return [self.dst_shape(op, "diff_dst")] + [(c,)] * (len(op.outputs) - 1)

    def reference(self, op, src, diff_dst, mean, variance, *gamma):
        ca = channel_dim(op)
        axes = other_axes(src.ndim, ca)
        with_affine = len(op.outputs) == 3
        mean, variance = channel_view(mean, src.ndim, ca), channel_view(variance, src.ndim, ca)
        g = channel_view(gamma[0], src.ndim, ca) if gamma and with_affine else None
        dx, xhat = norm_grad(src, diff_dst, mean, variance, op.attr("epsilon"), axes, g)
        if not with_affine:
            return (dx,)
        return dx, (diff_dst * xhat).sum(axis=axes), diff_dst.sum(axis=axes)

    def lower(self, op, kb, ins, outs):
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


# -------------------------------------------------------------------- LayerNorm
class _LayerNorm(OpSchema):
    family = "norm"

    def begin(self, op) -> int:
        return norm_axis(op, op.attr("begin_norm_axis"), op.input("src").ndim, attr="begin_norm_axis")

    def check_shapes(self, op, stats_ports, affine_ports):
        """Stats ports are src.shape[:begin], affine ports src.shape[begin:]."""
        shape, b = op.input("src").shape, self.begin(op)
        for name in stats_ports:
            expect_shape(op, name, shape[:b])
        for name in affine_ports:
            expect_shape(op, name, shape[b:])

    def axes(self, op):
        return tuple(range(self.begin(op), op.input("src").ndim))

    @staticmethod
    def merged(b: int, rows, stats=()):
        """``rows`` (kernel arguments of src's shape) and ``stats`` (of its leading
        shape [:b]) as views whose leading dims are one where contiguous in all
        (grouped.merged_views: a row's offset from one index, not from each dim's);
        returns (rows, stats, begin in the views).  Unchanged unless the leading
        dims of both merge alike."""
        nd = len(rows[0].shape)
        views, where = merged_views(rows, set(range(b, nd)))
        svs, swhere = merged_views(stats, set()) if stats else (list(stats), where[:b])
        if where == list(range(nd)) or swhere != where[:b]:
            return list(rows), list(stats), b
        return views, svs, (where[b] if b < nd else len(views[0].shape))


class LayerNorm(_LayerNorm):
    kind = "LayerNorm"
    doc = "Normalizes src over dims begin_norm_axis.. ; gamma and beta have the normalized dims' shape."
    inputs = (In("src"), In("gamma", optional=True), In("beta", optional=True))
    outputs = (Out("dst"), Out("mean", optional=True), Out("variance", optional=True))
    attrs = (KEEP_STATS, BEGIN_NORM_AXIS, USE_AFFINE, EPSILON_1E5)
    dtypes = DtypeTable(["src|dst", "gamma|beta|mean|variance"], [("f32", "f32"), ("bf16", "f32,bf16"), ("f16", "f32")])

    def check(self, op):
        both_or_neither(op, "gamma", "beta", "use_affine" if op.attr("use_affine") else None)
        both_or_neither(op, "mean", "variance", "keep_stats" if op.attr("keep_stats") else None)
        self.check_shapes(op, (), ("gamma", "beta"))

    def infer(self, op):
        shape = op.input("src").shape
        return [shape] + [shape[:self.begin(op)]] * (len(op.outputs) - 1)

    def reference(self, op, src, *affine):
        axes = self.axes(op)
        mean, var = stats(src, axes)
        dst = normalize(src, mean, var, op.attr("epsilon"))
        if affine and op.attr("use_affine"):
            dst = affine[0] * dst + affine[1]
        lead = src.shape[:self.begin(op)]
        return (dst, mean.reshape(lead), var.reshape(lead))[:len(op.outputs)]

    def lower(self, op, kb, ins, outs):
        gamma, beta = ins[1:] if len(ins) == 3 and op.attr("use_affine") else (None, None)
        (src, dst), stats, b = self.merged(self.begin(op), [ins[0], outs[0]], outs[1:])
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


class LayerNormBackward(_LayerNorm):
    kind = "LayerNormBackward"
    doc = "Gradients of LayerNorm given its mean and variance; diff_gamma and diff_beta when use_affine is true."
    inputs = (In("src"), In("diff_dst"), In("mean"), In("variance"), In("gamma", optional=True),
              In("beta", optional=True, doc="not used by the gradient"))
    outputs = (Out("diff_src"), Out("diff_gamma", optional=True), Out("diff_beta", optional=True))
    attrs = (BEGIN_NORM_AXIS, USE_AFFINE, EPSILON_1E5)
    dtypes = DtypeTable(["src|diff_dst|diff_src", "gamma|beta|mean|variance|diff_gamma|diff_beta"],
                        [("f32", "f32"), ("bf16", "f32,bf16"), ("f16", "f32")])

    def check(self, op):
        if op.attr("use_affine"):
            if op.input("gamma") is None:
                raise InvalidGraphOp("'gamma' is required when use_affine is true", op=op,
                                     where="attribute 'use_affine'", expected="port 'gamma'", found="absent")
            both_or_neither(op, "diff_gamma", "diff_beta", "use_affine")
        elif len(op.outputs) > 1:
            raise InvalidGraphOp("diff_gamma and diff_beta need use_affine true", op=op, where="port 'diff_gamma'",
                                 expected="diff_src only", found=f"{len(op.outputs)} outputs")
        expect_shape(op, "diff_dst", op.input("src").shape)
        self.check_shapes(op, ("mean", "variance"), ("gamma", "beta"))

    def infer(self, op):
        shape = merged_shape(op.input("src").shape, op.input("diff_dst").shape)
        return [shape] + [shape[self.begin(op):]] * (len(op.outputs) - 1)

    def reference(self, op, src, diff_dst, mean, variance, *affine):
        axes = self.axes(op)
        keep = src.shape[:self.begin(op)] + (1,) * len(axes)
        mean, variance = mean.reshape(keep), variance.reshape(keep)
        gamma = affine[0] if op.attr("use_affine") else None
        dx, xhat = norm_grad(src, diff_dst, mean, variance, op.attr("epsilon"), axes, gamma)
        if len(op.outputs) == 1:
            return (dx,)
        lead = tuple(range(self.begin(op)))
        return dx, (diff_dst * xhat).sum(axis=lead), diff_dst.sum(axis=lead)

    def lower(self, op, kb, ins, outs):
        # dx = inv * g + b * (x - mean) + k, g = dy * gamma, from the sums of g and g * (x - mean)
        gamma = ins[4] if op.attr("use_affine") else None
        (src, diff_dst, diff_src), (mean, variance), b = self.merged(self.begin(op), [ins[0], ins[1], outs[0]],
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


# -------------------------------------------------------------------- GroupNorm
class GroupNorm(OpSchema):
    kind = "GroupNorm"
    family = "norm"
    doc = "Normalizes each of `groups` channel groups per batch item; mean and variance are [N, groups]."
    inputs = (In("src"), In("gamma", optional=True), In("beta", optional=True))
    outputs = (Out("dst"), Out("mean", optional=True), Out("variance", optional=True))
    attrs = (Attr("groups", "s64", check=positive, check_doc="positive"), KEEP_STATS, USE_AFFINE, EPSILON_1E5,
             DATA_FORMAT)
    dtypes = DtypeTable(["src|dst", "gamma|beta|mean|variance"], [("f32", "f32"), ("bf16", "f32,bf16"), ("f16", "f32")])

    def check(self, op):
        both_or_neither(op, "gamma", "beta", "use_affine" if op.attr("use_affine") else None)
        both_or_neither(op, "mean", "variance", "keep_stats" if op.attr("keep_stats") else None)
        c, g = self.channels(op), op.attr("groups")
        if c != -1 and (g > c or c % g):
            raise bad_shape(op, "groups must divide the number of channels", where="attribute 'groups'",
                            expected=f"a divisor of {c}", found=g)

    def channels(self, op) -> int:
        return per_channel(op, op.input("src").shape[channel_dim(op)], ("gamma", "beta"))

    def infer(self, op):
        src = op.input("src").shape
        return [with_dim(src, channel_dim(op), self.channels(op))] + \
            [(src[0], op.attr("groups"))] * (len(op.outputs) - 1)

    def reference(self, op, src, *affine):
        ca, g = channel_dim(op), op.attr("groups")
        x = np.moveaxis(src, ca, 1)                                        # [N, C, ...]
        n, c = x.shape[:2]
        grouped = x.reshape((n, g, c // g) + x.shape[2:])                  # [N, G, C/G, ...]
        mean, var = stats(grouped, tuple(range(2, grouped.ndim)))
        dst = np.moveaxis(normalize(grouped, mean, var, op.attr("epsilon")).reshape(x.shape), 1, ca)
        if affine and op.attr("use_affine"):
            gamma, beta = (channel_view(v, src.ndim, ca) for v in affine)
            dst = gamma * dst + beta
        return (dst, mean.reshape(n, g), var.reshape(n, g))[:len(op.outputs)]

    def lower(self, op, kb, ins, outs):
        src, dst = ins[0], outs[0]
        gamma, beta = ins[1:] if len(ins) == 3 and op.attr("use_affine") else (None, None)
        ca, groups = channel_dim(op), op.attr("groups")
        (src, dst), where = merged_views([src, dst], {0, ca})   # the spatial dims as one where contiguous
        ca = where[ca]
        if channels_innermost(src, ca):
            _ChannelsLast(kb, src, ca, groups).emit(op, dst, gamma, beta, outs[1:])
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


def channels_innermost(ref, ca: int) -> bool:
    """Whether the channel dim of ``ref`` (longer than 1) has a smaller stride than
    every other dim longer than 1 (channels-last memory), and ``ref`` is not empty."""
    shape, st = ref.shape, ref.strides
    return shape[ca] > 1 and 0 not in shape and any(d != 1 for i, d in enumerate(shape) if i != ca) and all(
        abs(st[ca]) < abs(st[i]) for i, d in enumerate(shape) if i != ca and d != 1)


class _ChannelsLast:
    """GroupNorm whose channels are innermost in memory: each pass sweeps the
    positions (the dims but batch and channel) in memory order with the C
    channels as the vector lane.  Chunks of positions (of one batch item each)
    run in parallel.  One read of ``src`` gives both moments: per chunk and
    channel, blocks of FOLD_ROWS positions sum ``x - pivot`` and its square in
    f32 lanes (``pivot``: the chunk's running mean rounded to f32; for its first
    block, the mean of LEAD leading positions), each block folded in f64 into
    the chunk's running mean and M2 (Chan's formula); after the chunks, each group's mean and variance combine
    its chunks per channel, then its channels, the same way (in f64).  Then the
    normalizing pass with a per-channel scale and shift.  When the batch items
    alone keep the threads equally busy (or the kernel is serial), a chunk is a
    whole batch item and runs all of it in one loop, its normalizing pass
    sweeping the positions backward (what the statistics read last is in cache)."""

    #: positions whose mean is the first block's pivot
    LEAD = 4

    def __init__(self, kb, src, ca: int, groups: int):
        self.kb, self.src, self.ca, self.groups = kb, src, ca, groups
        self.N, self.C = src.shape[0], src.shape[ca]
        self.per = self.C // groups
        # the position dims, outermost in memory first
        self.pos = sorted((i for i in range(1, len(src.shape)) if i != ca), key=lambda i: -abs(src.strides[i]))
        self.pshape = [src.shape[i] for i in self.pos]
        self.S = math.prod(self.pshape)
        self.count = self.per * self.S
        self.par = worth_parallel(self.N * self.C * self.S)
        self.whole = not self.par or self.N % NUM_THREADS == 0 or self.N >= 8 * NUM_THREADS
        # position blocks per batch item
        self.B = 1 if self.whole else max(1, min(self.S, MAX_CHUNKS // self.N))
        self.K = self.N * self.B

    def _bounds(self, b):
        """The first and past-the-last position of position block ``b`` of a batch item."""
        B, S = self.B, self.S
        return b * S // B, (b + 1) * S // B

    @contextmanager
    def _chunks(self):
        """A loop over the chunks (parallel when worth it); yields (chunk, batch index,
        first position, past the last)."""
        kb = self.kb
        with kb.for_(self.K, "k", self.par and self.K > 1) as raw:
            k = kb.let(_clamp(_i64(raw), self.K - 1), "k")
            n = kb.let(k // self.B, "n")
            lo, hi = (kb.let(v, nm) for v, nm in zip(self._bounds(k - n * self.B), ("lo", "hi")))
            yield k, n, lo, hi

    @contextmanager
    def _positions(self, n, lo, hi, backward=False):
        """A loop over positions lo..hi-1 (``backward``: hi-1 down to lo) and the channels;
        yields (index of the element, channel)."""
        kb = self.kb
        with kb.for_(hi, "p", start=lo) as p:
            pv = unravel(kb, lo + hi - 1 - p if backward else p, self.pshape)
            with kb.for_(self.C, "c") as c:
                iv = [None] * len(self.src.shape)
                iv[0], iv[self.ca] = n, c
                for i, v in zip(self.pos, pv):
                    iv[i] = v
                yield iv, c

    def _moments(self, k, n, lo, hi):
        """Chunk ``k``'s position count and each channel's running mean and M2 (at
        k * C + channel in ``self.mean`` and ``self.m2``, zero before)."""
        kb, C, src, mean, m2 = self.kb, self.C, self.src, self.mean, self.m2
        kb.store(self.cnt, k, ir.f64(hi - lo))
        pivot, s1, s2 = (kb.alloc(C, "f32", fill=0, prefix=p) for p in ("pivot", "dsum", "dsq"))
        lead = kb.let(_min(hi, lo + self.LEAD), "lead")
        with self._positions(n, lo, lead) as (iv, c):
            kb.store(pivot, c, pivot[c] + src.load_nd(iv))
        with kb.for_(C, "c") as c:
            kb.store(pivot, c, pivot[c] / ir.f32(lead - lo))
        with kb.for_((hi - lo + (FOLD_ROWS - 1)) // FOLD_ROWS, "u") as u:
            p0 = kb.let(lo + u * FOLD_ROWS, "p")
            p1 = kb.let(_min(hi, p0 + FOLD_ROWS), "p")
            with self._positions(n, p0, p1) as (iv, c):
                d = kb.let(src.load_nd(iv) - pivot[c], "d")
                kb.store(s1, c, s1[c] + d)
                kb.store(s2, c, s2[c] + d * d)
            # Chan: the block (nb positions) joins the na before it (no division per channel)
            nb, na = kb.let(ir.f64(p1 - p0), "nb"), kb.let(ir.f64(p0 - lo), "na")
            w, rnb = kb.let(nb / (na + nb), "w"), kb.let(1.0 / nb, "rnb")
            cross = kb.let(na * w, "cw")
            with kb.for_(C, "c") as c:
                at = kb.let(k * C + c, "at")
                t, ma = kb.let(ir.f64(s1[c]), "t"), kb.let(mean[at], "ma")
                delta = kb.let(ir.f64(pivot[c]) + t * rnb - ma, "dl")
                mk = kb.let(ma + delta * w, "mk")
                kb.store(mean, at, mk)
                kb.store(m2, at, m2[at] + (ir.f64(s2[c]) - t * t * rnb) + delta * delta * cross)
                kb.store(pivot, c, ir.f32(mk))
                kb.store(s1, c, ir.const(0.0, "f32"))
                kb.store(s2, c, ir.const(0.0, "f32"))

    def _per_group(self, op, n, gamma, beta, stat_outs):
        """Batch item ``n``'s group statistics (Chan, in f64: its chunks per channel with
        the channel as the vector lane, then the group's channels), stored in
        ``stat_outs``, and each channel's f32 mean, scale and shift."""
        kb, C, per, B, S = self.kb, self.C, self.per, self.B, self.S
        chm, chq = self.chm, self.chq
        with kb.for_(B, "b") as b, kb.for_(C, "c") as c:
            k = kb.let(n * B + b, "k")
            kb.store(chm, n * C + c, chm[n * C + c] + self.cnt[k] * self.mean[k * C + c])
        with kb.for_(C, "c") as c:
            kb.store(chm, n * C + c, chm[n * C + c] / S)
        with kb.for_(B, "b") as b, kb.for_(C, "c") as c:
            k, at = kb.let(n * B + b, "k"), kb.let(n * C + c, "at")
            dm = kb.let(self.mean[k * C + c] - chm[at], "dm")
            kb.store(chq, at, chq[at] + self.m2[k * C + c] + self.cnt[k] * dm * dm)
        with kb.for_(self.groups, "g") as g:
            tot = kb.var(ir.const(0.0), "tot")
            with kb.for_(per, "j") as j:
                kb.assign(tot, tot + chm[n * C + g * per + j])
            m = kb.let(tot / per, "m")
            kb.assign(tot, ir.const(0.0))
            with kb.for_(per, "j") as j:
                at = kb.let(n * C + g * per + j, "at")
                dm = kb.let(chm[at] - m, "dm")
                kb.assign(tot, tot + chq[at] + S * dm * dm)
            var = kb.let(ir.call("max", tot / self.count, 0.0), "var")
            m32 = kb.let(ir.f64(ir.f32(m)), "m32")
            inv = kb.let(ir.f64(ir.f32(inv_std(var, op.attr("epsilon")))), "inv")
            sh = kb.let(ir.f64(ir.f32((m32 - m) * inv)), "sh")
            for out, v in zip(stat_outs, (m, var)):
                kb.emit(out.store_nd([n, g], v))
            with kb.for_(per, "j") as j:
                c = kb.let(g * per + j, "c")
                a, b = inv, sh
                if gamma is not None:
                    gm = kb.let(ir.f64(gamma.load_nd([c])), "gm")
                    a, b = inv * gm, sh * gm + ir.f64(beta.load_nd([c]))
                at = kb.let(n * C + c, "at")
                kb.store(self.mc, at, ir.f32(m32))
                kb.store(self.scale, at, ir.f32(a))
                kb.store(self.shift, at, ir.f32(b))

    def emit(self, op, dst, gamma, beta, stat_outs):
        kb, C, N, K = self.kb, self.C, self.N, self.K
        # per chunk: positions; per chunk and channel: running mean and M2
        self.cnt = kb.alloc(K, "f64", prefix="cnt")
        self.mean, self.m2 = (kb.alloc(K * C, "f64", fill=0, prefix=p) for p in ("mean", "m2"))
        # per batch item and channel: mean and M2 over the positions (f64); the group
        # mean rounded to f32, scale and shift (f32)
        self.chm, self.chq = (kb.alloc(N * C, "f64", fill=0, prefix=p) for p in ("chm", "chq"))
        self.mc, self.scale, self.shift = (kb.alloc(N * C, "f32", prefix=p) for p in ("mc", "scale", "shift"))

        def normalize(n, lo, hi):
            # a whole batch item backward: the positions its statistics read last are the
            # likeliest still in cache (corpus gnorm 0.32 -> 0.27 ms); chunks of positions
            # (in cache whole) forward
            with self._positions(n, lo, hi, backward=self.whole) as (iv, c):
                at = n * C + c
                y = (self.src.load_nd(iv) - self.mc[at]) * self.scale[at] + self.shift[at]
                kb.emit(dst.store_nd(iv, y))

        if self.whole:
            with self._chunks() as (k, n, lo, hi):
                self._moments(k, n, lo, hi)
                self._per_group(op, n, gamma, beta, stat_outs)
                normalize(n, lo, hi)
            return
        with self._chunks() as (k, n, lo, hi):
            self._moments(k, n, lo, hi)
        with kb.for_(N, "n") as n:
            self._per_group(op, n, gamma, beta, stat_outs)
        with self._chunks() as (k, n, lo, hi):
            normalize(n, lo, hi)


# ---------------------------------------------------------------------- RMSNorm
class RMSNorm(_LayerNorm):
    kind = "RMSNorm"
    doc = "dst = gamma * src / sqrt(mean(src^2 over dims begin_norm_axis..) + epsilon); gamma broadcasts to src."
    inputs = (In("src"), In("gamma", optional=True))
    outputs = (Out("dst"),)
    attrs = (EPSILON_1E5, BEGIN_NORM_AXIS)
    dtypes = DtypeTable(["src|dst", "gamma"], [("f32", "f32"), ("bf16", "f32,bf16"), ("f16", "f32,f16")])

    def check(self, op):
        self.begin(op)
        if op.input("gamma") is not None:
            expect_broadcastable(op, "gamma", op.input("src").shape)

    def infer(self, op):
        return [op.input("src").shape]

    def reference(self, op, src, *gamma):
        # The doc's formula reads sqrt(RMS + eps) with RMS already a root; oneDNN
        # (and every framework) divides by sqrt(mean square + eps).
        ms = (src * src).mean(axis=self.axes(op), keepdims=True)
        dst = src / np.sqrt(ms + op.attr("epsilon"))
        return (dst * gamma[0] if gamma else dst,)

    def lower(self, op, kb, ins, outs):
        src, gamma, dst = ins[0], ins[1] if len(ins) == 2 else None, outs[0]
        b = self.begin(op)
        if gamma is None or len(gamma.shape) <= len(src.shape) - b:   # gamma indexed by the trailing dims alone
            (src, dst), _, b = self.merged(b, [src, dst])
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
