"""Data movement ops (docs: Concat.md, StaticReshape.md, StaticTranspose.md,
Reorder.md, TypeCast.md; StaticSlice is graphc's own: oneDNN Graph has no
slice).  The reference works on logical arrays, so layout
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
#: the views (StaticReshape, StaticTranspose, StaticSlice) move values of any of these types
#: unchanged: graphc's extension to oneDNN's tables (floats), for frameworks' integer and
#: boolean views (index arithmetic, masks)
ANY_VIEW = same_dtype("src|dst", "f32,bf16,f16,f64,s32,s64,s8,u8,boolean")


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

    def vjp(self, op, em):
        """diff_dst cut back into the srcs: one StaticSlice per src along axis."""
        g = em.grad(op.outputs[0])
        axis, start, out = norm_axis(op, op.attr("axis"), g.ndim), 0, []
        for src in op.inputs:
            size = src.shape[axis]
            out.append(em.one("StaticSlice", [g], {"begin": [start], "end": [start + size], "axes": [axis]})
                       if em.wants(src) else None)
            start += size
        return out


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
    dtypes = ANY_VIEW

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
    dtypes = ANY_VIEW

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


class StaticSlice(OpSchema):
    """graphc's extension op (oneDNN Graph has no slice; as ONNX Slice or
    ttnn.slice with static bounds and step 1): dst is src[begin:end] on the
    listed ``axes``, every other dim whole.

    * ``begin``, ``end``: one value per listed axis (per dim of src when
      ``axes`` is absent: then there are rank-many);
    * a negative value counts from the end of its dim (numpy's -1 is dim - 1);
      after that, ``0 <= begin <= end <= dim`` must hold (no clamping: an out of
      range bound is an InvalidShape naming the attribute);
    * ``axes``: distinct axes of src (negative count from the last); default
      ``0 .. len(begin) - 1``.

    Step 1 only, so dst is a window of src with src's strides.  Alone in its
    partition it is a view when dst's layout allows those strides (the compile
    step's view_of, graphc/compiler/any_layout.py); otherwise, and inside
    fused kernels (whose views are strides from a buffer's first element, with
    no offset), it is a copy kernel (graphc/codegen/rules/shuffle.py)."""

    kind = "StaticSlice"
    family = "shuffle"
    doc = "dst = src[begin:end] along axes (step 1; negative bounds count from the dim's end); graphc's own op"
    inputs = (In("src"),)
    outputs = (Out("dst"),)
    attrs = (Attr("begin", "s64[]", doc="first index taken, one per listed axis"),
             Attr("end", "s64[]", doc="one past the last index taken, one per listed axis"),
             Attr("axes", "s64[]", None, doc="the sliced axes; default 0 .. len(begin) - 1"))
    dtypes = ANY_VIEW

    def axes(self, op, rank) -> tuple:
        begin, end, axes = op.attr("begin"), op.attr("end"), op.attr("axes")
        if len(end) != len(begin):
            raise InvalidGraphOp("begin and end must have one value per sliced axis each", op=op,
                                 where="attribute 'end'", expected=f"{len(begin)} values (as begin)", found=list(end))
        if axes is None:
            if len(begin) > rank:
                raise InvalidGraphOp("without axes, begin has one value per dim of src at most", op=op,
                                     where="attribute 'begin'", expected=f"at most {rank} values", found=list(begin))
            return tuple(range(len(begin)))
        if len(axes) != len(begin):
            raise InvalidGraphOp("axes must list one axis per value of begin and end", op=op,
                                 where="attribute 'axes'", expected=f"{len(begin)} axes", found=list(axes))
        norm = tuple(norm_axis(op, a, rank, "axes") for a in axes)
        if len(set(norm)) != len(norm):
            raise InvalidGraphOp("axes must be distinct", op=op, where="attribute 'axes'",
                                 expected="each axis of src once at most", found=list(axes))
        return norm

    def bounds(self, op, shape) -> list:
        """(start, stop) per dim of ``shape`` (None for a dim unknown and sliced)."""
        out = [None if d == -1 else (0, d) for d in shape]
        for name, i in (("begin", 0), ("end", 1)):
            for a, v in zip(self.axes(op, len(shape)), op.attr(name)):
                d = shape[a]
                if d == -1:
                    out[a] = None
                    continue
                pos = v + d if v < 0 else v
                if not 0 <= pos <= d:
                    raise bad_shape(op, f"{name} out of range for its dim", where=f"attribute '{name}'",
                                    expected=f"values in [{-d}, {d}] for axis {a} (dim {d})", found=list(op.attr(name)))
                out[a] = (pos, out[a][1]) if i == 0 else (out[a][0], pos)
        for a, b in enumerate(out):
            if b is not None and b[0] > b[1]:
                raise bad_shape(op, "begin must not pass end", where="attributes 'begin' and 'end'",
                                expected=f"begin <= end on axis {a} (after negative values count from {shape[a]})",
                                found=f"begin {list(op.attr('begin'))}, end {list(op.attr('end'))}")
        return out

    def infer(self, op):
        return [tuple(-1 if b is None else b[1] - b[0] for b in self.bounds(op, op.inputs[0].shape))]

    def reference(self, op, src):
        return (src[tuple(slice(b, e) for b, e in self.bounds(op, src.shape))],)

    def vjp(self, op, em):
        """diff_dst padded with zeros back to src's shape, one sliced axis at a
        time: Concat of (zeros, diff_dst, zeros), the zeros those of a slice of
        src of the right shape."""
        g, src = em.grad(op.outputs[0]), op.inputs[0]
        window = self.bounds(op, src.shape)
        for a, (b, e) in enumerate(window):
            if (b, e) == (0, src.shape[a]):
                continue
            parts = []
            for lo, hi in ((0, b), (e, src.shape[a])):
                if hi > lo:
                    cut = [(0, d) if k < a else w for k, (d, w) in enumerate(zip(src.shape, window))]
                    cut[a] = (lo, hi)
                    parts.append(em.zeros_like(em.one("StaticSlice", [src], slice_attrs(cut))))
            parts.insert(1 if b > 0 else 0, g)
            g = em.one("Concat", parts, {"axis": a}, dtype=g.dtype) if len(parts) > 1 else g
        return [g]


def slice_attrs(window) -> dict:
    """StaticSlice's attributes taking ``window``, a (begin, end) per dim."""
    return {"begin": [b for b, _ in window], "end": [e for _, e in window]}


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
    #: oneDNN's rows, and graphc's extension: integers and booleans to f32 (frameworks' masks
    #: made floats), rounding to nearest even as numpy and torch convert
    dtypes = DtypeTable(["src", "dst"], [("bf16,f16", "f32"), ("f32", "bf16,f16"), ("s32,s64,boolean", "f32")])
