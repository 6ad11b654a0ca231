"""Normalization ops (docs: BatchNormInference.md, BatchNormForwardTraining.md,
BatchNormTrainingBackward.md, LayerNorm.md, LayerNormBackward.md, GroupNorm.md,
RMSNorm.md).

All of them normalize ``x`` over some ``axes`` as ``(x - mean) / sqrt(var + eps)``
with the biased variance; the backward ops differentiate that through the
statistics (which were computed from ``x`` itself).  Their lowering is
graphc/codegen/rules/norm.py.
"""
from __future__ import annotations

import numpy as np

from ..errors import InvalidGraphOp
from ..types import DataType
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


def unused(op, em, inputs) -> list:
    """Zero gradients for ``inputs`` given but not used (gamma and beta without
    use_affine), None where none is wanted."""
    return [em.zeros_like(t) if em.wants(t) else None for t in inputs]


def channel_view(v, ndim, axis):
    """A [C] vector shaped to broadcast along dim ``axis`` of a rank-ndim tensor."""
    return v.reshape(with_dim((1,) * ndim, axis, -1))


def other_axes(ndim, axis):
    return tuple(i for i in range(ndim) if i != axis)


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

    def vjp(self, op, em):
        """dst = gamma * inv * (src - mean) + beta, inv = (variance + epsilon)^-1/2,
        differentiated with binary ops per channel."""
        src, gamma, beta, mean, var = op.inputs
        dy = em.cast(em.grad(op.outputs[0]), gamma.dtype)     # (sums per channel in the statistics' type)
        view = with_dim((1,) * src.ndim, channel_dim(op), gamma.shape[0])
        g, m, v = (em.reshape(t, view) for t in (gamma, mean, var))
        inv = em.one("Pow", [em.one("Add", [v, em.full_like(v, op.attr("epsilon"))])], {"beta": -0.5})
        centred, scaled = em.one("Subtract", [src, m], dtype=m.dtype), em.one("Multiply", [g, inv])
        dx = em.one("Multiply", [dy, scaled], dtype=m.dtype)

        def per_channel(t):
            return em.reshape(em.sum_to(t, view), gamma.shape)
        return [dx,
                per_channel(em.one("Multiply", [dy, em.one("Multiply", [centred, inv])], dtype=m.dtype))
                if em.wants(gamma) else None,
                per_channel(dy) if em.wants(beta) else None,
                em.neg(per_channel(dx)) if em.wants(mean) else None,
                em.scale(em.one("Multiply", [per_channel(em.one("Multiply", [dy, centred], dtype=m.dtype)),
                                             em.reshape(em.one("Multiply", [scaled, em.one("Multiply", [inv, inv])]),
                                                        gamma.shape)]), -0.5) if em.wants(var) else None]


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

    grad_outputs = ("dst",)
    grad_inputs = ("src", "gamma", "beta")   # (dst is normalized by the batch's statistics, not the running ones)

    def vjp(self, op, em):
        """BatchNormTrainingBackward on the forward's batch statistics."""
        src, gamma = op.input("src"), op.input("gamma")
        ins = [src, em.grad(op.outputs[0]), op.output("batch_mean"), op.output("batch_variance"), gamma]
        outs = [src.dtype] + ([gamma.dtype] * 2 if gamma is not None else [])
        grads = em.like("BatchNormTrainingBackward", ins, op, outs)
        return [grads[0], None, None] + grads[1:]


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

    grad_outputs = ("dst",)

    def vjp(self, op, em):
        """LayerNormBackward on the forward's mean and variance (keep_stats made
        true when the forward did not keep them)."""
        src, affine = op.input("src"), op.attr("use_affine")
        dtype = op.inputs[1].dtype if len(op.inputs) > 1 else DataType.f32
        stats = [em.stat(op, name, dtype, keep_stats=True) for name in ("mean", "variance")]
        ins = [src, em.grad(op.outputs[0])] + stats + (op.inputs[1:] if affine else [])
        outs = [src.dtype] + [t.dtype for t in op.inputs[1:]] * affine
        return em.like("LayerNormBackward", ins, op, outs) + unused(op, em, [] if affine else op.inputs[1:])


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

    grad_outputs = ("dst",)

    def vjp(self, op, em):
        """LayerNormBackward over [N, groups, the group's elements] with the
        forward's mean and variance (keep_stats made true when off); gamma's and
        beta's gradients summed per channel (BiasAddBackward)."""
        src, dy = op.input("src"), em.grad(op.outputs[0])
        affine = op.attr("use_affine") and op.input("gamma") is not None
        dtype = op.input("gamma").dtype if op.input("gamma") is not None else DataType.f32
        mean, var = (em.stat(op, name, dtype, keep_stats=True) for name in ("mean", "variance"))
        view = with_dim((1,) * src.ndim, channel_dim(op), src.shape[channel_dim(op)])
        g = em.one("Multiply", [dy, em.reshape(op.input("gamma"), view)], dtype=dtype) if affine else dy
        x = em.cast(src, g.dtype)
        to, back = self.grouped(op, em)
        lnb = {"begin_norm_axis": 2, "use_affine": False, "epsilon": op.attr("epsilon")}
        dx = back(em.one("LayerNormBackward", [to(x), to(g), mean, var], lnb))
        if not affine:
            return [dx] + unused(op, em, op.inputs[1:])
        stat = (op.input("src").shape[0], op.attr("groups"), 1)
        inv = em.one("Pow", [em.one("Add", [var, em.full_like(var, op.attr("epsilon"))])], {"beta": -0.5})
        xhat = em.one("Multiply", [em.one("Subtract", [to(x), em.reshape(mean, stat)]), em.reshape(inv, stat)])
        per_channel, dy = {"data_format": op.attr("data_format")}, em.cast(dy, dtype)   # (sums in gamma's type)
        return [dx, em.one("BiasAddBackward", [em.one("Multiply", [dy, back(xhat)], dtype=dtype)], per_channel),
                em.one("BiasAddBackward", [dy], per_channel)]

    def grouped(self, op, em):
        """(a tensor of src's shape to [N, groups, the group's elements], and back):
        a reshape for NCX; NXC's channels (last) go before the spatial dims first."""
        shape, groups = op.input("src").shape, op.attr("groups")
        n, rest = shape[0], int(np.prod(shape[1:])) // groups
        if op.attr("data_format") == "NCX":
            return (lambda t: em.reshape(t, (n, groups, rest))), (lambda t: em.reshape(t, shape))
        split = (n, int(np.prod(shape[1:-1])), groups, shape[-1] // groups)
        swapped = (n, groups, split[1], split[3])
        return (lambda t: em.reshape(em.transpose(em.reshape(t, split), (0, 2, 1, 3)), (n, groups, rest)),
                lambda t: em.reshape(em.transpose(em.reshape(t, swapped), (0, 2, 1, 3)), shape))


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

    def vjp(self, op, em):
        """dst = src * r * gamma, r = (mean(src^2) + epsilon)^-1/2 recomputed in f32:
        diff_src = r * (g - src * r^2 * mean(g * src)), g = diff_dst * gamma."""
        x, gamma = em.cast(op.inputs[0], DataType.f32), op.input("gamma")
        dy = em.cast(em.grad(op.outputs[0]), DataType.f32)
        mean = {"axes": list(self.axes(op)), "keep_dims": True}
        ms = em.one("ReduceMean", [em.one("Multiply", [x, x])], mean)
        r = em.one("Pow", [em.one("Add", [ms, em.full_like(ms, op.attr("epsilon"))])], {"beta": -0.5})
        g = dy if gamma is None else em.one("Multiply", [dy, em.cast(gamma, DataType.f32)])
        c = em.one("ReduceMean", [em.one("Multiply", [g, x])], mean)
        t = em.one("Multiply", [em.one("Multiply", [x, em.one("Multiply", [r, r])]), c])
        dx = em.one("Multiply", [r, em.one("Subtract", [g, t])])
        dgamma = em.sum_to(em.one("Multiply", [dy, em.one("Multiply", [x, r])]), gamma.shape) \
            if em.wants(gamma) else None
        return [dx, dgamma]
