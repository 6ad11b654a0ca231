"""SoftMax, LogSoftmax and their backward ops (docs: Softmax.md,
SoftmaxBackward.md, LogSoftmax.md, LogSoftmaxBackward.md); their lowering is
graphc/codegen/rules/softmax.py."""
from __future__ import annotations

import numpy as np

from ..types import DataType
from .common import merged_shape, same_shape_as
from .schema import Attr, DtypeTable, In, OpSchema, Out, norm_axis, same_dtype


class _AlongAxis(OpSchema):
    """An op along one ``axis`` of input 0 (a backward op: of dst, diff_dst alike)."""

    family = "softmax"

    def axis(self, op) -> int:
        return norm_axis(op, op.attr("axis"), op.inputs[0].ndim)

    def check(self, op):
        self.axis(op)
        if op.input("diff_dst") is not None:
            same_shape_as(op, "dst", "diff_dst")

    def infer(self, op):
        return [merged_shape(*(t.shape for t in op.inputs))]


class SoftMax(_AlongAxis):
    kind = "SoftMax"
    doc = ("dst = exp(src - max) / sum(exp(src - max)) along axis; stats = max + log(sum(exp(src - max))), "
           "axis kept as size 1.")
    inputs = (In("src"),)
    outputs = (Out("dst"), Out("stats", optional=True))
    attrs = (Attr("axis", "s64", 1),
             Attr("mode", "string", "none", choices=("none", "inf_as_zero"),
                  doc="inf_as_zero: dst is 0 where the whole axis is -inf (instead of NaN)"))
    dtypes = DtypeTable(["src", "dst", "stats"],
                        [("f32", "f32,bf16,f16", "f32"), ("bf16", "f32,bf16", "f32"), ("f16", "f32,f16", "f32")])

    def infer(self, op):
        shape = op.input("src").shape
        axis = self.axis(op)
        return [shape, shape[:axis] + (1,) + shape[axis + 1:]][:len(op.outputs)]

    def reference(self, op, src):
        axis = self.axis(op)
        m = src.max(axis=axis, keepdims=True, initial=-np.inf)
        inf_as_zero = op.attr("mode") == "inf_as_zero"
        if inf_as_zero:
            m = np.where(np.isneginf(m), 0.0, m)
        e = np.exp(src - m)
        s = e.sum(axis=axis, keepdims=True)
        dst = e / s
        if inf_as_zero:
            dst = np.where(s == 0, 0.0, dst)
        return (dst, m + np.log(s))[:len(op.outputs)]

    grad_outputs = ("dst",)

    def vjp(self, op, em):
        src, dst = op.inputs[0], op.outputs[0]
        dtype = src.dtype if src.dtype == dst.dtype else DataType.f32
        return em.like("SoftMaxBackward", [em.grad(dst), dst], op, [dtype])


class SoftMaxBackward(_AlongAxis):
    kind = "SoftMaxBackward"
    doc = "diff_src = dst * (diff_dst - sum(diff_dst * dst)) along axis."
    inputs = (In("diff_dst"), In("dst"))
    outputs = (Out("diff_src"),)
    attrs = (Attr("axis", "s64", 1),)
    dtypes = DtypeTable(["dst|diff_dst", "diff_src"], [("f32", "f32"), ("bf16", "f32,bf16"), ("f16", "f32,f16")])

    def reference(self, op, diff_dst, dst):
        return (dst * (diff_dst - (diff_dst * dst).sum(axis=self.axis(op), keepdims=True)),)


class LogSoftmax(_AlongAxis):
    kind = "LogSoftmax"
    doc = "dst = src - max - log(sum(exp(src - max))) along axis."
    inputs = (In("src"),)
    outputs = (Out("dst"),)
    attrs = (Attr("axis", "s64", -1),)
    dtypes = same_dtype("src|dst")

    def reference(self, op, src):
        axis = self.axis(op)
        m = src.max(axis=axis, keepdims=True, initial=-np.inf)
        z = src - m
        return (z - np.log(np.exp(z).sum(axis=axis, keepdims=True)),)

    def vjp(self, op, em):
        dst = op.outputs[0]
        return em.like("LogSoftmaxBackward", [em.grad(dst), dst], op)


class LogSoftmaxBackward(_AlongAxis):
    kind = "LogSoftmaxBackward"
    doc = "diff_src = diff_dst - exp(dst) * sum(diff_dst) along axis."
    inputs = (In("diff_dst"), In("dst"))
    outputs = (Out("diff_src"),)
    attrs = (Attr("axis", "s64", -1),)
    dtypes = same_dtype("diff_dst|dst|diff_src")

    def reference(self, op, diff_dst, dst):
        return (diff_dst - np.exp(dst) * diff_dst.sum(axis=self.axis(op), keepdims=True),)

