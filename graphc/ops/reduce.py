"""Reductions over a set of axes (docs: ReduceL1.md ... ReduceSum.md).

The axes come from the ``axes`` attribute or from the optional ``axes`` input
tensor (exactly one of them).  Empty axes make the op the identity, as the
docs state.  With ``keep_dims`` the reduced dims stay as 1s, else they go.

Kernels loop over the kept positions (in prange) and, inside, over the reduced
positions with a float64 accumulator: each op gives its ``init`` value, ``step``
statement and ``finish`` expression as source templates.  The axes-input form
is not lowered (the dst shape would depend on data).
"""
from __future__ import annotations

import math
from contextlib import ExitStack, nullcontext

import numpy as np

from ..codegen.kernel import num, worth_parallel
from ..codegen.loops import index_nest
from ..errors import InvalidGraphOp, RuntimeFault
from .schema import Attr, DtypeTable, In, OpSchema, Out, bad_shape

#: kept positions accumulated together when a reduction walks a contiguous kept dim
LANE_TILE = 256


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


class Reduce(OpSchema):
    family = "reduce"
    inputs = (In("src"), In("axes", optional=True, doc="1-D s32 tensor of axes, instead of the attribute"))
    outputs = (Out("dst"),)
    attrs = (Attr("axes", "s64[]", (), doc="axes to reduce; empty means the identity"),
             Attr("keep_dims", "bool", False))
    dtypes = DtypeTable(["src|dst", "axes"], [("f32", "s32"), ("bf16", "s32"), ("f16", "s32")])

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
        axes_in = op.input("axes")
        if axes_in is None:
            axes = _normalized_axes(op, op.attr("axes"), len(src))
            return [self._reduced_shape(op, src, axes)]
        n = axes_in.shape[0]
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

    #: kernel templates: accumulator start value, update with {x} (a float64 value),
    #: result from {acc} and {n} (the count of reduced elements)
    init = "0.0"
    step = "{acc} += {x}"
    finish = "{acc}"

    def supports_lowering(self, op) -> bool:
        return op.input("axes") is None

    def lower(self, op, kb, ins, outs):
        """Kept positions in prange; inside, the reduced dims (innermost: the one of
        smallest stride).  When a kept dim has a smaller stride than every reduced
        dim, a tile of its positions (lanes) accumulates at once in a local array,
        so the innermost loop still walks memory in order."""
        src, dst = ins[0], outs[0]
        rank = len(src.shape)
        axes = _normalized_axes(op, op.attr("axes"), rank)
        kept = [k for k in range(rank) if k not in axes]
        reduced = sorted((k for k in axes if src.shape[k] != 1), key=lambda k: -src.strides[k])
        lane = _lane_dim(src, kept, reduced)
        outer = [k for k in kept if k != lane]
        n_lane = src.shape[lane] if lane is not None else 1
        tile = min(n_lane, LANE_TILE)
        tiles = -(-n_lane // tile)
        nest = [src.shape[k] for k in outer] + ([tiles] if lane is not None else [])
        with index_nest(kb, nest, worth_parallel(src.lt.nelems)) as nest_vars:
            ivars = [None] * rank
            for k, v in zip(outer, nest_vars):
                ivars[k] = v
            if not axes:
                kb.line(dst.store_nd(ivars, src.load_nd(ivars)))
                return
            acc, x = kb.fresh("acc"), kb.fresh("x")
            if lane is None:
                lanes, acc_at = nullcontext, acc
                kb.line(f"{acc} = {self.init}")
            else:
                li = ivars[lane] = kb.fresh("l")
                kb.line(f"{acc} = np.full({tile}, {self.init})")
                if tiles == 1:
                    span, acc_at = f"{n_lane}", f"{acc}[{li}]"
                else:
                    lo = kb.fresh("lo")
                    kb.line(f"{lo} = {nest_vars[-1]} * {tile}")
                    span, acc_at = f"{lo}, min({lo} + {tile}, {n_lane})", f"{acc}[{li} - {lo}]"

                def lanes():
                    return kb.block(f"for {li} in range({span}):")
            dst_vars = list(ivars) if op.attr("keep_dims") else [ivars[k] for k in kept]
            with ExitStack() as loops:
                for k in reduced:
                    ivars[k] = kb.fresh("k")
                    loops.enter_context(kb.loop(ivars[k], src.shape[k]))
                loops.enter_context(lanes())
                kb.line(f"{x} = np.float64({src.load_nd(ivars)})")
                kb.line(self.step.format(acc=acc_at, x=x))
            n = math.prod(src.shape[k] for k in axes)
            with lanes():
                kb.line(dst.store_nd(dst_vars, self.finish.format(acc=acc_at, n=num(float(n)))))


def _lane_dim(src, kept, reduced):
    """The kept dim whose positions accumulate side by side: the one of smallest
    stride, if that is below every reduced dim's stride (``reduced`` is sorted by
    decreasing stride); else None."""
    big = [k for k in kept if src.shape[k] != 1]
    if not big or not reduced:
        return None
    lane = min(big, key=lambda k: src.strides[k])
    return lane if src.strides[lane] < src.strides[reduced[-1]] else None


class ReduceL1(Reduce):
    kind = "ReduceL1"
    doc = "sum of |src| over axes"
    step = "{acc} += abs({x})"

    def reduce(self, x, axes):
        return np.sum(np.abs(x), axis=axes)


class ReduceL2(Reduce):
    kind = "ReduceL2"
    doc = "sqrt of the sum of src^2 over axes"
    step = "{acc} += {x} * {x}"
    finish = "math.sqrt({acc})"

    def reduce(self, x, axes):
        return np.sqrt(np.sum(x * x, axis=axes))


class ReduceMax(Reduce):
    kind = "ReduceMax"
    doc = "max of src over axes (-inf over no elements)"
    init = "-np.inf"
    step = "{acc} = np.maximum({acc}, {x})"

    def reduce(self, x, axes):
        return np.max(x, axis=axes, initial=-np.inf)


class ReduceMean(Reduce):
    kind = "ReduceMean"
    doc = "mean of src over axes"
    finish = "{acc} / {n}"

    def reduce(self, x, axes):
        return np.mean(x, axis=axes)


class ReduceMin(Reduce):
    kind = "ReduceMin"
    doc = "min of src over axes (+inf over no elements)"
    init = "np.inf"
    step = "{acc} = np.minimum({acc}, {x})"

    def reduce(self, x, axes):
        return np.min(x, axis=axes, initial=np.inf)


class ReduceProd(Reduce):
    kind = "ReduceProd"
    doc = "product of src over axes"
    init = "1.0"
    step = "{acc} *= {x}"

    def reduce(self, x, axes):
        return np.prod(x, axis=axes)


class ReduceSum(Reduce):
    kind = "ReduceSum"
    doc = "sum of src over axes"

    def reduce(self, x, axes):
        return np.sum(x, axis=axes)
