"""Training graphs' patterns (the backward ops graphc.grad emits, with their
neighbours)."""
from __future__ import annotations

from ..pattern import Pattern


def matmul_softmax_bwd():
    """MatMul -> SoftMaxBackward (attention's backward: dP = dO @ V^T, then
    dS = P * (dP - sum(dP * P))): the MatMul's dst is SoftMaxBackward's
    diff_dst, staged through scratch in one kernel."""
    p = Pattern("matmul_softmax_bwd", 9, "MatMul -> SoftMaxBackward (diff_dst)", anchor="mm", kernel="staged")
    mm = p.op("MatMul", p.input(), p.input(), label="mm")
    p.op("SoftMaxBackward", mm, p.input(), label="softmax_bwd")
    return p


BUILDERS = [matmul_softmax_bwd]
