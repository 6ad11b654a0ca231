"""The forward convolution of channels-first data (NCX) whose window takes no
Winograd and no shifted GEMMs (1x1 windows, strided windows): per group,

    Y[OCg, columns] = W[OCg, T*Cg] @ Cols[T*Cg, columns]

where a column is a dst position of an image: the GEMM's output rows are dst's
channels and its columns run along dst's positions, as NCX lays them out.  The
positions-major im2col (graphc.codegen.conv.emit_forward) gathered one src
value per cache line (NCX's channel stride) and its tile's stores scattered
one per cache line too; here the columns' copy reads src rows in order (a 1x1
window's too: BLAS reading src in place, with the channel stride as leading
dimension, was pathological at 2 threads under load), and the tile's epilogue (bias,
post-ops, the sum's other input) reads and writes along dst's rows.

A work item holds a block of images, of rows of dst's outer spatial dims and of
its last dim (never more than one of the three partly): large images are cut
in row blocks, small ones (a strided 1x1 window's 7x7) are taken several images
at a time, so that each GEMM has enough columns for BLAS's packing of the
weights to pay (50x1024x14x14 -> 2048 at stride 2: 49 columns per call packed
8 MB of weights per image).

Depthwise convolutions (one src channel per group) of such data take a direct
loop instead (emit_depthwise): their GEMMs had one row.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np

from . import ir
from .blas_import import bf16_tile_gemm
from .conv_bf16 import RowWeights, bf16_operands, bf16_weight_rows, bits
from .conv_cols import BF16, F32, Cells, nothing
from .conv_views import Data, Geometry, Weights
from .conv_views import plain_f32, rounded, tap_loops
from .kernel import plan_threads, worth_parallel
from .loops import unravel, window_index
from ..types import DataType, dense_strides

#: f32 elements of one work item's columns and tile together: about L2's size
ITEM_ELEMS = 1 << 18
#: columns of one GEMM at least (images or rows joined to reach them)
MIN_COLS = 256


def channels_first(geo: Geometry, x: Data, dst: Data | None = None) -> bool:
    """Whether src ``x``'s channels lie outside its positions (NCX strides), or
    dst's do (an NCX dst of channels-last src: the positions-major tile's stores
    would scatter each dst row): the channels-first road then reads or writes
    along their rows."""
    return geo.cg * geo.taps > 1 and (_outer(x, geo.big) or (dst is not None and _outer(dst, geo.small)))


def _outer(d: Data, sizes) -> bool:
    """``d``'s channels lie outside its positions (of ``sizes``)."""
    _, cs, sp = d.strides()
    inner = [s for s, n in zip(sp, sizes) if n != 1]
    return bool(inner) and 0 < min(inner) < cs


#: output channels of a group the bf16 channels-first road needs at least (its GEMM's rows:
#: the tile makes 32 at a time), and input channels (a window's taps over 3 channels, the
#: 7x7 stem at stride 2: 2x3x224x224 -> 64, 2.57 ms against im2col's 1.89)
BF16_MIN_OC, BF16_MIN_C = 16, 16


def _bf16_on_tile(geo: Geometry, d: Data, w, rounding) -> bool:
    """bf16 tensors (``d`` and the weights) on graphc's bf16 tile, BF16_MIN_OC output
    and BF16_MIN_C input channels a group at least."""
    return (getattr(d.ref, "dtype", None) is DataType.bf16 and geo.ocg >= BF16_MIN_OC and geo.cg >= BF16_MIN_C
            and bf16_tile_gemm() and bf16_operands(d, w, rounding))


def bf16_channels_first(geo: Geometry, x: Data, w, rounding, dst: Data | None) -> bool:
    """Does a bf16 convolution of channels-first data (``channels_first``) whose
    window takes no shifted GEMMs (1x1, strided) run here on graphc's bf16 tile
    (weights as its A, columns as its B; :func:`_bf16_on_tile`), rather than
    im2col's positions-major gather of one value a cache line?"""
    return _bf16_on_tile(geo, x, w, rounding) and channels_first(geo, x, dst)


