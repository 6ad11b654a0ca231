"""Unary elementwise ops and their backward ops (docs: Abs.md ... TanhBackward.md).

Each forward op gives ``fn`` (numpy, float64 in and out); each backward op
gives ``grad(x, dy)`` where x is src, or dst when ``use_dst`` is true.  Their
lowering is graphc/codegen/rules/eltwise.py.
"""
from __future__ import annotations

import math

import numpy as np

from .common import Unary, UnaryBackward
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


def _sigmoid(x):
    # 1 / (1 + e^-x), as e^x / (1 + e^x) below 0: the value keeps its relative
    # accuracy down to float64's subnormals (0.5 (1 + tanh(x / 2)) is 0 below -37)
    x = np.asarray(x)
    with np.errstate(over="ignore"):
        e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0, e) / (1.0 + e)


def _softplus(x, beta=1.0):
    bx = beta * x
    return np.where(bx > 0, bx + np.log1p(np.exp(-np.abs(bx))), np.log1p(np.exp(bx))) / beta


def _erf_arr(x):
    x = np.asarray(x, dtype=np.float64)
    return _erf(x) if x.size else x.copy()


class Abs(Unary):
    kind = "Abs"
    backward = "AbsBackward"

    def fn(self, op, x):
        return np.abs(x)


def check_min_max(op):
    """Clamp's bounds: min <= max (both finite, as every f32 attribute)."""
    lo, hi = op.attr("min"), op.attr("max")
    if not lo <= hi:
        raise InvalidGraphOp("attribute 'min' is greater than attribute 'max'", op=op, where="attributes 'min', 'max'",
                             expected="min <= max", found=f"min {lo!r}, max {hi!r}")


class Clamp(Unary):
    kind = "Clamp"
    backward = "ClampBackward"
    #: src: a dst rounded to bf16 or f16 (f32(-1.3) clamped, stored as -1.296875)
    #: falls inside the bounds and would pass the gradient
    backward_reads_dst = False
    attrs = (Attr("min", "f32"), Attr("max", "f32"))

    def check(self, op):
        super().check(op)
        check_min_max(op)

    def fn(self, op, x):
        return np.minimum(np.maximum(x, op.attr("min")), op.attr("max"))


class Elu(Unary):
    kind = "Elu"
    backward = "EluBackward"
    attrs = (Attr("alpha", "f32", check=non_negative, check_doc="non-negative"),)

    def fn(self, op, x):
        return np.where(x >= 0, x, op.attr("alpha") * np.expm1(np.minimum(x, 0)))


class Exp(Unary):
    kind = "Exp"

    def fn(self, op, x):
        return np.exp(x)

    def vjp(self, op, em):
        return [em.one("Multiply", [em.grad(op.outputs[0]), op.outputs[0]])]


class GELU(Unary):
    kind = "GELU"
    backward = "GELUBackward"
    attrs = (GELU_MODE,)

    def fn(self, op, x):
        if op.attr("mode") == "gelu_tanh":
            return 0.5 * x * (1.0 + np.tanh(SQRT_2_PI * (x + 0.044715 * x ** 3)))
        return 0.5 * x * (1.0 + _erf_arr(x / math.sqrt(2.0)))


class HardSigmoid(Unary):
    kind = "HardSigmoid"
    backward = "HardSigmoidBackward"
    attrs = (Attr("alpha", "f32"), Attr("beta", "f32"))

    def fn(self, op, x):
        return np.clip(op.attr("alpha") * x + op.attr("beta"), 0.0, 1.0)


class HardSwish(Unary):
    kind = "HardSwish"
    backward = "HardSwishBackward"

    def fn(self, op, x):
        return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0


class LeakyReLU(Unary):
    kind = "LeakyReLU"
    attrs = (Attr("alpha", "f32"),)

    def fn(self, op, x):
        return np.where(x >= 0, x, op.attr("alpha") * x)

    def vjp(self, op, em):
        """dy where src > 0, else alpha * dy (torch's choice at 0)."""
        x, dy = op.inputs[0], em.grad(op.outputs[0])
        at_most_0 = em.one("GreaterEqual", [em.zeros_like(x), x], dtype="boolean")
        return [em.one("Select", [at_most_0, em.scale(dy, op.attr("alpha")), dy], dtype=dy.dtype)]


class Log(PositiveSrc, Unary):
    kind = "Log"

    def fn(self, op, x):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(x)

    def vjp(self, op, em):
        return [em.one("Divide", [em.grad(op.outputs[0]), op.inputs[0]])]


class Mish(Unary):
    kind = "Mish"
    backward = "MishBackward"

    def fn(self, op, x):
        return x * np.tanh(_softplus(x))


