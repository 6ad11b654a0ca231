"""Lowering of the unary elementwise ops and their backward ops
(graphc/ops/eltwise.py): each is an IR expression of the loaded src (and
diff_dst), computed through the shared elementwise loop nest or substituted by
fused kernels into their consumers."""
from __future__ import annotations

import math

from .. import ir
from . import ElementwiseRule

SQRT_2_PI = math.sqrt(2.0 / math.pi)


def tanh(x):
    """tanh in the kernel: the vectorizable float32 helper for float32 math."""
    return f32_or("math.tanh", "tanh_f32", x)


def sigmoid(x):
    """sigmoid in the kernel: the vectorizable float32 helper for float32 math."""
    return f32_or("sigmoid", "sigmoid_f32", x)


def f32_or(name, f32_name, *args):
    """A call of the vectorizable float32 helper ``f32_name`` (graphc/codegen/fastmath.py)
    when the math is float32, else of libm's ``name``."""
    return ir.call(f32_name, *args) if args[0].dt == "f32" else ir.call(name, *args)


def softplus(x, beta: float):
    """log(1 + exp(beta x)) / beta in the kernel."""
    return f32_or("softplus", "softplus_f32", x, beta)


def clamp(x, lo, hi):
    """min(max(x, lo), hi) in the kernel."""
    return ir.call("np.minimum", ir.call("np.maximum", x, lo), hi)


class Abs(ElementwiseRule):
    kinds = ("Abs",)

    def expr(self, op, x):
        return ir.call("abs", x)


class Clamp(ElementwiseRule):
    kinds = ("Clamp",)

    def expr(self, op, x):
        return clamp(x, float(op.attr("min")), float(op.attr("max")))


class Elu(ElementwiseRule):
    kinds = ("Elu",)

    def expr(self, op, x):
        return ir.select(x >= 0, x, float(op.attr("alpha")) * f32_or("math.expm1", "expm1_f32", x))


class Exp(ElementwiseRule):
    kinds = ("Exp",)

    def expr(self, op, x):
        return f32_or("math.exp", "exp_f32", x)


class GELU(ElementwiseRule):
    kinds = ("GELU",)

    def expr(self, op, x):
        if op.attr("mode") == "gelu_tanh":
            return 0.5 * x * (1.0 + tanh(SQRT_2_PI * (x + 0.044715 * x * x * x)))
        if x.dt == "f32":
            return ir.call("gelu_erf_f32", x)
        return 0.5 * x * (1.0 + ir.call("math.erf", x * (1 / math.sqrt(2.0))))


class HardSigmoid(ElementwiseRule):
    kinds = ("HardSigmoid",)

    def expr(self, op, x):
        return clamp(float(op.attr("alpha")) * x + float(op.attr("beta")), 0.0, 1.0)


class HardSwish(ElementwiseRule):
    kinds = ("HardSwish",)

    def expr(self, op, x):
        # x itself from 3 up: x * 6 / 6 would overflow f32 above 5.7e37 (NaN takes x too)
        return ir.select(x < 3.0, x * ir.call("np.maximum", x + 3.0, 0.0) / 6.0, x)


class LeakyReLU(ElementwiseRule):
    kinds = ("LeakyReLU",)

    def expr(self, op, x):
        return ir.select(x >= 0, x, float(op.attr("alpha")) * x)


class Log(ElementwiseRule):
    kinds = ("Log",)

    def expr(self, op, x):
        return f32_or("np.log", "log_f32", x)


class Mish(ElementwiseRule):
    kinds = ("Mish",)

    def expr(self, op, x):
        return x * tanh(softplus(x, 1.0))


class Pow(ElementwiseRule):
    kinds = ("Pow",)

    #: small whole exponents as products (no libm call: the loop vectorises; at most
    #: three roundings, within every float tolerance), others through np.power
    PRODUCTS = {1.0: 1, 2.0: 2, 3.0: 3, 4.0: 4, -1.0: -1, -2.0: -2}

    def expr(self, op, x):
        beta = float(op.attr("beta"))
        n = self.PRODUCTS.get(beta)
        if n is None:
            return ir.call("np.power", x, beta)
        prod = x
        for _ in range(abs(n) - 1):
            prod = prod * x
        return prod if n > 0 else 1.0 / prod


class Reciprocal(ElementwiseRule):
    kinds = ("Reciprocal",)

    def expr(self, op, x):
        return 1.0 / x


class ReLU(ElementwiseRule):
    kinds = ("ReLU",)

    def expr(self, op, x):
        return ir.call("np.maximum", x, 0.0)


class Round(ElementwiseRule):
    kinds = ("Round",)

    def expr(self, op, x):
        return ir.call("round_half_away", x)


class Sigmoid(ElementwiseRule):
    kinds = ("Sigmoid",)

    def expr(self, op, x):
        return sigmoid(x)


class SoftPlus(ElementwiseRule):
    kinds = ("SoftPlus",)

    def expr(self, op, x):
        return softplus(x, float(op.attr("beta")))


