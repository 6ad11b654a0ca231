"""Reductions over a set of axes (docs: ReduceL1.md ... ReduceSum.md).

The axes come from the ``axes`` attribute or from the optional ``axes`` input
tensor (exactly one of them).  Empty axes make the op the identity, as the
docs state.  With ``keep_dims`` the reduced dims stay as 1s, else they go.

The axes-input form is lowered per value of the axes: ``axes`` is a value input
(``value_inputs``), so the partition compiles at its first run for the axes
given: the compile step hands them to ``check_values`` and to the lowering
rule as an argument (graphc.compiler.specialize).  Their lowering is graphc/codegen/rules/reduce.py.
"""
from __future__ import annotations

import numpy as np

from ..errors import InvalidGraphOp, RuntimeFault, Unimplemented
from .schema import Attr, DtypeTable, In, OpSchema, Out, bad_shape


def normalized_axes(op, axes, rank, error=InvalidGraphOp, where="attribute 'axes'") -> tuple:
    """Sorted non-negative axes, checked to be in range and unique."""
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise error("axis out of range", op=op, where=where, expected=f"values in [{-rank}, {rank - 1}]",
                        found=list(axes))
        out.append(a + rank if a < 0 else a)
    if len(set(out)) != len(out):
        raise error("axes must be unique", op=op, where=where, found=list(axes))
    return tuple(sorted(out))


def axes_of(op, rank, values) -> tuple | None:
    """The op's sorted axes: from the attribute, or from ``values`` ({port name:
    tuple}, the input values a kernel is specialised on) when the axes input's
    are there (checked: a RuntimeFault naming the op); None while they are unknown."""
    if op.input("axes") is None:
        return normalized_axes(op, op.attr("axes"), rank)
    given = values.get("axes")
    if given is None:
        return None
    return normalized_axes(op, given, rank, RuntimeFault, "input 'axes'")


class Reduce(OpSchema):
    family = "reduce"
    inputs = (In("src"), In("axes", optional=True, doc="1-D s32 tensor of axes, instead of the attribute"))
    outputs = (Out("dst"),)
    attrs = (Attr("axes", "s64[]", (), doc="axes to reduce; empty means the identity"),
             Attr("keep_dims", "bool", False))
    dtypes = DtypeTable(["src|dst", "axes"], [("f32", "s32"), ("bf16", "s32"), ("f16", "s32")])
    #: input ports whose values the kernel is specialised on (graphc.compiler.specialize)
    value_inputs = ("axes",)

    def check(self, op):
        axes_in = op.input("axes")
        if axes_in is None:
            return  # infer() checks the attribute
        if op.attr("axes"):
            raise InvalidGraphOp("give the axes either as the attribute or as input 1, not both", op=op,
                                 where="attribute 'axes'", expected="no attribute 'axes' with an axes input",
                                 found=list(op.attr("axes")))
        if axes_in.ndim != 1:
            raise bad_shape(op, "axes must be a 1-D tensor", where="port 'axes'", expected="rank 1",
                            found=list(axes_in.shape))

    def infer(self, op):
        src = op.inputs[0].shape
        if op.input("axes") is None:
            return [self._reduced_shape(op, src, normalized_axes(op, op.attr("axes"), len(src)))]
        n = op.input("axes").shape[0]
        if n == 0:
            return [src]
        # the axes are data: only what holds for any choice of them is known
        if op.attr("keep_dims"):
            return [tuple(1 if d == 1 else -1 for d in src)]
        return [(-1,) * (len(src) - n) if n != -1 else None]

    def check_values(self, op, values):
        src = op.inputs[0].shape
        return [self._reduced_shape(op, src, axes_of(op, len(src), values))]

    @staticmethod
    def _reduced_shape(op, src, axes):
        if op.attr("keep_dims"):
            return tuple(1 if i in axes else d for i, d in enumerate(src))
        return tuple(d for i, d in enumerate(src) if i not in axes)

    def reference(self, op, src, axes=None):
        if axes is None:
            axes = normalized_axes(op, op.attr("axes"), src.ndim)
        else:
            axes = normalized_axes(op, [int(a) for a in axes], src.ndim, RuntimeFault, "input 'axes'")
        if not axes:
            return (src,)
        return (self.reduce(src, axes).reshape(self._reduced_shape(op, src.shape, axes)),)

    def reduce(self, x, axes):
        raise NotImplementedError

    def spread(self, op, em, g):
        """(the reduced axes, ``g`` of dst's shape broadcast back to src's)."""
        if op.input("axes") is not None:
            raise Unimplemented("no gradient of a reduction whose axes are an input (known only at run)", op=op,
                                where="port 'axes'", expected="the axes attribute")
        src = op.inputs[0]
        axes = normalized_axes(op, op.attr("axes"), src.ndim)
        kept = tuple(1 if i in axes else d for i, d in enumerate(src.shape))
        return axes, em.broadcast_to(em.reshape(g, kept), src)

    def group_sum(self, op, em, t):
        """``t`` (src's shape) summed over the reduced axes, broadcast back."""
        axes = normalized_axes(op, op.attr("axes"), t.ndim)
        return em.broadcast_to(em.one("ReduceSum", [t], {"axes": list(axes), "keep_dims": True}), t)

    def to_extremes(self, op, em, largest: bool):
        """diff_dst shared evenly among the src elements equal to dst (the ties of
        a group each get diff_dst / their count, as torch's amax/amin)."""
        src, y = op.inputs[0], op.outputs[0]
        dy, extreme = self.spread(op, em, em.grad(y))[1], self.spread(op, em, y)[1]
        hit = em.one("GreaterEqual", [src, extreme] if largest else [extreme, src], dtype="boolean")
        zeros = em.zeros_like(dy)
        ties = self.group_sum(op, em, em.one("Select", [hit, em.full_like(dy, 1.0), zeros], dtype=dy.dtype))
        return [em.one("Select", [hit, em.one("Divide", [dy, ties]), zeros], dtype=dy.dtype)]