class Pow(PositiveSrc, Unary):
    kind = "Pow"
    attrs = (Attr("beta", "f32"),)

    def fn(self, op, x):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.power(x, op.attr("beta"))

    def vjp(self, op, em):
        beta = op.attr("beta")
        if beta == 0.0:
            return [em.zeros_like(em.grad(op.outputs[0]))]
        slope = em.scale(em.one("Pow", [op.inputs[0]], {"beta": beta - 1.0}), beta)
        return [em.one("Multiply", [em.grad(op.outputs[0]), slope])]


class Reciprocal(PositiveSrc, Unary):
    kind = "Reciprocal"

    def fn(self, op, x):
        with np.errstate(divide="ignore"):
            return 1.0 / x

    def vjp(self, op, em):
        y = op.outputs[0]
        return [em.neg(em.one("Multiply", [em.grad(y), em.one("Multiply", [y, y])]))]


class ReLU(Unary):
    kind = "ReLU"
    backward = "ReLUBackward"

    def fn(self, op, x):
        return np.maximum(x, 0.0)


class Round(Unary):
    kind = "Round"

    def fn(self, op, x):
        # half away from zero, as oneDNN's round
        return np.sign(x) * np.floor(np.abs(x) + 0.5)

    def vjp(self, op, em):
        return [em.zeros_like(em.grad(op.outputs[0]))]


class Sigmoid(Unary):
    kind = "Sigmoid"
    backward = "SigmoidBackward"

    def fn(self, op, x):
        return _sigmoid(x)


class SoftPlus(Unary):
    kind = "SoftPlus"
    backward = "SoftPlusBackward"
    attrs = (Attr("beta", "f32", 1.0),)

    def fn(self, op, x):
        return _softplus(x, op.attr("beta"))


class Sqrt(PositiveSrc, Unary):
    kind = "Sqrt"
    backward = "SqrtBackward"

    def fn(self, op, x):
        with np.errstate(invalid="ignore"):
            return np.sqrt(x)


class Square(Unary):
    kind = "Square"

    def fn(self, op, x):
        return x * x

    def vjp(self, op, em):
        x = op.inputs[0]
        return [em.one("Multiply", [em.grad(op.outputs[0]), em.one("Add", [x, x])])]


class Tanh(Unary):
    kind = "Tanh"
    backward = "TanhBackward"

    def fn(self, op, x):
        return np.tanh(x)


# ------------------------------------------------------------------ backward ops
class AbsBackward(UnaryBackward):
    kind = "AbsBackward"
    forward = "Abs"

    def grad(self, op, x, dy):
        return dy * np.sign(x)


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


class HardSigmoidBackward(UnaryBackward):
    kind = "HardSigmoidBackward"
    forward = "HardSigmoid"
    attrs = (Attr("alpha", "f32"), Attr("beta", "f32"))

    def grad(self, op, x, dy):
        a, b = op.attr("alpha"), op.attr("beta")
        v = a * x + b
        return np.where((v > 0) & (v < 1), dy * a, 0.0)


class HardSwishBackward(UnaryBackward):
    kind = "HardSwishBackward"
    forward = "HardSwish"

    def grad(self, op, x, dy):
        return np.where(x < -3, 0.0, np.where(x > 3, dy, dy * (2 * x + 3) / 6.0))


class MishBackward(UnaryBackward):
    kind = "MishBackward"
    forward = "Mish"

    def grad(self, op, x, dy):
        sp = _softplus(x)
        t = np.tanh(sp)
        return dy * (t + x * (1 - t * t) * _sigmoid(x))


class ReLUBackward(UnaryBackward):
    kind = "ReLUBackward"
    forward = "ReLU"
    inputs = SRC_OR_DST
    attrs = (USE_DST,)

    def grad(self, op, x, dy):
        return np.where(x > 0, dy, 0.0)


class SigmoidBackward(UnaryBackward):
    kind = "SigmoidBackward"
    forward = "Sigmoid"
    inputs = SRC_OR_DST
    attrs = (USE_DST,)

    def grad(self, op, x, dy):
        s = x if op.attr("use_dst") else _sigmoid(x)
        return dy * s * (1 - s)


class SoftPlusBackward(UnaryBackward):
    kind = "SoftPlusBackward"
    forward = "SoftPlus"
    attrs = (Attr("beta", "f32", 1.0),)

    def grad(self, op, x, dy):
        return dy * _sigmoid(op.attr("beta") * x)


class SqrtBackward(PositiveSrc, UnaryBackward):
    kind = "SqrtBackward"
    forward = "Sqrt"
    inputs = SRC_OR_DST
    attrs = (USE_DST,)

    def grad(self, op, x, dy):
        with np.errstate(divide="ignore", invalid="ignore"):
            s = x if op.attr("use_dst") else np.sqrt(x)
            return dy / (2 * s)


class TanhBackward(UnaryBackward):
    kind = "TanhBackward"
    forward = "Tanh"
    inputs = SRC_OR_DST
    attrs = (USE_DST,)

    def grad(self, op, x, dy):
        t = x if op.attr("use_dst") else np.tanh(x)
        return dy * (1 - t * t)
