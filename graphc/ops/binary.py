"""Binary elementwise ops with numpy broadcasting, GreaterEqual and Select
(docs: Add.md, Subtract.md, Multiply.md, Divide.md, Maximum.md, Minimum.md,
SquaredDifference.md, GreaterEqual.md, Select.md); their lowering is
graphc/codegen/rules/binary.py."""
from __future__ import annotations

import numpy as np

from .common import AUTO_BROADCAST, Binary, Elementwise, binary_shape
from .schema import DtypeTable, In, Out, bad_shape

FLOAT_ROWS = [("f32", "f32"), ("bf16", "bf16"), ("f16", "f16")]
SAME_FLOAT = DtypeTable(["src_0|src_1", "dst"], FLOAT_ROWS)
#: Add, Subtract, Multiply, Divide: src_0, src_1 and dst each of any floating type (oneDNN's
#: op schemas, src/graph/interface/op_def.hpp: three independent type constraints T1, T2, T3;
#: the doc tables list the common rows only): frameworks dump bf16 * bf16 -> f32 (training's
#: O * dO) and bf16 / f32 -> bf16 (a scale kept in f32).  The value is computed in f32 and
#: rounded once to dst.
ANY_FLOAT = "f32,bf16,f16"
MIXED_FLOAT = DtypeTable(["src_0", "src_1", "dst"], [(ANY_FLOAT, ANY_FLOAT, ANY_FLOAT)])


class Add(Binary):
    kind = "Add"
    doc = "dst = src_0 + src_1"

    def fn(self, op, a, b):
        return a + b


class Subtract(Binary):
    kind = "Subtract"
    doc = "dst = src_0 - src_1"

    def fn(self, op, a, b):
        return a - b


class Multiply(Binary):
    kind = "Multiply"
    doc = "dst = src_0 * src_1"
    dtypes = MIXED_FLOAT

    def fn(self, op, a, b):
        return a * b


class Divide(Binary):
    kind = "Divide"
    doc = "dst = src_0 / src_1"
    dtypes = MIXED_FLOAT

    def fn(self, op, a, b):
        return a / b


class Maximum(Binary):
    kind = "Maximum"
    doc = "dst = max(src_0, src_1)"
    dtypes = SAME_FLOAT

    def fn(self, op, a, b):
        return np.maximum(a, b)


class Minimum(Binary):
    kind = "Minimum"
    doc = "dst = min(src_0, src_1)"
    dtypes = SAME_FLOAT

    def fn(self, op, a, b):
        return np.minimum(a, b)


class SquaredDifference(Binary):
    kind = "SquaredDifference"
    doc = "dst = (src_0 - src_1)^2"
    dtypes = SAME_FLOAT

    def fn(self, op, a, b):
        return (a - b) ** 2


class GreaterEqual(Binary):
    kind = "GreaterEqual"
    doc = "dst = src_0 >= src_1, a boolean tensor"
    dtypes = DtypeTable(["src_0|src_1", "dst"],
                        [("f32", "boolean"), ("bf16", "boolean"), ("f16", "boolean"), ("s32", "boolean")])

    def fn(self, op, a, b):
        return a >= b


class Select(Elementwise):
    """dst = cond ? src_0 : src_1.  With numpy broadcasting, src_0 and src_1
    broadcast to dst's shape and cond broadcasts one way into it."""

    kind = "Select"
    family = "binary"
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