class ReduceL1(Reduce):
    kind = "ReduceL1"
    doc = "sum of |src| over axes"

    def reduce(self, x, axes):
        return np.sum(np.abs(x), axis=axes)

    def vjp(self, op, em):
        """diff_dst times the sign of src (AbsBackward)."""
        return [em.one("AbsBackward", [op.inputs[0], self.spread(op, em, em.grad(op.outputs[0]))[1]])]


class ReduceL2(Reduce):
    kind = "ReduceL2"
    doc = "sqrt of the sum of src^2 over axes"

    def reduce(self, x, axes):
        return np.sqrt(np.sum(x * x, axis=axes))

    def vjp(self, op, em):
        """diff_dst / dst times src."""
        y = op.outputs[0]
        return [em.one("Multiply", [self.spread(op, em, em.one("Divide", [em.grad(y), y]))[1], op.inputs[0]])]


class ReduceMax(Reduce):
    kind = "ReduceMax"
    doc = "max of src over axes (-inf over no elements)"

    def reduce(self, x, axes):
        return np.max(x, axis=axes, initial=-np.inf)

    def vjp(self, op, em):
        return self.to_extremes(op, em, True)


class ReduceMean(Reduce):
    kind = "ReduceMean"
    doc = "mean of src over axes"

    def reduce(self, x, axes):
        return np.mean(x, axis=axes)

    def vjp(self, op, em):
        """diff_dst spread over the reduced elements, over their count."""
        axes, g = self.spread(op, em, em.grad(op.outputs[0]))
        count = int(np.prod([op.inputs[0].shape[a] for a in axes]))
        return [em.scale(g, 1.0 / count) if count else g]


class ReduceMin(Reduce):
    kind = "ReduceMin"
    doc = "min of src over axes (+inf over no elements)"

    def reduce(self, x, axes):
        return np.min(x, axis=axes, initial=np.inf)

    def vjp(self, op, em):
        return self.to_extremes(op, em, False)


class ReduceProd(Reduce):
    kind = "ReduceProd"
    doc = "product of src over axes"

    def reduce(self, x, axes):
        return np.prod(x, axis=axes)

    def input_range(self, op, index):
        """src within [-1.25, 1.25]: a long product then shrinks towards 0 (keeping its
        sign) in any order.  From [-4, 4], 32768 factors overflow float64 and meet a
        zero factor, and inf * 0 = NaN or 0 depends on the order of the products."""
        return (-1.25, 1.25) if index == 0 else super().input_range(op, index)

    def vjp(self, op, em):
        """As torch: per group, with no zero in src diff_dst * dst / src; with
        exactly one, diff_dst times the product of the others at the zero and 0
        elsewhere; with two or more, 0.  Zeros are found as 0 >= |src|; dst / src
        is taken with the zeros replaced by 1 (dst is 0 in such a group)."""
        src, y = op.inputs[0], op.outputs[0]
        (axes, prod), dy = self.spread(op, em, y), self.spread(op, em, em.grad(y))[1]
        zeros, ones = em.zeros_like(src), em.full_like(src, 1.0)
        zero = em.one("GreaterEqual", [zeros, em.one("Abs", [src])], dtype="boolean")
        nonzero = em.one("Select", [zero, ones, src], dtype=src.dtype)
        count = self.group_sum(op, em, em.one("Select", [zero, ones, zeros], dtype=src.dtype))
        others = em.broadcast_to(em.one("ReduceProd", [nonzero], {"axes": list(axes), "keep_dims": True}), src)
        lone = em.one("Select", [em.one("GreaterEqual", [ones, count], dtype="boolean"),
                                 em.one("Multiply", [dy, others]), zeros], dtype=src.dtype)
        usual = em.one("Multiply", [dy, em.one("Divide", [prod, nonzero])])
        return [em.one("Select", [zero, lone, usual], dtype=src.dtype)]


class ReduceSum(Reduce):
    kind = "ReduceSum"
    doc = "sum of src over axes"

    def reduce(self, x, axes):
        return np.sum(x, axis=axes)

    def vjp(self, op, em):
        return [self.spread(op, em, em.grad(op.outputs[0]))[1]]
