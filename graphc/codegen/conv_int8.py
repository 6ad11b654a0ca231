"""int8 forward convolutions on graphc's u8 x s8 tile (graphc.codegen.int8_gemm:
AMX-INT8's or AVX512-VNNI's), for a Convolution whose src and weights are static
s8/u8 Dequantizes computed in the kernel (graphc/codegen/rules/conv.py).

Per image and group, ``Y[P, OCg] = Cols[P, T*Cg] @ W[T*Cg, OCg]`` as in
graphc.codegen.conv's im2col road, on the quantized values themselves, shifted
to the tile's types (src + shifts[0] as u8, weights + shifts[1] as s8): the
weights are copied once per call as a (T*Cg x OCg) s8 matrix per group and
packed into the tile's panels (their column sums on the way); each work item
of dst positions fills a u8 panel of its columns (rows of whole steps of the
tile, zeros past T*Cg: the tile reads it in place) or reads src in place (1x1
windows over NXC u8 src), and multiplies it a tile of C at a time
(``u8s8_block``: MR positions x 32 channels into an s32 block in L1), each
tile stored right away with the zero points compensated
(graphc.codegen.gemm_int8.compensated) and the scales applied by ``store``.  The padding holds src's zero point
(shifted), so that its terms (q - z) are 0 as the reference's zeros are.
"""
from __future__ import annotations

from . import ir
from .blas_import import int8_tile_gemm
from .conv_cols import Cells, im2col
from .conv_views import Data, Geometry, Weights, panel_width, tap_loops, tile_rows, work_item
from .gemm_int8 import compensated, fits_s32
from .int8_gemm import KQ_ALIGN, MR, block_pack_bytes, u8s8_panels
from .kernel import ArrayRef, worth_parallel
from .loops import linear, unravel
from ..types import DataType

#: a row of a panel of columns: whole steps of the tile's k (bytes)
STEP = 4 * KQ_ALIGN
#: output channels per group below which the tile's 32-column panels waste most of
#: their work: the exact f32 roads keep those convolutions
MIN_OCG = 8


class Int8Operands:
    """The quantized operands of an integer convolution: src's zero point ``za``
    (per tensor), the weights' zero point ``zb(channel)`` of a dst channel (an
    f64 expression), and the ``shifts`` (src, weights) that bring them to u8 and
    s8 (128 for s8 src, -128 for u8 weights, else 0)."""

    def __init__(self, za: float, zb, shifts: tuple[int, int], zb_zero: bool):
        self.za, self.zb, self.shifts, self.zb_zero = za, zb, shifts, zb_zero

    @property
    def za2(self) -> float:
        """src's zero point as the tile sees it (u8)."""
        return float(self.za + self.shifts[0])


def int8_conv_applies(geo: Geometry) -> bool:
    """Does an integer forward convolution of ``geo`` take the int8 tile: the CPU
    has it, its s32 sums of T*Cg products stay exact, and the groups have the
    output channels to fill the tile's panels?"""
    return int8_tile_gemm() and fits_s32(geo.kd) and geo.ocg >= MIN_OCG


