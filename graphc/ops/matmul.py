"""MatMul (doc: MatMul.md): dst = src @ weights (+ bias), with batch broadcasting.

The two right-most dims are the matrix, the others batch dims that broadcast
(numpy rules, the lower-rank operand unsqueezed on the left).  A 1-D src [d]
is taken as [1, d] and a 1-D weights [d] as [d, 1]; transposes do not apply
to them and the added dim is dropped from dst again (numpy matmul semantics).
"""
from __future__ import annotations

import math

import numpy as np

from ..codegen import ir
from ..codegen.blas_import import int8_gemm
from ..codegen.gemm import S32_LIMIT, Matrix, emit_gemm, emit_int8_gemm, fpmath_rounding
from ..codegen.loops import aligned, linear
from ..types import DataType
from .quant import exact_chunk, integer_operands
from .schema import Attr, DtypeTable, In, OpSchema, Out, bad_shape, broadcast_shapes, dims_equal

ACCUMULATION_MODES = ("strict", "relaxed", "any", "f32", "s32", "f16")


def _matrix(shape, transpose: bool, vector) -> tuple:
    if len(shape) == 1:
        return vector(shape[0])
    return tuple(shape[:-2]) + (shape[-1], shape[-2]) if transpose else tuple(shape)


def dst_shape(op, src, weights) -> tuple:
    """dst shape from src and weights shapes (-1 for unknown dims)."""
    for name, shape in (("src", src), ("weights", weights)):
        if len(shape) == 0:
            raise bad_shape(op, "MatMul operands need at least one dim", where=f"port '{name}'",
                            expected="rank >= 1", found=[])
    a = _matrix(src, op.attr("transpose_a"), lambda d: (1, d))
    b = _matrix(weights, op.attr("transpose_b"), lambda d: (d, 1))
    if not dims_equal(a[-1], b[-2]):
        raise bad_shape(op, "the contracting dims of src and weights differ", where="port 'weights'",
                        expected=f"K = {a[-1]} (src {list(src)})", found=f"{b[-2]} (weights {list(weights)})")
    batch = broadcast_shapes(op, a[:-2], b[:-2], where="batch dims of src and weights")
    return batch + (a[-2],) * (len(src) > 1) + (b[-1],) * (len(weights) > 1)


class MatMul(OpSchema):
    kind = "MatMul"
    family = "matmul"
    doc = "dst = src @ weights + bias, batch dims broadcast"
    inputs = (In("src"), In("weights"), In("bias", optional=True, doc="broadcasts to dst"))
    outputs = (Out("dst"),)
    attrs = (Attr("transpose_a", "bool", False), Attr("transpose_b", "bool", False),
             Attr("accumulation_mode", "string", "strict", choices=ACCUMULATION_MODES))
    fpmath_inputs = ("src", "weights")
    dtypes = DtypeTable(["src|weights|bias", "dst"], [("f32", "f32"), ("bf16", "f32,bf16"), ("f16", "f32,f16")])

    def infer(self, op):
        dst = dst_shape(op, op.inputs[0].shape, op.inputs[1].shape)
        bias = op.input("bias")
        if bias is not None:
            lead = len(dst) - bias.ndim
            if lead < 0 or any(b != 1 and not dims_equal(b, d) for b, d in zip(bias.shape, dst[lead:])):
                raise bad_shape(op, "bias must broadcast to dst", where="port 'bias'",
                                expected=f"dims equal to or 1 against {list(dst)}", found=list(bias.shape))
        return [dst]

    def reference(self, op, src, weights, bias=None):
        a = src if src.ndim == 1 or not op.attr("transpose_a") else np.swapaxes(src, -1, -2)
        b = weights if weights.ndim == 1 or not op.attr("transpose_b") else np.swapaxes(weights, -1, -2)
        dst = np.matmul(a, b)  # float64 in, float64 accumulation
        return (dst if bias is None else dst + bias,)

    def flops(self, op):
        """2 * M * N * K * batch: two per multiply-add for every dst element."""
        src = op.inputs[0].shape
        k = src[-2] if op.attr("transpose_a") and len(src) > 1 else src[-1]
        return 2 * math.prod(op.outputs[0].shape) * k

    def lower(self, op, kb, ins, outs):
        """BLAS on tiles of dst (graphc.codegen.gemm): f32 operands are read in
        place, others packed to f32; bias and fused post-ops apply where each
        element is stored."""
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
    emit_gemm(kb, batch, a, b, store, out, exact_k)
