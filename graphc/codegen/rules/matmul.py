"""Lowering of MatMul (graphc/ops/matmul.py): BLAS on tiles of dst
(graphc.codegen.gemm).  f32 operands are read in place, others packed to f32;
bias and fused post-ops apply where each element is stored.  Operands that are
static s8/u8 Dequantizes computed in the kernel multiply as integers, summed
exactly as oneDNN's s32 accumulator sums them (graphc.codegen.quant.Factored),
through MKL's int8 GEMM where it fits."""
from __future__ import annotations

from .. import ir
from ..blas_import import int8_gemm
from ..gemm import S32_LIMIT, Matrix, emit_gemm, emit_int8_gemm, fpmath_rounding
from ..gemv import emit_gemv, gemv_applies
from ..loops import aligned, linear
from ..quant import exact_chunk, integer_operands
from ...types import DataType
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
    u8s8 = ints is not None and int8_gemm() and S32_LIMIT > ints[0].bound * ints[1].bound * w.lt.shape[-1 if tb else -2]
    if u8s8:
        # MKL's int8 GEMM on the quantized values, the zero points compensated
        fa, fb = ints
        src, w, rounding = fa.raw, fb.raw, None
    elif ints is not None:
        # int8 as oneDNN computes it: integer products summed exactly (as in s32),
        # the scales applied to the sum
        (fa, fb), rounding = ints, None
        src, w, exact_k = fa.ints, fb.ints, exact_chunk(fa, fb)

    def operand(ref, vector_rows, transpose):
        shape, strides = ref.shape, ref.strides
        if len(shape) == 1:
            # a vector: [1, d] (src) or [d, 1] (weights)
            rows, cols = (1, shape[0]) if vector_rows else (shape[0], 1)
            st = (0, strides[0]) if vector_rows else (strides[0], 0)
            return Matrix(ref, rows, cols, lambda bv, r, c: [c] if vector_rows else [r], False, st,
                          lambda bv: ir.const(0), rounding)
        lead = shape[:-2]
        rows, cols = (shape[-1], shape[-2]) if transpose else (shape[-2], shape[-1])
        st = (strides[-1], strides[-2]) if transpose else (strides[-2], strides[-1])

        def index(bv, r, c):
            head = aligned(bv, batch, lead) if bv is not None else [None] * len(lead)
            return head + ([c, r] if transpose else [r, c])

        def base(bv):
            return linear(aligned(bv, batch, lead), strides[:-2]) if bv is not None else ir.const(0)
        return Matrix(ref, rows, cols, index, any(d != 1 for d in lead), st, base, rounding)

    a = operand(src, True, ta)
    b = operand(w, False, tb)
    has_i, has_j = src.lt.ndim > 1, w.lt.ndim > 1

    def dst_index(bv, i, j):
        return list(bv) + [i] * has_i + [j] * has_j

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
        out = Matrix(dst, a.rows, b.cols, None, True, (rs, cs), lambda bv: linear(bv, dst.strides[:nb]))
    if u8s8:
        shifts = (0 if fa.q.dtype is DataType.u8 else 128, 0 if fb.q.dtype is DataType.s8 else -128)
        za = float(fa.op.attr("zps")[0]) if fa.zps is not None else 0.0
        emit_int8_gemm(kb, batch, a, b, za, fb.zero, shifts, store)
        return
    if exact_k is None and gemv_applies(batch, a, b):
        # a few rows times bf16/f16 weights: the weights read once, in place (graphc.codegen.gemv)
        emit_gemv(kb, batch, a, b, store)
        return
    emit_gemm(kb, batch, a, b, store, out, exact_k)
