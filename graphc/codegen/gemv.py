"""A few rows times narrow-float weights (M = 1 to 4: tokens through a decoder's
MLP), the weights read once, in place.

``C = A @ B`` with A of at most MAX_ROWS rows and B a bf16 or f16 kernel
argument stored row-major (unit column stride).  A GEMM library would pack all
of B first (the bf16 tile pairs rows of k; sgemm needs B widened to f32): for
a few rows of C that copy moves the weights twice more than the product reads
them, and the product is bound by reading them.  Here A's rows are loaded once
into an f32 buffer (a fused prologue computed there) and each block of ``NB``
columns of C, a task of the parallel loop, is summed in f32 down the rows of
B, ``UNROLL`` rows at a time, each value of B widened exactly as it is loaded
and multiplied into every row of A: the f32 products of the bf16 GEMM (bf16
values multiply exactly in f32), summed in f32 in an order fixed by the plan
(the same for any thread count).  Measured on the gated MLP's [1, 4096] x
[4096, 14336] bf16 (docs/performance.md, "bf16 gated MLP for one token").
"""
from __future__ import annotations

import math

from . import ir
from .cpu import has_f16c
from .gemm import Matrix, direct
from .kernel import ArrayRef, worth_parallel
from ..types import DataType

#: columns of C per task (a row of them is 512 bytes of bf16 weights)
NB = 256
#: rows of B summed per pass over a block's accumulators
UNROLL = 4
#: most rows of A (a few tokens): each value of B loaded once serves all of them; from
#: 8 rows on the bf16 tile's 8-row tiles are full
MAX_ROWS = 4
#: the weights' dtypes read in place
NARROW = (DataType.bf16, DataType.f16)


def gemv_applies(batch_shape, a: Matrix, b: Matrix) -> bool:
    """Whether the product is a few rows (at most MAX_ROWS) times narrow weights read
    in place: one matrix in the batch, B a bf16/f16 argument with unit column stride
    and no rounding, and something to sum (K, N > 0)."""
    if not 1 <= a.rows <= MAX_ROWS or math.prod(batch_shape) != 1 or a.batched or b.batched:
        return False
    if type(b.ref) is not ArrayRef or b.ref.dtype not in NARROW or b.rounding is not None:
        return False
    d = direct(b, b.ref.dtype)
    return d is not None and d[0] == 0 and a.cols > 0 and b.cols > 0


def emit_gemv(kb, batch_shape, a: Matrix, b: Matrix, store) -> None:
    """Emit ``store(bivars, i, j, C[i, j])`` for every element of ``C = A @ B``
    (``gemv_applies`` holds)."""
    M, K, N = a.rows, a.cols, b.cols
    bivars = [ir.const(0)] * len(batch_shape)
    x = kb.scratch(M * K, "f32", False, prefix="grow")
    with kb.for_(M, "r") as r, kb.for_(K, "c") as c:
        v = a.ref.load_nd(a.index(bivars, r, c))
        if a.rounding is not None:
            v = a.rounding(v)
        kb.emit(x.store(r * K + c, ir.f32(v)))
    nblk = -(-N // NB)
    parallel = nblk > 1 and worth_parallel(M * K * N)
    with kb.for_(nblk, "gb", parallel) as t:
        j0 = kb.let(t * NB, "j0")
        n_ = kb.let(ir.call("min", NB, N - j0), "n")
        acc = kb.scratch(M * NB, "f32", parallel, prefix="gacc")
        with kb.for_(M * NB, "e") as e:
            kb.emit(acc.store(e, ir.const(0.0, "f32")))
        _rows(kb, b, x, acc, (M, K), j0, n_, 0, K // UNROLL, UNROLL)
        if K % UNROLL:
            _rows(kb, b, x, acc, (M, K), j0, n_, K - K % UNROLL, K % UNROLL, 1)
        with kb.for_(M, "r") as r, kb.for_(n_, "jj") as jj:
            kb.emit(store(bivars, r, j0 + jj, acc[r * NB + jj]))


def _rows(kb, b, x, acc, dims, j0, n_, k0, steps, unroll) -> None:
    """acc[i, jj] += sum over rows k = k0 + s * unroll + u (s < steps, u < unroll) of
    A[i, k] * B[k, j0 + jj], for each row i of A; each value of B loaded once."""
    M, K = dims
    with kb.for_(steps, "gk") as s:
        k = kb.let(k0 + s * unroll, "k")
        xs = [[kb.let(x[i * K + k + u], "xk") for u in range(unroll)] for i in range(M)]
        with kb.for_(n_, "jj") as jj:
            j = j0 + jj
            w = [kb.let(_weight(b, k + u, j), "wk") for u in range(unroll)]
            for i in range(M):
                terms = [xs[i][u] * w[u] for u in range(unroll)]
                while len(terms) > 1:   # a balanced sum: pairs, then pairs of pairs
                    terms = [terms[q] + terms[q + 1] if q + 1 < len(terms) else terms[q]
                             for q in range(0, len(terms), 2)]
                kb.emit(acc.store(i * NB + jj, acc[i * NB + jj] + terms[0]))


def _weight(b: Matrix, k, j) -> ir.Expr:
    """B[k, j] in f32: a bf16 widened as any load widens it (a shift), an f16 too
    where kernels convert it in hardware (F16C); elsewhere an f16 by
    :func:`f16_bits_to_f32` (the integer f16_to_f32 branches on the exponent:
    17.3-17.7 ms against 12.4-15.4 for [1, 4096] x [4096, 14336] on one thread)."""
    if b.ref.dtype is DataType.bf16 or has_f16c():
        return ir.f32(b.ref.load_nd(b.index(None, k, j)))
    return f16_bits_to_f32(b.ref.at(b.ref.offset(b.index(None, k, j))))


def f16_bits_to_f32(raw) -> ir.Expr:
    """The f16 of bits ``raw`` as an f32, exactly, in integer arithmetic without a
    branch or select: the magnitude's bits moved to f32's place and scaled by
    2^112 (normal and subnormal values), the infinities and NaN (exponent all
    ones) given f32's all-ones exponent instead, then the sign."""
    h = ir.i64(raw)
    em = h & 0x7FFF
    shifted = em << 13
    scaled = ir.i64(ir.call("f32_to_bits", ir.call("bits_to_f32", shifted) * ir.const(2.0 ** 112, "f32")))
    special = ir.i64(em >= 0x7C00)
    bits = scaled + special * ((shifted | 0x7F800000) - scaled)
    return ir.call("bits_to_f32", bits | ((h & 0x8000) << 16))


__all__ = ["NB", "UNROLL", "MAX_ROWS", "gemv_applies", "emit_gemv", "f16_bits_to_f32"]
