"""Reductions over a set of axes (docs: ReduceL1.md ... ReduceSum.md).

The axes come from the ``axes`` attribute or from the optional ``axes`` input
tensor (exactly one of them).  Empty axes make the op the identity, as the
docs state.  With ``keep_dims`` the reduced dims stay as 1s, else they go.

Kernels are the reduction planner's (graphc.codegen.grouped): the kept dims
are its groups, the reduced dims its rows and lanes; each op gives its
accumulator kind, the ``term`` it accumulates per element and the ``finish``
of the result.  The axes-input form is lowered per value of the axes: ``axes``
is a value input (``value_inputs``), so the partition compiles at its first run
for the axes given, and the specialised op copies carry them in
``op.input_values`` (graphc.compiled.specialize).
"""
from __future__ import annotations

import math

import numpy as np

from ..codegen import ir
from ..codegen.grouped import MIN_GROUPS, MergedView, Nest, VDim, each_element, plan, tensor_vdims
from ..codegen.kernel import ArrayRef
from ..errors import InvalidGraphOp, RuntimeFault, Unimplemented
from .schema import Attr, DtypeTable, In, OpSchema, Out, bad_shape


def _normalized_axes(op, axes, rank, error=InvalidGraphOp, where="attribute 'axes'") -> tuple:
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


def _groups_and_lanes(shape, strides, axes) -> tuple:
    """The planner's group count and lane extent (grouped.plan) for a src of
    ``shape`` and ``strides`` reduced over ``axes``."""
    p = plan([VDim(d, st, k not in axes) for k, (d, st) in enumerate(zip(shape, strides))])
    return p.G, p.L


def _merged(src, dst, axes, keep_dims):
    """``src`` and ``dst`` seen with adjacent dims of src merged where both are
    reduced, or both kept and contiguous in dst too, and contiguous in src (e.g.
    ReduceSum over the channels of NCHW: H*W kept lanes, contiguous rows of
    channels, not W lanes in groups of H); dims of extent 1 are left out.
    Returns (src view, dst view in the keep_dims form, the view's axes), or None
    when nothing merges or a ref is not a plain argument (a fused one computes
    other tensors at its indices)."""
    if type(src) is not ArrayRef or type(dst) is not ArrayRef:
        return None
    kept = [k for k in range(len(src.shape)) if k not in axes]
    live = [k for k in range(len(src.shape)) if src.shape[k] != 1]

    def at_dst(k):
        return k if keep_dims else kept.index(k)

    runs = []
    for k in live:
        prev = runs[-1][-1] if runs else None
        if prev is not None and (prev in axes) == (k in axes) and src.strides[prev] == src.shape[k] * src.strides[k] \
                and (k in axes or dst.strides[at_dst(prev)] == dst.shape[at_dst(k)] * dst.strides[at_dst(k)]):
            runs[-1].append(k)
        else:
            runs.append([k])
    if len(runs) == len(live):
        return None
    shape = tuple(math.prod(src.shape[k] for k in r) for r in runs)
    reduced = {i for i, r in enumerate(runs) if r[0] in axes}
    # not when the merge leaves too few groups to share out and longer lanes: the
    # planner's chunks of rows then keep and combine partials of every lane
    # (ReduceSum over the channels of 1x256x56x56: 56 groups of 56 lanes, 4x
    # faster than 1 group of 3136; over dims 1-3 of 1x512x56x56: rows of 56
    # lanes, 2.7x faster than of 4096)
    groups, lanes = _groups_and_lanes(shape, [src.strides[r[-1]] for r in runs], reduced)
    if groups < MIN_GROUPS and lanes > _groups_and_lanes(src.shape, src.strides, axes)[1]:
        return None
    sv = MergedView(src.name, src.lt, shape, tuple(src.strides[r[-1]] for r in runs))
    dv = MergedView(dst.name, dst.lt, tuple(1 if i in reduced else d for i, d in enumerate(shape)),
                    tuple(0 if i in reduced else dst.strides[at_dst(r[-1])] for i, r in enumerate(runs)))
    return sv, dv, reduced


def _axes(op, rank):
    """The op's sorted axes: from the attribute, or from the values of the axes
    input when the op was specialised on them (checked: a RuntimeFault naming the
    op); None while those values are unknown."""
    if op.input("axes") is None:
        return _normalized_axes(op, op.attr("axes"), rank)
    values = getattr(op, "input_values", {}).get("axes")
    if values is None:
        return None
    return _normalized_axes(op, values, rank, RuntimeFault, "input 'axes'")


