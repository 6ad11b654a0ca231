"""bf16 weight gradients on AMX's tile (graphc.codegen.bf16_gemm.bf16_weight_taps).

At unit strides, the gradient of a tap's weights is one GEMM over every dst
position: ``dW_t[Cg, OCg] = X_t[Cg, P] @ dY[P, OCg]``, X_t the src values tap t
meets.  Over the virtual rows of graphc.codegen.conv_cols.VirtualLayout
(``every_tap``: src padded on every side, one position a row, a tap a row
offset), X_t is the transposed copy of src read from the tap's offset: each
work item (an image, a group, a block of KB virtual rows) copies src's rows
transposed (channels x positions, its taps' halo included) and dY's rows
(zeros where a virtual row is no dst position) packed for the tile once, and
then every tap's product is a tile reading the same packed dY and the copy of
src from the tap's offset; the sums stay float32 in a partial sum per thread,
added up and stored (rounded as dW holds them) at the end.  The bf16 values
are multiplied as they are (no f32 Winograd transforms of them).

A virtual row that is no dst position contributes zero products, from src
values that are real ones: a NaN or an infinity in src can so reach a tap
whose window never meets it in the definition (as Winograd's transforms
spread such values too)."""
from __future__ import annotations

import math
from contextlib import contextmanager

from . import ir
from .blas_import import bf16_tile_gemm
from .conv_bf16 import bf16_operands, bits, plain_bf16
from .conv_cols import VirtualLayout, nothing
from .conv_views import Data, Geometry, rounded
from .kernel import plan_threads, worth_parallel
from .loops import unravel

#: virtual rows (pairs of k: KB / 2 <= bf16_gemm.KC, one packed block) of a work item
KB = 512


#: a thread's float32 partial sums of one group (taps x Cg x OCg) at most, unless the work
#: items' blocks of k are long (PARTIAL_MIN_K): each item adds its products into all of them,
#: and from memory (ResNet-50's 1x1 2048 x 512 gradient over 7x7 positions, 4 MB of sums and
#: 64 virtual rows an item, ran 2.3 ms on the tile against 0.6 on the im2col road)
PARTIAL_BYTES = 1 << 20
PARTIAL_MIN_K = 256


