"""Quantized pooling."""
from __future__ import annotations

from ..pattern import Pattern
from .pieces import int8_quant, keeps_shape, post_ops


POOLS = ["AvgPool", "MaxPool"]


def pool_rule(o, m) -> bool:
    """oneDNN's check_avgpool_attributes: no AvgPool with rounding_type ceil and exclude_pad false."""
    return not (o.kind == "AvgPool" and o.attr("rounding_type", "floor") == "ceil" and not o.attr("exclude_pad"))


def int8_pool(p):
    """int8 per-tensor Dequantize -> AvgPool/MaxPool (the pool is the anchor: the
    kernel dequantizes each tap as it loads it)."""
    d = p.op("Dequantize", p.input("src"), pred=int8_quant)
    return p.op(POOLS, d, pred=pool_rule, label="pool")


def x8_pool_post_ops():
    """oneDNN's x8_pool_post_ops and x8_pool_reshape_transpose: post-ops, then an
    optional reshape or transpose before the Quantize.  Legality folds a view into
    a kernel's output only when the view's dst leaves the partition; one between the
    pool and the Quantize makes a staged kernel (the pool and the view's copy into
    scratch, the Quantize a loop of its own)."""
    p = Pattern("x8_pool_post_ops", 10, "int8 Dequantize -> AvgPool/MaxPool -> post-ops -> [reshape/transpose] -> "
                                        "int8 Quantize", anchor="pool", kernel=("anchor", "staged"))
    v = p.op(["StaticReshape", "StaticTranspose"], post_ops(p, int8_pool(p)), optional=True, label="view")
    p.op("Quantize", v, pred=int8_quant)
    return p


def x8_pool_add_post_ops():
    """oneDNN's x8_pool_add_post_ops_cpu: the Add's other operand (either side)
    dequantized in the kernel where the pool stores."""
    p = Pattern("x8_pool_add_post_ops", 10.1, "int8 Dequantize -> AvgPool/MaxPool -> Add (a Dequantize) -> "
                                              "post-ops -> int8 Quantize", anchor="pool", kernel="anchor")
    pool = int8_pool(p)
    other = p.op("Dequantize", p.input("other"), label="other")
    add = p.op("Add", pool, other, either_order=True, pred=keeps_shape(pool), label="sum")
    p.op("Quantize", post_ops(p, add), pred=int8_quant)
    return p


BUILDERS = [x8_pool_post_ops, x8_pool_add_post_ops]