class Reduce(OpSchema):
    family = "reduce"
    inputs = (In("src"), In("axes", optional=True, doc="1-D s32 tensor of axes, instead of the attribute"))
    outputs = (Out("dst"),)
    attrs = (Attr("axes", "s64[]", (), doc="axes to reduce; empty means the identity"),
             Attr("keep_dims", "bool", False))
    dtypes = DtypeTable(["src|dst", "axes"], [("f32", "s32"), ("bf16", "s32"), ("f16", "s32")])
    #: input ports whose values the kernel is specialised on (graphc.compiled)
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
        _axes(op, op.inputs[0].ndim)  # values given to specialise on: in range and unique

    def infer(self, op):
        src = op.inputs[0].shape
        axes = _axes(op, len(src))
        if axes is not None:
            return [self._reduced_shape(op, src, axes)]
        n = op.input("axes").shape[0]
        if n == 0:
            return [src]
        # the axes are data: only what holds for any choice of them is known
        if op.attr("keep_dims"):
            return [tuple(1 if d == 1 else -1 for d in src)]
        return [(-1,) * (len(src) - n) if n != -1 else None]

    @staticmethod
    def _reduced_shape(op, src, axes):
        if op.attr("keep_dims"):
            return tuple(1 if i in axes else d for i, d in enumerate(src))
        return tuple(d for i, d in enumerate(src) if i not in axes)

    def reference(self, op, src, axes=None):
        if axes is None:
            axes = _normalized_axes(op, op.attr("axes"), src.ndim)
        else:
            axes = _normalized_axes(op, [int(a) for a in axes], src.ndim, RuntimeFault, "input 'axes'")
        if not axes:
            return (src,)
        return (self.reduce(src, axes).reshape(self._reduced_shape(op, src.shape, axes)),)

    def reduce(self, x, axes):
        raise NotImplementedError

    #: the accumulator kind (graphc.codegen.grouped.KINDS)
    acc_kind = "sum"

    def term(self, x: ir.Expr) -> ir.Expr:
        """What an element ``x`` adds to the accumulator."""
        return x

    def finish(self, acc: ir.Expr, n: int) -> ir.Expr:
        """The result from the accumulator and the count of reduced elements."""
        return acc

    def lower(self, op, kb, ins, outs):
        src, dst = ins[0], outs[0]
        rank = len(src.shape)
        axes = _axes(op, rank)
        if axes is None:
            raise Unimplemented("the axes input's values are needed to lower this op", op=op,
                                where="input 'axes'")
        if not axes:
            with each_element(kb, src) as iv:
                kb.emit(dst.store_nd(iv, src.load_nd(iv)))
            return
        n = math.prod(src.shape[k] for k in axes)
        keep_dims = op.attr("keep_dims")
        merged = _merged(src, dst, axes, keep_dims)
        if merged is not None:
            src, dst, axes = merged
            rank, keep_dims = len(src.shape), True
        kept = [k for k in range(rank) if k not in axes]
        nest = Nest(kb, tensor_vdims(src, set(kept)))
        acc = nest.acc(self.acc_kind)
        with nest.groups():
            with nest.pass_(acc) as iv:
                acc.add(self.term(src.load_nd(iv)))
            with nest.per_group():
                iv = nest.iv
                dst_iv = [None if k in axes else iv[k] for k in range(rank)] if keep_dims else [iv[k] for k in kept]
                kb.emit(dst.store_nd(dst_iv, self.finish(acc.value, n)))


class ReduceL1(Reduce):
    kind = "ReduceL1"
    doc = "sum of |src| over axes"

    def term(self, x):
        return ir.call("abs", x)

    def reduce(self, x, axes):
        return np.sum(np.abs(x), axis=axes)


class ReduceL2(Reduce):
    kind = "ReduceL2"
    doc = "sqrt of the sum of src^2 over axes"

    def term(self, x):
        return x * x

    def finish(self, acc, n):
        return ir.call("math.sqrt", acc)

    def reduce(self, x, axes):
        return np.sqrt(np.sum(x * x, axis=axes))


class ReduceMax(Reduce):
    kind = "ReduceMax"
    doc = "max of src over axes (-inf over no elements)"
    acc_kind = "nanmax"

    def reduce(self, x, axes):
        return np.max(x, axis=axes, initial=-np.inf)


class ReduceMean(Reduce):
    kind = "ReduceMean"
    doc = "mean of src over axes"

    def finish(self, acc, n):
        return acc / float(n)

    def reduce(self, x, axes):
        return np.mean(x, axis=axes)


class ReduceMin(Reduce):
    kind = "ReduceMin"
    doc = "min of src over axes (+inf over no elements)"
    acc_kind = "nanmin"

    def reduce(self, x, axes):
        return np.min(x, axis=axes, initial=np.inf)


class ReduceProd(Reduce):
    kind = "ReduceProd"
    doc = "product of src over axes"
    acc_kind = "prod"

    def reduce(self, x, axes):
        return np.prod(x, axis=axes)

    def input_range(self, op, index):
        """src within [-1.25, 1.25]: a long product then shrinks towards 0 (keeping its
        sign) in any order.  From [-4, 4], 32768 factors overflow float64 and meet a
        zero factor, and inf * 0 = NaN or 0 depends on the order of the products."""
        return (-1.25, 1.25) if index == 0 else super().input_range(op, index)


class ReduceSum(Reduce):
    kind = "ReduceSum"
    doc = "sum of src over axes"

    def reduce(self, x, axes):
        return np.sum(x, axis=axes)