def _packed_weights(kb, geo: Geometry, w: Weights, shift: int):
    """The weights of each group, (T*Cg x OCg) s8 (+ ``shift``), packed for the
    tile: (panels, bytes per group, panels per group, column sums (s32, OCg
    per group))."""
    G, kd, ocg, cg = geo.groups, geo.kd, geo.ocg, geo.cg
    wm = kb.workspace(G * kd * ocg, "i8", prefix="wints")
    with kb.for_(G, "g") as g, kb.for_(ocg, "oc") as oc:
        with tap_loops(kb, geo.kernel) as (taps, flat):
            with kb.for_(cg, "ic") as ic:
                v = ir.i64(w.load(g, oc, ic, taps)) + shift
                kb.store(wm, ir.u64(g * (kd * ocg) + (flat * cg + ic) * ocg + oc), ir.cast(v, "i8"))
    per, npan = u8s8_panels(ocg, kd), -(-ocg // 32)
    bp = kb.workspace(G * per, "i8", prefix="wpanels")
    sums = kb.workspace(G * ocg, "i32", prefix="wsums")
    with kb.for_(G, "g", G > 1 and worth_parallel(G * kd * ocg)) as g:
        kb.let(ir.call("pack_b_u8s8", 0, ocg, kd, wm, g * (kd * ocg), ocg, bp, g * per, sums, g * ocg, 0, npan),
               "st")
    return bp, per, npan, sums


def _in_place(geo: Geometry, x: Data, shift: int, n, g, p0):
    """(buffer, offset, ld) of the (positions x Cg) u8 matrix of src for image n,
    group g from position p0 when the tile reads it in place (a 1x1 window at
    unit strides, no padding, NXC u8 src as a kernel argument), else None."""
    ref = x.ref
    if shift or type(ref) is not ArrayRef or ref.dtype is not DataType.u8 or not x.nxc or ref.strides is None:
        return None
    if geo.taps != 1 or geo.big != geo.small or any(s != 1 for s in geo.strides) or any(geo.begin):
        return None
    ns, cs, _ = x.strides()
    ps = x.rows(geo.big)
    if cs != 1 or ps is None or (ps < geo.cg and geo.positions > 1):
        return None
    return ref.buf, linear([n, g * geo.cg, p0], [ns, cs, ps], x.base() or None), max(ps, geo.cg)


def emit_forward_int8(kb, geo: Geometry, x: Data, w: Weights, store, ops: Int8Operands):
    """dst = conv(x, w) on the int8 tile (see the module's doc): ``x`` and ``w``
    view the quantized values q (as f64), ``store(n, c, spatial ivars, value)``
    takes the f64 sum of (q - z) products of dst channel c."""
    G, P, kd = geo.groups, geo.positions, geo.kd
    shift_x, shift_w = ops.shifts
    no_zb = ops.zb_zero and shift_w == 0
    bp, per, npan, cb = _packed_weights(kb, geo, w, shift_w)
    ld = -(-kd // STEP) * STEP
    tm = tile_rows(geo, geo.n * G, ld)
    mt = -(-P // tm)
    items = geo.n * G * mt
    par = items > 1 and worth_parallel(geo.n * P * geo.oc * kd // 32)
    cells = Cells("u8", lambda v: ir.cast(ir.i64(v) + shift_x, "u8"), ir.cast(ir.const(int(ops.za2)), "u8"))
    with kb.for_(items, "t", par) as t:
        n, g, p0, m = work_item(kb, t, geo, mt, tm, P)
        a = _in_place(geo, x, shift_x, n, g, p0)
        if a is None:
            cols = im2col(kb, geo, x, n, g, p0, m, None, tm, par, cells, ld=ld)
            if ld > kd:   # (the tile's whole steps: zeros past T*Cg, which the packed weights have too)
                with kb.for_(m, "r") as r, kb.for_(ld - kd, "z") as z:
                    kb.emit(cols.store(r * ld + kd + z, ir.cast(ir.const(0), "u8")))
            abuf, aoff, lda, k = cols.buf, cols.at(0), ld, ld
        else:
            (abuf, aoff, lda), k = a, kd
        ra = None
        if not no_zb:
            ra = kb.scratch(tm, "f64", par, prefix="rsum")
            kb.let(ir.call("row_sums_u8", m, kd, abuf, aoff, lda, ra.buf, ra.at(0)), "st")
        # each tile of C (MR positions x 32 channels) stored by the epilogue right after the
        # tile writes it, in L1 (a whole work item's s32 sums went through L2: the tile's
        # stores and the epilogue's loads of 409x64 sums per 1x1 item cost 2.4 against 1.x ms)
        block = kb.scratch(MR * 32, "i32", par, prefix="iblock")
        ap = kb.scratch(block_pack_bytes(k), "u8", par, prefix="apack")
        kb.let(ir.call("u8s8_begin"), "st")
        with kb.for_((m + (MR - 1)) // MR, "s") as s:
            i0 = kb.let(s * MR, "i0")
            mi = kb.let(ir.call("min", MR, m - i0), "mi")
            with kb.for_(npan, "jp") as jp:
                kb.let(ir.call("u8s8_block", mi, k, abuf, aoff + i0 * lda, lda, ap.buf, ap.at(0), bp, g * per, npan,
                               jp, block.buf, block.at(0)), "st")
                _store(kb, geo, store, n, g, p0 + i0, mi, jp * 32, block, None if ra is None else (ra, i0), cb, ops,
                       no_zb)


def _store(kb, geo: Geometry, store, n, g, p0, m, j0, block, ra, cb, ops: Int8Operands, no_zb: bool):
    """Store the tile of C (``m`` dst positions from p0 x the 32 channels of group g
    from j0, s32, rows 32 apart in ``block``) compensated (``ra``: the row sums and
    the tile's first row in them), position after position (NCX dst too: a
    position's channel lines stay in L1 for the next positions)."""
    ocg = geo.ocg
    nj = panel_width(ocg, j0)
    with kb.for_(m, "r") as r:
        pos = unravel(kb, p0 + r, geo.small)
        rai = None if ra is None else kb.let(ra[0][ra[1] + r], "ra")
        with kb.for_(nj, "jj") as jj:
            c = kb.let(g * ocg + j0 + jj, "c")
            z = None if no_zb else kb.let(ops.zb(c) + float(ops.shifts[1]), "zb")
            kb.emit(store(n, c, pos, compensated(block[r * 32 + jj], rai, cb[c], z, geo.kd, ops.za2, no_zb)))


__all__ = ["Int8Operands", "emit_forward_int8", "int8_conv_applies"]
