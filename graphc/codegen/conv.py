"""Convolution kernels as GEMMs, forward and both gradients.

Every convolution op reduces, as in graphc/ops/conv.py's reference, to one of
three computations on logical NCX data and (OC, C/G, *K) weights:

* ``forward`` (emit_convolution picks the road): Winograd F(2x2, 3x3) for 3x3
  windows at unit strides (emit_forward_winograd); one accumulating GEMM per
  outer tap over a padded copy of src for other unit-stride windows
  (emit_forward_shifted); else, per image and group,
  ``Y[P, OCg] = Cols[P, T*Cg] @ W[T*Cg, OCg]`` where Cols holds, for each output
  position, the src values its window taps meet (im2col, zeros in the
  padding), packed a tile of positions at a time (emit_forward);
* ``backward_data``: at unit strides the forward convolution of dY with the
  flipped, transposed weights; else ``Cols = dY[P, OCg] @ W^T``, scattered back
  onto the positions the taps met (col2im) in an f32 accumulator per image and
  group;
* ``backward_weights``: Winograd's weight gradient for 3x3 windows at unit
  strides (graphc.codegen.winograd); else ``dW[T*Cg, OCg] += Cols^T @ dY``
  over every image and tile, in per-thread f32 partial sums added up at the end.

Tensors are reached through views (:class:`Data`, :class:`Weights`) mapping
the logical indices to each tensor's own layout (NCX/NXC, OIX/XIO/IOX/XOI,
the transposed convolutions' swapped O and I, any strides), so the same code
serves all six ops; operands BLAS can read in place (f32, unit stride along
one matrix dim, the other dims flattening to one stride) are not copied.
"""
from __future__ import annotations

import math

from . import ir
from .conv_bf16 import PackedWeights, bf16_operands, bf16_weights, bits, plain_bf16, taps_in_tile
from .conv_int8 import Int8Operands, emit_forward_int8
from .conv_cf import F32Rows, bf16_channels_first, bf16_data_channels_first, bf16_rows, channels_first, depthwise
from .conv_cf import emit_backward_data_cf, emit_depthwise, emit_forward_cf
from .conv_cols import BF16 as _BF16, F32 as _F32, VirtualLayout, VirtualRows, im2col as _im2col
from .conv_cols import nothing as _nothing, window_taps as _window_taps
from .conv_weights_bf16 import emit_backward_weights_tile, tile_weights
from .conv_weights_cf import emit_backward_weights_cf, few_positions
from .conv_views import Data, Geometry, Weights, cropped, moved_store, store_zeros_outside, visible_box
from .conv_views import MIN_ROWS, PANEL_ELEMS, panel_width, tile_rows
from .conv_views import plain_f32 as _plain, rounded as _rounded, tap_loops as _tap_loops, work_item as _item
from .gemm import Matrix, direct, exact_runs
from .kernel import plan_threads, worth_parallel
from .loops import linear, unravel
from .winograd import emit_backward_weights_winograd, emit_forward_winograd, winograd
from ..types import DataType, dense_strides

#: output channels per pass of the forward roads' packing of OIX-like weights
PACK_OC = 16


