"""Convolutions and transposed convolutions, forward and backward (docs:
Convolution.md, ConvolutionBackwardData.md, ConvolutionBackwardWeights.md,
ConvTranspose.md, ConvTransposeBackwardData.md, ConvTransposeBackwardWeights.md).

Conventions, shared with pool.py:

* src/dst are NCX or NXC (``data_format``) with 1 to 3 spatial dims.
* ``weights_format`` places three things: O, the op's output channels (all
  groups, one group after the other), I, the op's input channels of one group,
  and the spatial axes X.  The convolutions take OIX and XIO; the transposed
  convolutions also take IOX and XOI, the layouts their docs' notes describe.
* ``auto_pad``: the docs spell none, same_upper, same_lower, valid and oneDNN
  writes None, SAME_UPPER, ..., so any letter case is accepted.  same_* pads
  the src side of the convolution (the dst side of a transposed one) so that
  the small side is ceil(big / stride), plus output_padding where the op has
  it; an odd total puts the extra pad at the end for same_upper and at the
  beginning for same_lower (the ONNX rule, which oneDNN implements).
* output_padding may be longer than the spatial rank when the extra values are
  zeros (benchdnn writes a fixed-length list).

Every op reduces to three numpy kernels on NCX data and (OC, C/G, *K) weights:
``conv_forward``, its gradient w.r.t. src ``conv_backward_data`` (which is
also the transposed convolution) and its gradient w.r.t. weights
``conv_backward_weights``.  A transposed convolution from C to OC channels is
the data gradient of the convolution from OC to C channels whose weights are
the transposed one's with O and I swapped inside each group (``swap_io``).
Their lowering is graphc/codegen/rules/conv.py.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import InvalidGraphOp, InvalidShape, RuntimeFault
from ..types import dense_strides
from .schema import (Attr, DtypeTable, In, OpSchema, Out, all_non_negative, all_positive, bad_shape, dims_equal,
                     merge_dim, positive, same_dtype)

AUTO_PADS = ("none", "same_upper", "same_lower", "valid")
#: elements of one im2col block of the reference kernels
BLOCK = 1 << 22

STRIDES = Attr("strides", "s64[]", check=all_positive, check_doc="positive values")
PADS_BEGIN = Attr("pads_begin", "s64[]", check=all_non_negative, check_doc="non-negative values")
PADS_END = Attr("pads_end", "s64[]", check=all_non_negative, check_doc="non-negative values")
DILATIONS = Attr("dilations", "s64[]", check=all_positive, check_doc="positive values")
AUTO_PAD = Attr("auto_pad", "string", "none", check=lambda v: v.lower() in AUTO_PADS,
                check_doc="one of none, same_upper, same_lower, valid (any letter case)")
GROUPS = Attr("groups", "s64", 1, check=positive, check_doc="positive")
DATA_FORMAT = Attr("data_format", "string", "NXC", choices=("NCX", "NXC"))
CONV_WEIGHTS_FORMAT = Attr("weights_format", "string", "XIO", choices=("OIX", "XIO"))
DECONV_WEIGHTS_FORMAT = Attr("weights_format", "string", "XIO", choices=("OIX", "XIO", "IOX", "XOI"))
OUTPUT_PADDING = Attr("output_padding", "s64[]", None, check=all_non_negative,
                      check_doc="non-negative values, all zeros by default")


def shape_attr(name, doc):
    # (non-negative: a batch or channel count of 0 is an empty tensor, as in the ports'
    # shapes; a kernel dim of 0 is refused by window)
    return Attr(name, "s64[]", None, check=all_non_negative, check_doc="non-negative values", doc=doc)


def shape_input(name):
    return In(name, optional=True, doc=f"1-D s32 tensor, instead of the '{name}' attribute")


# ------------------------------------------------------------------ layouts
def spatial_rank(op, port) -> int:
    t = op.input(port)
    if not 3 <= t.ndim <= 5:
        raise bad_shape(op, "needs 1 to 3 spatial dims", where=f"port '{port}'", expected="rank 3, 4 or 5",
                        found=list(t.shape))
    return t.ndim - 2


def check_lengths(op, nsp, names):
    """Each s64[] attribute in ``names`` (when set) has one value per spatial dim."""
    for name in names:
        v = op.attr(name)
        if v is not None and len(v) != nsp:
            raise InvalidGraphOp("attribute needs one value per spatial dim", op=op, where=f"attribute '{name}'",
                                 expected=f"{nsp} values", found=list(v))


def check_window_attrs(op, nsp, names=("strides", "dilations")):
    check_lengths(op, nsp, names + (("pads_begin", "pads_end") if op.attr("auto_pad").lower() == "none" else ()))


def output_padding(op, nsp) -> tuple:
    v = op.attr("output_padding")
    if v is None:
        return (0,) * nsp
    if len(v) < nsp or any(v[nsp:]):
        raise InvalidGraphOp("attribute needs one value per spatial dim (extra values must be 0)", op=op,
                             where="attribute 'output_padding'", expected=f"{nsp} values", found=list(v))
    return v[:nsp]


def split_data(op, shape):
    """(N, C, spatial dims) of a src/dst shape in data_format."""
    if op.attr("data_format") == "NXC":
        return shape[0], shape[-1], tuple(shape[1:-1])
    return shape[0], shape[1], tuple(shape[2:])


def join_data(op, n, c, spatial) -> tuple:
    return (n, *spatial, c) if op.attr("data_format") == "NXC" else (n, c, *spatial)


def to_ncx(op, x):
    return np.moveaxis(x, -1, 1) if op.attr("data_format") == "NXC" else x


def from_ncx(op, x):
    return np.moveaxis(x, 1, -1) if op.attr("data_format") == "NXC" else x


def oix_axes(fmt, rank) -> tuple:
    """Axes of a weights tensor in ``fmt``, listed as O, I, then the spatial axes."""
    first = rank - 2 if fmt[0] == "X" else 0
    spatial = range(rank - 2) if fmt[0] == "X" else range(2, rank)
    letters = fmt.replace("X", "")
    return (first + letters.index("O"), first + letters.index("I"), *spatial)


def io_grouped(op) -> bool:
    """IOX/XOI weights of a grouped transposed convolution: oneDNN puts the groups
    on I (all groups' input channels) and leaves O one group's output channels,
    the other way round from OIX/XIO (its corpus' deconv_bwd_d cases)."""
    return op.attr("weights_format") in ("IOX", "XOI") and op.attr("groups") > 1


def split_weights(op, shape):
    """(O, I, kernel dims) of a weights shape in weights_format: O all groups'
    output channels, I one group's input channels, whatever the format."""
    axes = oix_axes(op.attr("weights_format"), len(shape))
    o, i, k = shape[axes[0]], shape[axes[1]], tuple(shape[a] for a in axes[2:])
    if io_grouped(op):
        g = op.attr("groups")
        if i != -1 and i % g:
            raise bad_shape(op, "the weights' I dim holds every group's input channels: it must be divisible by "
                            "groups", where="port 'weights'", expected=f"a multiple of {g}", found=list(shape))
        o, i = (o * g if o != -1 else -1), (i // g if i != -1 else -1)
    return o, i, k


def join_weights(op, o, i, kernel) -> tuple:
    axes = oix_axes(op.attr("weights_format"), len(kernel) + 2)
    if io_grouped(op):
        g = op.attr("groups")
        o, i = (o // g if o != -1 else -1), (i * g if i != -1 else -1)
    shape = [0] * len(axes)
    for a, d in zip(axes, (o, i, *kernel)):
        shape[a] = d
    return tuple(shape)


def weights_to_oix(op, w):
    """Weights as (O, I, *K) with O all groups' outputs and I one group's inputs."""
    w = np.transpose(w, oix_axes(op.attr("weights_format"), w.ndim))
    if io_grouped(op):
        g = op.attr("groups")
        a, gi, *k = w.shape
        w = w.reshape(a, g, gi // g, *k).swapaxes(0, 1).reshape(g * a, gi // g, *k)
    return w


def weights_from_oix(op, w):
    if io_grouped(op):
        g = op.attr("groups")
        ga, i, *k = w.shape
        w = w.reshape(g, ga // g, i, *k).swapaxes(0, 1).reshape(ga // g, g * i, *k)
    return np.transpose(w, np.argsort(oix_axes(op.attr("weights_format"), w.ndim)))


def swap_io(w, groups):
    """(G*A, B, *K) weights -> (G*B, A, *K), swapping the two channel axes in each group."""
    g_a, b, *k = w.shape
    return w.reshape(groups, g_a // groups, b, *k).swapaxes(1, 2).reshape(groups * b, g_a // groups, *k)


# --------------------------------------------------------------- shape checks
def agree(op, where, what, expected, found) -> int:
    """The merged value of two dims that must be equal (-1 is unknown)."""
    if not dims_equal(expected, found):
        raise bad_shape(op, f"{what} do not match", where=where, expected=expected, found=found)
    return merge_dim(expected, found)


def check_channels(op, in_c, i, o, where_in, where_o="port 'weights'") -> int:
    """in_c == I * groups and groups divides O; returns I (in_c / groups when I is unknown)."""
    g = op.attr("groups")
    for c, where in ((o, where_o), (in_c, where_in)):
        if c != -1 and c % g:
            raise bad_shape(op, "channels must be divisible by groups", where=where, expected=f"a multiple of {g}",
                            found=c)
    if i == -1:
        return in_c // g if in_c != -1 else -1
    agree(op, where_in, "channels and weights' I dim * groups", i * g, in_c)
    return i


def times_groups(op, i) -> int:
    return i * op.attr("groups") if i != -1 else -1


def check_bias(op, o):
    bias = op.input("bias")
    if bias is not None:
        if bias.ndim != 1:
            raise bad_shape(op, "bias must be 1-D", where="port 'bias'", expected="rank 1", found=list(bias.shape))
        agree(op, "port 'bias'", "bias size and output channels", o, bias.shape[0])


def check_shape_source(op, name, rank):
    """The ``name`` shape comes from the input of that name, else from the attribute."""
    t = op.input(name)
    if t is not None:
        if t.ndim != 1 or not dims_equal(t.shape[0], rank):
            raise bad_shape(op, "shape input must be 1-D with one value per dim", where=f"port '{name}'",
                            expected=f"[{rank}]", found=list(t.shape))
        return
    v = op.attr(name)
    if v is None:
        raise InvalidGraphOp(f"either the '{name}' input or the '{name}' attribute is required", op=op,
                             where=f"attribute '{name}'", expected=f"{rank} non-negative values")
    if len(v) != rank:
        raise InvalidGraphOp("shape attribute has the wrong rank", op=op, where=f"attribute '{name}'",
                             expected=f"{rank} values", found=list(v))


def given_shape(op, name, values=None):
    """The ``name`` attribute when no input of that name overrides it; else the
    input's values when a compiled partition specialises on them (``values``,
    {port name: tuple}: value_inputs), else None (unknown)."""
    if op.input(name) is None:
        return op.attr(name)
    values = (values or {}).get(name)
    if values is None:
        return None
    shape = tuple(int(v) for v in values)
    if len(shape) != op.input(name).shape[0] or min(shape, default=0) < 0:
        raise RuntimeFault(f"input '{name}' must hold {op.input(name).shape[0]} non-negative dims", op=op,
                           found=list(shape))
    return shape


def runtime_shape(op, name, value, rank, validate):
    """The ``name`` shape at run time: the input's data when given, else the attribute;
    ``validate(shape)`` checks it against the input arrays (InvalidShape -> RuntimeFault)."""
    shape = tuple(op.attr(name)) if value is None else tuple(int(v) for v in value)
    if len(shape) != rank or min(shape) < 0:
        raise RuntimeFault(f"input '{name}' must hold {rank} non-negative dims", op=op, found=list(shape))
    try:
        validate(shape)
    except InvalidShape as e:
        raise RuntimeFault(f"'{name}' does not fit the input arrays: {e.message}", op=op,
                           expected=e.expected, found=e.found) from None
    return shape


# ------------------------------------------------------------------- windows
def resolve_pads(op, sizes, kernel, strides, dilations, extra):
    """(pads_begin, pads_end) after auto_pad.  ``sizes`` are the spatial dims of
    the larger side of the window scan; unknown sizes give unknown (-1) pads."""
    mode = op.attr("auto_pad").lower()
    if mode == "none":
        return tuple(op.attr("pads_begin")), tuple(op.attr("pads_end"))
    if mode == "valid":
        return (0,) * len(kernel), (0,) * len(kernel)
    begin, end = [], []
    for i, k, s, d, e in zip(sizes, kernel, strides, dilations, extra):
        if i < 0 or k < 0:
            begin.append(-1)
            end.append(-1)
            continue
        total = max(0, s * (-(-i // s) - 1) + (k - 1) * d + 1 - i + e)
        lo = total // 2 if mode == "same_upper" else total - total // 2
        begin.append(lo)
        end.append(total - lo)
    return tuple(begin), tuple(end)


def window(op, big, kernel, extra=None) -> "Window":
    """The op's window over the spatial dims; ``big`` sizes resolve auto_pad."""
    if 0 in kernel:
        raise bad_shape(op, "the weights have a spatial dim of 0: a window of no taps", where="weights' spatial dims",
                        expected="sizes >= 1", found=list(kernel))
    n = len(kernel)
    strides = tuple(op.attr("strides"))
    dilations = tuple(op.attr("dilations") or (1,) * n)
    return Window(kernel, strides, dilations, *resolve_pads(op, big, kernel, strides, dilations, extra or (0,) * n))


class Window:
    """A window of ``kernel`` taps (``dilations`` apart) sliding by ``strides`` over
    a big side padded by ``begin``/``end``; each position gives one small-side element."""

    def __init__(self, kernel, strides, dilations, begin, end):
        self.kernel, self.strides, self.dilations = tuple(kernel), tuple(strides), tuple(dilations)
        self.begin, self.end = tuple(begin), tuple(end)

    def _axes(self):
        return zip(self.kernel, self.strides, self.dilations, self.begin, self.end)

    def out_sizes(self, op, sizes, ceil=False) -> tuple:
        """Small-side sizes for big-side ``sizes`` (-1 where unknown); ``ceil`` adds
        a last window overhanging the end, unless it would start in the end pad."""
        out = []
        for i, (k, s, d, b, e) in zip(sizes, self._axes()):
            if min(i, k, b, e) < 0:
                out.append(-1)
                continue
            span = i + b + e - (k - 1) * d - 1
            if span < 0:
                raise bad_shape(op, "the window is larger than the padded input", where="spatial dims",
                                expected=f"padded size >= {(k - 1) * d + 1}", found=i + b + e)
            o = (-(-span // s) if ceil else span // s) + 1
            out.append(o - 1 if ceil and (o - 1) * s >= i + b else o)  # no window starting in the end pad
        return tuple(out)

    def in_sizes(self, op, sizes, extra) -> tuple:
        """Big-side sizes of a transposed scan over small-side ``sizes``, plus ``extra``."""
        out = []
        for o, x, (k, s, d, b, e) in zip(sizes, extra, self._axes()):
            if min(o, k, b, e) < 0:
                out.append(-1)
                continue
            n = (o - 1) * s + (k - 1) * d + 1 - b - e + x
            if n <= 0:
                raise bad_shape(op, "the pads leave no output", where="spatial dims", expected="positive sizes",
                                found=n)
            out.append(n)
        return tuple(out)

    def slices(self, out, start=0):
        """For each kernel tap (C order): the index of the padded (N, C, *big) array
        reaching the elements that tap meets at the ``out`` positions (the first
        axis' positions counted from ``start``)."""
        for tap in np.ndindex(*self.kernel):
            first = [t * d for t, d in zip(tap, self.dilations)]
            first[0] += start * self.strides[0]
            yield (slice(None), slice(None)) + tuple(
                slice(f, f + (o - 1) * s + 1, s) for f, s, o in zip(first, self.strides, out))

    def blocks(self, n, c, out):
        """(start, stop, out sizes) of runs of the first out axis whose im2col
        columns (N, C, taps, positions) hold about BLOCK elements."""
        row = n * c * math.prod(self.kernel) * math.prod(out[1:])
        step = max(1, BLOCK // max(row, 1))
        for a in range(0, out[0], step):
            b = min(a + step, out[0])
            yield a, b, (b - a, *out[1:])

    def columns(self, xp, start, out):
        """im2col: (N, C, taps, positions) of the padded src for the ``out`` positions from ``start``."""
        n, c = xp.shape[:2]
        taps = math.prod(self.kernel)
        return np.stack([xp[sl] for sl in self.slices(out, start)], axis=2).reshape(n, c, taps, math.prod(out))

    def _widths(self, sizes, out):
        return [(0, 0), (0, 0)] + [(b, max(0, (o - 1) * s + (k - 1) * d + 1 - i - b))
                                   for i, o, (k, s, d, b, _) in zip(sizes, out, self._axes())]

    def padded(self, x, out, value=0.0):
        """x (N, C, *big) padded so that the scan over ``out`` positions stays in range."""
        return np.pad(x, self._widths(x.shape[2:], out), constant_values=value)

    def padded_zeros(self, n, c, sizes, out):
        return np.zeros([d + a + b for d, (a, b) in zip((n, c, *sizes), self._widths(sizes, out))])

    def cropped(self, xp, sizes):
        return xp[(slice(None), slice(None)) + tuple(slice(b, b + i) for b, i in zip(self.begin, sizes))]


# ------------------------------------------------------------------- kernels
def conv_forward(x, w, groups, win, out):
    """x (N, C, *I) convolved with w (OC, C/G, *K) -> (N, OC, *out)."""
    n, oc = x.shape[0], w.shape[0]
    per = math.prod(w.shape[1:])   # C/G * taps
    xp = win.padded(x, out)
    wg = w.reshape(groups, oc // groups, per)
    y = np.empty((n, oc, *out))
    for a, b, part in win.blocks(n, x.shape[1], out):
        cols = win.columns(xp, a, part).reshape(n, groups, per, math.prod(part))
        y[:, :, a:b] = (wg @ cols).reshape(n, oc, *part)
    return y


def conv_backward_data(dy, w, groups, win, sizes):
    """Gradient of conv_forward w.r.t. x (N, C, *sizes), given dy (N, OC, *O)."""
    n, (oc, icg), out = dy.shape[0], w.shape[:2], dy.shape[2:]
    taps = math.prod(win.kernel)
    wt = w.reshape(groups, oc // groups, icg * taps).swapaxes(1, 2)
    dxp = win.padded_zeros(n, groups * icg, sizes, out)
    for a, b, part in win.blocks(n, groups * icg, out):
        cols = (wt @ dy[:, :, a:b].reshape(n, groups, oc // groups, math.prod(part))).reshape(
            n, groups * icg, taps, *part)
        for j, sl in enumerate(win.slices(part, a)):
            dxp[sl] += cols[:, :, j]
    return win.cropped(dxp, sizes)


def conv_backward_weights(x, dy, groups, win):
    """Gradient of conv_forward w.r.t. w (OC, C/G, *win.kernel), given x and dy."""
    n, c, oc, out = x.shape[0], x.shape[1], dy.shape[1], dy.shape[2:]
    xp = win.padded(x, out)
    per = c // groups * math.prod(win.kernel)
    dw = np.zeros((groups, oc // groups, per))
    for a, b, part in win.blocks(n, c, out):
        cols = win.columns(xp, a, part).reshape(n, groups, per, math.prod(part))
        dw += (dy[:, :, a:b].reshape(n, groups, oc // groups, math.prod(part)) @ cols.swapaxes(-1, -2)).sum(axis=0)
    return dw.reshape(oc, c // groups, *win.kernel)


# ------------------------------------------------------------------- schemas
WINDOW_ATTRS = (STRIDES, PADS_BEGIN, PADS_END, DILATIONS, AUTO_PAD, GROUPS, DATA_FORMAT)
DECONV_ATTRS = WINDOW_ATTRS + (OUTPUT_PADDING, DECONV_WEIGHTS_FORMAT)


class _Conv(OpSchema):
    family = "conv"
    fpmath_inputs = ("src", "weights", "diff_dst")
    attrs = WINDOW_ATTRS + (CONV_WEIGHTS_FORMAT,)
    #: the data port defining the spatial rank, and the shape input/attribute if any
    data_port = "src"
    shape_name = ""
    #: a forward op's data and weights gradient ops (graphc.grad)
    grad_ops: tuple = ()

    @classmethod
    def has_vjp(cls) -> bool:
        return bool(cls.grad_ops)

    def vjp(self, op, em):
        src, weights, bias = op.input("src"), op.input("weights"), op.input("bias")
        dy, (data, wei) = em.grad(op.outputs[0]), self.grad_ops
        shape = {"dst_shape": list(src.shape)} if data == "ConvolutionBackwardData" else {}
        return [em.like(data, [dy, weights], op, **shape)[0] if em.wants(src) else None,
                em.like(wei, [src, dy], op, weights_shape=list(weights.shape))[0] if em.wants(weights) else None,
                em.like("BiasAddBackward", [dy], op)[0] if em.wants(bias) else None]

    def check(self, op):
        nsp = spatial_rank(op, self.data_port)
        for t, name in zip(op.inputs, op.input_names):
            if name in ("src", "diff_dst", "weights") and t.ndim != nsp + 2:
                raise bad_shape(op, f"rank differs from '{self.data_port}'", where=f"port '{name}'",
                                expected=nsp + 2, found=list(t.shape))
        check_window_attrs(op, nsp)
        if self.attr_spec("output_padding"):
            output_padding(op, nsp)
        if self.shape_name:
            check_shape_source(op, self.shape_name, nsp + 2)

    def flops(self, op):
        """2 * N * OC * C/groups * out-spatial * kernel-spatial of the convolution
        the op is, transposes or differentiates: two per multiply-add, every
        weight meeting every output position of that convolution (its dst;
        diff_dst for its gradients; for the transposed ones, whose convolution
        maps their dst to their src, src, or diff_src), padding included."""
        conv_out = {"Convolution": "dst", "ConvolutionBackwardData": "diff_dst",
                    "ConvolutionBackwardWeights": "diff_dst", "ConvTranspose": "src",
                    "ConvTransposeBackwardData": "diff_src", "ConvTransposeBackwardWeights": "src"}[op.kind]
        data = dict(op.named_ports())
        n, _, spatial = split_data(op, data[conv_out].shape)
        weights = data["diff_weights" if "diff_weights" in data else "weights"].shape
        return 2 * n * math.prod(spatial) * math.prod(weights)

    def transposed_window(self, op, small, kernel):
        """Window of a transposed convolution producing its dst from ``small`` sizes."""
        return window(op, [o * s if o >= 0 else -1 for o, s in zip(small, op.attr("strides"))], kernel,
                      output_padding(op, len(kernel)))


CONV_DATA_TYPES = DtypeTable(["diff_dst|weights|diff_src", "dst_shape"], [("f32", "s32"), ("bf16", "s32"),
                                                                          ("f16", "s32")])
WEIGHTS_GRAD_TYPES = DtypeTable(["src|diff_dst|diff_weights", "weights_shape"],
                                [("f32", "s32"), ("bf16", "s32"), ("f16", "s32")])


class Convolution(_Conv):
    kind = "Convolution"
    grad_ops = ("ConvolutionBackwardData", "ConvolutionBackwardWeights")
    doc = "dst = src convolved with weights (+ bias), with groups, strides, dilations and padding"
    inputs = (In("src"), In("weights"), In("bias", optional=True))
    outputs = (Out("dst"),)
    dtypes = same_dtype("src|weights|bias|dst")

    def infer(self, op):
        n, c, sp = split_data(op, op.input("src").shape)
        o, i, k = split_weights(op, op.input("weights").shape)
        check_channels(op, c, i, o, "port 'src'")
        check_bias(op, o)
        return [join_data(op, n, o, window(op, sp, k).out_sizes(op, sp))]

    def preferred_strides(self, op):
        """Channels last for an NCX dst: the GEMMs produce rows of output channels
        per pixel, stored contiguously so (an NCX 3x3 convolution 56x56x64 measured
        7% faster into channels-last strides than into dense NCX)."""
        if op.attr("data_format") != "NCX":
            return None
        n, c, *sp = op.outputs[0].shape
        st = dense_strides((n, *sp, c))        # the NXC layout, seen with NCX's dims
        return (st[0], st[-1], *st[1:-1])

    def reference(self, op, src, weights, bias=None):
        x, w = to_ncx(op, src), weights_to_oix(op, weights)
        win = window(op, x.shape[2:], w.shape[2:])
        y = conv_forward(x, w, op.attr("groups"), win, win.out_sizes(op, x.shape[2:]))
        if bias is not None:
            y += bias.reshape(-1, *[1] * (y.ndim - 2))
        return (from_ncx(op, y),)



class ConvolutionBackwardData(_Conv):
    kind = "ConvolutionBackwardData"
    value_inputs = ("dst_shape",)   # a shape input: kernels specialise on its values
    doc = "diff_src of Convolution; dst_shape (input or attribute) is the shape of diff_src"
    inputs = (In("diff_dst"), In("weights"), shape_input("dst_shape"))
    outputs = (Out("diff_src"),)
    attrs = _Conv.attrs + (OUTPUT_PADDING, shape_attr("dst_shape", "shape of diff_src (the forward src)"))
    dtypes = CONV_DATA_TYPES
    data_port = "diff_dst"
    shape_name = "dst_shape"

    def infer(self, op, values=None):
        return [self._shape(op, op.input("diff_dst").shape, op.input("weights").shape,
                            given_shape(op, "dst_shape", values))]

    def check_values(self, op, values):
        return self.infer(op, values)

    def _shape(self, op, dy_shape, w_shape, shape):
        n, oc, small = split_data(op, dy_shape)
        o, i, k = split_weights(op, w_shape)
        agree(op, "port 'diff_dst'", "channels and weights' O dim", o, oc)
        if shape is None:
            check_channels(op, -1, i, o, "port 'diff_dst'")
            return join_data(op, n, times_groups(op, i), (-1,) * len(small))
        n2, c, big = split_data(op, shape)
        agree(op, "attribute 'dst_shape'", "batch sizes", n, n2)
        check_channels(op, c, i, o, "attribute 'dst_shape'")
        win = window(op, big, k, output_padding(op, len(k)))
        for a, b in zip(win.out_sizes(op, big), small):
            agree(op, "port 'diff_dst'", "spatial dims and the convolution of dst_shape", a, b)
        return tuple(shape)

    def reference(self, op, diff_dst, weights, dst_shape=None):
        shape = runtime_shape(op, "dst_shape", dst_shape, diff_dst.ndim,
                              lambda s: self._shape(op, diff_dst.shape, weights.shape, s))
        big = split_data(op, shape)[2]
        w = weights_to_oix(op, weights)
        win = window(op, big, w.shape[2:], output_padding(op, len(big)))
        return (from_ncx(op, conv_backward_data(to_ncx(op, diff_dst), w, op.attr("groups"), win, big)),)


def _weights_grad_dims(op, x_shape, dy_shape, shape):
    """Shared checks of the weight-gradient ops: (src channels, src spatial, diff_dst
    spatial, O, I, kernel) with batch and channel counts agreeing between ports."""
    n, c, x_sp = split_data(op, x_shape)
    n2, oc, dy_sp = split_data(op, dy_shape)
    agree(op, "port 'diff_dst'", "batch sizes", n, n2)
    o, i, k = split_weights(op, shape) if shape is not None else (oc, -1, (-1,) * len(x_sp))
    o = agree(op, "port 'diff_dst'", "channels and weights' O dim", o, oc)
    i = check_channels(op, c, i, o, "port 'src'", "port 'diff_dst'")
    return c, x_sp, dy_sp, o, i, k


class ConvolutionBackwardWeights(_Conv):
    kind = "ConvolutionBackwardWeights"
    value_inputs = ("weights_shape",)   # a shape input: kernels specialise on its values
    doc = "diff_weights of Convolution; weights_shape (input or attribute) is its shape"
    inputs = (In("src"), In("diff_dst"), shape_input("weights_shape"))
    outputs = (Out("diff_weights"),)
    attrs = _Conv.attrs + (shape_attr("weights_shape", "shape of diff_weights"),)
    dtypes = WEIGHTS_GRAD_TYPES
    shape_name = "weights_shape"

    def infer(self, op, values=None):
        return [self._shape(op, op.input("src").shape, op.input("diff_dst").shape,
                            given_shape(op, "weights_shape", values))]

    def check_values(self, op, values):
        return self.infer(op, values)

    def _shape(self, op, x_shape, dy_shape, shape):
        c, big, small, o, i, k = _weights_grad_dims(op, x_shape, dy_shape, shape)
        for a, b in zip(window(op, big, k).out_sizes(op, big), small):
            agree(op, "port 'diff_dst'", "spatial dims and the convolution of src", a, b)
        return join_weights(op, o, i, k)

    def reference(self, op, src, diff_dst, weights_shape=None):
        shape = runtime_shape(op, "weights_shape", weights_shape, src.ndim,
                              lambda s: self._shape(op, src.shape, diff_dst.shape, s))
        x = to_ncx(op, src)
        win = window(op, x.shape[2:], split_weights(op, shape)[2])
        dw = conv_backward_weights(x, to_ncx(op, diff_dst), op.attr("groups"), win)
        return (weights_from_oix(op, dw),)


class ConvTranspose(_Conv):
    kind = "ConvTranspose"
    grad_ops = ("ConvTransposeBackwardData", "ConvTransposeBackwardWeights")
    doc = "dst = src transposed-convolved with weights (+ bias): the data gradient of a convolution"
    inputs = (In("src"), In("weights"), In("bias", optional=True))
    outputs = (Out("dst"),)
    attrs = DECONV_ATTRS
    dtypes = same_dtype("src|weights|bias|dst")

    def infer(self, op):
        n, c, small = split_data(op, op.input("src").shape)
        o, i, k = split_weights(op, op.input("weights").shape)
        check_channels(op, c, i, o, "port 'src'")
        check_bias(op, o)
        win = self.transposed_window(op, small, k)
        return [join_data(op, n, o, win.in_sizes(op, small, output_padding(op, len(k))))]

    def reference(self, op, src, weights, bias=None):
        x, w = to_ncx(op, src), weights_to_oix(op, weights)
        small, g = x.shape[2:], op.attr("groups")
        win = self.transposed_window(op, small, w.shape[2:])
        y = conv_backward_data(x, swap_io(w, g), g, win, win.in_sizes(op, small, output_padding(op, len(small))))
        if bias is not None:
            y += bias.reshape(-1, *[1] * (y.ndim - 2))
        return (from_ncx(op, y),)


class ConvTransposeBackwardData(_Conv):
    kind = "ConvTransposeBackwardData"
    doc = "diff_src of ConvTranspose: the convolution of diff_dst"
    inputs = (In("diff_dst"), In("weights"))
    outputs = (Out("diff_src"),)
    attrs = DECONV_ATTRS
    dtypes = same_dtype("diff_dst|weights|diff_src")
    data_port = "diff_dst"

    def infer(self, op):
        n, oc, big = split_data(op, op.input("diff_dst").shape)
        o, i, k = split_weights(op, op.input("weights").shape)
        agree(op, "port 'diff_dst'", "channels and weights' O dim", o, oc)
        check_channels(op, -1, i, o, "port 'diff_dst'")
        win = window(op, big, k, output_padding(op, len(k)))
        return [join_data(op, n, times_groups(op, i), win.out_sizes(op, big))]

    def reference(self, op, diff_dst, weights):
        dy, w = to_ncx(op, diff_dst), weights_to_oix(op, weights)
        big, g = dy.shape[2:], op.attr("groups")
        win = window(op, big, w.shape[2:], output_padding(op, len(big)))
        return (from_ncx(op, conv_forward(dy, swap_io(w, g), g, win, win.out_sizes(op, big))),)


class ConvTransposeBackwardWeights(_Conv):
    kind = "ConvTransposeBackwardWeights"
    value_inputs = ("weights_shape",)   # a shape input: kernels specialise on its values
    doc = "diff_weights of ConvTranspose; weights_shape (input or attribute) is its shape"
    inputs = (In("src"), In("diff_dst"), shape_input("weights_shape"))
    outputs = (Out("diff_weights"),)
    attrs = DECONV_ATTRS + (shape_attr("weights_shape", "shape of diff_weights"),)
    dtypes = WEIGHTS_GRAD_TYPES
    shape_name = "weights_shape"

    def infer(self, op, values=None):
        return [self._shape(op, op.input("src").shape, op.input("diff_dst").shape,
                            given_shape(op, "weights_shape", values))]

    def check_values(self, op, values):
        return self.infer(op, values)

    def _shape(self, op, x_shape, dy_shape, shape):
        c, small, big, o, i, k = _weights_grad_dims(op, x_shape, dy_shape, shape)
        win = self.transposed_window(op, small, k)
        for a, b in zip(win.in_sizes(op, small, output_padding(op, len(k))), big):
            agree(op, "port 'diff_dst'", "spatial dims and the transposed convolution of src", a, b)
        return join_weights(op, o, i, k)

    def reference(self, op, src, diff_dst, weights_shape=None):
        shape = runtime_shape(op, "weights_shape", weights_shape, src.ndim,
                              lambda s: self._shape(op, src.shape, diff_dst.shape, s))
        x, g = to_ncx(op, src), op.attr("groups")
        win = self.transposed_window(op, x.shape[2:], split_weights(op, shape)[2])
        dw = conv_backward_weights(to_ncx(op, diff_dst), x, g, win)
        return (weights_from_oix(op, swap_io(dw, g)),)