def tile_weights(geo: Geometry, x: Data, dy: Data, rounding) -> bool:
    """Does the weight gradient of ``geo`` take AMX's tile: unit strides, src and
    dy both bf16 values, graphc's tile on AMX, and partial sums an item's block
    of k pays for (PARTIAL_BYTES, PARTIAL_MIN_K)?"""
    if not (bf16_tile_gemm() and all(s == 1 for s in geo.strides) and bf16_operands(x, dy, rounding)):
        return False
    from .bf16_gemm import AMX, MR
    kbk = _block_rows(VirtualLayout(geo, every_tap=True).rows)
    sums = geo.taps * -(-geo.cg // MR) * MR * -(-geo.ocg // 32) * 32 * 4
    return AMX and (sums <= PARTIAL_BYTES or kbk >= PARTIAL_MIN_K)


def _block_rows(rows: int) -> int:
    """Virtual rows of a work item: an image's ``rows`` in blocks of at most KB, as even
    as whole steps of the tile (32 rows) let them."""
    return -(-rows // (-(-rows // KB) * 32)) * 32


def _stride(elems: int) -> int:
    """A row stride of at least ``elems`` bf16 values, whole 32-byte steps, that
    L1 holds a tile's lines at (amx_tile.CONFLICT_STRIDE)."""
    from .amx_tile import CONFLICT_STRIDE
    ld = -(-elems // 16) * 16
    return ld + 16 if (2 * ld) % CONFLICT_STRIDE == 0 else ld


def emit_backward_weights_tile(kb, geo: Geometry, x: Data, dy: Data, store, rounding=None):
    """dw = the gradient of conv(x, w) w.r.t. w on the tile (the module's doc);
    ``store(g, oc, ic, taps, value)`` stores one element of dw."""
    from .bf16_gemm import MR
    lay = VirtualLayout(geo, every_tap=True)
    G, cg, ocg, T = geo.groups, geo.cg, geo.ocg, geo.taps
    cgp = -(-cg // MR) * MR                 # A's rows: whole tiles (zero rows past cg)
    npan = -(-ocg // 32)
    ocp = npan * 32
    kbk = _block_rows(lay.rows)
    nq = -(-lay.rows // kbk)
    lda = _stride(kbk + max(lay.offs))
    items = geo.n * G * nq
    par = worth_parallel(geo.n * geo.positions * geo.oc * geo.kd // 8)
    chunks = max(1, min(items, plan_threads())) if par else 1
    size = G * T * cgp * ocp
    part = kb.workspace(chunks * size, "f32", prefix="part")
    # one group: a chunk's first item overwrites its partial sums (every tap's whole tiles), no zeros first
    overwrite = G == 1
    aoffs = kb.const_array(lay.offs, "int", prefix="taps")
    with kb.for_(chunks, "ch", chunks > 1) as ch:
        xt = kb.scratch(cgp * lda, "u16", chunks > 1, prefix="xt")
        rows = kb.scratch(kbk * ocg, "u16", chunks > 1, prefix="dyrows")
        bp = kb.scratch(kbk // 2 * ocp * 2, "u16", chunks > 1, prefix="dypanels")
        mine = kb.let(ch * size, "pc")
        if not overwrite:
            with kb.for_(size, "i") as i:
                kb.store(part, ir.u64(mine + i), ir.const(0.0, "f32"))
        if cgp > cg:    # (A's rows past Cg: zeros, never written again)
            with kb.for_((cgp - cg) * lda, "i") as i:
                kb.store(xt, cg * lda + i, ir.const(0, "int"))
        kb.let(ir.call("bf16_begin"), "st")
        with kb.for_((items - ch + (chunks - 1)) // chunks, "k") as k:
            t = kb.let(ch + k * chunks, "t")
            n = kb.let(t // (G * nq), "n")
            g = kb.let((t // nq) % G, "g")
            q0 = kb.let((t % nq) * kbk, "q0")
            _copy_src(kb, geo, lay, x, rounding, n, g, q0, lda, xt)
            _copy_dy(kb, geo, lay, dy, rounding, n, g, q0, kbk, rows)
            kb.let(ir.call("pack_b_bf16", 0, ocg, kbk, rows.buf, rows.at(0), ocg, bp.buf, bp.at(0), 0, npan), "st")
            kb.let(ir.call("bf16_weight_taps", cgp, xt.buf, xt.at(0), lda, aoffs, bp.buf, bp.at(0), kbk // 2, npan,
                           ir.select(k.eq(0), 0, 1) if overwrite else 1, part, mine + g * (T * cgp * ocp), ocp, cgp * ocp), "st")
    # the partial sums added up, a row of OCg at a time (read in order): dW[g][oc, ic, taps]
    with kb.for_(G * T, "gt", worth_parallel(size * chunks)) as gt:
        g = kb.let(gt // T, "g")
        taps = [v if v is not None else ir.const(0) for v in unravel(kb, gt % T, geo.kernel)]
        with kb.for_(cg, "ic") as ic, kb.for_(ocg, "oc") as oc:
            at = kb.let((gt * cgp + ic) * ocp + oc, "pa")
            total = part[at]
            for c in range(1, chunks):
                total = total + part[at + c * size]
            kb.emit(store(g, oc, ic, taps, total))


@contextmanager
def _segments(kb, lay: VirtualLayout, v0, count: int):
    """A loop over the pieces of the virtual rows [v0, v0 + count) that one row of
    the padded last dim holds; yields (the row's index over the image's padded
    rows, the piece's first column, its columns, the index of its first virtual
    row in the range)."""
    pdl = lay.pd[-1]
    first = kb.let(v0 // pdl, "R0")
    with kb.for_((v0 + (count - 1)) // pdl - first + 1, "R") as i:
        row = kb.let(first + i, "R")
        lo = kb.let(ir.call("max", v0, row * pdl), "lo")
        hi = kb.let(ir.call("min", v0 + count, row * pdl + pdl), "hi")
        yield row, kb.let(lo - row * pdl, "c0"), kb.let(hi - lo, "cn"), kb.let(lo - v0, "at")


def _outer(kb, lay: VirtualLayout, row, begin, extents):
    """The coordinates (minus ``begin``) over the dims before the last of padded
    row ``row`` of the last dim, and the condition that they are inside
    ``extents`` (a row past the image's padded rows is inside none)."""
    pd = lay.pd[:-1]
    per = [math.prod(pd[k + 1:]) for k in range(len(pd))]
    coords = [kb.let((row // p) % d if k else row // p, "o") for k, (p, d) in enumerate(zip(per, pd))]
    coords = [kb.let(c - b, "ip") if b else c for c, b in zip(coords, begin)]
    ok = row < math.prod(pd)
    for c, e in zip(coords, extents):
        ok = ok & (c >= 0) & (c < e)
    return coords, ok


def _clamp(v, lo, hi):
    return ir.call("min", ir.call("max", v, lo), hi)


def _by_blocks(kb, run, move):
    """A run of ``run`` positions moved 16 at a time (``move(j)``: the 16 from j; a
    last block overlapping the one before where 16 does not divide the run);
    returns the condition that the run is shorter than 16, for the caller to
    move it value by value."""
    nb = kb.let(run // 16, "nb")
    with kb.for_(nb, "b") as b:
        move(b * 16)
    with kb.if_((nb > 0) & ((run % 16) > 0)):
        move(run - 16)
    return nb.eq(0)


def _copy_src(kb, geo, lay, x: Data, rounding, n, g, q0, lda, xt):
    """Rows c < Cg of ``xt`` (``lda`` apart): src channel g * Cg + c at virtual rows
    [q0, q0 + lda) of image n (zeros in the padding and past the image).  A run
    of positions inside src is copied along a channel's row (channels first), or
    transposed 16 positions x 16 channels at a time in registers (channels last,
    plain bf16: graphc.codegen.bf16_gemm.transpose_u16), else value by value."""
    cg, bl, big = geo.cg, geo.begin[-1], geo.big[-1]
    zero = ir.const(0, "int")
    ref = x.ref
    blocked = (x.nxc and rounding is None and plain_bf16(ref) and ref.strides is not None and x.strides()[1] == 1
               and cg % 16 == 0)
    with _segments(kb, lay, q0, lda) as (row, c0, cn, at):
        coords, ok = _outer(kb, lay, row, geo.begin[:-1], geo.big[:-1])
        lo = kb.let(_clamp(bl - c0, 0, cn), "rl")                   # the run of src: [lo, lo + run) of the piece
        run = kb.let(ir.select(ok, _clamp(bl + big - c0, 0, cn) - lo, 0), "run")
        lo = kb.let(ir.select(run > 0, lo, cn), "rl")
        # (the padding's few columns a column at a time: a fill along each row is a call per channel)
        with kb.for_(lo, "j") as j, kb.for_(cg, "c") as c:
            kb.store(xt, c * lda + at + j, zero)
        with kb.for_(cn - lo - run, "j") as j, kb.for_(cg, "c") as c:
            kb.store(xt, c * lda + at + lo + run + j, zero)
        p0 = kb.let(c0 + lo - bl, "p0")                            # src's last index of the run's first
        if blocked:
            lds = x.strides()[2][-1]

            def move(j):
                src = kb.let(ref.offset(x.ivars(n, g * cg, coords + [p0 + j])), "xs")
                kb.let(ir.call("transpose_u16", ref.buf, src, lds, xt.buf, xt.at(at + lo + j), lda, cg // 16), "st")
            short = _by_blocks(kb, run, move)
        else:
            short = None
        with (kb.if_(short) if short is not None else nothing()):
            if x.nxc:
                with kb.for_(run, "j") as j, kb.for_(cg, "c") as c:
                    kb.store(xt, c * lda + at + lo + j, bits(rounded(x.load(n, g * cg + c, coords + [p0 + j]),
                                                                     rounding)))
            else:
                with kb.for_(cg, "c") as c, kb.for_(run, "j") as j:
                    kb.store(xt, c * lda + at + lo + j, bits(rounded(x.load(n, g * cg + c, coords + [p0 + j]),
                                                                     rounding)))


def _copy_dy(kb, geo, lay, dy: Data, rounding, n, g, q0, kbk, rows):
    """Rows r < kbk of ``rows`` (OCg apart): dy's channels of group g at the dst
    position of virtual row q0 + r of image n (zeros where it is none).  A run of
    dst positions is copied position by position (channels last), or transposed
    16 positions x 16 channels at a time in registers (channels first, plain
    bf16), else value by value."""
    ocg, sl = geo.ocg, geo.small[-1]
    zero = ir.const(0, "int")
    ref = dy.ref
    plain = rounding is None and plain_bf16(ref) and ref.strides is not None
    blocked = plain and not dy.nxc and dy.strides()[2][-1] == 1 and ocg % 16 == 0
    dense = plain and dy.nxc and dy.strides()[1] == 1 and dy.strides()[2][-1] == ocg
    with _segments(kb, lay, q0, kbk) as (row, c0, cn, at):
        coords, ok = _outer(kb, lay, row, [0] * (len(lay.pd) - 1), geo.small[:-1])
        run = kb.let(ir.select(ok, _clamp(sl - c0, 0, cn), 0), "run")
        with kb.for_((cn - run) * ocg, "j") as j:
            kb.store(rows, (at + run) * ocg + j, zero)
        if blocked:
            lds = dy.strides()[1]

            def move(j):
                with kb.for_(ocg // 16, "cb") as cb:
                    src = kb.let(ref.offset(dy.ivars(n, g * ocg + cb * 16, coords + [c0 + j])), "ys")
                    kb.let(ir.call("transpose_u16", ref.buf, src, lds, rows.buf, rows.at((at + j) * ocg + cb * 16),
                                   ocg, 1), "st")
            short = _by_blocks(kb, run, move)
        else:
            short = None
        with (kb.if_(short) if short is not None else nothing()):
            if dense:   # the run's channels one after the other in dy: one copy of run x OCg values
                src = kb.let(ref.offset(dy.ivars(n, g * ocg, coords + [c0])), "ys")
                with kb.for_(run * ocg, "j") as j:
                    kb.store(rows, at * ocg + j, ir.load(ref.buf, ir.u64(src + j)))
            else:
                with kb.for_(run, "j") as j, kb.for_(ocg, "oc") as oc:
                    kb.store(rows, (at + j) * ocg + oc, bits(rounded(dy.load(n, g * ocg + oc, coords + [c0 + j]),
                                                                     rounding)))


__all__ = ["KB", "emit_backward_weights_tile", "tile_weights"]
