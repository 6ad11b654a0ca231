"""im2col for the convolutions (graphc.codegen.conv): the (positions x taps x
channels) panels of src values a window meets, the shifted GEMMs' virtual rows
(a window's last dim's taps side by side, the other taps rows apart), and the
loops over dst positions and their window taps."""
from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np

from . import ir
from .conv_bf16 import bits, plain_bf16
from .conv_views import Data, Geometry
from .conv_views import rounded as _rounded, tap_loops as _tap_loops
from .loops import unravel
from ..types import dense_strides

#: src channels per pass over the window taps of an im2col row (channels-first src)
IM2COL_CHANNELS = 16


class Cells:
    """What an im2col panel holds: elements of type ``elem``, a src value (as loaded,
    after fpmath rounding) written as ``convert(value)``, and ``pad`` in the
    padding."""

    def __init__(self, elem: str, convert, pad: ir.Expr):
        self.elem, self.convert, self.pad = elem, convert, pad


#: f32 values (the f32 GEMMs' operand)
F32 = Cells("f32", ir.f32, ir.const(0.0, "f32"))
#: bf16 values as their bits (the bf16 tile's operand)
BF16 = Cells("u16", bits, ir.const(0, "int"))


def in_positions(kb, geo: Geometry, out_pos, taps):
    """Src spatial indices a tap meets from dst position ``out_pos``, and the
    condition that all are inside (None when no padding can be met)."""
    pos, inside = [], None
    for o, t, s, d, b, size in zip(out_pos, taps, geo.strides, geo.dilations, geo.begin, geo.big):
        p = kb.let(o * s + t * d - b, "ip")
        pos.append(p)
        c = (p >= 0) & (p < size)
        inside = c if inside is None else inside & c
    return pos, inside


