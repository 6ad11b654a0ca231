"""Lowering of the Reduce ops (graphc/ops/reduce.py) on the reduction planner
(graphc.codegen.grouped): the kept dims are its groups, the reduced dims its
rows and lanes; each op gives its accumulator kind, the ``term`` it accumulates
per element and the ``finish`` of the result.  The axes of the axes-input form
are the ``values`` the kernel is specialised on (``values["axes"]``)."""
from __future__ import annotations

import math

from .. import ir
from ..grouped import MIN_GROUPS, Nest, each_element
from ..kernel import ArrayRef
from ..merged_views import MergedView
from ..reduce_plan import VDim, plan, tensor_vdims
from ...errors import Unimplemented
from ...ops.reduce import axes_of
from . import Rule


def _groups_and_lanes(shape, strides, axes) -> tuple:
    """The planner's group count and lane extent (reduce_plan.plan) for a src of
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


class Reduce(Rule):
    """The Reduce ops' loop nest; each op's rule gives acc_kind, term and finish."""
    #: the accumulator kind (graphc.codegen.accumulators.KINDS)
    acc_kind = "sum"
    #: the type of its lanes, if not the kind's
    lane_dt = None

    def term(self, x: ir.Expr) -> ir.Expr:
        """What an element ``x`` adds to the accumulator."""
        return x

    def finish(self, acc: ir.Expr, n: int) -> ir.Expr:
        """The result from the accumulator and the count of reduced elements."""
        return acc

    def lower(self, op, kb, ins, outs, values):
        src, dst = ins[0], outs[0]
        rank = len(src.shape)
        axes = axes_of(op, rank, values)
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
        acc = nest.acc(self.acc_kind, lane_dt=self.lane_dt)
        with nest.groups():
            with nest.pass_(acc) as iv:
                acc.add(self.term(src.load_nd(iv)))
            with nest.per_group():
                iv = nest.iv
                dst_iv = [None if k in axes else iv[k] for k in range(rank)] if keep_dims else [iv[k] for k in kept]
                kb.emit(dst.store_nd(dst_iv, self.finish(acc.value, n)))


class ReduceL1(Reduce):
    kinds = ("ReduceL1",)

    def term(self, x):
        return ir.call("abs", x)


class ReduceL2(Reduce):
    kinds = ("ReduceL2",)
    lane_dt = "f64"

    def term(self, x):
        # squares in f64 (as the reference's): an f32 square overflows above 1.8e19
        x = ir.f64(x)
        return x * x

    def finish(self, acc, n):
        return ir.call("math.sqrt", acc)


class ReduceMax(Reduce):
    kinds = ("ReduceMax",)
    acc_kind = "nanmax"


class ReduceMean(Reduce):
    kinds = ("ReduceMean",)

    def finish(self, acc, n):
        return acc / float(n)


class ReduceMin(Reduce):
    kinds = ("ReduceMin",)
    acc_kind = "nanmin"


class ReduceProd(Reduce):
    kinds = ("ReduceProd",)
    acc_kind = "prod"


class ReduceSum(Reduce):
    kinds = ("ReduceSum",)
