"""Logical views of a convolution's operands (graphc.codegen.conv and
graphc.codegen.winograd): its sizes (:class:`Geometry`), data tensors in their
data_format (:class:`Data`), weights in their weights_format (:class:`Weights`),
and the loops and work items their kernels share."""
from __future__ import annotations

import math
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from . import ir
from .kernel import ArrayRef, plan_threads, worth_parallel
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
    """An (N, C, *spatial) view of a src/dst/diff tensor in its data_format;
    ``origin``: the tensor's spatial indices of the view's position 0 (a view
    of a box of the tensor's positions, see :func:`visible_box`)."""

    def __init__(self, ref, nxc: bool, origin: tuple | None = None):
        self.ref, self.nxc = ref, nxc
        self.origin = origin if origin is not None and any(origin) else None

    def ivars(self, n, c, sp) -> list:
        if self.origin is not None:
            sp = [ir.const(o) if v is None else (v + o if o else v) for v, o in zip(sp, self.origin)]
        return [n, *sp, c] if self.nxc else [n, c, *sp]

    def moved(self, lo):
        """The view whose position 0 is this view's position ``lo``."""
        return Data(self.ref, self.nxc, tuple(a + b for a, b in zip(self.origin or (0,) * len(lo), lo)))

    def base(self) -> int:
        """The element offset of the view's position 0 (of image 0, channel 0)."""
        if self.origin is None:
            return 0
        return sum(o * s for o, s in zip(self.origin, self.strides()[2]))

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

    def channel_major(self, geo: Geometry):
        """(row stride, group stride) of the (OCg x Cg*T) matrix whose column
        ic * T + tap is W[g][oc, ic, taps] (IOX weights of a transposed
        convolution, OIX of a data gradient), when its columns are one
        unit-stride run, else None."""
        s = self.ref.strides
        oc_s, ic_s = self.channel_strides()
        expect = 1
        for a, k in zip(reversed(self.axes[2:]), reversed(geo.kernel)):
            if k != 1 and s[a] != expect:
                return None
            expect *= k
        if (geo.cg > 1 and ic_s != expect) or (geo.ocg > 1 and oc_s < geo.kd):
            return None
        so, si = s[self.axes[0]], s[self.axes[1]]
        return oc_s, (self.i_per_group * si if self.io_grouped else self.o_per_group * so)

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


def visible_box(geo: Geometry) -> list | None:
    """Per spatial dim, the dst positions [lo, hi) whose window meets src (every
    other dst position's window lies in the padding alone: a forward
    convolution's dst there is a sum of no products, and a data gradient's dy
    there reaches no src position), or None when that is every position.  A
    transposed convolution cropped by a large pads_end reads a few of its src
    positions: 1x32x28x28 -> 128x16x16 at stride 2 reads 8x8."""
    box = []
    for o, b, k, s, d, p in zip(geo.small, geo.big, geo.kernel, geo.strides, geo.dilations, geo.begin):
        lo = max(0, -(((k - 1) * d - p) // s))          # ceil((p - (k-1)d) / s)
        hi = min(o, (b - 1 + p) // s + 1)
        box.append((min(lo, o), max(min(lo, o), hi)))
    return None if all(lo == 0 and hi == o for (lo, hi), o in zip(box, geo.small)) else box


def cropped(geo: Geometry, box) -> Geometry:
    """``geo`` over the dst positions of ``box`` (dst position 0 is box's lo)."""
    return Geometry(geo.n, geo.c, geo.oc, geo.groups, geo.big, tuple(hi - lo for lo, hi in box), geo.kernel,
                    geo.strides, geo.dilations, tuple(p - lo * s for (lo, _), p, s in zip(box, geo.begin, geo.strides)))


def moved_store(store, lo):
    """``store(n, c, spatial ivars, value)`` of a view whose position 0 is
    ``store``'s position ``lo``."""
    def moved(n, c, sp, value):
        return store(n, c, [ir.const(o) if v is None else (v + o if o else v) for v, o in zip(sp, lo)], value)
    return moved


def store_zeros_outside(kb, geo: Geometry, box, store, channels_last: bool):
    """0 stored through ``store`` at every dst position outside ``box``: for each
    spatial dim, the slabs before and after its [lo, hi) (the dims before it
    inside the box, those after it whole), the channels outermost or
    (``channels_last``) innermost."""
    sizes = geo.small
    par = worth_parallel(geo.n * geo.oc * (geo.positions - math.prod(hi - lo for lo, hi in box)))
    for d, (lo, hi) in enumerate(box):
        for a, b in ((0, lo), (hi, sizes[d])):
            if b <= a:
                continue
            ranges = list(box[:d]) + [(a, b)] + [(0, s) for s in sizes[d + 1:]]
            with ExitStack() as loops:
                if channels_last:
                    n = loops.enter_context(kb.for_(geo.n, "zn", par and geo.n > 1))
                else:
                    nc = loops.enter_context(kb.for_(geo.n * geo.oc, "zc", par))
                    n, c = kb.let(nc // geo.oc, "n"), kb.let(nc % geo.oc, "c")
                pos = []
                for r0, r1 in ranges:
                    v = loops.enter_context(kb.for_(r1 - r0, "zp"))
                    pos.append(kb.let(v + r0, "zi") if r0 else v)
                if channels_last:
                    c = loops.enter_context(kb.for_(geo.oc, "zc"))
                kb.emit(store(n, c, pos, ir.const(0.0, "f32")))


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


#: elements of one work item's panel of columns at most (im2col's: f32, bf16 bits or u8),
#: a panel near L2's size
PANEL_ELEMS = 1 << 17
#: dst positions of a work item at least
MIN_ROWS = 32


def tile_rows(geo: Geometry, items: int, width: int) -> int:
    """The dst positions of a work item whose panel rows are ``width`` elements,
    ``items`` (images x groups) sharing the threads: at most a panel of
    PANEL_ELEMS, fewer where the items are fewer than the threads."""
    rows = geo.positions
    threads = plan_threads()
    if items < threads:
        rows = -(-rows // -(-threads // items))
    return max(1, min(rows, max(MIN_ROWS, PANEL_ELEMS // max(1, width))))


def panel_width(total: int, j0):
    """The columns of the 32-column panel from ``j0`` of ``total`` columns: a
    number where every panel has the same (all 32, or one panel of fewer), else
    an expression."""
    return min(32, total) if total <= 32 or total % 32 == 0 else ir.call("min", 32, total - j0)


def work_item(kb, t, geo: Geometry, blocks: int, size: int, total: int):
    """Work item ``t`` of (image, group, block of ``size`` of ``total`` rows):
    (n, g, the block's first row, its rows)."""
    n = kb.let(t // (geo.groups * blocks), "n")
    g = kb.let((t // blocks) % geo.groups, "g")
    start = kb.let((t % blocks) * size, "p0")
    return n, g, start, kb.let(ir.call("min", size, total - start), "m")
