"""MatMul (doc: MatMul.md): dst = src @ weights (+ bias), with batch broadcasting.

The two right-most dims are the matrix, the others batch dims that broadcast
(numpy rules, the lower-rank operand unsqueezed on the left).  A 1-D src [d]
is taken as [1, d] and a 1-D weights [d] as [d, 1]; transposes do not apply
to them and the added dim is dropped from dst again (numpy matmul semantics).
Its lowering is graphc/codegen/rules/matmul.py.
"""
from __future__ import annotations

import math

import numpy as np

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

    def vjp(self, op, em):
        """MatMuls of diff_dst with the other operand (transposed as the forward's
        attributes say), summed over broadcast batch dims; 1-D operands as
        matrices of one row (src) or column (weights); bias: diff_dst summed to
        its shape."""
        a, b = op.inputs[:2]
        y, bias = op.outputs[0], op.input("bias")
        ta, tb = op.attr("transpose_a") and a.ndim > 1, op.attr("transpose_b") and b.ndim > 1
        full = y.shape + (1,) * (b.ndim == 1)
        full = full[:-1] + (1,) * (a.ndim == 1) + full[-1:]
        dy = em.reshape(em.cast(em.grad(y), a.dtype), full)
        a2 = em.reshape(a, (1,) + a.shape) if a.ndim == 1 else a
        b2 = em.reshape(b, b.shape + (1,)) if b.ndim == 1 else b
        da = db = None
        if em.wants(a):
            da = (em.one("MatMul", [b2, dy], {"transpose_a": tb, "transpose_b": True}) if ta
                  else em.one("MatMul", [dy, b2], {"transpose_b": not tb}))
            da = em.reshape(em.sum_to(da, a2.shape), a.shape)
        if em.wants(b):
            if b2.ndim == 2 and a2.ndim > 2 and not ta:   # batch dims of src alone: rows of one product
                rows = math.prod(a2.shape[:-1])
                a2, dy = em.reshape(a2, (rows, a2.shape[-1])), em.reshape(dy, (rows, dy.shape[-1]))
            db = (em.one("MatMul", [dy, a2], {"transpose_a": True, "transpose_b": ta}) if tb
                  else em.one("MatMul", [a2, dy], {"transpose_a": not ta}))
            db = em.reshape(em.sum_to(db, b2.shape), b.shape)
        return [da, db, em.sum_to(em.grad(y), bias.shape) if em.wants(bias) else None]

    def flops(self, op):
        """2 * M * N * K * batch: two per multiply-add for every dst element."""
        src = op.inputs[0].shape
        k = src[-2] if op.attr("transpose_a") and len(src) > 1 else src[-1]
        return 2 * math.prod(op.outputs[0].shape) * k
