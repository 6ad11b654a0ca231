"""Data movement ops (docs: Concat.md, StaticReshape.md, StaticTranspose.md,
Reorder.md, TypeCast.md).  The reference works on logical arrays, so layout
(strides) never changes values: Reorder and TypeCast are the identity there,
TypeCast's rounding to nearest even being the executor's one rounding to dst.
Their lowering is graphc/codegen/rules/shuffle.py."""
from __future__ import annotations

import math

import numpy as np

from ..errors import InvalidGraphOp
from .common import Elementwise, merged_shape
from .schema import Attr, DtypeTable, In, OpSchema, Out, bad_shape, norm_axis, same_dtype

SAME_FLOAT = same_dtype("src|dst", "f32,bf16,f16")


class Concat(OpSchema):
    kind = "Concat"
    family = "shuffle"
    doc = "concatenates the src tensors along axis"
    inputs = (In("src", variadic=True, doc="src_i: the tensors to concatenate, same rank and dtype"),)
    outputs = (Out("dst"),)
    attrs = (Attr("axis", "s64"),)
    dtypes = SAME_FLOAT

    def infer(self, op):
        shapes = [t.shape for t in op.inputs]
        rank = len(shapes[0])
        for i, s in enumerate(shapes):
            if len(s) != rank:
                raise bad_shape(op, "all inputs must have the same rank", where=f"input {i}",
                                expected=rank, found=list(s))
        axis = norm_axis(op, op.attr("axis"), rank)
        rest = [s[:axis] + s[axis + 1:] for s in shapes]
        for i, s in enumerate(rest):
            if any(a != b and a != -1 and b != -1 for a, b in zip(rest[0], s)):
                raise bad_shape(op, "inputs must agree on every dim but the concatenation axis",
                                where=f"input {i}", expected=list(shapes[0]), found=list(shapes[i]))
        sizes = [s[axis] for s in shapes]
        total = -1 if -1 in sizes else sum(sizes)
        out = list(merged_shape(*shapes))
        out[axis] = total
        return [tuple(out)]

    def reference(self, op, *srcs):
        return (np.concatenate(srcs, axis=norm_axis(op, op.attr("axis"), srcs[0].ndim)),)


def _volume(shape) -> int:
    return -1 if -1 in shape else math.prod(shape)


class StaticReshape(OpSchema):
    """In ``shape``, one -1 takes whatever size keeps the element count; with
    ``special_zero`` a 0 copies the src dim at the same index, else it is a
    zero-size dim."""

    kind = "StaticReshape"
    family = "shuffle"
    doc = "reshapes src to the shape attribute (-1: inferred dim; 0: copy when special_zero)"
    inputs = (In("src"),)
    outputs = (Out("dst"),)
    attrs = (Attr("shape", "s64[]", check=lambda v: all(d >= -1 for d in v) and list(v).count(-1) <= 1,
                  check_doc="dims >= 0, with at most one -1"),
             Attr("special_zero", "bool"))
    dtypes = SAME_FLOAT

    def target(self, op, src) -> tuple:
        """dst shape for a src shape (-1 for unknown dims)."""
        spec = op.attr("shape")
        shape = list(spec)
        if op.attr("special_zero"):
            for i, d in enumerate(spec):
                if d == 0:
                    if i >= len(src):
                        raise bad_shape(op, "a 0 in shape copies the src dim at its index, which src lacks",
                                        where="attribute 'shape'", expected=f"0s at indices < {len(src)}",
                                        found=list(spec))
                    shape[i] = src[i]
        total = _volume(src)
        if -1 in spec:
            i = spec.index(-1)
            known = _volume(shape[:i] + shape[i + 1:])
            if total == -1 or known == -1:
                return tuple(shape)
            if known == 0 or total % known:
                raise bad_shape(op, "the -1 dim cannot keep the element count", where="attribute 'shape'",
                                expected=f"dims whose product divides {total}", found=list(spec))
            shape[i] = total // known
        elif -1 not in (total, _volume(shape)) and total != _volume(shape):
            raise bad_shape(op, "reshape must keep the element count", where="attribute 'shape'",
                            expected=f"{total} elements", found=f"{list(spec)} ({_volume(shape)} elements)")
        return tuple(shape)

    def infer(self, op):
        return [self.target(op, op.inputs[0].shape)]

    def reference(self, op, src):
        return (src.reshape(self.target(op, src.shape)),)

    def vjp(self, op, em):
        return [em.reshape(em.grad(op.outputs[0]), op.inputs[0].shape)]


class StaticTranspose(OpSchema):
    kind = "StaticTranspose"
    family = "shuffle"
    doc = "dst dim i is src dim order[i] (negative values count from the last axis)"
    inputs = (In("src"),)
    outputs = (Out("dst"),)
    attrs = (Attr("order", "s64[]"),)
    dtypes = SAME_FLOAT

    def order(self, op) -> tuple:
        order, rank = op.attr("order"), op.inputs[0].ndim
        norm = tuple(o + rank if o < 0 else o for o in order)
        if sorted(norm) != list(range(rank)):
            raise InvalidGraphOp("order must be a permutation of the src axes", op=op, where="attribute 'order'",
                                 expected=f"a permutation of 0..{rank - 1} (or of -{rank}..-1)",
                                 found=list(order))
        return norm

    def infer(self, op):
        src = op.inputs[0].shape
        return [tuple(src[o] for o in self.order(op))]

    def reference(self, op, src):
        return (np.transpose(src, self.order(op)),)

    def vjp(self, op, em):
        inverse = np.argsort(self.order(op))
        return [em.transpose(em.grad(op.outputs[0]), [int(i) for i in inverse])]


class SameShape(Elementwise):
    """dst has src's shape and values; only strides or dtype may differ (the
    inferred shape makes a dst of another shape an InvalidShape).  Elementwise
    (the identity), so fused kernels substitute it; the store rounds to dst's
    dtype."""

    family = "shuffle"
    inputs = (In("src"),)
    outputs = (Out("dst"),)

    def infer(self, op):
        return [op.inputs[0].shape]

    def reference(self, op, src):
        return (src,)

    def vjp(self, op, em):
        """diff_dst itself, in src's dtype (the accumulation casts)."""
        return [em.grad(op.outputs[0])]


class Reorder(SameShape):
    kind = "Reorder"
    doc = "copies src to dst's layout (strides); no dtype conversion"
    dtypes = SAME_FLOAT


class TypeCast(SameShape):
    kind = "TypeCast"
    doc = "converts src to dst's dtype, rounding to nearest even"
    dtypes = DtypeTable(["src", "dst"], [("bf16,f16", "f32"), ("f32", "bf16,f16")])
