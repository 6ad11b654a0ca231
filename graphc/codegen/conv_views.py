"""Logical views of a convolution's operands (graphc.codegen.conv and
graphc.codegen.winograd): its sizes (:class:`Geometry`), data tensors in their
data_format (:class:`Data`), weights in their weights_format (:class:`Weights`),
and the loops and work items their kernels share."""
from __future__ import annotations

import math
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from . import ir
from .kernel import ArrayRef
from ..types import DataType


@dataclass
class Geometry:
    """Logical sizes of one convolution (the forward direction)."""

    n: int
    c: int                 # src channels (all groups)
    oc: int                # dst channels (all groups)
    groups: int
    big: tuple             # src spatial sizes
    small: tuple           # dst spatial sizes
    kernel: tuple
    strides: tuple
    dilations: tuple
    begin: tuple           # pads at the start of each spatial axis

    @property
    def cg(self):
        return self.c // self.groups

    @property
    def ocg(self):
        return self.oc // self.groups

    @property
    def taps(self):
        return math.prod(self.kernel)

    @property
    def kd(self):
        return self.taps * self.cg

    @property
    def positions(self):
        return math.prod(self.small)

    @property
    def big_size(self):
        return math.prod(self.big)


def rounded(v, rounding):
    return rounding(v) if rounding is not None else v


def plain_f32(ref) -> bool:
    return type(ref) is ArrayRef and ref.dtype is DataType.f32


class Data:
    """An (N, C, *spatial) view of a src/dst/diff tensor in its data_format."""

    def __init__(self, ref, nxc: bool):
        self.ref, self.nxc = ref, nxc

    def ivars(self, n, c, sp) -> list:
        return [n, *sp, c] if self.nxc else [n, c, *sp]

    def load(self, n, c, sp):
        return self.ref.load_nd(self.ivars(n, c, sp))

    def store(self, n, c, sp, value):
        return self.ref.store_nd(self.ivars(n, c, sp), value)

    def strides(self):
        """(n, c, spatial...) element strides."""
        s = self.ref.strides
        return (s[0], s[-1], tuple(s[1:-1])) if self.nxc else (s[0], s[1], tuple(s[2:]))

    def rows(self, sizes):
        """The stride of a flat spatial position when the spatial dims (of ``sizes``)
        flatten to one stride, else None."""
        _, _, sp = self.strides()
        step = None
        for k in range(len(sizes) - 1, -1, -1):
            if sizes[k] == 1:
                continue
            if step is None:
                step = sp[k]
                expect = sp[k] * sizes[k]
            elif sp[k] != expect:
                return None
            else:
                expect = sp[k] * sizes[k]
        return step if step is not None else 0


class Weights:
    """Weights as the convolution sees them, W[g][oc, ic, *taps], over a tensor
    whose (O, I, *X) axes are ``axes`` (from its weights_format; see
    ops/conv.py's split_weights).  ``swapped``: a transposed convolution's
    weights, whose O and I swap inside each group (``swap_io`` in ops/conv.py):
    W[g][oc, ic] = w[O = g * O-per-group + ic, I = oc].  ``io_grouped``: IOX/XOI
    weights of a grouped transposed convolution, whose I axis holds the groups
    (``io_grouped`` in ops/conv.py)."""

    def __init__(self, ref, axes, groups, swapped: bool, io_grouped: bool = False):
        self.ref, self.axes, self.groups, self.swapped, self.io_grouped = ref, axes, groups, swapped, io_grouped
        o_dim, i_dim = ref.shape[axes[0]], ref.shape[axes[1]]
        self.o_per_group = o_dim if io_grouped else o_dim // groups
        self.i_per_group = i_dim // groups if io_grouped else i_dim

    def _oi(self, g, oc, ic):
        """The tensor's (O, I) indices of W[g][oc, ic]."""
        o, i = (ic, oc) if self.swapped else (oc, ic)      # O inside the group, I inside the group
        return (o, g * self.i_per_group + i) if self.io_grouped else (g * self.o_per_group + o, i)

    def ivars(self, g, oc, ic, taps) -> list:
        out = [None] * len(self.axes)
        for a, v in zip(self.axes, (*self._oi(g, oc, ic), *taps)):
            out[a] = v
        return out

    def load(self, g, oc, ic, taps):
        return self.ref.load_nd(self.ivars(g, oc, ic, taps))

    def store(self, g, oc, ic, taps, value):
        return self.ref.store_nd(self.ivars(g, oc, ic, taps), value)

    def channel_strides(self) -> tuple:
        """(oc stride, ic stride) of W[g][oc, ic] in the tensor."""
        s = self.ref.strides
        so, si = s[self.axes[0]], s[self.axes[1]]
        return (si, so) if self.swapped else (so, si)

    def matrix_strides(self, geo: Geometry, channel_major: bool = False):
        """(row stride, col stride, group stride) of the (T*Cg x OCg) matrix
        (rows: taps then ic, or with ``channel_major`` ic then taps, as OIX
        weights lie; cols: oc) in the tensor, when rows flatten to one stride,
        else None."""
        s = self.ref.strides
        so, si = s[self.axes[0]], s[self.axes[1]]
        oc_s, ic_s = self.channel_strides()
        g_s = self.i_per_group * si if self.io_grouped else self.o_per_group * so
        taps = [(s[a], k) for a, k in zip(self.axes[2:], geo.kernel) if k != 1]
        if channel_major:
            step = taps[-1][0] if taps else ic_s
            expect = step
            for st, k in reversed(taps):
                if st != expect:
                    return None
                expect *= k
            return (step, oc_s, g_s) if geo.cg == 1 or ic_s == expect else None
        expect = ic_s * geo.cg
        for st, k in reversed(taps):
            if st != expect:
                return None
            expect *= k
        return ic_s, oc_s, g_s


@contextmanager
def tap_loops(kb, kernel):
    """Nested loops over the kernel taps; yields (tap indices, flat tap index)."""
    with ExitStack() as stack:
        taps, flat = [], None
        for k in kernel:
            v = stack.enter_context(kb.for_(k, "k"))
            taps.append(v)
            flat = v if flat is None else flat * k + v
        yield taps, (flat if flat is not None else ir.const(0))


def work_item(kb, t, geo: Geometry, blocks: int, size: int, total: int):
    """Work item ``t`` of (image, group, block of ``size`` of ``total`` rows):
    (n, g, the block's first row, its rows)."""
    n = kb.let(t // (geo.groups * blocks), "n")
    g = kb.let((t // blocks) % geo.groups, "g")
    start = kb.let((t % blocks) * size, "p0")
    return n, g, start, kb.let(ir.call("min", size, total - start), "m")
