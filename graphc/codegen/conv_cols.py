"""im2col for the convolutions (graphc.codegen.conv): the (positions x taps x
channels) panels of src values a window meets, and the loops over dst positions
and their window taps."""
from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np

from . import ir
from .conv_bf16 import bits
from .conv_views import Data, Geometry
from .conv_views import rounded as _rounded, tap_loops as _tap_loops
from .loops import unravel

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
