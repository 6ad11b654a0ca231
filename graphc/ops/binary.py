"""Binary elementwise ops with numpy broadcasting, the comparisons and Select
(docs: Add.md, Subtract.md, Multiply.md, Divide.md, Maximum.md, Minimum.md,
SquaredDifference.md, GreaterEqual.md, Select.md); their lowering is
graphc/codegen/rules/binary.py.

graphc's extensions to oneDNN Graph's op set, for frameworks' index and mask
arithmetic (graphc.torch): the integer rows of Add, Subtract and Multiply (s32 and
s64, wrapping as numpy's and torch's integers do: common.INT_ROWS), GreaterEqual's
s64 row, the comparisons Equal, NotEqual, Greater, Less and LessEqual (the types
GreaterEqual takes, a boolean dst), and LogicalAnd, LogicalOr and LogicalNot on
booleans.  They load and save in oneDNN JSON like any op."""
from __future__ import annotations

import numpy as np

from .common import AUTO_BROADCAST, Binary, Elementwise, Predicate, binary_shape, summed_in_f32
from .schema import DtypeTable, In, Out, bad_shape

FLOAT_ROWS = [("f32", "f32"), ("bf16", "bf16"), ("f16", "f16")]
SAME_FLOAT = DtypeTable(["src_0|src_1", "dst"], FLOAT_ROWS)
#: Add, Subtract, Multiply, Divide: src_0, src_1 and dst each of any floating type (oneDNN's
#: op schemas, src/graph/interface/op_def.hpp: three independent type constraints T1, T2, T3;
#: the doc tables list the common rows only): frameworks dump bf16 * bf16 -> f32 (training's
#: O * dO, binary-MatMul-binary) and bf16 / f32 -> bf16 (a scale kept in f32).  The value is
#: computed in f32 and rounded once to dst.
ANY_FLOAT = "f32,bf16,f16"
MIXED_FLOAT = DtypeTable(["src_0", "src_1", "dst"], [(ANY_FLOAT, ANY_FLOAT, ANY_FLOAT)])


class Add(Binary):
    kind = "Add"
    doc = "dst = src_0 + src_1"

    def fn(self, op, a, b):
        return a + b

    def partials(self, op, em, dy):
        return dy, dy


class Subtract(Binary):
    kind = "Subtract"
    doc = "dst = src_0 - src_1"

    def fn(self, op, a, b):
        return a - b

    def partials(self, op, em, dy):
        return dy, em.neg(dy) if em.wants(op.inputs[1]) else None


class Multiply(Binary):
    kind = "Multiply"
    doc = "dst = src_0 * src_1"

    def fn(self, op, a, b):
        return a * b

    def partials(self, op, em, dy):
        a, b = op.inputs
        return (em.one("Multiply", [dy, b]) if em.wants(a) else None,
                em.one("Multiply", [dy, a]) if em.wants(b) else None)


class Divide(Binary):
    kind = "Divide"
    doc = "dst = src_0 / src_1"
    dtypes = MIXED_FLOAT

    def fn(self, op, a, b):
        return a / b

    def partials(self, op, em, dy):
        """dy / b and -dy * dst / b (= -dy * a / b^2)."""
        b, y = op.inputs[1], op.outputs[0]
        return (em.one("Divide", [dy, b]) if em.wants(op.inputs[0]) else None,
                em.neg(em.one("Divide", [em.one("Multiply", [dy, y]), b])) if em.wants(b) else None)


class Maximum(Binary):
    kind = "Maximum"
    doc = "dst = max(src_0, src_1)"
    dtypes = SAME_FLOAT

    def fn(self, op, a, b):
        return np.maximum(a, b)

    def partials(self, op, em, dy):
        return routed(op, em, dy, op.inputs[0], op.inputs[1])


class Minimum(Binary):
    kind = "Minimum"
    doc = "dst = min(src_0, src_1)"
    dtypes = SAME_FLOAT

    def fn(self, op, a, b):
        return np.minimum(a, b)

    def partials(self, op, em, dy):
        return routed(op, em, dy, op.inputs[1], op.inputs[0])


class SquaredDifference(Binary):
    kind = "SquaredDifference"
    doc = "dst = (src_0 - src_1)^2"
    dtypes = SAME_FLOAT

    def fn(self, op, a, b):
        return (a - b) ** 2

    def partials(self, op, em, dy):
        d = em.one("Subtract", list(op.inputs), op.attrs)
        g = em.one("Multiply", [dy, em.one("Add", [d, d])])
        return g, em.neg(g) if em.wants(op.inputs[1]) else None


#: the comparisons' operands: both of one floating or integer type (s64: graphc's extension)
COMPARE = DtypeTable(["src_0|src_1", "dst"], [(dt, "boolean") for dt in ("f32", "bf16", "f16", "s32", "s64")])


class GreaterEqual(Predicate):
    kind = "GreaterEqual"
    doc = "dst = src_0 >= src_1, a boolean tensor"
    dtypes = COMPARE

    def fn(self, op, a, b):
        return a >= b


