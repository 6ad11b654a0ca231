"""Unary elementwise ops and their backward ops (docs: Abs.md ... TanhBackward.md).

Each forward op gives ``fn`` (numpy, float64 in and out); each backward op
gives ``grad(x, dy)`` where x is src, or dst when ``use_dst`` is true.
"""
from __future__ import annotations

import math

import numpy as np

from .common import Unary, UnaryBackward
from ..codegen import ir
from ..errors import InvalidGraphOp
from .schema import Attr, In, non_negative

_erf = np.vectorize(math.erf, otypes=[np.float64])
SQRT_2_PI = math.sqrt(2.0 / math.pi)

USE_DST = Attr("use_dst", "bool", True, doc="if true, input 0 is dst of the forward op, else src")
SRC_OR_DST = (In("src", doc="src of the forward op, or its dst when use_dst is true"), In("diff_dst"))
GELU_MODE = Attr("mode", "string", "gelu_erf", choices=("gelu_erf", "gelu_tanh"))


class PositiveSrc:
    """For ops defined on positive src only (log, sqrt, 1/x, x**beta): generated
    test data for src stays in [0.25, 4]."""

    def input_range(self, op, index):
        return (0.25, 4.0) if index == 0 else super().input_range(op, index)


def tanh(x):
    """tanh in the kernel: the vectorizable float32 helper for float32 math."""
    return ir.call("tanh_f32", x) if x.dt == "f32" else ir.call("math.tanh", x)


def sigmoid(x):
    """sigmoid in the kernel: the vectorizable float32 helper for float32 math."""
    return ir.call("sigmoid_f32", x) if x.dt == "f32" else ir.call("sigmoid", x)


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _softplus(x, beta=1.0):
    bx = beta * x
    return np.where(bx > 0, bx + np.log1p(np.exp(-np.abs(bx))), np.log1p(np.exp(bx))) / beta


def _erf_arr(x):
    x = np.asarray(x, dtype=np.float64)
    return _erf(x) if x.size else x.copy()


class Abs(Unary):
    kind = "Abs"

    def fn(self, op, x):
        return np.abs(x)

    def expr(self, op, x):
        return ir.call("abs", x)


def check_min_max(op):
    """Clamp's bounds: min <= max (both finite, as every f32 attribute)."""
    lo, hi = op.attr("min"), op.attr("max")
    if not lo <= hi:
        raise InvalidGraphOp("attribute 'min' is greater than attribute 'max'", op=op, where="attributes 'min', 'max'",
                             expected="min <= max", found=f"min {lo!r}, max {hi!r}")


class Clamp(Unary):
    kind = "Clamp"
    attrs = (Attr("min", "f32"), Attr("max", "f32"))

    def check(self, op):
        super().check(op)
        check_min_max(op)

    def fn(self, op, x):
        return np.minimum(np.maximum(x, op.attr("min")), op.attr("max"))

    def expr(self, op, x):
        return ir.call("np.minimum", ir.call("np.maximum", x, float(op.attr("min"))), float(op.attr("max")))


class Elu(Unary):
    kind = "Elu"
    attrs = (Attr("alpha", "f32", check=non_negative, check_doc="non-negative"),)

    def fn(self, op, x):
        return np.where(x >= 0, x, op.attr("alpha") * np.expm1(np.minimum(x, 0)))

    def expr(self, op, x):
        return ir.select(x >= 0, x, float(op.attr("alpha")) * ir.call("math.expm1", x))


class Exp(Unary):
    kind = "Exp"

    def fn(self, op, x):
        return np.exp(x)

    def expr(self, op, x):
        return ir.call("math.exp", x)


class GELU(Unary):
    kind = "GELU"
    attrs = (GELU_MODE,)

    def fn(self, op, x):
        if op.attr("mode") == "gelu_tanh":
            return 0.5 * x * (1.0 + np.tanh(SQRT_2_PI * (x + 0.044715 * x ** 3)))
        return 0.5 * x * (1.0 + _erf_arr(x / math.sqrt(2.0)))

    def expr(self, op, x):
        if op.attr("mode") == "gelu_tanh":
            return 0.5 * x * (1.0 + tanh(SQRT_2_PI * (x + 0.044715 * x * x * x)))
        if x.dt == "f32":
            return ir.call("gelu_erf_f32", x)
        return 0.5 * x * (1.0 + ir.call("math.erf", x * (1 / math.sqrt(2.0))))


class HardSigmoid(Unary):
    kind = "HardSigmoid"
    attrs = (Attr("alpha", "f32"), Attr("beta", "f32"))

    def fn(self, op, x):
        return np.clip(op.attr("alpha") * x + op.attr("beta"), 0.0, 1.0)

    def expr(self, op, x):
        return ir.call("np.minimum", ir.call("np.maximum", float(op.attr("alpha")) * x + float(op.attr("beta")), 0.0), 1.0)


