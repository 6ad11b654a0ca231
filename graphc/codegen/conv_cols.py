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


def im2col(kb, geo: Geometry, x: Data, n, g, p0, nrows, rounding, tm, parallel, bf16=False,
            channel_major=False):
    """A (nrows x T*Cg) f32 panel (``bf16``: of bf16 bits) (a Scratch of tm rows):
    row r holds, tap after tap, the Cg src channels of group g that the taps of
    dst position p0 + r meet (0 in the padding); ``channel_major``: channel
    after channel, each channel's taps (the order of OIX weights' rows)."""
    kd, cg = geo.kd, geo.cg
    step = geo.taps if channel_major else 1
    panel = kb.scratch(tm * kd, "u16" if bf16 else "f32", parallel, prefix="cols")
    # channels-first src whose channels alias in L1: the taps of IM2COL_CHANNELS channels at
    # a time (their rows stay in L1 across the taps; 128 channels 1 KB apart thrash its sets:
    # 20 against 6.5 us for 32 rows of 128 channels x 3x3 taps; 56x56 f16 channels, 6272 bytes
    # apart, ran 2.5x slower so)
    cb = IM2COL_CHANNELS if aliased_channels(x, cg) else cg
    with kb.for_(nrows, "r") as r:
        out_pos = [v if v is not None else ir.const(0) for v in unravel(kb, p0 + r, geo.small)]
        row = kb.let(r * kd, "cr")
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
                        kb.emit(panel.store(at + ci * step, bits(v) if bf16 else ir.f32(v)))
                    with kb.else_(st):
                        with kb.for_(count, "ci") as ci:
                            kb.emit(panel.store(at + ci * step, ir.const(0, "int") if bf16 else ir.const(0.0, "f32")))
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