class Greater(Predicate):
    kind = "Greater"
    doc = "dst = src_0 > src_1, a boolean tensor; graphc's own op"
    dtypes = COMPARE

    def fn(self, op, a, b):
        return a > b


class Less(Predicate):
    kind = "Less"
    doc = "dst = src_0 < src_1, a boolean tensor; graphc's own op"
    dtypes = COMPARE

    def fn(self, op, a, b):
        return a < b


class LessEqual(Predicate):
    kind = "LessEqual"
    doc = "dst = src_0 <= src_1, a boolean tensor; graphc's own op"
    dtypes = COMPARE

    def fn(self, op, a, b):
        return a <= b


class Equal(Predicate):
    kind = "Equal"
    doc = "dst = src_0 == src_1, a boolean tensor; graphc's own op"
    dtypes = COMPARE

    def fn(self, op, a, b):
        return a == b


class NotEqual(Predicate):
    kind = "NotEqual"
    doc = "dst = src_0 != src_1, a boolean tensor (true where either is NaN); graphc's own op"
    dtypes = COMPARE

    def fn(self, op, a, b):
        return a != b


LOGICAL = DtypeTable(["src_0|src_1|dst"], [("boolean",)])


class LogicalAnd(Predicate):
    kind = "LogicalAnd"
    doc = "dst = src_0 and src_1, on booleans; graphc's own op"
    dtypes = LOGICAL

    def fn(self, op, a, b):
        return a & b


class LogicalOr(Predicate):
    kind = "LogicalOr"
    doc = "dst = src_0 or src_1, on booleans; graphc's own op"
    dtypes = LOGICAL

    def fn(self, op, a, b):
        return a | b


class LogicalNot(Elementwise):
    """Not a Unary (the catalog takes those as float post-ops)."""

    kind = "LogicalNot"
    family = "binary"
    doc = "dst = not src, on booleans; graphc's own op"
    inputs = (In("src"),)
    outputs = (Out("dst"),)
    dtypes = DtypeTable(["src|dst"], [("boolean",)])

    def infer(self, op):
        return [op.inputs[0].shape]

    def reference(self, op, src):
        return (~src,)


def routed(op, em, dy, first, second):
    """dy to src_0 where ``first`` >= ``second`` (Maximum: src_0 >= src_1), else
    to src_1; zeros elsewhere."""
    pick = em.one("GreaterEqual", [first, second], op.attrs, dtype="boolean")
    zeros = em.zeros_like(dy)
    return select_partials(op, em, pick, dy, zeros)


def select_partials(op, em, cond, dy, zeros):
    """Select's gradients: dy where ``cond``, zeros elsewhere, and the reverse."""
    attrs = {"auto_broadcast": op.attr("auto_broadcast")}
    a, b = op.inputs[-2:]
    return (em.one("Select", [cond, dy, zeros], attrs, dy.dtype) if em.wants(a) else None,
            em.one("Select", [cond, zeros, dy], attrs, dy.dtype) if em.wants(b) else None)


class Select(Elementwise):
    """dst = cond ? src_0 : src_1.  With numpy broadcasting, src_0 and src_1
    broadcast to dst's shape and cond broadcasts one way into it."""

    kind = "Select"
    family = "binary"
    grad_inputs = ("src_0", "src_1")
    doc = "dst = cond ? src_0 : src_1"
    inputs = (In("cond"), In("src_0"), In("src_1"))
    outputs = (Out("dst"),)
    attrs = (AUTO_BROADCAST,)
    dtypes = DtypeTable(["cond", "src_0|src_1", "dst"],
                        [("boolean", "f32", "f32"), ("boolean", "bf16", "bf16"), ("boolean", "f16", "f16")])

    def infer(self, op):
        cond, a, b = (t.shape for t in op.inputs)
        dst = binary_shape(op, a, b)
        if op.attr("auto_broadcast") == "none":
            return [binary_shape(op, dst, cond)]
        lead = len(dst) - len(cond)
        if lead < 0 or any(c not in (1, d, -1) and d != -1 for c, d in zip(cond, dst[lead:])):
            raise bad_shape(op, "'cond' must broadcast one way to the shape of src_0 and src_1 broadcast",
                            where="port 'cond'", expected=f"dims equal to or 1 against {list(dst)}",
                            found=list(cond))
        # a known cond dim other than 1 fixes an unknown dst dim
        return [dst[:lead] + tuple(c if d == -1 and c > 1 else d for c, d in zip(cond, dst[lead:]))]

    def reference(self, op, cond, a, b):
        return (np.where(cond, a, b),)

    def vjp(self, op, em):
        dy = summed_in_f32(op, em)
        cond, a, b = op.inputs
        partials = select_partials(op, em, cond, dy, em.zeros_like(dy))
        return [None] + [None if g is None else em.sum_to(g, t.shape) for g, t in zip(partials, (a, b))]
