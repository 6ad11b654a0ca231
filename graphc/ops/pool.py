"""Average and max pooling, forward and backward (docs: AvgPool.md,
AvgPoolBackward.md, MaxPool.md, MaxPoolBackward.md).

The window, data_format and auto_pad rules are the convolutions' (conv.py).
MaxPool's dilations count like a convolution's (1 is dense, the doc formula's
``DH + 1``).  ``rounding_type`` ceil lets the last window overhang the padded
src, but no window starts in the end pad (as in PyTorch and ONNX); the
backward ops have no rounding_type and accept a diff_dst of either size.
AvgPool divides by the kernel size, or with ``exclude_pad`` by the number of
src elements the window meets.  MaxPoolBackward routes each
diff_dst element to the first maximum of its window (taps in C order).
Their lowering is graphc/codegen/rules/pool.py.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .conv import (AUTO_PAD, DATA_FORMAT, PADS_BEGIN, PADS_END, STRIDES, agree, check_shape_source,
                   check_window_attrs, from_ncx, given_shape, join_data, runtime_shape, shape_attr, shape_input,
                   spatial_rank, split_data, to_ncx, window)
from .schema import Attr, DtypeTable, In, OpSchema, Out, all_positive, bad_shape, dims_equal, same_dtype

KERNEL = Attr("kernel", "s64[]", check=all_positive, check_doc="positive values")
EXCLUDE_PAD = Attr("exclude_pad", "bool", doc="if true, the average is over the src elements only, not the pads")
ROUNDING_TYPE = Attr("rounding_type", "string", "floor", choices=("floor", "ceil"))
DILATIONS = Attr("dilations", "s64[]", None, check=all_positive, check_doc="positive values, all 1s by default")


def tap_counts(win, big, small) -> list:
    """Per spatial axis: for each small-side position, how many taps of its window
    meet the big side (not the padding)."""
    counts = []
    for i, o, k, s, d, b in zip(big, small, win.kernel, win.strides, win.dilations, win.begin):
        at = np.arange(o)[:, None] * s + np.arange(k)[None, :] * d - b
        counts.append(((at >= 0) & (at < i)).sum(axis=1))
    return counts


def _divisor(win, sizes, out, exclude_pad):
    """Per output position: the kernel size, or the number of src elements the window meets."""
    if not exclude_pad:
        return math.prod(win.kernel)
    return functools.reduce(np.multiply.outer, tap_counts(win, sizes, out))


def _first_max_taps(xp, win, out):
    """Index of the first maximal tap of each window of the (-inf) padded src."""
    best = np.full(xp.shape[:2] + tuple(out), -np.inf)
    tap = np.zeros(best.shape, dtype=np.int64)
    for j, sl in enumerate(win.slices(out)):
        better = xp[sl] > best
        np.copyto(best, xp[sl], where=better)
        tap[better] = j
    return tap


class _Pool(OpSchema):
    family = "pool"
    outputs = (Out("dst"),)
    data_port = "src"
    shape_name = ""

    def check(self, op):
        nsp = spatial_rank(op, self.data_port)
        for t, name in zip(op.inputs, op.input_names):
            if name in ("src", "diff_dst") and t.ndim != nsp + 2:
                raise bad_shape(op, f"rank differs from '{self.data_port}'", where=f"port '{name}'",
                                expected=nsp + 2, found=list(t.shape))
        check_window_attrs(op, nsp, ("strides", "kernel", "dilations"))
        if self.shape_name:
            check_shape_source(op, self.shape_name, nsp + 2)

    def window(self, op, sizes):
        return window(op, sizes, tuple(op.attr("kernel")))

    def forward_shape(self, op, src_shape):
        n, c, sp = split_data(op, src_shape)
        return join_data(op, n, c, self.window(op, sp).out_sizes(op, sp, op.attr("rounding_type") == "ceil"))

    def backward_shape(self, op, src_shape, dy_shape):
        """src_shape merged with what diff_dst tells; diff_dst may have the floor or the ceil size."""
        n, c, sp = split_data(op, src_shape)
        n2, c2, small = split_data(op, dy_shape)
        n, c = agree(op, "port 'diff_dst'", "batch sizes", n, n2), agree(op, "port 'diff_dst'", "channels", c, c2)
        win = self.window(op, sp)
        for lo, hi, o in zip(win.out_sizes(op, sp), win.out_sizes(op, sp, ceil=True), small):
            if not (dims_equal(lo, o) or dims_equal(hi, o)):
                raise bad_shape(op, "spatial dims do not match the pooling of src", where="port 'diff_dst'",
                                expected=lo if lo == hi else f"{lo} or {hi}", found=list(dy_shape))
        return join_data(op, n, c, sp)


FWD_ATTRS = (STRIDES, PADS_BEGIN, PADS_END, KERNEL)


class _PoolForward(_Pool):
    """AvgPool and MaxPool: dst's shape from src's; src as NCX with its windows, padded with ``fill``."""

    def infer(self, op):
        return [self.forward_shape(op, op.input("src").shape)]

    def padded_windows(self, op, src, fill):
        x = to_ncx(op, src)
        win = self.window(op, x.shape[2:])
        out = win.out_sizes(op, x.shape[2:], op.attr("rounding_type") == "ceil")
        return x, win, out, win.padded(x, out, fill)


class AvgPool(_PoolForward):
    kind = "AvgPool"
    doc = "dst = the average of src over each window"
    inputs = (In("src"),)
    attrs = FWD_ATTRS + (EXCLUDE_PAD, ROUNDING_TYPE, AUTO_PAD, DATA_FORMAT)
    dtypes = same_dtype("src|dst")

    def reference(self, op, src):
        x, win, out, xp = self.padded_windows(op, src, 0.0)
        total = sum(xp[sl] for sl in win.slices(out))
        return (from_ncx(op, total / _divisor(win, x.shape[2:], out, op.attr("exclude_pad"))),)

    def vjp(self, op, em):
        return em.like("AvgPoolBackward", [em.grad(op.outputs[0])], op, src_shape=list(op.inputs[0].shape))


class AvgPoolBackward(_Pool):
    kind = "AvgPoolBackward"
    doc = "diff_src of AvgPool; src_shape (input or attribute) is the shape of diff_src"
    inputs = (In("diff_dst"), shape_input("src_shape"))
    outputs = (Out("diff_src"),)
    attrs = FWD_ATTRS + (EXCLUDE_PAD, AUTO_PAD, DATA_FORMAT, shape_attr("src_shape", "shape of diff_src (the forward src)"))
    dtypes = DtypeTable(["diff_dst|diff_src", "src_shape"], [("f32", "s32"), ("bf16", "s32"), ("f16", "s32")])
    data_port = "diff_dst"
    shape_name = "src_shape"

    def infer(self, op):
        dy = op.input("diff_dst").shape
        shape = given_shape(op, "src_shape")
        if shape is None:
            n, c, small = split_data(op, dy)
            return [join_data(op, n, c, (-1,) * len(small))]
        return [self.backward_shape(op, shape, dy)]

    def reference(self, op, diff_dst, src_shape=None):
        shape = runtime_shape(op, "src_shape", src_shape, diff_dst.ndim,
                              lambda s: self.backward_shape(op, s, diff_dst.shape))
        dy = to_ncx(op, diff_dst)
        sizes = split_data(op, shape)[2]
        win = self.window(op, sizes)
        out = dy.shape[2:]
        share = dy / _divisor(win, sizes, out, op.attr("exclude_pad"))
        dxp = win.padded_zeros(dy.shape[0], dy.shape[1], sizes, out)
        for sl in win.slices(out):
            dxp[sl] += share
        return (from_ncx(op, win.cropped(dxp, sizes)),)


class MaxPool(_PoolForward):
    kind = "MaxPool"
    doc = "dst = the maximum of src over each window"
    inputs = (In("src"),)
    attrs = FWD_ATTRS + (ROUNDING_TYPE, AUTO_PAD, DILATIONS, DATA_FORMAT)
    dtypes = same_dtype("src|dst")

    def reference(self, op, src):
        _, win, out, xp = self.padded_windows(op, src, -np.inf)
        return (from_ncx(op, functools.reduce(np.maximum, (xp[sl] for sl in win.slices(out)))),)

    def vjp(self, op, em):
        return em.like("MaxPoolBackward", [op.inputs[0], em.grad(op.outputs[0])], op)


class MaxPoolBackward(_Pool):
    kind = "MaxPoolBackward"
    doc = "diff_src of MaxPool: each diff_dst element goes to the first maximum of its window"
    inputs = (In("src"), In("diff_dst"))
    outputs = (Out("diff_src"),)
    attrs = FWD_ATTRS + (AUTO_PAD, DILATIONS, DATA_FORMAT)
    dtypes = same_dtype("src|diff_dst|diff_src")

    def infer(self, op):
        return [self.backward_shape(op, op.input("src").shape, op.input("diff_dst").shape)]

    def reference(self, op, src, diff_dst):
        x, dy = to_ncx(op, src), to_ncx(op, diff_dst)
        win = self.window(op, x.shape[2:])
        out = dy.shape[2:]
        xp = win.padded(x, out, -np.inf)
        tap = _first_max_taps(xp, win, out)
        dxp = np.zeros(xp.shape)
        for j, sl in enumerate(win.slices(out)):
            dxp[sl] += np.where(tap == j, dy, 0.0)
        return (from_ncx(op, win.cropped(dxp, x.shape[2:])),)
