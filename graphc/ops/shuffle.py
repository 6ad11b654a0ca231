"""Data movement ops (docs: Concat.md, StaticReshape.md, StaticTranspose.md,
Reorder.md, TypeCast.md).  The reference works on logical arrays, so layout
(strides) never changes values: Reorder and TypeCast are the identity there,
TypeCast's rounding to nearest even being the executor's one rounding to dst.

Kernels copy through the tensors' ArrayRefs (load_nd widens, store_nd narrows
with RNE), looping in dst's memory order, so StaticTranspose and Concat can
anchor fusion; StaticReshape moves runs of elements by flat offsets.  Reorder
and TypeCast are elementwise (the identity expression): fused into a chain,
the value rounds once, where it is stored."""
from __future__ import annotations

import math

import numpy as np

from ..codegen.elementwise import collapse, transposes
from ..codegen.kernel import as_stored, worth_parallel
from ..codegen.loops import linear, memory_order_nest, unravel
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

    def lower(self, op, kb, ins, outs):
        """Each src in turn, walked in dst's memory order, lands at its offset on axis."""
        dst = outs[0]
        axis = norm_axis(op, op.attr("axis"), len(dst.shape))
        start = 0
        for src in ins:
            with memory_order_nest(kb, src.shape, dst.strides, worth_parallel(src.lt.nelems)) as ivars:
                at = list(ivars)
                if start:
                    at[axis] = ivars[axis] + start if ivars[axis] is not None else start
                kb.emit(dst.store_nd(at, src.load_nd(ivars)))
            start += src.shape[axis]


def _volume(shape) -> int:
    return -1 if -1 in shape else math.prod(shape)


def _run_start(kb, flat, dims, strides):
    """(the offset of element ``flat``, bound to a name, and the stride of the innermost merged dim)."""
    return kb.let(linear(unravel(kb, flat, dims), strides), "b"), strides[-1]


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

    def lower(self, op, kb, ins, outs):
        """Both tensors walk the same row-major element order.  On each side, dims
        that step evenly through memory merge; a run of ``m`` elements (m divides
        the innermost merged dim of both sides) then moves with one stride each."""
        (src,), (dst,) = ins, outs
        n = dst.lt.nelems
        if n == 0:
            return
        sides = []
        for ref in (src, dst):
            dims, (strides,) = collapse(ref.shape, [ref.strides])
            sides.append((dims or [1], strides or [0]))
        m = math.gcd(sides[0][0][-1], sides[1][0][-1])
        runs = n // m
        par = worth_parallel(n)
        with kb.for_(runs, "c", par and runs > 1) as c:
            (sb, ss), (db, ds) = (_run_start(kb, c * m, dims, strides) for dims, strides in sides)
            with kb.for_(m, "j", par and runs == 1) as j:
                kb.emit(dst.store(linear([j], [ds], db), src.load(linear([j], [ss], sb))))


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

    def lower(self, op, kb, ins, outs):
        (src,), (dst,) = ins, outs
        with memory_order_nest(kb, dst.shape, dst.strides, worth_parallel(dst.lt.nelems)) as ivars:
            src_vars = [None] * len(ivars)
            for v, o in zip(ivars, self.order(op)):
                src_vars[o] = v
            kb.emit(dst.store_nd(ivars, src.load_nd(src_vars)))


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

    def expr(self, op, x):
        """The value as dst holds it (a narrowing TypeCast rounds here, so a fused
        consumer sees what the reference's TypeCast gives)."""
        return as_stored(x, op.outputs[0].dtype)

    def lower(self, op, kb, ins, outs):
        """Walks dst in its memory order, rows by columns (a dense f32 -> bf16 cast
        runs ~7% faster this way than as one flat prange, the shared elementwise
        loop), or in tiles through that loop when src is read across its layout."""
        (src,), (dst,) = ins, outs
        if transposes(outs, ins):
            super().lower(op, kb, ins, outs)
            return
        with memory_order_nest(kb, dst.shape, dst.strides, worth_parallel(dst.lt.nelems)) as ivars:
            kb.emit(dst.store_nd(ivars, self.source(op, src.load_nd(ivars))))


class Reorder(SameShape):
    kind = "Reorder"
    doc = "copies src to dst's layout (strides); no dtype conversion"
    dtypes = SAME_FLOAT


class TypeCast(SameShape):
    kind = "TypeCast"
    doc = "converts src to dst's dtype, rounding to nearest even"
    dtypes = DtypeTable(["src", "dst"], [("bf16,f16", "f32"), ("f32", "bf16,f16")])