def _blocks(geo: Geometry):
    """(images, rows, last-dim positions) of a work item."""
    W = geo.small[-1]
    R = geo.positions // W
    P = geo.positions
    want = max(MIN_COLS, ITEM_ELEMS // (geo.kd + geo.ocg))
    if P >= want:
        nb, nr, mw = 1, (max(1, want // W) if W < want else 1), (W if W < want else want)
    else:
        nb, nr, mw = max(1, min(geo.n, want // P)), R, W

    def items(nb, nr, mw):
        return geo.groups * -(-geo.n // nb) * -(-R // nr) * -(-W // mw)
    need = 2 * plan_threads()
    while items(nb, nr, mw) < need:
        if nb > 1:
            nb = -(-nb // 2)
        elif nr > 1:
            nr = -(-nr // 2)
        elif mw > 64:
            mw = -(-mw // 2)
        else:
            break
    return nb, nr, mw, items(nb, nr, mw)


def _padded_dims(geo: Geometry) -> list[bool]:
    """Per spatial dim, whether a tap may meet the padding (a check is needed)."""
    return [b > 0 or (o - 1) * s + (k - 1) * d - b >= size
            for o, s, k, d, b, size in zip(geo.small, geo.strides, geo.kernel, geo.dilations, geo.begin, geo.big)]


def _in_place(geo: Geometry, d: Data, sizes, nb: int):
    """(channel stride, image stride) when ``d``'s (channels x positions) matrix of
    one image is a plain f32 matrix with unit position stride (and one image per
    item), else None."""
    if nb != 1 or not plain_f32(d.ref):
        return None
    ns, cs, _ = d.strides()
    return (cs, ns) if d.rows(sizes) == 1 and cs >= math.prod(sizes) else None


class F32Rows:
    """The weights as the f32 GEMM's A (conv.weights_operand's buffer, group
    offset function, ld and transpose flag), columns f32 values; K channel
    after channel when ``channel_major`` (OIX weights read in place), else
    taps first."""
    cells = F32

    def __init__(self, operand, channel_major: bool):
        self.operand, self.channel_major = operand, channel_major

    def product(self, kb, geo: Geometry, g, cols, panel, c, par):
        wbuf, woff, ldw, tw = self.operand
        kb.let(ir.call("gemm_f32", tw, 0, geo.ocg, cols, geo.kd, wbuf, woff(g), ldw, panel.buf, panel.at(0), cols,
                       0.0, *c), "st")


class BF16Rows:
    """The weights packed as the A of graphc's bf16 tile (conv_bf16.RowWeights),
    columns bf16 bits in the weights' order of k; each work item packs its
    columns as the tile's B (pack_b_bf16's panels, in L2) before the product."""
    cells = BF16

    def __init__(self, rows: RowWeights, cols_max: int):
        self.rows, self.cols_max = rows, cols_max
        self.channel_major = rows.channel_major

    def product(self, kb, geo: Geometry, g, cols, panel, c, par):
        from .bf16_gemm import bf16_panels
        bp = kb.scratch(bf16_panels(self.cols_max, geo.kd), "u16", par, prefix="cpanels")
        kb.let(ir.call("pack_panels_bf16", 0, cols, geo.kd, panel.buf, panel.at(0), cols, bp.buf, bp.at(0)), "st")
        kb.let(self.rows.product(g, cols, bp.buf, bp.at(0), (cols + 31) // 32, *c), "st")


def bf16_rows(kb, geo: Geometry, w, rounding) -> BF16Rows:
    """The bf16 weights of the channels-first road (packed once per call)."""
    kb.road("bf16_gemm")
    nb, nr, mw, _ = _blocks(geo)
    return BF16Rows(bf16_weight_rows(kb, geo, w, rounding), nb * nr * mw)


def emit_forward_cf(kb, geo: Geometry, x: Data, store, weights, rounding=None, out: Data | None = None):
    """dst = conv(x, w) with the channels first (see the module's text);
    ``store(n, o, spatial ivars, value)`` as in conv.emit_forward, ``out`` dst
    when the store only stores (the GEMM then writes it in place when it can);
    ``weights()``: the (OCg x T*Cg) weights as the GEMM's A (:class:`F32Rows`,
    :class:`BF16Rows`), made before the work items' loop."""
    kb.road("channels_first")
    W = geo.small[-1]
    R = geo.positions // W
    nb, nr, mw, items = _blocks(geo)
    cols_max = nb * nr * mw
    nbk, rbk, wbk = -(-geo.n // nb), -(-R // nr), -(-W // mw)
    wop = weights()
    dst_in = _in_place(geo, out, geo.small, nb) if out is not None else None
    par = items > 1 and worth_parallel(geo.n * geo.positions * geo.oc * geo.kd // 8)
    with kb.for_(items, "t", par) as t:
        iw = kb.let(t % wbk, "iw")
        ir_ = kb.let((t // wbk) % rbk, "ir")
        ib = kb.let((t // (wbk * rbk)) % nbk, "ib")
        g = kb.let(t // (wbk * rbk * nbk), "g")
        n0, r0, w0 = kb.let(ib * nb, "n0"), kb.let(ir_ * nr, "r0"), kb.let(iw * mw, "w0")
        cn = kb.let(ir.call("min", nb, geo.n - n0), "cn")
        cr = kb.let(ir.call("min", nr, R - r0), "cr")
        # (the last dim's count hidden from LLVM (fastmath.hidden_int): knowing it at most 56,
        # LLVM unrolled the row loop and vectorised across rows, a bias-only store as AVX-512
        # gathers and scatters: 50x64x56x56 with bias 26 -> 7 ms on one core)
        cw = kb.let(ir.call("hidden_int", ir.call("min", mw, W - w0), dt="int"), "cw")
        cols = kb.let(cn * cr * cw, "nc")
        p0 = kb.let(r0 * W + w0, "pp")
        # (src always copied: read in place as BLAS's B, leading dimension the channel stride,
        # 50x64x56x56 took 2.07 s a call at 2 threads under load with libgomp's default wait
        # policy (45 ms before this road, 25 ms with the copy; 16 ms under OMP_WAIT_POLICY=PASSIVE))
        panel = kb.scratch(geo.kd * cols_max, wop.cells.elem, par, prefix="cols")
        pack_columns(kb, geo, x, panel, g, (n0, cn), (r0, cr), (w0, cw), cols, rounding, wop.cells, wop.channel_major)
        if dst_in is not None:
            cs, ns = dst_in
            wop.product(kb, geo, g, cols, panel, (out.ref.buf, n0 * ns + g * geo.ocg * cs + p0 + out.base(), cs), par)
        else:
            tile = kb.scratch(geo.ocg * cols_max, "f32", par, prefix="tile")
            wop.product(kb, geo, g, cols, panel, (tile.buf, tile.at(0), cols), par)
            with kb.for_(geo.ocg, "oc") as oc:
                c = kb.let(g * geo.ocg + oc, "c")
                row = kb.let(oc * cols, "ro")
                with _columns(kb, geo, (n0, cn), (r0, cr), (w0, cw)) as (n, pos, col):
                    kb.emit(store(n, c, pos, tile[row + col]))


@contextmanager
def _columns(kb, geo, images, rows, lasts):
    """Loops over a work item's columns: yields (image, dst spatial indices,
    column index); the innermost loop runs over dst's last spatial index."""
    (n0, cn), (r0, cr), (w0, cw) = images, rows, lasts
    with kb.for_(cn, "im") as i:
        n = kb.let(n0 + i, "n")
        with kb.for_(cr, "rr") as rr:
            outer = [v if v is not None else ir.const(0) for v in unravel(kb, r0 + rr, geo.small[:-1])]
            base = kb.let((i * cr + rr) * cw - w0, "cb")
            with kb.for_(w0 + cw, "ow", start=w0) as ow:
                yield n, outer + [ow], base + ow


def pack_columns(kb, geo: Geometry, x: Data, panel, g, images, rows, lasts, cols, rounding, cells: Cells,
                 channel_major: bool):
    """The work item's (T*Cg x cols) matrix of ``cells``: row (tap, ci)
    (``channel_major``: row (ci, tap)) holds, column by column, the src value of channel g * Cg + ci
    the tap meets from the column's dst position (0 in the padding); rows read
    src along its positions."""
    padded = _padded_dims(geo)
    (n0, cn), (r0, cr), (w0, cw) = images, rows, lasts
    with kb.for_(cn, "im") as i:
        with kb.for_(cr, "rr") as rr:
            outer = unravel(kb, r0 + rr, geo.small[:-1])
            base = kb.let((i * cr + rr) * cw, "cb")
            n = kb.let(n0 + i, "n")
            with tap_loops(kb, geo.kernel) as (taps, flat):
                pos, inside = [], None
                for o, t, s, d, b, size, pad in zip(outer, taps, geo.strides, geo.dilations, geo.begin, geo.big,
                                                     padded):
                    p = kb.let((o if o is not None else ir.const(0)) * s + t * d - b, "ip")
                    pos.append(p)
                    if pad:
                        c = (p >= 0) & (p < size)
                        inside = c if inside is None else inside & c
                with kb.for_(geo.cg, "ci") as ci:
                    k = ci * geo.taps + flat if channel_major else flat * geo.cg + ci
                    row = kb.let(k * cols + base, "cr")
                    with kb.for_(cw, "ww") as ww:
                        last = kb.let((w0 + ww) * geo.strides[-1] + taps[-1] * geo.dilations[-1] - geo.begin[-1],
                                      "ip")
                        ok = inside
                        if padded[-1]:
                            c = (last >= 0) & (last < geo.big[-1])
                            ok = c if ok is None else ok & c
                        value = cells.convert(rounded(x.load(n, g * geo.cg + ci, pos + [last]), rounding))
                        if ok is None:
                            kb.emit(panel.store(row + ww, value))
                        else:
                            with kb.if_(ok) as st:
                                kb.emit(panel.store(row + ww, value))
                                with kb.else_(st):
                                    kb.emit(panel.store(row + ww, cells.pad))


def bf16_data_channels_first(geo: Geometry, dy: Data, w, rounding) -> bool:
    """Does the data gradient of a bf16 convolution of channels-first dy run
    here (:func:`emit_backward_data_cf`; :func:`_bf16_on_tile`)?"""
    return _bf16_on_tile(geo, dy, w, rounding) and _outer(dy, geo.small)


#: f32 elements of a block of the data gradient's columns (T*Cg x a block of dy's rows)
DATA_COLS_ELEMS = 1 << 18


def emit_backward_data_cf(kb, geo: Geometry, dy: Data, w, store, rounding=None):
    """dx = the data gradient of conv(x, w) (any strides) channels first on
    graphc's bf16 tile: per image and group, ``Cols[T*Cg, P] = W^T @ dY[OCg, P]``
    (the weights packed once a call as the tile's A, dY's rows copied as bits
    and packed as its B a block of its rows at a time), each block's columns
    added into an f32 accumulator of dx's rows (row (ci, tap) into channel ci
    at the positions the tap meets, along dy's rows), stored at the end.  The
    positions-major col2im gathered dY and scattered dx one value a cache line."""
    from .bf16_gemm import bf16_panels
    kb.road("channels_first")
    kb.road("bf16_gemm")
    G, cg, ocg, kd = geo.groups, geo.cg, geo.ocg, geo.kd
    W = geo.small[-1]
    R = geo.positions // W
    wt = bf16_weight_rows(kb, geo, w, rounding, transposed=True)
    work = geo.n * geo.positions * geo.oc * kd // 8
    cb = _data_channel_block(geo, wt.channel_major, work)
    nblk = -(-cg // cb)
    nr = max(1, min(R, DATA_COLS_ELEMS // (cb * geo.taps * W)))
    cols_max = nr * W
    big = geo.big_size
    items = geo.n * G * nblk
    par = items > 1 and worth_parallel(work)
    with kb.for_(items, "t", par) as t:
        n = kb.let(t // (G * nblk), "n")
        g = kb.let((t // nblk) % G, "g")
        c0 = kb.let(t % nblk * cb, "c0")
        cn = kb.let(ir.call("min", cb, cg - c0), "cn")
        acc = kb.alloc(cb * big, "f32", fill=0, prefix="acc")
        rows = kb.scratch(ocg * cols_max, "u16", par, prefix="dyrows")
        bp = kb.scratch(bf16_panels(cols_max, ocg), "u16", par, prefix="dypanels")
        tile = kb.scratch(cb * geo.taps * cols_max, "f32", par, prefix="cols")
        with kb.for_(-(-R // nr), "rb") as rb:
            r0 = kb.let(rb * nr, "r0")
            cr = kb.let(ir.call("min", nr, R - r0), "cr")
            cols = kb.let(cr * W, "nc")
            with kb.for_(ocg, "oc") as oc, kb.for_(cols, "p") as p:
                pos = [v if v is not None else ir.const(0) for v in unravel(kb, r0 * W + p, geo.small)]
                kb.emit(rows.store(oc * cols + p, bits(rounded(dy.load(n, g * ocg + oc, pos), rounding))))
            kb.let(ir.call("pack_panels_bf16", 0, cols, ocg, rows.buf, rows.at(0), cols, bp.buf, bp.at(0)), "st")
            mine = None if nblk == 1 else (cn * geo.taps, c0 * geo.taps)
            kb.let(wt.product(g, cols, bp.buf, bp.at(0), (cols + 31) // 32, tile.buf, tile.at(0), cols, mine), "st")
            _add_columns(kb, geo, acc, tile, (r0, cr), cols, wt.channel_major, cn)
        with kb.for_(cn, "ci") as ci, kb.for_(big, "b") as b:
            kb.emit(store(n, g * cg + c0 + ci, unravel(kb, b, geo.big), acc[ci * big + b]))


def _data_channel_block(geo: Geometry, channel_major: bool, work: int) -> int:
    """dx channels of a work item of the channels-first data gradient: all of a
    group's, unless the images and groups are fewer than the threads and the
    weights' rows run channel after channel (a block's rows of W^T then lie
    together, whole tiles of rows from the first): blocks enough for the threads."""
    from .bf16_gemm import MR
    items = geo.n * geo.groups
    if not channel_major or items >= plan_threads() or not worth_parallel(work):
        return geo.cg
    step = MR // math.gcd(MR, geo.taps)          # channels whose rows are whole tiles of rows
    want = -(-geo.cg // -(-plan_threads() // items))
    return min(geo.cg, -(-want // step) * step)


def _add_columns(kb, geo: Geometry, acc, tile, rows, cols, channel_major: bool, channels):
    """Add a block of the data gradient's columns (rows (ci, tap), or (tap, ci)
    unless ``channel_major``; a column per dy position of dy's rows [r0, r0 +
    cr)) of ``channels`` dx channels into their (channels x src positions)
    accumulator, along dy's rows."""
    r0, cr = rows
    W, big = geo.small[-1], geo.big_size
    padded = _padded_dims(geo)
    bs = dense_strides(geo.big)
    with kb.for_(channels, "ci") as ci, tap_loops(kb, geo.kernel) as (taps, flat):
        k = ci * geo.taps + flat if channel_major else flat * geo.cg + ci
        with kb.for_(cr, "rr") as rr:
            outer = unravel(kb, r0 + rr, geo.small[:-1])
            at, inside = ci * big, None
            for o, tp, s, d, b, size, st, pad in zip(outer, taps, geo.strides, geo.dilations, geo.begin, geo.big,
                                                      bs, padded):
                ip = kb.let((o if o is not None else ir.const(0)) * s + tp * d - b, "ip")
                at = at + ip * st
                if pad:
                    c = (ip >= 0) & (ip < size)
                    inside = c if inside is None else inside & c
            row = kb.let(k * cols + rr * W, "cr")
            base = kb.let(at, "ab")
            with (kb.if_(inside) if inside is not None else nothing()):
                with kb.for_(W, "ow") as ow:
                    last = kb.let(ow * geo.strides[-1] + taps[-1] * geo.dilations[-1] - geo.begin[-1], "ip")
                    ok = (last >= 0) & (last < geo.big[-1]) if padded[-1] else None
                    with (kb.if_(ok) if ok is not None else nothing()):
                        kb.store(acc, base + last, acc[base + last] + tile[row + ow])


#: taps of a depthwise window the direct loop takes at most (each an unrolled term)
DIRECT_TAPS = 64


def depthwise(geo: Geometry, x: Data, dst: Data | None) -> bool:
    """One src channel per group (a depthwise convolution) of a small window, its
    data channels first: the direct loop (emit_depthwise) instead of one GEMM of
    one row per group and block."""
    return geo.cg == 1 and geo.taps <= DIRECT_TAPS and dst is not None and channels_first(geo, x, dst)


def emit_depthwise(kb, geo: Geometry, x: Data, w: Weights, store, rounding=None):
    """dst = conv(x, w) for one src channel per group: per (image, group, block
    of rows of dst's outer dims) in parallel, each dst row a loop over its last
    index (vectorised: the taps' loads clamped into src and zeroed outside it,
    no branch) of the window's taps' products, summed in f32 in tap order, the
    weights loaded once per item.  A GEMM per group had one row (M = OCg = 1)
    and K = the taps: 2x64x112x112 3x3 at stride 2 took 0.8 ms."""
    kb.road("depthwise_direct")
    G, ocg = geo.groups, geo.ocg
    W = geo.small[-1]
    R = geo.positions // W
    rb = max(1, min(R, -(-(1 << 14) // W)))          # rows of about 16k outputs per item
    while rb > 1 and geo.n * G * -(-R // rb) < 2 * plan_threads():
        rb = -(-rb // 2)
    nrb = -(-R // rb)
    items = geo.n * G * nrb
    par = items > 1 and worth_parallel(geo.n * geo.positions * geo.oc * geo.taps // 8)
    taps = list(np.ndindex(*geo.kernel))
    with kb.for_(items, "t", par) as t:
        n = kb.let(t // (G * nrb), "n")
        g = kb.let((t // nrb) % G, "g")
        r0 = kb.let((t % nrb) * rb, "r0")
        cr = kb.let(ir.call("min", rb, R - r0), "cr")
        with kb.for_(ocg, "oc") as oc:
            c = kb.let(g * ocg + oc, "c")
            wv = [kb.let(ir.f32(rounded(w.load(g, oc, ir.const(0), [ir.const(k) for k in tap]), rounding)), "wt")
                  for tap in taps]
            with kb.for_(cr, "rr") as rr:
                outer = [v if v is not None else ir.const(0) for v in unravel(kb, r0 + rr, geo.small[:-1])]
                with kb.for_(ir.call("hidden_int", W, dt="int"), "ow") as ow:
                    acc = None
                    for tap, wt in zip(taps, wv):
                        term = ir.f32(rounded(_clamped_load(kb, geo, x, n, g, outer + [ow], tap), rounding)) * wt
                        acc = term if acc is None else acc + term
                    kb.emit(store(n, c, outer + [ow], acc))


def _clamped_load(kb, geo: Geometry, x: Data, n, g, opos, tap):
    """src of group g's channel met by ``tap`` from dst position ``opos``, 0 in the
    padding: loaded at the index clamped into src (always a valid load) and
    selected, so that the row loop has no branch."""
    pos, inside = [], None
    for args in zip(opos, tap, geo.strides, geo.dilations, geo.begin, geo.big, geo.small):
        p, ok = window_index(*args)
        pos.append(p)
        if ok is not None:
            inside = ok if inside is None else inside & ok
    if inside is None:
        return x.load(n, g, pos)
    # (loaded first, then selected: a load inside the select's arm stays a branch)
    return ir.select(inside, kb.let(ir.f32(x.load(n, g, pos)), "xv"), ir.const(0.0, "f32"))
