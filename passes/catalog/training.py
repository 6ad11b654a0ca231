"""Training graphs' patterns: the backward ops graphc.grad emits, with the
forward ops whose values they read."""
from __future__ import annotations

from ..pattern import Pattern
from .pieces import ELTWISE, UNARY, UNARY_BWD, keeps_shape


def matmul_softmax_bwd():
    """MatMul -> SoftMaxBackward (attention's backward: dP = dO @ V^T, then
    dS = P * (dP - sum(dP * P))): the MatMul's dst is SoftMaxBackward's
    diff_dst, staged through scratch in one kernel."""
    p = Pattern("matmul_softmax_bwd", 9, "MatMul -> SoftMaxBackward (diff_dst)", anchor="mm", kernel="staged")
    mm = p.op("MatMul", p.input(), p.input(), label="mm")
    p.op("SoftMaxBackward", mm, p.input(), label="softmax_bwd")
    return p


def eltwise_fwd_bwd():
    """An eltwise op -> its backward op reading its dst (use_dst: ReLU, Sigmoid,
    Tanh, ...) -> post-ops: one loop reads src and diff_dst and writes dst and
    diff_src (dst is not read back)."""
    p = Pattern("eltwise_fwd_bwd", 6.5, "unary -> backward op (its dst) -> post-op*", kernel="eltwise")
    fwd = p.op(UNARY, p.input())
    bwd = p.op(UNARY_BWD, fwd, p.input(), pred=lambda o, m: o.attr("use_dst", False))
    p.repeat(lambda q, x: q.op(ELTWISE + ["TypeCast"], x, None, either_order=True, pred=keeps_shape(x)), bwd, 0, 20)
    return p


def norm_bwd_post_ops():
    """LayerNormBackward -> post-ops (the residual branch's gradient added where
    diff_src is stored)."""
    p = Pattern("norm_bwd_post_ops", 8, "LayerNormBackward -> post-op*", kernel="anchor")
    n = p.op("LayerNormBackward", p.input(), p.input(), p.input(), p.input())
    p.repeat(lambda q, x: q.op(ELTWISE + ["TypeCast"], x, None, either_order=True, pred=keeps_shape(x)), n, 1, 20)
    return p


BUILDERS = [matmul_softmax_bwd, eltwise_fwd_bwd, norm_bwd_post_ops]