def _pack_weights(kb, geo: Geometry, w: Weights, transposed: bool, rounding, cb=None):
    """All groups' weights as f32 matrices: (G, T*Cg, OCg), or (G, OCg, T*Cg) when
    ``transposed``; the loops write the panel in order (written across, a store
    per element to a new cache line cost 5 ns an element).  ``cb`` (transposed
    only; a divisor of Cg): each row's columns in blocks of ``cb`` input
    channels, (Cg / cb, T, cb), so that a block's T*cb columns are adjacent."""
    kd, cg, ocg = geo.kd, geo.cg, geo.ocg
    cb = cg if cb is None else cb
    panel = kb.workspace(geo.groups * kd * ocg, "f32", prefix="wp")
    if transposed:   # (rows of oc in parallel)
        with kb.for_(geo.groups * ocg, "go", worth_parallel(geo.groups * ocg * kd)) as go:
            g, oc = kb.let(go // ocg, "g"), kb.let(go % ocg, "oc")
            with (kb.for_(cg // cb, "blk") if cb < cg else _nothing()) as blk:
                with _tap_loops(kb, geo.kernel) as (taps, flat):
                    with kb.for_(cb, "ic") as ic:
                        col, c = (flat, ic) if blk is None else (blk * geo.taps + flat, blk * cb + ic)
                        kb.store(panel, ir.u64(go * kd + col * cb + ic),
                                 ir.f32(_rounded(w.load(g, oc, c, taps), rounding)))
        return panel
    if _oc_outer(w) and _plain(w.ref):
        # OIX-like f32 weights: PACK_OC output channels at a time, read along (ic, taps)
        # and written a row's cache line per (ic, tap): both in whole lines (32x128x3x3:
        # 5.2 us, 8.1 as (OCg, T*Cg) rows; f16 ones converted so took 41 against 9)
        nob = -(-ocg // PACK_OC)
        with kb.for_(geo.groups * nob, "gb", worth_parallel(geo.groups * ocg * kd)) as gb:
            g, o0 = kb.let(gb // nob, "g"), kb.let(gb % nob * PACK_OC, "o0")
            with kb.for_(cg, "ic") as ic:
                with _tap_loops(kb, geo.kernel) as (taps, flat):
                    at = kb.let(g * (kd * ocg) + (flat * cg + ic) * ocg + o0, "wa")
                    with kb.for_(ir.call("min", PACK_OC, ocg - o0), "oc") as j:
                        kb.store(panel, ir.u64(at + j), ir.f32(_rounded(w.load(g, o0 + j, ic, taps), rounding)))
        return panel
    with kb.for_(geo.groups, "g") as g:
        with _tap_loops(kb, geo.kernel) as (taps, flat):
            with kb.for_(cg, "ic") as ic:
                with kb.for_(ocg, "oc") as oc:
                    at = g * (kd * ocg) + (flat * cg + ic) * ocg + oc
                    kb.store(panel, ir.u64(at), ir.f32(_rounded(w.load(g, oc, ic, taps), rounding)))
    return panel


def _oc_outer(w) -> bool:
    """Weights whose oc stride is above their ic's (OIX): packed (T*Cg x OCg) a
    block of output channels at a time, or as (OCg, T*Cg) rows (transposed), read
    and written in order."""
    if not isinstance(w, Weights):
        return False
    oc_s, ic_s = w.channel_strides()
    return oc_s > ic_s


def channel_major(geo: Geometry, w, rounding) -> bool:
    """Whether the weights' (T*Cg x OCg) matrix is read in place with its rows
    channel after channel (OIX weights of a window of several taps), and not
    taps first: the GEMM's other operand then orders its K so (no weights
    packed at every call)."""
    return geo.taps > 1 and isinstance(w, Weights) and _plain(w.ref) and rounding is None \
        and w.matrix_strides(geo) is None and w.matrix_strides(geo, True) is not None


def weights_operand(kb, geo, w: Weights, transposed: bool, rounding, either: bool = False, cm: bool = False):
    """(buffer, group offset function, ld, BLAS transpose flag) of the weights matrix
    (T*Cg x OCg), or its transpose when ``transposed``; ``either``: the caller
    takes the other orientation too (by the flag): a transposed one of XIO-like
    weights is packed (T*Cg x OCg), as they lie; ``cm``: rows channel after
    channel, read in place (see channel_major)."""
    ms = w.matrix_strides(geo, cm) if _plain(w.ref) and rounding is None else None
    if ms is not None:
        rs, cs, gs = ms
        m = Matrix(w.ref, geo.ocg if transposed else geo.kd, geo.kd if transposed else geo.ocg, None, False,
                   (cs, rs) if transposed else (rs, cs), lambda bv: ir.const(0))
        d = direct(m)
        if d is not None:
            return w.ref.buf, (lambda g: g * gs), d[1], d[0]
    assert not cm, "channel-major weights are read in place"
    # (a GEMM of B transposed ran 1.1-2.3x slower: 32x32x1152 15.5 against 6.8 us,
    # 113x128x1152 106 against 72; the forward roads pack f32 weights (T*Cg x OCg))
    oc_outer = _oc_outer(w)
    flip = either and (not oc_outer if transposed else oc_outer and not _plain(w.ref))
    panel = _pack_weights(kb, geo, w, transposed != flip, rounding)
    size = geo.kd * geo.ocg
    return panel, (lambda g: g * size), (geo.kd if transposed != flip else geo.ocg), int(flip)


def _data_operand(geo: Geometry, d: Data, channels_per_group, sizes, n, g, p0, bf16=False):
    """(buffer, offset, ld) of the (positions x channels-of-group) matrix of ``d``
    for image n, group g, from position p0, when BLAS can read it in place
    (``bf16``: a bf16 GEMM's operand)."""
    if not (plain_bf16(d.ref) if bf16 else _plain(d.ref)):
        return None
    ns, cs, _ = d.strides()
    ps = d.rows(sizes)
    if cs != 1 and channels_per_group > 1:
        return None
    if ps is None or (ps < channels_per_group and math.prod(sizes) > 1):
        return None
    ld = ps if math.prod(sizes) > 1 else channels_per_group
    return d.ref.buf, linear([n, g * channels_per_group, p0], [ns, cs, ps], d.base() or None), ld


def _channel_rows(geo: Geometry, d: Data, n, g, p0):
    """(buffer, offset, ld) of the (channels-of-group x positions) matrix of ``d``
    (dy's OCg channels) for image n, group g from position p0 when BLAS reads it
    in place (positions one stride apart: NCX), else None."""
    if not _plain(d.ref):
        return None
    ns, cs, _ = d.strides()
    if d.rows(geo.small) != 1 or cs < geo.positions:
        return None
    return d.ref.buf, linear([n, g * geo.ocg, p0], [ns, cs, 1], d.base() or None), cs


def _dy_operand(kb, geo: Geometry, dy: Data, n, g, p0, m, tm, rounding, parallel, bf16=False):
    """(buffer, offset, ld) of the (m x OCg) matrix of dy for image n, group g from
    position p0: in place when BLAS can read it so, else packed to f32 (``bf16``:
    as bf16 bits, for the tile)."""
    ocg = geo.ocg
    a = _data_operand(geo, dy, ocg, geo.small, n, g, p0, bf16) if rounding is None else None
    if a is not None:
        return a
    buf = kb.scratch(tm * ocg, "u16" if bf16 else "f32", parallel, prefix="dyp")
    with kb.for_(m, "r") as r:
        pos = unravel(kb, p0 + r, geo.small)
        with kb.for_(ocg, "oc") as oc:
            v = _rounded(dy.load(n, g * ocg + oc, pos), rounding)
            kb.emit(buf.store(r * ocg + oc, bits(v) if bf16 else ir.f32(v)))
    return buf.buf, buf.at(0), ocg


def emit_forward(kb, geo: Geometry, x: Data, w: Weights, store, rounding=None, out: Data | None = None,
                 exact_k: int | None = None):
    """dst = conv(x, w): ``store(n, o, spatial ivars, value)`` returns the statements
    storing one dst element (with bias and fused post-ops); ``out``, when the
    store only stores, is dst itself: BLAS then writes into it when it can.
    ``exact_k``: integer operands, summed exactly (graphc.codegen.gemm.emit_gemm)."""
    G, P, kd, ocg, cg = geo.groups, geo.positions, geo.kd, geo.ocg, geo.cg
    run = None if exact_k is None or kd <= exact_k else -(-kd // -(-kd // exact_k))
    one_by_one = geo.taps == 1 and geo.big == geo.small and all(s == 1 for s in geo.strides) and not any(geo.begin)
    bf16 = exact_k is None and bf16_operands(x, w, rounding)
    if bf16:
        kb.road("bf16_gemm")
        wb = bf16_weights(kb, geo, w, rounding, kd)
    cm = not bf16 and run is None and channel_major(geo, w, rounding)
    if not bf16:
        wbuf, woff, ldw, tw = weights_operand(kb, geo, w, False, rounding, either=run is None, cm=cm)
    tm = tile_rows(geo, geo.n * G, kd)
    mt = -(-P // tm)
    items = geo.n * G * mt
    par = items > 1 and worth_parallel(geo.n * P * geo.oc * kd // 8)
    with kb.for_(items, "t", par) as t:
        n, g, p0, m = _item(kb, t, geo, mt, tm, P)
        a = _data_operand(geo, x, cg, geo.big, n, g, p0, bf16) if one_by_one and rounding is None else None
        if a is None:
            cols = _im2col(kb, geo, x, n, g, p0, m, rounding, tm, par, _BF16 if bf16 else _F32, cm)
            abuf, aoff, lda = cols.buf, cols.at(0), kd
        else:
            abuf, aoff, lda = a
        c = _data_operand(geo, out, ocg, geo.small, n, g, p0) if out is not None else None
        if bf16:
            tile = kb.scratch(tm * ocg, "f32", par, prefix="tile") if c is None else None
            cbuf, coff, ldc = c if c is not None else (tile.buf, tile.at(0), ocg)
            kb.let(wb.product(m, ocg, kd, abuf, aoff, lda, g, 0, 0.0, cbuf, coff, ldc), "st")
            if c is None:
                _store_tile(kb, geo, store, n, g, p0, m, tile)
        elif run is not None:
            assert tw == 0 and ldw == ocg, "integer weights are packed"

            def at(bv, r, oc, value):
                return store(n, g * ocg + oc, unravel(kb, p0 + r, geo.small), value)
            exact_runs(kb, at, None, ir.const(0), ir.const(0), m, ocg, kd, run, tm * ocg, par,
                       (abuf, aoff, lda), (wbuf, woff(g), ldw))
        elif c is not None:
            kb.let(ir.call("gemm_f32", 0, tw, m, ocg, kd, abuf, aoff, lda, wbuf, woff(g), ldw, 0.0, *c), "st")
        else:
            tile = kb.scratch(tm * ocg, "f32", par, prefix="tile")
            kb.let(ir.call("gemm_f32", 0, tw, m, ocg, kd, abuf, aoff, lda, wbuf, woff(g), ldw, 0.0, tile.buf,
                           tile.at(0), ocg), "st")
            _store_tile(kb, geo, store, n, g, p0, m, tile)


def _store_tile(kb, geo: Geometry, store, n, g, p0, m, tile):
    """Store the (m x OCg) f32 tile of dst positions p0.. of image n, group g."""
    ocg = geo.ocg
    with kb.for_(m, "r") as r:
        pos = unravel(kb, p0 + r, geo.small)
        row = kb.let(r * ocg, "tr")
        with kb.for_(ocg, "oc") as oc:
            kb.emit(store(n, g * ocg + oc, pos, tile[row + oc]))


#: a window of fewer taps takes the channels-first road where that applies (NCX f32): its
#: product per position is short beside the shifted road's copy of src into virtual rows
#: (2x2 over 2x64x112x112, 32 outputs: 1.49 -> 1.15 ms); 3x3 windows ran 0.82-0.94x as fast
#: channels first, and keep the shifted GEMMs
SHIFTED_MIN_TAPS = 9


def shifted(geo: Geometry) -> bool:
    """Unit strides and a window of several taps: the forward convolution runs as
    one GEMM per tap over a padded copy of src (emit_forward_shifted), no im2col."""
    return geo.taps > 1 and all(s == 1 for s in geo.strides)


def emit_forward_shifted(kb, geo: Geometry, x: Data, w: Weights, store, rounding=None, bf16=False):
    """dst = conv(x, w) at unit strides, with one GEMM per tap of the outer window
    dims and no full im2col.  Each image (and group) is copied once into an f32
    buffer over the padded extents ``pd`` (dst size + dilated window - 1 over the
    outer window dims, dst's size over the last) whose
    *virtual row* v holds, for the window's last dim, the Cg channels of each of
    its KW taps (zeros in the padding): a row of KW*Cg values.  A dst position o
    has the virtual row ``q = sum(o[t] * vs[t])`` (``vs`` the row strides over
    ``pd``) and an outer tap k (over the other window dims) reads row
    ``q + off(k)``: for a run of consecutive virtual rows, each outer tap's
    operand is a plain (rows x KW*Cg) matrix of the buffer.  The dst tile is the
    sum of those matrices times the tap's (KW*Cg x OCg) weights (accumulating
    GEMMs, beta 1), then a store loop skips the virtual rows past dst's inner dims.
    ``bf16`` (graphc.codegen.conv_bf16): the GEMMs run on the tile, each tap's
    weights packed for it once per call, and each work item copies the virtual
    rows it reads (its own and the outer taps' halo) as bf16 bits into its
    thread's scratch right before its GEMMs (rather than a whole copy first:
    the rows are in L2 when read, and the kernel has one parallel loop).
    Where the tile sums a tile of C's taps in its registers (conv_bf16.
    taps_in_tile: AMX), a virtual row is one position's channels and every tap
    a row offset (VirtualLayout's ``every_tap``): one call per tile of C, and a
    copy of src not widened KW times."""
    G, ocg = geo.groups, geo.ocg
    every_tap = bf16 and taps_in_tile(geo)
    lay = VirtualLayout(geo, every_tap)
    width, rows, offs, span = lay.width, lay.rows, lay.offs, lay.span
    kw = geo.kernel[-1]
    per = span * width
    copy = VirtualRows(kb, geo, x, rounding, lay, _BF16 if bf16 else _F32)
    if not bf16:
        # 1. the expanded copies: (image, group, block of virtual rows) in parallel; every value written
        xp = kb.workspace(geo.n * G * per, "f32", prefix="xp")
        chunk = 256
        nch = -(-span // chunk)
        par = worth_parallel(geo.n * geo.c * geo.big_size * kw)
        with kb.for_(geo.n * G * nch, "t", par and geo.n * G * nch > 1) as t:
            n = kb.let(t // (G * nch), "n")
            g = kb.let((t // nch) % G, "g")
            v0 = kb.let((t % nch) * chunk, "v0")
            copy.emit(n, g, v0, ir.call("min", chunk, span - v0), xp, (n * G + g) * per + v0 * width)
    # 2. tiles of virtual rows: whole first-dim rows of dst, one accumulating GEMM per outer tap
    if bf16:
        wb = bf16_weights(kb, geo, w, rounding, width)

        def product(k, a_at, m, beta, tile):
            return wb.product(m, ocg, width, rows_.buf, a_at, width, g, k, beta, tile.buf, tile.at(0), ocg)
    else:
        wbuf, woff, ldw, tw = weights_operand(kb, geo, w, False, rounding, either=True)
        wrow = ldw if tw == 0 else 1                    # one weights row (an input channel) further

        def product(k, a_at, m, beta, tile):
            return ir.call("gemm_f32", 0, tw, m, ocg, width, xp, a_at, width, wbuf, woff(g) + k * width * wrow, ldw,
                           beta, tile.buf, tile.at(0), ocg)
    mt, tm = lay.tiles(geo.n * G, plan_threads())
    items = geo.n * G * mt
    par = items > 1 and worth_parallel(geo.n * geo.positions * geo.oc * geo.kd // 8)
    with kb.for_(items, "t", par) as t:
        n, g, q0, m = _item(kb, t, geo, mt, tm, rows)
        if bf16:
            # 1'. bf16: the work item's own virtual rows (and the outer taps' halo), copied
            # into the thread's scratch just before its GEMMs read them (in L2; no pass
            # over the whole copy, one parallel loop fewer)
            # (on the every-tap road the tile reads a last slice's MR rows whole: room for them)
            from .bf16_gemm import MR
            rows_ = kb.scratch(lay.scratch_rows(tm, MR if every_tap else 1) * lay.ld, "u16", par, prefix="xrows")
            copy.emit(n, g, q0, m + max(offs), rows_.buf, rows_.at(0))
            base = rows_.at(0)
        else:
            base = kb.let((n * G + g) * per + q0 * width, "xa")

        def virtual_row(r, c0, nc, read):
            """Store row r of the products (virtual row q0 + r; channels c0.., nc of them,
            each ``read(oc)``) where it is a dst position."""
            opos, valid = lay.position(kb, q0 + r)
            with (kb.if_(valid) if valid is not None else _nothing()):
                with kb.for_(nc, "oc") as oc:
                    kb.emit(store(n, g * ocg + c0 + oc, opos, read(oc)))
        if bf16 and isinstance(wb, PackedWeights):
            _tap_blocks(kb, wb, g, m, offs, (width, lay.ld), ocg, rows_.buf, base, par, virtual_row, every_tap)
        else:
            tile = kb.scratch(tm * ocg, "f32", par, prefix="tile")
            for k, off in enumerate(offs):
                kb.let(product(k, base + off * width, m, 0.0 if k == 0 else 1.0, tile), "st")
            with kb.for_(m, "r") as r:
                row = kb.let(r * ocg, "tr")
                virtual_row(r, 0, ocg, lambda oc: tile[row + oc])


def _tap_blocks(kb, wb: PackedWeights, g, m, offs, rows, ocg, abuf, base, par, virtual_row, every_tap: bool):
    """The shifted GEMMs on graphc's bf16 tile a tile of C at a time: for each MR
    virtual rows x 32 channels, the outer taps' products summed into a float32
    block in L1 (``bf16_block``; ``every_tap``: all taps in one ``bf16_taps``
    call, summed in the tile registers), and its rows stored right away
    (``virtual_row``) rather than each tap's GEMM adding into a work item's tile
    of C in L2 and the store reading it after the last."""
    from .bf16_gemm import MR, block_pack_elems
    width, ld = rows     # (a virtual row's values; from one to the next)
    block = kb.scratch(MR * 32, "f32", par, prefix="cblock")
    ap = kb.scratch(block_pack_elems(width), "u16", par, prefix="apack")
    aoffs = kb.const_array([off * ld for off in offs], "int", prefix="taps") if every_tap else None
    kb.let(ir.call("bf16_begin"), "st")
    with kb.for_((m + (MR - 1)) // MR, "s") as s:
        i0 = kb.let(s * MR, "i0")
        mi = kb.let(ir.call("min", MR, m - i0), "mi")
        with kb.for_(wb.npan, "jp") as jp:
            if every_tap:
                kb.let(wb.taps(mi, width, abuf, base + i0 * ld, ld, aoffs, ap, g, jp, block), "st")
            for k, off in enumerate(offs if not every_tap else ()):
                kb.let(wb.block(mi, width, abuf, base + (i0 + off) * ld, ld, ap, g, k, jp, k > 0, block), "st")
            nc = panel_width(ocg, jp * 32)
            with kb.for_(mi, "r") as r:
                row = kb.let(r * 32, "br")
                virtual_row(i0 + r, jp * 32, nc, lambda oc: block[row + oc])


def as_forward(geo: Geometry) -> Geometry | None:
    """At unit strides, the data gradient of ``geo``'s convolution as a forward
    convolution (of dy, OC -> C channels, over dy's spatial dims, with the
    window flipped and pads_begin (K - 1) * d - b), else None."""
    if any(s != 1 for s in geo.strides):
        return None
    begin = tuple((k - 1) * d - b for k, d, b in zip(geo.kernel, geo.dilations, geo.begin))
    return Geometry(geo.n, geo.oc, geo.c, geo.groups, geo.small, geo.big, geo.kernel, geo.strides, geo.dilations,
                    begin)


class FlippedWeights:
    """The weights of :func:`as_forward`'s convolution, W'[g][c, oc, taps] =
    W[g][oc, c, K - 1 - taps], over a :class:`Weights` view (always packed)."""

    def __init__(self, w: Weights, geo: Geometry):
        self.w, self.kernel = w, geo.kernel
        self.ref = w.ref

    def load(self, g, oc, ic, taps):
        return self.w.load(g, ic, oc, [k - 1 - t for k, t in zip(self.kernel, taps)])

    def matrix_strides(self, geo, channel_major=False):
        """A 1x1 window's: the weights' own matrix transposed (rows its output
        channels, columns its input channels); else None (the taps flip)."""
        if any(k != 1 for k in self.kernel):
            return None
        ms = self.w.matrix_strides(geo, channel_major)
        return None if ms is None else (ms[1], ms[0], ms[2])


def emit_convolution(kb, geo: Geometry, x: Data, w, store, rounding=None, out: Data | None = None,
                     exact_k: int | None = None, dst: Data | None = None, int8: Int8Operands | None = None):
    """dst = conv(x, w) by the fastest road for its geometry: Winograd, the
    shifted GEMMs (other unit-stride windows), channels first (graphc.codegen.conv_cf:
    NCX src or ``dst``, the dst view, given by the forward convolution's rule), or
    im2col (``out``: see emit_forward).
    Integer operands (``exact_k``, see emit_gemm) take no Winograd (its transforms
    are fractions), and im2col when the sum must be split into exact runs;
    ``int8``: ``x`` and ``w`` are quantized values multiplied on the int8 tile
    (graphc.codegen.conv_int8).
    Only the dst positions whose window meets src are computed (visible_box):
    the others are sums of no products, stored as 0 through ``store``."""
    box = visible_box(geo)
    if box is not None:
        kb.road("cropped")
        store_zeros_outside(kb, geo, box, store, x.nxc)
        if any(lo == hi for lo, hi in box):
            return
        lo = [a for a, _ in box]
        geo, store, out = cropped(geo, box), moved_store(store, lo), out.moved(lo) if out is not None else None
    if int8 is not None:
        kb.road("int8_gemm")
        emit_forward_int8(kb, geo, x, w, store, int8)
    elif exact_k is not None:
        if shifted(geo) and geo.kd <= exact_k:
            kb.road("shifted_gemm")
            emit_forward_shifted(kb, geo, x, w, store, rounding)
        else:
            kb.road("im2col")
            emit_forward(kb, geo, x, w, store, rounding, out, exact_k)
    elif depthwise(geo, x, dst) and x.ref.dtype is not DataType.bf16:
        emit_depthwise(kb, geo, x, w, store, rounding)
    elif shifted(geo) and bf16_operands(x, w, rounding) and (x.nxc or not winograd(geo) or taps_in_tile(geo)):
        # (NCX: f32 Winograd, channels first, beat the virtual rows gathered from src's planes
        # (1.29 against 1.37 ms of CPU on one core for 2x64x56x56) until the tile summed every
        # tap in its registers and src's planes moved by transposed blocks: 8x64x56x56 5.3 -> 1.6 ms)
        kb.road("bf16_shifted_gemm")
        emit_forward_shifted(kb, geo, x, w, store, rounding, bf16=True)
    elif not shifted(geo) and bf16_channels_first(geo, x, w, rounding, dst):
        emit_forward_cf(kb, geo, x, store, lambda: bf16_rows(kb, geo, w, rounding), rounding, out)
    elif winograd(geo):
        kb.road("winograd")
        emit_forward_winograd(kb, geo, x, w, store, rounding)
    elif shifted(geo) and not (geo.taps < SHIFTED_MIN_TAPS and dst is not None and channels_first(geo, x, dst)
                               and x.ref.dtype is not DataType.bf16):
        kb.road("shifted_gemm")
        emit_forward_shifted(kb, geo, x, w, store, rounding)
    elif dst is not None and channels_first(geo, x, dst) and x.ref.dtype is not DataType.bf16:
        # (f32 under fpmath bf16 too: its rounded values' products are exact in f32, summed in
        # f32 as on the tile; NCX's positions-major gather cost the tile road 2x on 50x64x56x56)
        cm = channel_major(geo, w, rounding)
        emit_forward_cf(kb, geo, x, store, lambda: F32Rows(weights_operand(kb, geo, w, True, rounding, True, cm), cm),
                        rounding, out)
    else:
        kb.road("im2col")
        emit_forward(kb, geo, x, w, store, rounding, out)


def emit_backward_data(kb, geo: Geometry, dy: Data, w: Weights, store, rounding=None, exact_k: int | None = None):
    """dx = the gradient of conv(x, w) w.r.t. x given dy; ``store(n, c, spatial
    ivars, value)`` stores one element of dx.  At unit strides it is the forward
    convolution of dy with the flipped, transposed weights (as_forward), run by
    the forward roads when one other than im2col applies; otherwise col2im of
    dY @ W^T, images and groups in parallel, each with its f32 accumulator.
    Only the dy positions whose window meets dx are read (visible_box)."""
    geo, dy = _visible_dy(kb, geo, dy)
    fwd = as_forward(geo)
    if fwd is not None and (exact_k is not None or winograd(fwd) or shifted(fwd)
                            or bf16_channels_first(fwd, dy, w, rounding, None)):
        emit_convolution(kb, fwd, dy, FlippedWeights(w, geo), store, rounding, exact_k=exact_k)
        return
    if exact_k is None and bf16_data_channels_first(geo, dy, w, rounding):
        emit_backward_data_cf(kb, geo, dy, w, store, rounding)
        return
    kb.road("col2im")
    G, P, kd, ocg, cg = geo.groups, geo.positions, geo.kd, geo.ocg, geo.cg
    # integer operands (exact_k): each column value a sum of ocg products, taken
    # in exact runs; the columns added up in an f64 accumulator
    run = None if exact_k is None or ocg <= exact_k else -(-ocg // -(-ocg // exact_k))
    acc_dt = "f32" if exact_k is None else "f64"
    bf16 = exact_k is None and bf16_operands(dy, w, rounding)
    work = geo.n * P * geo.oc * kd // 8
    # fewer images x groups than threads (f32): the channels split in blocks too,
    # each block's columns a GEMM of its own and its dx rows its own accumulator
    blocks = _channel_blocks(cg, geo.n * G, work) if exact_k is None and not bf16 else 1
    cb = cg // blocks
    width = geo.taps * cb                           # one block's columns
    # IOX-like f32 weights read in place as W^T (OCg x Cg*T): columns channel-major,
    # taps inner (no packing: the deconv's 32x128x3x3 took 5-8 us of its serial part)
    in_place = w.channel_major(geo) if run is None and not bf16 and _plain(w.ref) and rounding is None else None
    if blocks > 1:
        kb.road("channel_blocks")
    if bf16:
        kb.road("bf16_gemm")
        wb = bf16_weights(kb, geo, w, rounding, ocg, transposed=True)
    elif in_place is not None:
        (ldw, gs), wbuf, tw = in_place, w.ref.buf, 0

        def woff(g):
            return g * gs
    elif blocks > 1:
        wbuf, ldw, tw = _pack_weights(kb, geo, w, True, rounding, cb), kd, 0

        def woff(g):
            return g * (kd * ocg)
    else:
        wbuf, woff, ldw, tw = weights_operand(kb, geo, w, True, rounding, either=run is None)
    # a channel's step and a tap's step in a row of columns
    c_step, t_step = (geo.taps, 1) if in_place is not None else (1, cb)
    tm = max(1, min(P, max(MIN_ROWS, PANEL_ELEMS // max(1, width))))
    mt = -(-P // tm)
    items = geo.n * G * blocks
    big = geo.big_size
    par = items > 1 and worth_parallel(work)
    with kb.for_(items, "t", par) as t:
        n = kb.let(t // (G * blocks), "n")
        g = kb.let((t // blocks) % G, "g")
        blk = kb.let(t % blocks, "blk")
        acc = kb.alloc(big * cb, acc_dt, fill=0, prefix="acc")
        cols = kb.scratch(tm * width, acc_dt if run else "f32", par, prefix="cols")
        with kb.for_(mt, "pt") as pt:
            p0 = kb.let(pt * tm, "p0")
            m = kb.let(ir.call("min", tm, P - p0), "m")
            abuf, aoff, lda = _dy_operand(kb, geo, dy, n, g, p0, m, tm, rounding, par, bf16)
            if bf16:
                kb.let(wb.product(m, kd, ocg, abuf, aoff, lda, g, 0, 0.0, cols.buf, cols.at(0), kd), "st")
            elif run is not None:
                assert tw == 0 and ldw == kd, "integer weights are packed"
                exact_runs(kb, lambda bv, r, c, value: cols.store(r * kd + c, value), None, ir.const(0),
                           ir.const(0), m, kd, ocg, run, tm * kd, par, (abuf, aoff, lda), (wbuf, woff(g), ldw))
            else:
                kb.let(ir.call("gemm_f32", 0, tw, m, width, ocg, abuf, aoff, lda, wbuf, woff(g) + blk * width, ldw,
                               0.0, cols.buf, cols.at(0), width), "st")
            with _window_taps(kb, geo, p0, m, cb, t_step) as (pos, inside, at):
                base = kb.let(linear(pos, dense_strides(geo.big)) * cb, "ab")
                with kb.if_(inside):
                    with kb.for_(cb, "ci") as ci:
                        col = cols[at + ci * c_step if c_step != 1 else at + ci]
                        kb.store(acc, base + ci, acc[base + ci] + (ir.f64(col) if exact_k else col))
        _store_accumulator(kb, geo, store, acc, n, g * cg + blk * cb, cb)


#: dx channels one pass of the accumulator's store writes: a cache line of each
#: channels-first row (all 128 channels of a 16x16 NCX dx per position: 1 KB
#: strides, a store per cache set's conflict: 70 against 7 us)
STORE_CHANNELS = 16


def _store_accumulator(kb, geo: Geometry, store, acc, n, c0, cb):
    """dx channels c0.. (``cb`` of them) of image n from the (positions x cb)
    accumulator, STORE_CHANNELS channels at a time across the positions."""
    sc = min(cb, STORE_CHANNELS)
    with kb.for_(-(-cb // sc), "cs") as cs:
        c1 = kb.let(cs * sc, "c1")
        with kb.for_(geo.big_size, "b") as b:
            pos = unravel(kb, b, geo.big)
            row = kb.let(b * cb, "ar")
            with kb.for_(ir.call("min", sc, cb - c1), "ci") as ci:
                c = kb.let(c1 + ci, "ci")
                kb.emit(store(n, c0 + c, pos, acc[row + c]))


def _channel_blocks(cg: int, items: int, work: int) -> int:
    """Blocks of dx channels the col2im road splits each (image, group) into:
    enough for the threads (a divisor of cg, blocks of 16 channels at least),
    1 when the images and groups suffice or the work is small."""
    want = -(-plan_threads() // items)
    if want <= 1 or not worth_parallel(work):
        return 1
    return next((b for b in range(want, cg // 16 + 1) if cg % b == 0), 1)


def _visible_dy(kb, geo: Geometry, dy: Data):
    """``geo`` and ``dy`` over the dy positions whose window meets the big side
    (visible_box; an empty box keeps one position, whose columns are zeros)."""
    box = visible_box(geo)
    if box is None:
        return geo, dy
    kb.road("cropped")
    box = [(lo, hi) if hi > lo else (min(lo, o - 1), min(lo, o - 1) + 1) for (lo, hi), o in zip(box, geo.small)]
    return cropped(geo, box), dy.moved([lo for lo, _ in box])


def emit_backward_weights(kb, geo: Geometry, x: Data, dy: Data, store, rounding=None):
    """dw = the gradient of conv(x, w) w.r.t. w: per-thread f32 partial sums of
    Cols^T @ dY over (image, group, tile) work items, added up at the end;
    ``store(g, oc, ic, taps, value)`` stores one element of dw.  3x3 windows at
    unit strides take Winograd (graphc.codegen.winograd).  Only the dy positions
    whose window meets x are read (visible_box: the others' columns are zeros)."""
    geo, dy = _visible_dy(kb, geo, dy)
    if few_positions(geo, x, dy, rounding):
        emit_backward_weights_cf(kb, geo, x, dy, store, rounding)
        return
    if tile_weights(geo, x, dy, rounding):
        kb.road("bf16_tile_weights")
        emit_backward_weights_tile(kb, geo, x, dy, store, rounding)
        return
    if winograd(geo):
        kb.road("winograd_weights")
        emit_backward_weights_winograd(kb, geo, x, dy, store, rounding)
        return
    kb.road("im2col_weights")
    G, P, kd, ocg, cg = geo.groups, geo.positions, geo.kd, geo.ocg, geo.cg
    tm = max(1, min(P, max(MIN_ROWS, PANEL_ELEMS // max(1, kd))))
    mt = -(-P // tm)
    items = geo.n * G * mt
    chunks = max(1, min(items, plan_threads())) if worth_parallel(geo.n * P * geo.oc * kd // 8) else 1
    if chunks > 1:
        kb.road("dw_partial_sums")
    size = G * kd * ocg
    # one group: a chunk's first product overwrites its partial sums (beta 0), no zeros
    # written first (a pass over OC x T*C floats per chunk: 9.4 MB for 512x512x3x3)
    overwrite = G == 1
    part = kb.alloc(chunks * size, "f32", fill=None if overwrite else 0, prefix="part")
    with kb.for_(chunks, "ch", chunks > 1) as ch:
        with kb.for_((items - ch + (chunks - 1)) // chunks, "k") as k:
            t = kb.let(ch + k * chunks, "t")
            n, g, p0, m = _item(kb, t, geo, mt, tm, P)
            cols = _im2col(kb, geo, x, n, g, p0, m, rounding, tm, chunks > 1)
            at = ch * size + g * (kd * ocg)
            beta = ir.select(k.eq(0), 0.0, 1.0) if overwrite else 1.0
            rows = _channel_rows(geo, dy, n, g, p0) if rounding is None else None
            if rows is not None:   # dY^T read in place: channels-first rows
                kb.let(ir.call("gemm_f32", 0, 0, ocg, kd, m, *rows, cols.buf, cols.at(0), kd, beta, part, at, kd),
                       "st")
            else:
                bbuf, boff, ldb = _dy_operand(kb, geo, dy, n, g, p0, m, tm, rounding, chunks > 1)
                kb.let(ir.call("gemm_f32", 1, 0, ocg, kd, m, bbuf, boff, ldb, cols.buf, cols.at(0), kd, beta, part,
                               at, kd), "st")
    # (the partial sums are (OCg x T*Cg) rows: read in order, as OIX weights are written)
    with kb.for_(G * ocg, "go", worth_parallel(size * chunks)) as go:
        g = kb.let(go // ocg, "g")
        oc = kb.let(go % ocg, "oc")
        with _tap_loops(kb, geo.kernel) as (taps, flat):
            with kb.for_(cg, "ic") as ic:
                at = kb.let(go * kd + flat * cg + ic, "pa")
                total = part[at]
                for c in range(1, chunks):
                    total = total + part[at + c * size]
                kb.emit(store(g, oc, ic, taps, total))
