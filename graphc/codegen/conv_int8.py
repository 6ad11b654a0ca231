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

At unit strides, on AMX, with s8 weights without zero points and a group's
channels whole steps of the tile (:func:`every_tap`), there is no panel: the
work item copies src into virtual rows of one position each
(graphc.codegen.conv_cols.VirtualLayout's ``every_tap``), each tap of the
window a row offset into them, and ``u8s8_taps`` sums a tile of C's taps in the
tile registers, the weights packed per tap.
"""
from __future__ import annotations

from . import ir
from .blas_import import int8_tile_gemm
from .conv_cols import Cells, VirtualLayout, VirtualRows, im2col, nothing
from .conv_views import Data, Geometry, Weights, panel_width, tap_loops, tile_rows, work_item
from .gemm_int8 import compensated, fits_s32
from .int8_gemm import KQ_ALIGN, MR, block_pack_bytes, taps_in_registers, u8s8_panels
from .kernel import ArrayRef, plan_threads, worth_parallel
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


def _weights_matrix(kb, geo: Geometry, w: Weights, shift: int):
    """The weights of each group as a (T*Cg x OCg) s8 matrix (+ ``shift``; rows:
    taps then input channels), groups T*Cg*OCg apart."""
    G, kd, ocg, cg = geo.groups, geo.kd, geo.ocg, geo.cg
    wm = kb.workspace(G * kd * ocg, "i8", prefix="wints")
    with kb.for_(G, "g") as g, kb.for_(ocg, "oc") as oc:
        with tap_loops(kb, geo.kernel) as (taps, flat):
            with kb.for_(cg, "ic") as ic:
                v = ir.i64(w.load(g, oc, ic, taps)) + shift
                kb.store(wm, ir.u64(g * (kd * ocg) + (flat * cg + ic) * ocg + oc), ir.cast(v, "i8"))
    return wm


def _packed_weights(kb, geo: Geometry, w: Weights, shift: int):
    """The weights of each group, (T*Cg x OCg) s8 (+ ``shift``), packed for the
    tile: (panels, bytes per group, panels per group, column sums (s32, OCg
    per group))."""
    G, kd, ocg = geo.groups, geo.kd, geo.ocg
    wm = _weights_matrix(kb, geo, w, shift)
    per, npan = u8s8_panels(ocg, kd), -(-ocg // 32)
    bp = kb.workspace(G * per, "i8", prefix="wpanels")
    sums = kb.workspace(G * ocg, "i32", prefix="wsums")
    with kb.for_(G, "g", G > 1 and worth_parallel(G * kd * ocg)) as g:
        kb.let(ir.call("pack_b_u8s8", 0, ocg, kd, wm, g * (kd * ocg), ocg, bp, g * per, sums, g * ocg, 0, npan),
               "st")
    return bp, per, npan, sums


def _packed_taps(kb, geo: Geometry, w: Weights):
    """The weights of each (group, tap), a (Cg x OCg) s8 matrix, packed for the
    tile: (panels, bytes per tap, panels per tap, each group's column sums over
    all its taps (s32, OCg per group))."""
    G, T, cg, ocg = geo.groups, geo.taps, geo.cg, geo.ocg
    wm = _weights_matrix(kb, geo, w, 0)
    per, npan = u8s8_panels(ocg, cg), -(-ocg // 32)
    bp = kb.workspace(G * T * per, "i8", prefix="wpanels")
    tsums = kb.workspace(G * T * ocg, "i32", prefix="tsums")
    with kb.for_(G * T, "gt") as gt:
        kb.let(ir.call("pack_b_u8s8", 0, ocg, cg, wm, gt * (cg * ocg), ocg, bp, gt * per, tsums, gt * ocg, 0, npan),
               "st")
    sums = kb.workspace(G * ocg, "i32", prefix="wsums")
    with kb.for_(G, "g") as g, kb.for_(ocg, "oc") as oc:
        at = kb.let(g * ocg + oc, "sa")
        kb.store(sums, ir.u64(at), tsums[g * T * ocg + oc])
        with kb.for_(T - 1, "t") as t:
            kb.store(sums, ir.u64(at), sums[at] + tsums[(g * T + t + 1) * ocg + oc])
    return bp, per, npan, sums


def every_tap(geo: Geometry, ops: "Int8Operands") -> bool:
    """Does the convolution sum its window's taps in AMX's tile registers
    (``u8s8_taps`` over virtual rows of one position each: conv_cols.
    VirtualLayout's ``every_tap``, no im2col)?  Unit strides and several taps,
    s8 weights without zero points (no row sums of src to compensate), and on
    AMX's road a group's channels whole steps of the tile read in place."""
    return (ops.zb_zero and ops.shifts[1] == 0 and geo.taps > 1 and all(s == 1 for s in geo.strides)
            and taps_in_registers.py_func(geo.cg, geo.cg))


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
    cells = Cells("u8", lambda v: ir.cast(ir.i64(v) + shift_x, "u8"), ir.cast(ir.const(int(ops.za2)), "u8"))
    if every_tap(geo, ops):
        _forward_every_tap(kb, geo, x, w, store, ops, cells)
        return
    bp, per, npan, cb = _packed_weights(kb, geo, w, shift_w)
    ld = -(-kd // STEP) * STEP
    tm = tile_rows(geo, geo.n * G, ld)
    mt = -(-P // tm)
    items = geo.n * G * mt
    par = items > 1 and worth_parallel(geo.n * P * geo.oc * kd // 32)
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
        rsums = (lambda i0: None) if ra is None else (lambda i0: (ra, i0))
        _tiles(kb, m, npan, k, par,
               lambda i0, mi, jp, block, ap: ir.call("u8s8_block", mi, k, abuf, aoff + i0 * lda, lda, ap.buf, ap.at(0),
                                                     bp, g * per, npan, jp, block.buf, block.at(0)),
               lambda i0, mi, jp, block: _store(kb, geo, store, n, g, mi, jp * 32, block, rsums(i0), cb, ops, no_zb,
                                                lambda r: (unravel(kb, p0 + i0 + r, geo.small), None)))


def _tiles(kb, m, npan, k, par, product, store_tile):
    """A work item's m rows times the weights' npan panels, a tile of C (MR rows
    x 32 channels, s32) at a time: ``product(i0, mi, jp, block, ap)`` the call
    making the tile of rows i0.. (mi of them) and panel jp in ``block`` (A packed
    into ``ap`` where it must be, k of it), ``store_tile(i0, mi, jp, block)`` its
    store right after, while it is in L1 (a whole work item's s32 sums went through
    L2: the tile's stores and the epilogue's loads of 409x64 sums per 1x1 item
    cost 2.4 against 1.x ms)."""
    block = kb.scratch(MR * 32, "i32", par, prefix="iblock")
    ap = kb.scratch(block_pack_bytes(k), "u8", par, prefix="apack")
    kb.let(ir.call("u8s8_begin"), "st")
    with kb.for_((m + (MR - 1)) // MR, "s") as s:
        i0 = kb.let(s * MR, "i0")
        mi = kb.let(ir.call("min", MR, m - i0), "mi")
        with kb.for_(npan, "jp") as jp:
            kb.let(product(i0, mi, jp, block, ap), "st")
            store_tile(i0, mi, jp, block)


def _forward_every_tap(kb, geo: Geometry, x: Data, w: Weights, store, ops: Int8Operands, cells: Cells):
    """dst = conv(x, w) with every tap a row offset (see :func:`every_tap`): each
    work item copies its virtual rows (and the taps' halo; src's zero point in the
    padding) into its thread's scratch, and ``u8s8_taps`` makes each tile of C
    from all the taps in the tile registers; its rows that are dst positions
    are stored compensated."""
    G, cg = geo.groups, geo.cg
    lay = VirtualLayout(geo, every_tap=True)
    bp, per, npan, cb = _packed_taps(kb, geo, w)
    aoffs = kb.const_array([off * cg for off in lay.offs], "int", prefix="taps")
    mt, tm = lay.tiles(geo.n * G, plan_threads())
    items = geo.n * G * mt
    par = items > 1 and worth_parallel(geo.n * geo.positions * geo.oc * geo.kd // 32)
    with kb.for_(items, "t", par) as t:
        n, g, q0, m = work_item(kb, t, geo, mt, tm, lay.rows)
        # (the tile reads a last slice's MR rows whole: room for them)
        rows = kb.scratch(lay.scratch_rows(tm, MR) * cg, "u8", par, prefix="xrows")
        VirtualRows(kb, geo, x, None, lay, cells).emit(n, g, q0, m + max(lay.offs), rows.buf, rows.at(0))
        _tiles(kb, m, npan, cg, par,
               lambda i0, mi, jp, block, ap: ir.call("u8s8_taps", mi, cg, rows.buf, rows.at(0) + i0 * cg, cg, aoffs,
                                                     ap.buf, ap.at(0), bp, g * geo.taps * per, per, npan, jp,
                                                     block.buf, block.at(0)),
               lambda i0, mi, jp, block: _store(kb, geo, store, n, g, mi, jp * 32, block, None, cb, ops, True,
                                                lambda r: lay.position(kb, q0 + i0 + r)))


def _store(kb, geo: Geometry, store, n, g, m, j0, block, ra, cb, ops: Int8Operands, no_zb: bool, position):
    """Store the tile of C (``m`` rows x the 32 channels of group g from j0, s32,
    rows 32 apart in ``block``) compensated (``ra``: the row sums and the tile's
    first row in them), row after row (NCX dst too: a position's channel lines
    stay in L1 for the next positions); ``position(r)``: row r's dst spatial
    indices and the condition that it is a dst position (None: always)."""
    ocg = geo.ocg
    nj = panel_width(ocg, j0)
    with kb.for_(m, "r") as r:
        pos, valid = position(r)
        with (kb.if_(valid) if valid is not None else nothing()):
            rai = None if ra is None else kb.let(ra[0][ra[1] + r], "ra")
            with kb.for_(nj, "jj") as jj:
                c = kb.let(g * ocg + j0 + jj, "c")
                z = None if no_zb else kb.let(ops.zb(c) + float(ops.shifts[1]), "zb")
                kb.emit(store(n, c, pos, compensated(block[r * 32 + jj], rai, cb[c], z, geo.kd, ops.za2, no_zb)))


__all__ = ["Int8Operands", "emit_forward_int8", "every_tap", "int8_conv_applies"]