def im2col(kb, geo: Geometry, x: Data, n, g, p0, nrows, rounding, tm, parallel, cells: Cells = F32,
           channel_major=False, ld: int | None = None):
    """A (nrows x T*Cg) panel of ``cells`` (a Scratch of tm rows, ``ld`` elements
    apart, T*Cg unless given): row r holds, tap after tap, the Cg src channels of
    group g that the taps of dst position p0 + r meet (``cells.pad`` in the
    padding); ``channel_major``: channel after channel, each channel's taps (the
    order of OIX weights' rows).  Columns past T*Cg are left as they are."""
    kd, cg = geo.kd, geo.cg
    ld = kd if ld is None else ld
    step = geo.taps if channel_major else 1
    panel = kb.scratch(tm * ld, cells.elem, parallel, prefix="cols")
    # channels-first src whose channels alias in L1: the taps of IM2COL_CHANNELS channels at
    # a time (their rows stay in L1 across the taps; 128 channels 1 KB apart thrash its sets:
    # 20 against 6.5 us for 32 rows of 128 channels x 3x3 taps; 56x56 f16 channels, 6272 bytes
    # apart, ran 2.5x slower so)
    cb = IM2COL_CHANNELS if aliased_channels(x, cg) else cg
    with kb.for_(nrows, "r") as r:
        out_pos = [v if v is not None else ir.const(0) for v in unravel(kb, p0 + r, geo.small)]
        row = kb.let(r * ld, "cr")
        with (kb.for_(-(-cg // cb), "cb") if cb < cg else nothing()) as blk:
            c0 = None if blk is None else kb.let(blk * cb, "c0")
            count = cg if blk is None else ir.call("min", cb, cg - c0)
            with _tap_loops(kb, geo.kernel) as (taps, flat):
                pos, inside = in_positions(kb, geo, out_pos, taps)
                first = row + (flat if channel_major else flat * cg)   # (the tap's channel 0)
                at = kb.let(first if c0 is None else first + c0 * step, "ca")
                c1 = g * cg if c0 is None else g * cg + c0
                with kb.if_(inside) as st:
                    with kb.for_(count, "ci") as ci:
                        v = _rounded(x.load(n, c1 + ci, pos), rounding)
                        kb.emit(panel.store(at + ci * step, cells.convert(v)))
                    with kb.else_(st):
                        with kb.for_(count, "ci") as ci:
                            kb.emit(panel.store(at + ci * step, cells.pad))
    return panel


def aliased_channels(x: Data, cg: int) -> bool:
    """Whether the ``cg`` channels of channels-first ``x`` lie a stride apart that
    puts them in fewer lines of L1 (64 sets of 64 bytes, 12 ways) than ``cg``."""
    dtype = getattr(x.ref, "dtype", None)
    if x.nxc or cg <= IM2COL_CHANNELS or dtype is None or dtype.info.np is None:
        return False
    step = x.strides()[1] * np.dtype(dtype.info.np).itemsize
    if step % 64:
        return False
    return 12 * (64 // math.gcd(step // 64, 64)) < cg


#: rows of virtual positions one work item of the shifted GEMMs holds at least
SHIFTED_TILE_ROWS = 384


class VirtualLayout:
    """The shifted GEMMs' virtual rows of a unit-stride convolution (see
    graphc.codegen.conv.emit_forward_shifted): over the padded extents ``pd``
    (dst size + dilated window - 1 over the outer window dims, dst's size over
    the last, whose taps lie in the row), virtual row v holds the Cg channels of
    each of the last dim's KW taps (``width`` values, rows ``ld`` apart).  A dst position has the
    virtual row ``sum(o[t] * vs[t])``; an outer tap k reads the row ``offs[k]``
    further; ``rows`` virtual rows hold every dst position, ``span`` those a tap
    may read; ``inner``: the rows of one step of the first dim.

    ``every_tap``: the last dim is padded as the outer ones are and a virtual
    row holds one position's Cg channels, so that every tap is a row offset
    (``offs`` over the whole window) and the copy of src is not widened KW
    times (the rows of padding past dst's last dim are computed and skipped):
    for a tile summing all taps in its registers (graphc.codegen.bf16_gemm.
    bf16_taps)."""

    def __init__(self, geo: Geometry, every_tap: bool = False):
        self.geo = geo
        #: the last dim's taps a virtual row holds
        self.row_taps = 1 if every_tap else geo.kernel[-1]
        self.width = self.row_taps * geo.cg
        #: elements from one virtual row to the next (every tap's rows, read in place by
        #: AMX's tile, apart by a stride whose loads do not conflict in L1)
        self.ld = self.width
        if every_tap:
            from .bf16_gemm import row_stride
            self.ld = row_stride(self.width)
        # (folded, the last dim's extent is dst's own: no virtual rows of padding to compute
        # and skip; 56x56 computed 58 columns for 56)
        outer = len(geo.kernel) if every_tap else len(geo.kernel) - 1
        self.pd = [o + (k - 1) * d for o, k, d in zip(geo.small[:outer], geo.kernel[:outer], geo.dilations[:outer])] \
            + list(geo.small[outer:])
        self.vs = dense_strides(self.pd)
        self.inner = math.prod(self.pd[1:])
        self.rows = geo.small[0] * self.inner
        self.offs = [sum(t * d * v for t, d, v in zip(tap, geo.dilations, self.vs))
                     for tap in np.ndindex(*geo.kernel[:outer])]
        self.span = self.rows + max(self.offs)

    def scratch_rows(self, tm: int, whole: int = 1) -> int:
        """The virtual rows a work item of ``tm`` rows copies for its taps (its own
        and the taps' halo), its own rounded up to ``whole`` (a tile that reads a
        last slice's rows whole)."""
        return -(-tm // whole) * whole + max(self.offs)

    def tiles(self, items: int, threads: int) -> tuple[int, int]:
        """(blocks, rows per block) of the virtual rows for work items of whole
        first-dim rows of dst: SHIFTED_TILE_ROWS rows at least, fewer while
        ``items`` x blocks gives fewer than two per thread."""
        geo = self.geo
        rt = max(1, min(geo.small[0], -(-SHIFTED_TILE_ROWS // self.inner)))
        while rt > 1 and items * -(-geo.small[0] // rt) < 2 * threads:
            rt = -(-rt // 2)
        return -(-geo.small[0] // rt), rt * self.inner

    def position(self, kb, q):
        """(dst's spatial indices of virtual row ``q``, the condition that it is a dst
        position, None when every row is)."""
        opos = [kb.let(q // self.inner, "o")] + [kb.let((q // v) % d, "o") for v, d in zip(self.vs[1:], self.pd[1:])]
        valid = None
        for o, size in zip(opos[1:], self.geo.small[1:]):
            c = o < size
            valid = c if valid is None else valid & c
        return opos, valid


class VirtualRows:
    """The copy of src into virtual rows (:class:`VirtualLayout`): ``emit(n, g, v0,
    count, dest, at)`` writes virtual rows [v0, v0 + count) of image n, group g
    into ``dest`` from ``at`` as ``cells`` (``cells.pad`` in the padding); every
    value written."""

    def __init__(self, kb, geo: Geometry, x: Data, rounding, layout: VirtualLayout, cells: Cells):
        self.kb, self.geo, self.x, self.rounding, self.layout, self.cells = kb, geo, x, rounding, layout, cells

    def transposable(self) -> bool:
        """Can :meth:`emit` move the values by 16 x 16 blocks transposed in
        registers (graphc.codegen.bf16_gemm.transpose_u16): plain bf16 src (a
        kernel argument, not a value a fused op computes),
        channels first with unit stride along the last dim, one position a row,
        16 channels a block, the last dim's src whole inside its padded extent,
        on a CPU with graphc's AVX-512 bf16 module."""
        from .blas_import import bf16_tile_gemm
        x, geo = self.x, self.geo
        ref = x.ref
        return (self.layout.row_taps == 1 and not x.nxc and self.rounding is None and self.cells.elem == "u16"
                and plain_bf16(ref) and ref.strides is not None
                and x.strides()[2][-1] == 1 and geo.cg % 16 == 0 and geo.big[-1] >= 16 and geo.begin[-1] >= 0
                and geo.begin[-1] + geo.big[-1] <= self.layout.pd[-1] and bf16_tile_gemm())

    def emit(self, n, g, v0, count, dest, at0):
        kb, geo, vs, pd = self.kb, self.geo, self.layout.vs, self.layout.pd
        cg = geo.cg
        # the last dim's src positions moved by blocks: 16 x blocks from lo, and where a row
        # is not whole blocks, one more block ending at its end (overlapping the last)
        blocks = geo.big[-1] // 16 if self.transposable() else 0
        tail = blocks and geo.big[-1] % 16 != 0
        lo, hi = geo.begin[-1], geo.begin[-1] + (geo.big[-1] if blocks else 0)
        kw, dw = self.layout.row_taps, geo.dilations[-1]
        with kb.for_(count, "v") as v:
            vv = kb.let(v0 + v, "vv")
            vpos = [kb.let(vv // vs[0], "p")] + [kb.let((vv // st) % d, "p") for st, d in zip(vs[1:], pd[1:])]
            pos = [kb.let(p - b, "ip") for p, b in zip(vpos[:-1], geo.begin[:-1])]
            inside = None
            for p, size in zip(pos, geo.big[:-1]):
                c = (p >= 0) & (p < size)
                inside = c if inside is None else inside & c
            ld = self.layout.ld
            row = kb.let(at0 + v * ld, "xr")
            if blocks:
                # the run of this last-dim row's src positions [lo, hi), inside src and wholly
                # within the rows asked for: its channels, 16 at a time, transposed from src's
                # rows into the run's rows, at its first position (the positions before and after
                # it, the rows outside src and a run cut by the range: value by value)
                first = kb.let(v - (vpos[-1] - lo), "vf")
                fits = kb.let((first >= 0) & (first + (hi - lo) <= count), "fit")
                start = fits & vpos[-1].eq(lo)
                with kb.if_(start if inside is None else inside & start):
                    with kb.for_(cg // 16, "cb") as cb:
                        src = kb.let(self.x.ref.offset(self.x.ivars(n, g * cg + cb * 16, pos + [ir.const(0)])), "xs")
                        kb.let(ir.call("transpose_u16", self.x.ref.buf, src, self.x.strides()[1], dest,
                                       row + cb * 16, ld, blocks), "st")
                        if tail:
                            back = hi - lo - 16
                            kb.let(ir.call("transpose_u16", self.x.ref.buf, src + back, self.x.strides()[1], dest,
                                           row + back * ld + cb * 16, ld, 1), "st")
            # (a position the block run moved: nothing more to write)
            moved = None if not blocks else (vpos[-1] >= lo) & (vpos[-1] < hi) & fits
            moved = moved if moved is None or inside is None else moved & inside
            with (kb.if_(~moved) if moved is not None else nothing()):
                with kb.for_(kw, "k") as k:
                    last = kb.let(vpos[-1] + k * dw - geo.begin[-1], "ip")
                    ok = (last >= 0) & (last < geo.big[-1])
                    ok = ok if inside is None else inside & ok
                    at = kb.let(row + k * cg, "xa")
                    with kb.if_(ok) as st:
                        with kb.for_(cg, "ci") as ci:
                            val = _rounded(self.x.load(n, g * cg + ci, pos + [last]), self.rounding)
                            kb.store(dest, ir.u64(at + ci), self.cells.convert(val))
                        with kb.else_(st):
                            with kb.for_(cg, "ci") as ci:
                                kb.store(dest, ir.u64(at + ci), self.cells.pad)


@contextmanager
def window_taps(kb, geo: Geometry, p0, nrows, width=None, tap_step=None):
    """Loops over the dst positions p0 + r (r < nrows) and their window taps;
    yields (the src spatial indices the tap meets, whether they are inside the
    src, the offset of the tap's Cg values in a (nrows x T*Cg) panel; ``width``:
    of its ``width`` values in a (nrows x T*width) panel; ``tap_step``: a tap's
    offset from the previous one in the row, ``width`` unless given)."""
    width = geo.cg if width is None else width
    with kb.for_(nrows, "r") as r:
        out_pos = unravel(kb, p0 + r, geo.small)
        out_pos = [v if v is not None else ir.const(0) for v in out_pos]
        row = kb.let(r * (geo.taps * width), "cr")
        with _tap_loops(kb, geo.kernel) as (taps, flat):
            pos, inside = in_positions(kb, geo, out_pos, taps)
            yield pos, inside, kb.let(row + flat * (width if tap_step is None else tap_step), "ca")



@contextmanager
def nothing():
    yield