class Sqrt(ElementwiseRule):
    kinds = ("Sqrt",)

    def expr(self, op, x):
        return ir.call("np.sqrt", x)


class Square(ElementwiseRule):
    kinds = ("Square",)

    def expr(self, op, x):
        return x * x


class Tanh(ElementwiseRule):
    kinds = ("Tanh",)

    def expr(self, op, x):
        return tanh(x)


# ------------------------------------------------------------------ backward ops
# x is src, or dst when the op's use_dst is true; dy is diff_dst
class AbsBackward(ElementwiseRule):
    kinds = ("AbsBackward",)

    def expr(self, op, x, dy):
        return dy * ir.call("np.sign", x)


class ClampBackward(ElementwiseRule):
    kinds = ("ClampBackward",)

    def expr(self, op, x, dy):
        return ir.select((x > float(op.attr("min"))) & (x < float(op.attr("max"))), dy, 0.0)


class EluBackward(ElementwiseRule):
    kinds = ("EluBackward",)

    def expr(self, op, x, dy):
        a = float(op.attr("alpha"))
        if op.attr("use_dst"):
            return ir.select(x > 0, dy, dy * (x + a))
        # exp of x <= 0 where it is taken (the other lanes' values are discarded), its
        # subnormal values kept: dy may scale them back
        return ir.select(x > 0, dy, dy * a * f32_or("math.exp", "exp_sub_f32", x))


class GELUBackward(ElementwiseRule):
    kinds = ("GELUBackward",)

    def expr(self, op, x, dy):
        if op.attr("mode") == "gelu_tanh":
            return ir.call("gelu_tanh_grad", x) * dy
        cdf = 0.5 * (1.0 + f32_or("math.erf", "erf_f32", x * (1 / math.sqrt(2.0))))
        pdf = f32_or("math.exp", "exp_sub_f32", -0.5 * x * x) * (1 / math.sqrt(2.0 * math.pi))
        return dy * (cdf + x * pdf)


class HardSigmoidBackward(ElementwiseRule):
    kinds = ("HardSigmoidBackward",)

    def expr(self, op, x, dy):
        a, b = float(op.attr("alpha")), float(op.attr("beta"))
        # the kink tests in f64, as the reference (a * x is exact there, + b rounds once):
        # in f32, a * x + b rounds twice and an x next to a kink falls on the other side
        v = a * ir.f64(x) + b
        return ir.select((v > 0.0) & (v < 1.0), dy * a, 0.0)


class HardSwishBackward(ElementwiseRule):
    kinds = ("HardSwishBackward",)

    def expr(self, op, x, dy):
        # dy times the slope (at most 1.5): dy * (2x + 3) first would overflow f32 for large dy
        return ir.select(x < -3.0, ir.const(0.0, dy.dt), ir.select(x > 3.0, dy, dy * ((2.0 * x + 3.0) / 6.0)))


class MishBackward(ElementwiseRule):
    kinds = ("MishBackward",)

    def expr(self, op, x, dy):
        return f32_or("mish_grad", "mish_grad_f32", x) * dy


class ReLUBackward(ElementwiseRule):
    kinds = ("ReLUBackward",)

    def expr(self, op, x, dy):
        return ir.select(x > 0, dy, 0.0)


class SigmoidBackward(ElementwiseRule):
    kinds = ("SigmoidBackward",)

    def expr(self, op, x, dy):
        if op.attr("use_dst"):
            # three factors of any size (x is a dst but may hold anything): in f64, as the
            # reference, so that no partial product overflows f32 where the result does not
            xd = ir.f64(x)
            return ir.f64(dy) * xd * (1.0 - xd)
        s = f32_or("sigmoid", "sigmoid_sub_f32", x)   # (subnormal values kept: dy may scale them back)
        return dy * s * (1.0 - s)


class SoftPlusBackward(ElementwiseRule):
    kinds = ("SoftPlusBackward",)

    def expr(self, op, x, dy):
        return dy * f32_or("sigmoid", "sigmoid_sub_f32", float(op.attr("beta")) * x)


class SqrtBackward(ElementwiseRule):
    kinds = ("SqrtBackward",)

    def expr(self, op, x, dy):
        if op.attr("use_dst"):
            # in f64, as the reference: in f32, 2 * x overflows above 1.7e38, and dy / 2
            # loses a subnormal dy's last bit (divided by a subnormal x, no longer small)
            return ir.f64(dy) / (2.0 * ir.f64(x))
        return dy / (2.0 * ir.call("np.sqrt", x))


class TanhBackward(ElementwiseRule):
    kinds = ("TanhBackward",)

    def expr(self, op, x, dy):
        if op.attr("use_dst"):
            xd = ir.f64(x)   # x * x overflows f32 above 1.8e19: in f64, as the reference
            return dy * (1.0 - xd * xd)
        return dy * (1.0 - tanh(x) ** 2)
