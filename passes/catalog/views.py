"""Views folded into fused kernels."""
from __future__ import annotations

from ..pattern import Pattern
from .attention import viewed
from .pieces import ELTWISE, MAX_POST_OPS, keeps_shape, post_ops


VIEWS = ["StaticReshape", "StaticTranspose"]


def has_view(m) -> bool:
    return any(o.kind in VIEWS for o in m.ops)


def output_views(p, x):
    """Up to four reshapes/transposes after the value: stored through the inverse
    strides of the output (legality folds them when nothing else reads)."""
    return p.repeat(lambda q, y: q.op(VIEWS, y), x, 0, 4, label="output views")


def matmul_views():
    """A transformer's head split and merge around a MatMul: reshape/transpose views
    of its inputs -> MatMul -> [BiasAdd] -> post-ops -> reshape/transpose views.
    No data moves for the views: the GEMM reads and writes through strides."""
    p = Pattern("matmul_views", 8.5, "[reshape/transpose] -> MatMul -> [BiasAdd] -> post-ops -> "
                                     "[reshape/transpose]", anchor="mm", kernel="anchor")
    mm = p.op("MatMul", viewed(p, "src"), viewed(p, "weights"), label="mm")
    output_views(p, post_ops(p, p.op("BiasAdd", mm, optional=True)))
    p.check = has_view
    return p


def eltwise_views():
    """Reshape/transpose views of an input -> unary/binary chain -> [reshape/transpose
    views]: one loop, the views folded into its indexing.  (Anchored at the first
    view: views are rare, elementwise ops are not.)"""
    p = Pattern("eltwise_views", 5.5, "reshape/transpose -> unary/binary chain -> [reshape/transpose]",
                anchor="view", kernel="eltwise")
    v = p.repeat(lambda q, x: q.op(VIEWS, x), p.op(VIEWS, p.input("src"), label="view"), 0, 2)
    first = p.op(ELTWISE + ["TypeCast"], v)
    chain = p.repeat(lambda q, x: q.op(ELTWISE + ["TypeCast"], x, None, either_order=True, pred=keeps_shape(x)),
                     first, 0, MAX_POST_OPS)
    output_views(p, chain)
    return p


def view_chain():
    """Reshapes and transposes one after another: one view when the strides allow."""
    p = Pattern("view_chain", 4, "reshape/transpose -> reshape/transpose ...", kernel="views")
    p.repeat(lambda q, x: q.op(VIEWS, x), p.op(VIEWS, p.input()), 1, 8)
    return p


BUILDERS = [matmul_views, eltwise_views, view_chain]
