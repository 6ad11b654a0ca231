"""Lowering of MatMul (graphc/ops/matmul.py): BLAS on tiles of dst
(graphc.codegen.gemm).  f32 operands are read in place, others packed to f32;
bias and fused post-ops apply where each element is stored.  Operands that are
static s8/u8 Dequantizes computed in the kernel multiply as integers, summed
exactly as oneDNN's s32 accumulator sums them (graphc.codegen.quant.Factored),
through the int8 GEMM (graphc.codegen.gemm_int8) where it fits."""
from __future__ import annotations

import math

from .. import ir
from ..blas_import import int8_gemm
from ..gemm import Matrix, emit_gemm, fpmath_rounding
from ..gemm_int8 import emit_int8_gemm, fits_s32, shifts_of
from ..gemv import emit_gemv, gemv_applies
from ..loops import aligned, linear
from ..quant import exact_chunk, integer_operands
from . import Rule


class MatMul(Rule):
    kinds = ("MatMul",)

    def lower(self, op, kb, ins, outs, values):
        lower_matmul(op, kb, dict(zip(op.input_names, ins)), outs[0])


def lower_matmul(op, kb, ins, dst):
    src, w, bias = ins["src"], ins["weights"], ins.get("bias")
    ta = op.attr("transpose_a") and src.lt.ndim > 1
    tb = op.attr("transpose_b") and w.lt.ndim > 1
    nb = len(dst.shape) - (src.lt.ndim > 1) - (w.lt.ndim > 1)
    batch = tuple(dst.shape[:nb])
    rounding = fpmath_rounding(op)
    ints = integer_operands(kb, src, w, w.lt.ndim - (2 if tb else 1)) if w.lt.ndim > 1 else None
    exact_k = None
    u8s8 = ints is not None and int8_gemm() and fits_s32(w.lt.shape[-1 if tb else -2])
    if u8s8:
        # the int8 GEMM on the quantized values (read in place where they are
        # kernel arguments), the zero points compensated
        fa, fb = ints
        src, w, rounding = fa.argument() or fa.raw, fb.argument() or fb.raw, None
    elif ints is not None:
        # int8 as oneDNN computes it: integer products summed exactly (as in s32),
        # the scales applied to the sum
        (fa, fb), rounding = ints, None
        src, w, exact_k = fa.ints, fb.ints, exact_chunk(fa, fb)

    # trailing batch dims that A's rows and C's rows continue in memory, with B
    # the same for all of them, fold into M: one GEMM over the collapsed rows
    # instead of one short GEMM per batch index (each packing B again)
    fold = 0 if ints is not None else folded_batch_dims(src, w, dst, batch, ta)
    rows_of = batch[nb - fold:] + ((src.lt.shape[-2],) if fold else ())
    batch = batch[:nb - fold]

    def split_rows(r):
        """The multi-index (folded batch dims, row) of folded row ``r``."""
        if not fold:
            return [r]
        out, inner = [], 1
        for d in reversed(rows_of):
            q = r if inner == 1 else r // inner
            out.append(None if d == 1 else (q if inner * d == math.prod(rows_of) else q % d))
            inner *= d
        return out[::-1]

    def operand(ref, vector_rows, transpose):
        shape, strides = ref.shape, ref.strides
        if len(shape) == 1:
            # a vector: [1, d] (src) or [d, 1] (weights)
            rows, cols = (1, shape[0]) if vector_rows else (shape[0], 1)
            st = (0, strides[0]) if vector_rows else (strides[0], 0)
            return Matrix(ref, rows, cols, lambda bv, r, c: [c] if vector_rows else [r], False, st,
                          lambda bv: ir.const(0), rounding)
        folded = fold if vector_rows else 0
        lead = shape[:-2 - folded]
        rows, cols = (shape[-1], shape[-2]) if transpose else (shape[-2], shape[-1])
        rows *= math.prod(shape[len(lead):-2])
        st = (strides[-1], strides[-2]) if transpose else (strides[-2], strides[-1])

        def index(bv, r, c):
            head = aligned(bv, batch, lead) if bv is not None else [None] * len(lead)
            if folded:
                return head + split_rows(r) + [c]
            return head + ([c, r] if transpose else [r, c])

        def base(bv):
            return linear(aligned(bv, batch, lead), strides[:-2]) if bv is not None else ir.const(0)
        return Matrix(ref, rows, cols, index, any(d != 1 for d in lead), st, base, rounding)

    a = operand(src, True, ta)
    b = operand(w, False, tb)
    has_i, has_j = src.lt.ndim > 1, w.lt.ndim > 1

    def dst_index(bv, i, j):
        return list(bv) + (split_rows(i) if has_i else []) + [j] * has_j

    def store(bv, i, j, v):
        ivars = dst_index(bv, i, j)
        if ints is not None:
            v = ir.f64(v) * (ints[0].scale(None) * ints[1].scale(j))
        if bias is not None:
            v = v + bias.load_nd(aligned(ivars, dst.shape, bias.shape))
        return dst.store_nd(ivars, v)
    out = None
    if bias is None and ints is None:
        rs = dst.strides[nb] if has_i else 0
        cs = dst.strides[-1] if has_j else 0
        out = Matrix(dst, a.rows, b.cols, None, True, (rs, cs), lambda bv: linear(bv, dst.strides[:nb - fold]))
    if u8s8:
        shifts = shifts_of(fa.q.dtype, fb.q.dtype)
        za = float(fa.op.attr("zps")[0]) if fa.zps is not None else 0.0
        emit_int8_gemm(kb, batch, a, b, za, fb.zero, shifts, store)
        return
    if exact_k is None and gemv_applies(batch, a, b):
        # a few rows times bf16/f16 weights: the weights read once, in place (graphc.codegen.gemv)
        emit_gemv(kb, batch, a, b, store)
        return
    emit_gemm(kb, batch, a, b, store, out, exact_k)


def folded_batch_dims(src, w, dst, batch, ta: bool) -> int:
    """How many trailing dims of the batch fold into the rows of the product:
    B (``w``) is one matrix for the whole batch, A (``src``, not transposed) and
    C (``dst``) have those dims in full, each laid out right above the rows (its
    stride the rows' count times the rows' stride)."""
    if ta or src.lt.ndim < 3 or w.lt.ndim < 2 or any(d != 1 for d in w.shape[:-2]):
        return 0
    if src.strides is None or dst.strides is None:
        return 0
    fold = 0
    s_off = src.lt.ndim - 2 - len(batch)    # (C's batch dims are its first)
    for k in range(len(batch) - 1, -1, -1):
        sk = k + s_off
        if sk < 0 or src.shape[sk] != batch[k]:
            break
        if not (_continues(src.shape, src.strides, sk) and _continues(dst.shape, dst.strides, k)):
            break
        fold += 1
    return fold


def _continues(shape, strides, k) -> bool:
    """Is dim ``k`` laid out right above dim ``k + 1`` (or is it of size 1)?"""
    return shape[k] == 1 or strides[k] == shape[k + 1] * strides[k + 1]
