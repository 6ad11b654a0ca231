"""Lowering of the convolutions (graphc/ops/conv.py): each of the six ops is a
forward convolution, its data gradient or its weight gradient, emitted by
graphc.codegen.conv over Data/Weights views of the op's ports.  The window
comes from the ports' shapes (a shape input's values are already in them), so
the rule reads nothing from ``values``."""
from __future__ import annotations

import math
from contextlib import ExitStack

from .. import conv as cg, ir
from ..conv import Data, Geometry, Weights
from ..conv_int8 import Int8Operands, int8_conv_applies
from ..gemm_int8 import shifts_of
from ..gemm import fpmath_rounding
from ..loops import unravel
from ..quant import exact_chunk, integer_operands
from ...ops.conv import io_grouped, oix_axes, output_padding, split_data, split_weights, window
from . import Rule


class Conv(Rule):
    kinds = ("Convolution", "ConvolutionBackwardData", "ConvolutionBackwardWeights", "ConvTranspose",
             "ConvTransposeBackwardData", "ConvTransposeBackwardWeights")

    def lower(self, op, kb, ins, outs, values):
        lower_conv(op, kb, ins, outs)


def _geometry(op, n, c, oc, big, small, win):
    return Geometry(n, c, oc, op.attr("groups"), tuple(big), tuple(small), win.kernel, win.strides, win.dilations,
                    win.begin)


def _views(op, ins, outs):
    """Data/Weights views of the op's ports by name, and the fpmath rounding."""
    nxc = op.attr("data_format") == "NXC"
    swapped = op.kind.startswith("ConvTranspose")
    named = dict(zip(op.input_names, ins)) | dict(zip(op.output_names, outs))
    views = {}
    for name, ref in named.items():
        if "weights" in name:
            views[name] = Weights(ref, oix_axes(op.attr("weights_format"), len(ref.shape)), op.attr("groups"),
                                  swapped, io_grouped(op))
        elif "shape" not in name and name != "bias":
            views[name] = Data(ref, nxc)
    return views, named.get("bias"), fpmath_rounding(op)


def _data_store(view, bias, scale=None):
    """``scale(c)``: the factor of an integer convolution's sums (see _integer_operands)."""
    def store(n, c, sp, value):
        if scale is not None:
            value = ir.f64(value) * scale(c)
        if bias is not None:
            value = value + bias.load_nd([c])
        return view.store(n, c, sp, value)
    return store


def _integer_operands(op, kb, v, x, geo: Geometry | None = None):
    """A Convolution's (ConvTranspose's) src and weights as
    graphc.codegen.quant.Factored operands (static s8/u8 Dequantizes computed
    in the kernel, src per tensor, weights per tensor or per output channel),
    summed exactly as oneDNN's s32 accumulator sums them: returns (the keyword
    of graphc.codegen.conv's road, the scale of dst channel c), or None.  The
    road is the int8 tile's (``int8``: the views read the quantized values)
    where a forward convolution of ``geo`` takes it, else exact runs of f32
    GEMMs (``exact_k``: the views read the integers q - z)."""
    w = v["weights"]
    pair = None if w.io_grouped else integer_operands(kb, v[x].ref, w.ref, w.axes[0])
    if pair is None:
        return None
    fx, fw = pair

    def scale(c):
        return fx.scale(None) * fw.scale(c)
    if geo is not None and int8_conv_applies(geo):
        v[x] = Data(fx.argument() or fx.raw, v[x].nxc)
        v["weights"] = Weights(fw.argument() or fw.raw, w.axes, w.groups, w.swapped, w.io_grouped)
        za = float(fx.zps[0]) if fx.zps is not None else 0.0
        return {"int8": Int8Operands(za, fw.zero, shifts_of(fx.q.dtype, fw.q.dtype), fw.zps is None)}, scale
    v[x] = Data(fx.ints, v[x].nxc)
    v["weights"] = Weights(fw.ints, w.axes, w.groups, w.swapped, w.io_grouped)
    return {"exact_k": exact_chunk(fx, fw)}, scale


def _sizes(op, ref):
    return split_data(op, ref.shape)