class HardSwish(Unary):
    kind = "HardSwish"

    def fn(self, op, x):
        return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0

    def expr(self, op, x):
        return x * ir.call("np.minimum", ir.call("np.maximum", x + 3.0, 0.0), 6.0) / 6.0


class LeakyReLU(Unary):
    kind = "LeakyReLU"
    attrs = (Attr("alpha", "f32"),)

    def fn(self, op, x):
        return np.where(x >= 0, x, op.attr("alpha") * x)

    def expr(self, op, x):
        return ir.select(x >= 0, x, float(op.attr("alpha")) * x)


class Log(PositiveSrc, Unary):
    kind = "Log"

    def fn(self, op, x):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(x)

    def expr(self, op, x):
        return ir.call("np.log", x)


class Mish(Unary):
    kind = "Mish"

    def fn(self, op, x):
        return x * np.tanh(_softplus(x))

    def expr(self, op, x):
        return x * tanh(ir.call("softplus", x, 1.0))


class Pow(PositiveSrc, Unary):
    kind = "Pow"
    attrs = (Attr("beta", "f32"),)

    def fn(self, op, x):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.power(x, op.attr("beta"))

    def expr(self, op, x):
        return ir.call("np.power", x, float(op.attr("beta")))


class Reciprocal(PositiveSrc, Unary):
    kind = "Reciprocal"

    def fn(self, op, x):
        with np.errstate(divide="ignore"):
            return 1.0 / x

    def expr(self, op, x):
        return 1.0 / x


class ReLU(Unary):
    kind = "ReLU"

    def fn(self, op, x):
        return np.maximum(x, 0.0)

    def expr(self, op, x):
        return ir.call("np.maximum", x, 0.0)


class Round(Unary):
    kind = "Round"

    def fn(self, op, x):
        # half away from zero, as oneDNN's round
        return np.sign(x) * np.floor(np.abs(x) + 0.5)

    def expr(self, op, x):
        return ir.call("round_half_away", x)


class Sigmoid(Unary):
    kind = "Sigmoid"

    def fn(self, op, x):
        return _sigmoid(x)

    def expr(self, op, x):
        return sigmoid(x)


class SoftPlus(Unary):
    kind = "SoftPlus"
    attrs = (Attr("beta", "f32", 1.0),)

    def fn(self, op, x):
        return _softplus(x, op.attr("beta"))

    def expr(self, op, x):
        return ir.call("softplus", x, float(op.attr("beta")))


class Sqrt(PositiveSrc, Unary):
    kind = "Sqrt"

    def fn(self, op, x):
        with np.errstate(invalid="ignore"):
            return np.sqrt(x)

    def expr(self, op, x):
        return ir.call("np.sqrt", x)


class Square(Unary):
    kind = "Square"

    def fn(self, op, x):
        return x * x

    def expr(self, op, x):
        return x * x


class Tanh(Unary):
    kind = "Tanh"

    def fn(self, op, x):
        return np.tanh(x)

    def expr(self, op, x):
        return tanh(x)


# ------------------------------------------------------------------ backward ops
class AbsBackward(UnaryBackward):
    kind = "AbsBackward"
    forward = "Abs"

    def grad(self, op, x, dy):
        return dy * np.sign(x)

    def expr(self, op, x, dy):
        return dy * ir.call("np.sign", x)


class ClampBackward(UnaryBackward):
    kind = "ClampBackward"
    forward = "Clamp"
    inputs = SRC_OR_DST
    attrs = (Attr("min", "f32"), Attr("max", "f32"), USE_DST)

    def check(self, op):
        super().check(op)
        check_min_max(op)

    def grad(self, op, x, dy):
        lo, hi = op.attr("min"), op.attr("max")
        # with use_dst, x = clamp(src): the same open interval selects the gradient
        return np.where((x > lo) & (x < hi), dy, 0.0)

    def expr(self, op, x, dy):
        return ir.select((x > float(op.attr("min"))) & (x < float(op.attr("max"))), dy, 0.0)


class EluBackward(UnaryBackward):
    kind = "EluBackward"
    forward = "Elu"
    inputs = SRC_OR_DST
    attrs = (Attr("alpha", "f32", check=non_negative, check_doc="non-negative"), USE_DST)

    def grad(self, op, x, dy):
        a = op.attr("alpha")
        if op.attr("use_dst"):
            return np.where(x > 0, dy, dy * (x + a))
        return np.where(x > 0, dy, dy * a * np.exp(np.minimum(x, 0)))

    def expr(self, op, x, dy):
        a = float(op.attr("alpha"))
        if op.attr("use_dst"):
            return ir.select(x > 0, dy, dy * (x + a))
        return ir.select(x > 0, dy, dy * a * ir.call("math.exp", x))


