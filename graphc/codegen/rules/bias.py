"""Lowering of BiasAdd, PReLU and their backward ops (graphc/ops/bias.py)."""
from __future__ import annotations

from ...ops.bias import slope_view
from ...ops.norm import channel_dim
from .. import ir
from ..grouped import Nest, each_element
from ..reduce_plan import tensor_vdims
from . import ElementwiseRule, Rule


def slope_ivars(view, slope_shape, iv) -> list:
    """Index expressions of the slope (its shape, its broadcast ``view`` against src)
    at src's index ``iv``: its dims other than 1 are view's, in order."""
    picked = iter([v for v, d in zip(iv, view) if d != 1])
    return [next(picked) if d != 1 else None for d in slope_shape]


class BiasAdd(ElementwiseRule):
    kinds = ("BiasAdd",)

    def expr(self, op, x, b):
        """Pointwise (fused kernels substitute it, e.g. as a MatMul or Convolution
        epilogue), bias read along the channel dim (the schema's input_dims)."""
        return x + b

    def lower(self, op, kb, ins, outs, values):
        src, bias = ins
        ca = channel_dim(op)
        with each_element(kb, src) as iv:
            kb.emit(outs[0].store_nd(iv, src.load_nd(iv) + bias.load_nd([iv[ca]])))


class BiasAddBackward(Rule):
    kinds = ("BiasAddBackward",)

    def lower(self, op, kb, ins, outs, values):
        diff_dst = ins[0]
        ca = channel_dim(op, "diff_dst")
        nest = Nest(kb, tensor_vdims(diff_dst, {ca}))
        s = nest.acc()
        with nest.groups():
            with nest.pass_(s) as iv:
                s.add(diff_dst.load_nd(iv))
            with nest.per_group():
                kb.emit(outs[0].store_nd([nest.iv[ca]], s.value))


class PReLU(Rule):
    kinds = ("PReLU",)

    def lower(self, op, kb, ins, outs, values):
        src, slope = ins
        view = op.schema.view(op, src.shape, slope.shape)
        with each_element(kb, src) as iv:
            x = kb.let(src.load_nd(iv), "x")
            a = slope.load_nd(slope_ivars(view, slope.shape, iv))
            kb.emit(outs[0].store_nd(iv, ir.select(x >= 0, x, a * x)))


class PReLUBackward(Rule):
    kinds = ("PReLUBackward",)

    def lower(self, op, kb, ins, outs, values):
        src, slope, diff_dst = ins
        view = slope_view(op, src.shape, slope.shape, True)
        nest = Nest(kb, tensor_vdims(src, {i for i, d in enumerate(view) if d != 1}))
        s = nest.acc()
        with nest.groups():
            with nest.pass_(s) as iv:
                x = kb.let(src.load_nd(iv), "x")
                dy = kb.let(diff_dst.load_nd(iv), "dy")
                a = slope.load_nd(slope_ivars(view, slope.shape, iv))
                kb.emit(outs[0].store_nd(iv, ir.select(x >= 0, dy, a * dy)))
                s.add(ir.select(x < 0, x * dy, 0.0))
            with nest.per_group():
                kb.emit(outs[1].store_nd(slope_ivars(view, slope.shape, nest.iv), s.value))