def _no_products(kb, out_sizes, terms: int, store) -> bool:
    """Whether the op's output (of logical ``out_sizes``: (N, C, spatial) of a data
    output, (groups, OC/G, C/G, kernel) of weights) takes no product: empty (nothing
    to store), or each element a sum of no ``terms`` (0 stored through ``store``:
    bias and post-ops applied).  Those stores are emitted."""
    *lead, sp = out_sizes
    if 0 in (*lead, *sp):
        return True
    if terms:
        return False
    with ExitStack() as loops:
        ivars = [loops.enter_context(kb.for_(d, "z")) for d in lead]
        p = loops.enter_context(kb.for_(math.prod(sp), "zp"))
        kb.emit(store(*ivars, unravel(kb, p, sp), ir.const(0.0, "f32")))
    return True


def lower_conv(op, kb, ins, outs):
    """Any of the six ops as a forward convolution, its data gradient or its weight
    gradient (graphc.codegen.conv picks the kernel)."""
    v, bias, rounding = _views(op, ins, outs)
    kind = op.kind
    if kind in ("Convolution", "ConvTransposeBackwardData"):
        x, y = ("src", "dst") if kind == "Convolution" else ("diff_dst", "diff_src")
        n, c, big = _sizes(op, v[x].ref)
        _, oc, small = _sizes(op, v[y].ref)
        kernel = split_weights(op, v["weights"].ref.shape)[2]
        extra = None if kind == "Convolution" else output_padding(op, len(kernel))
        win = window(op, big, kernel, extra)
        if _no_products(kb, (n, oc, tuple(small)), c // op.attr("groups") * math.prod(kernel) * math.prod(big),
                        _data_store(v[y], bias)):
            return
        geo = _geometry(op, n, c, oc, big, small, win)
        ints = _integer_operands(op, kb, v, x, geo) if kind == "Convolution" else None
        if ints is None:
            # (dst's view: the forward convolution's road depends on its layout too)
            cg.emit_convolution(kb, geo, v[x], v["weights"], _data_store(v[y], bias), rounding,
                                v[y] if bias is None else None, dst=v[y] if kind == "Convolution" else None)
        else:
            cg.emit_convolution(kb, geo, v[x], v["weights"], _data_store(v[y], bias, ints[1]), **ints[0])
    elif kind in ("ConvolutionBackwardData", "ConvTranspose"):
        dy, dx = ("diff_dst", "diff_src") if kind == "ConvolutionBackwardData" else ("src", "dst")
        n, oc, small = _sizes(op, v[dy].ref)
        _, c, big = _sizes(op, v[dx].ref)
        kernel = split_weights(op, v["weights"].ref.shape)[2]
        if kind == "ConvTranspose":
            win = op.schema.transposed_window(op, small, kernel)
        else:
            win = window(op, big, kernel, output_padding(op, len(kernel)))
        if _no_products(kb, (n, c, tuple(big)), oc // op.attr("groups") * math.prod(kernel) * math.prod(small),
                        _data_store(v[dx], bias)):
            return
        ints = _integer_operands(op, kb, v, dy) if kind == "ConvTranspose" else None
        if ints is None:
            cg.emit_backward_data(kb, _geometry(op, n, c, oc, big, small, win), v[dy], v["weights"],
                                  _data_store(v[dx], bias), rounding)
        else:
            cg.emit_backward_data(kb, _geometry(op, n, c, oc, big, small, win), v[dy], v["weights"],
                                  _data_store(v[dx], bias, ints[1]), **ints[0])
    else:
        x, dy = ("src", "diff_dst") if kind == "ConvolutionBackwardWeights" else ("diff_dst", "src")
        n, c, big = _sizes(op, v[x].ref)
        _, oc, small = _sizes(op, v[dy].ref)
        kernel = split_weights(op, v["diff_weights"].ref.shape)[2]
        if kind == "ConvolutionBackwardWeights":
            win = window(op, big, kernel)
        else:
            win = op.schema.transposed_window(op, small, kernel)
        g = op.attr("groups")
        if _no_products(kb, (g, oc // g, c // g, tuple(kernel)), n * math.prod(small) * math.prod(big),
                        v["diff_weights"].store):
            return
        cg.emit_backward_weights(kb, _geometry(op, n, c, oc, big, small, win), v[x], v[dy],
                                 v["diff_weights"].store, rounding)

