"""Lowering of the binary ops (graphc/ops/binary.py): each is an IR expression
of the loaded operands.  Kernels compute in the widened type the loads give
(f32 for floats, int64 for s32, so s32 sums are exact before the saturating
store, as in the reference)."""
from __future__ import annotations

from .. import ir
from . import ElementwiseRule


class Add(ElementwiseRule):
    kinds = ("Add",)

    def expr(self, op, a, b):
        return a + b


class Subtract(ElementwiseRule):
    kinds = ("Subtract",)

    def expr(self, op, a, b):
        return a - b


class Multiply(ElementwiseRule):
    kinds = ("Multiply",)

    def expr(self, op, a, b):
        return a * b


class Divide(ElementwiseRule):
    kinds = ("Divide",)

    def expr(self, op, a, b):
        return a / b


class Maximum(ElementwiseRule):
    kinds = ("Maximum",)

    def expr(self, op, a, b):
        return ir.call("np.maximum", a, b)


class Minimum(ElementwiseRule):
    kinds = ("Minimum",)

    def expr(self, op, a, b):
        return ir.call("np.minimum", a, b)


class SquaredDifference(ElementwiseRule):
    kinds = ("SquaredDifference",)

    def expr(self, op, a, b):
        return (a - b) * (a - b)


class GreaterEqual(ElementwiseRule):
    kinds = ("GreaterEqual",)

    def expr(self, op, a, b):
        return a >= b


class Select(ElementwiseRule):
    kinds = ("Select",)

    def expr(self, op, cond, a, b):
        return ir.select(cond, a, b)
