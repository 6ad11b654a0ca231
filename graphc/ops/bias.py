"""BiasAdd, PReLU and their backward ops (docs: BiasAdd.md, BiasAddBackward.md,
PReLU.md, PReLUBackward.md); their lowering is graphc/codegen/rules/bias.py."""
from __future__ import annotations

import numpy as np

from ..errors import Unimplemented
from .common import Elementwise, merged_shape, same_shape_as, unbroadcast
from .norm import DATA_FORMAT, channel_dim, channel_view, other_axes, per_channel, with_dim
from .schema import Attr, In, OpSchema, Out, bad_shape, channel_axis, dims_equal, same_dtype


class BiasAdd(Elementwise):
    kind = "BiasAdd"
    family = "bias"
    doc = "dst = src + bias, bias [C] added along the channel dim."
    inputs = (In("src"), In("bias"))
    outputs = (Out("dst"),)
    attrs = (DATA_FORMAT,)
    dtypes = same_dtype("src|bias|dst")

    def infer(self, op):
        ca = channel_dim(op)
        return [with_dim(op.input("src").shape, ca, per_channel(op, op.input("src").shape[ca], ("bias",)))]

    def reference(self, op, src, bias):
        return (src + channel_view(bias, src.ndim, channel_dim(op)),)

    def input_dims(self, op, port):
        return [channel_dim(op)] if port == 1 else None

    def vjp(self, op, em):
        dy = em.grad(op.outputs[0])
        return [dy, em.like("BiasAddBackward", [dy], op)[0] if em.wants(op.inputs[1]) else None]


class BiasAddBackward(OpSchema):
    kind = "BiasAddBackward"
    aliases = ("BiasAddBackprop",)
    family = "bias"
    doc = "diff_bias = diff_dst summed over every dim but the channel dim."
    inputs = (In("diff_dst"),)
    outputs = (Out("diff_bias"),)
    attrs = (DATA_FORMAT,)
    dtypes = same_dtype("diff_dst|diff_bias")

    def infer(self, op):
        return [(op.input("diff_dst").shape[channel_dim(op, "diff_dst")],)]

    def reference(self, op, diff_dst):
        return (diff_dst.sum(axis=other_axes(diff_dst.ndim, channel_dim(op, "diff_dst"))),)


def slope_view(op, src, slope, per_channel_1d: bool) -> tuple:
    """The shape ``slope`` takes to broadcast against ``src`` (shapes): a 1-D
    slope goes to the channel dim when ``per_channel_1d`` (and src has rank >= 2);
    otherwise slope aligns with src's trailing dims (numpy).  Each dim must be 1
    or src's."""
    n = len(src)
    if per_channel_1d and len(slope) == 1 and n >= 2:
        view = with_dim((1,) * n, channel_axis(op.attr("data_format"), n), slope[0])
    else:
        view = (1,) * (n - len(slope)) + slope
    if len(slope) > n or not all(v == 1 or dims_equal(v, s) for v, s in zip(view, src)):
        how = "per channel" if per_channel_1d and len(slope) == 1 else "numpy-style from the right"
        raise bad_shape(op, f"slope does not broadcast to src ({how})", where="port 'slope'",
                        expected=f"broadcastable to {list(src)}", found=list(slope))
    return view


class PReLU(OpSchema):
    kind = "PReLU"
    family = "bias"
    doc = "dst = src where src >= 0, else slope * src; slope broadcasts to src."
    inputs = (In("src"), In("slope"))
    outputs = (Out("dst"),)
    attrs = (DATA_FORMAT,
             Attr("per_channel_broadcast", "bool", True, doc="a 1-D slope is per channel (else per last dim)"))
    dtypes = same_dtype("src|dst|slope")

    def view(self, op, src, slope):
        return slope_view(op, src, slope, op.attr("per_channel_broadcast"))

    def check(self, op):
        self.view(op, op.input("src").shape, op.input("slope").shape)

    def infer(self, op):
        return [op.input("src").shape]

    def reference(self, op, src, slope):
        return (np.where(src >= 0, src, slope.reshape(self.view(op, src.shape, slope.shape)) * src),)

    def vjp(self, op, em):
        src, slope = op.inputs
        if not op.attr("per_channel_broadcast") and slope.ndim == 1 and src.ndim >= 2 and slope.shape[0] != 1:
            raise Unimplemented("PReLUBackward takes a 1-D slope per channel: no rule for a slope along the last dim",
                                op=op, where="attribute 'per_channel_broadcast'", expected="true", found="false")
        return em.like("PReLUBackward", [src, slope, em.grad(op.outputs[0])], op, [src.dtype, slope.dtype])


class PReLUBackward(OpSchema):
    kind = "PReLUBackward"
    family = "bias"
    doc = "Gradients of PReLU; a 1-D slope is per channel, diff_slope has slope's shape."
    inputs = (In("src"), In("slope"), In("diff_dst"))
    outputs = (Out("diff_src"), Out("diff_slope"))
    attrs = (DATA_FORMAT,)
    dtypes = same_dtype("src|slope|diff_dst|diff_src|diff_slope")

    def check(self, op):
        slope_view(op, op.input("src").shape, op.input("slope").shape, True)
        same_shape_as(op, "src", "diff_dst")

    def infer(self, op):
        return [merged_shape(op.input("src").shape, op.input("diff_dst").shape), op.input("slope").shape]

    def reference(self, op, src, slope, diff_dst):
        view = slope_view(op, src.shape, slope.shape, True)
        diff_src = np.where(src >= 0, diff_dst, slope.reshape(view) * diff_dst)
        diff_slope = unbroadcast(np.where(src < 0, src * diff_dst, 0.0), view)
        return diff_src, diff_slope.reshape(slope.shape)
