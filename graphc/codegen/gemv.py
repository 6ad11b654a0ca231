"""A row vector times narrow-float weights (M = 1: one token through a decoder's
MLP), the weights read once, in place.

``C[0, :] = a @ B`` with B a bf16 or f16 kernel argument stored row-major (unit
column stride).  A GEMM library would pack all of B first (the bf16 tile pairs
rows of k; sgemm needs B widened to f32): for one row of C that copy moves the
weights twice more than the product reads them, and the product is bound by
reading them.  Here a's row is loaded once into an f32 vector (its fused
prologue computed there) and each block of ``NB`` columns of C, a task of the
parallel loop, is summed in f32 down the rows of B, ``UNROLL`` rows at a time,
B's values widened exactly as they are loaded: the f32 products of the bf16
GEMM (bf16 values multiply exactly in f32), summed in f32 in an order fixed by
the plan (the same for any thread count).  Measured on the gated MLP's
[1, 4096] x [4096, 14336] bf16 (docs/performance.md, "bf16 gated MLP").
"""
from __future__ import annotations

import math

from . import ir
from .gemm import Matrix, direct
from .kernel import ArrayRef, worth_parallel
from ..types import DataType

#: columns of C per task (a row of them is 512 bytes of bf16 weights)
NB = 256
#: rows of B summed per pass over a block's accumulators
UNROLL = 4
#: the weights' dtypes read in place
NARROW = (DataType.bf16, DataType.f16)


def gemv_applies(batch_shape, a: Matrix, b: Matrix) -> bool:
    """Whether the product is one row times narrow weights read in place: M = 1,
    one matrix in the batch, B a bf16/f16 argument with unit column stride and no
    rounding, and something to sum (K, N > 0)."""
    if a.rows != 1 or math.prod(batch_shape) != 1 or a.batched or b.batched:
        return False
    if type(b.ref) is not ArrayRef or b.ref.dtype not in NARROW or b.rounding is not None:
        return False
    d = direct(b, b.ref.dtype)
    return d is not None and d[0] == 0 and a.cols > 0 and b.cols > 0


def emit_gemv(kb, batch_shape, a: Matrix, b: Matrix, store) -> None:
    """Emit ``store(bivars, 0, j, C[0, j])`` for every column j of ``C = a @ B``
    (``gemv_applies`` holds)."""
    K, N = a.cols, b.cols
    bivars = [ir.const(0)] * len(batch_shape)
    x = kb.scratch(K, "f32", False, prefix="grow")
    with kb.for_(K, "c") as c:
        v = a.ref.load_nd(a.index(bivars, ir.const(0), c))
        if a.rounding is not None:
            v = a.rounding(v)
        kb.emit(x.store(c, ir.f32(v)))
    nblk = -(-N // NB)
    parallel = nblk > 1 and worth_parallel(K * N)
    with kb.for_(nblk, "gb", parallel) as t:
        j0 = kb.let(t * NB, "j0")
        n_ = kb.let(ir.call("min", NB, N - j0), "n")
        acc = kb.scratch(NB, "f32", parallel, prefix="gacc")
        with kb.for_(n_, "jj") as jj:
            kb.emit(acc.store(jj, ir.const(0.0, "f32")))
        _rows(kb, b, x, acc, j0, n_, 0, K // UNROLL, UNROLL)
        if K % UNROLL:
            _rows(kb, b, x, acc, j0, n_, K - K % UNROLL, K % UNROLL, 1)
        with kb.for_(n_, "jj") as jj:
            kb.emit(store(bivars, ir.const(0), j0 + jj, acc[jj]))


def _rows(kb, b, x, acc, j0, n_, k0, steps, unroll) -> None:
    """acc[jj] += sum over rows k0 + s * unroll + u (s < steps, u < unroll) of
    x[k] * B[k, j0 + jj]."""
    with kb.for_(steps, "gk") as s:
        k = kb.let(k0 + s * unroll, "k")
        xs = [kb.let(x[k + u], "xk") for u in range(unroll)]
        with kb.for_(n_, "jj") as jj:
            j = j0 + jj
            terms = [xs[u] * ir.f32(b.ref.load_nd(b.index(None, k + u, j))) for u in range(unroll)]
            while len(terms) > 1:   # a balanced sum: pairs, then pairs of pairs
                terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
            kb.emit(acc.store(jj, acc[jj] + terms[0]))


__all__ = ["NB", "UNROLL", "gemv_applies", "emit_gemv"]