class GELUBackward(UnaryBackward):
    kind = "GELUBackward"
    forward = "GELU"
    attrs = (GELU_MODE,)

    def grad(self, op, x, dy):
        if op.attr("mode") == "gelu_tanh":
            u = SQRT_2_PI * (x + 0.044715 * x ** 3)
            t = np.tanh(u)
            du = SQRT_2_PI * (1.0 + 3 * 0.044715 * x ** 2)
            return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)
        cdf = 0.5 * (1.0 + _erf_arr(x / math.sqrt(2.0)))
        pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        return dy * (cdf + x * pdf)

    def expr(self, op, x, dy):
        if op.attr("mode") == "gelu_tanh":
            return ir.call("gelu_tanh_grad", x) * dy
        cdf = 0.5 * (1.0 + ir.call("math.erf", x * (1 / math.sqrt(2.0))))
        pdf = ir.call("math.exp", -0.5 * x * x) * (1 / math.sqrt(2.0 * math.pi))
        return dy * (cdf + x * pdf)


class HardSigmoidBackward(UnaryBackward):
    kind = "HardSigmoidBackward"
    forward = "HardSigmoid"
    attrs = (Attr("alpha", "f32"), Attr("beta", "f32"))

    def grad(self, op, x, dy):
        a, b = op.attr("alpha"), op.attr("beta")
        v = a * x + b
        return np.where((v > 0) & (v < 1), dy * a, 0.0)

    def expr(self, op, x, dy):
        a, b = float(op.attr("alpha")), float(op.attr("beta"))
        v = a * x + b
        return ir.select((v > 0.0) & (v < 1.0), dy * a, 0.0)


class HardSwishBackward(UnaryBackward):
    kind = "HardSwishBackward"
    forward = "HardSwish"

    def grad(self, op, x, dy):
        return np.where(x < -3, 0.0, np.where(x > 3, dy, dy * (2 * x + 3) / 6.0))

    def expr(self, op, x, dy):
        return ir.select(x < -3.0, ir.const(0.0, dy.dt), ir.select(x > 3.0, dy, dy * (2.0 * x + 3.0) / 6.0))


class MishBackward(UnaryBackward):
    kind = "MishBackward"
    forward = "Mish"

    def grad(self, op, x, dy):
        sp = _softplus(x)
        t = np.tanh(sp)
        return dy * (t + x * (1 - t * t) * _sigmoid(x))

    def expr(self, op, x, dy):
        return ir.call("mish_grad", x) * dy


class ReLUBackward(UnaryBackward):
    kind = "ReLUBackward"
    forward = "ReLU"
    inputs = SRC_OR_DST
    attrs = (USE_DST,)

    def grad(self, op, x, dy):
        return np.where(x > 0, dy, 0.0)

    def expr(self, op, x, dy):
        return ir.select(x > 0, dy, 0.0)


class SigmoidBackward(UnaryBackward):
    kind = "SigmoidBackward"
    forward = "Sigmoid"
    inputs = SRC_OR_DST
    attrs = (USE_DST,)

    def grad(self, op, x, dy):
        s = x if op.attr("use_dst") else _sigmoid(x)
        return dy * s * (1 - s)

    def expr(self, op, x, dy):
        if op.attr("use_dst"):
            return dy * x * (1.0 - x)
        return dy * sigmoid(x) * (1.0 - sigmoid(x))


class SoftPlusBackward(UnaryBackward):
    kind = "SoftPlusBackward"
    forward = "SoftPlus"
    attrs = (Attr("beta", "f32", 1.0),)

    def grad(self, op, x, dy):
        return dy * _sigmoid(op.attr("beta") * x)

    def expr(self, op, x, dy):
        return dy * sigmoid(float(op.attr("beta")) * x)


class SqrtBackward(PositiveSrc, UnaryBackward):
    kind = "SqrtBackward"
    forward = "Sqrt"
    inputs = SRC_OR_DST
    attrs = (USE_DST,)

    def grad(self, op, x, dy):
        with np.errstate(divide="ignore", invalid="ignore"):
            s = x if op.attr("use_dst") else np.sqrt(x)
            return dy / (2 * s)

    def expr(self, op, x, dy):
        if op.attr("use_dst"):
            return dy / (2.0 * x)
        return dy / (2.0 * ir.call("np.sqrt", x))


class TanhBackward(UnaryBackward):
    kind = "TanhBackward"
    forward = "Tanh"
    inputs = SRC_OR_DST
    attrs = (USE_DST,)

    def grad(self, op, x, dy):
        t = x if op.attr("use_dst") else np.tanh(x)
        return dy * (1 - t * t)

    def expr(self, op, x, dy):
        if op.attr("use_dst"):
            return dy * (1.0 - x * x)
        return dy * (1.0 - tanh(x) ** 2)
