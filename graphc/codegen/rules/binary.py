"""Lowering of the binary ops (graphc/ops/binary.py): each is an IR expression
of the loaded operands.  Kernels compute in the widened type the loads give
(f32 for floats, int64 for integers: never an integer through a float); an
integer Add, Subtract or Multiply wraps to dst's width (s32: a cast to int32),
as the reference and numpy do.  The comparisons and logical ops give booleans."""
from __future__ import annotations

from .. import ir
from ..kernel import wrapped
from . import ElementwiseRule


class Arithmetic(ElementwiseRule):
    """Add, Subtract, Multiply: ``fn`` of the operands, wrapped to dst's width when
    dst is an integer type."""

    def fn(self, a, b):
        raise NotImplementedError

    def expr(self, op, a, b):
        dst = op.outputs[0].dtype
        return wrapped(self.fn(a, b), dst) if dst.is_int else self.fn(a, b)


class Add(Arithmetic):
    kinds = ("Add",)

    def fn(self, a, b):
        return a + b


class Subtract(Arithmetic):
    kinds = ("Subtract",)

    def fn(self, a, b):
        return a - b


class Multiply(Arithmetic):
    kinds = ("Multiply",)

    def fn(self, a, b):
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


#: comparison kind -> its operator
COMPARE = {"GreaterEqual": ">=", "Greater": ">", "Less": "<", "LessEqual": "<=", "Equal": "==", "NotEqual": "!="}


class Compare(ElementwiseRule):
    kinds = tuple(COMPARE)

    def expr(self, op, a, b):
        return ir.compare(COMPARE[op.kind], a, b)


class Logical(ElementwiseRule):
    kinds = ("LogicalAnd", "LogicalOr")

    def expr(self, op, a, b):
        return ir.binop("&" if op.kind == "LogicalAnd" else "|", a, b)


class LogicalNot(ElementwiseRule):
    kinds = ("LogicalNot",)

    def expr(self, op, a):
        return ~a


class Select(ElementwiseRule):
    kinds = ("Select",)

    def expr(self, op, cond, a, b):
        return ir.select(cond, a, b)
