"""bf16 weight gradients of channels-first data over few dst positions, on
graphc's bf16 tile:

    dW[g][OCg, T*Cg] = dY[g][OCg, K] @ Cols[g][T*Cg, K]^T

with K every dst position of the batch (N x P) in the one GEMM's k.

A network's late layers have a weight gradient of millions of values from a
short sum (ResNet-50's 512 x 512 x 3 x 3 over 7 x 7 positions at batch 2:
K = 98).  The partial-sum roads (a work item per image or block of
positions, each adding its products into a whole dW of float32 per thread,
9.4 MB there) spend their time storing and adding up sums.  Here each operand
is made once: dY's rows copied as bf16 bits into one (OCg x K) matrix and
packed as the tile's A, every image's columns (graphc.codegen.conv_cf's copy,
src read along its rows) packed as its B; then the threads split dW by
blocks of rows and columns, each block's whole sum made by one call and
stored (rounded as dW holds it) while it is in L2.  No partial sums."""
from __future__ import annotations

import math

from . import ir
from .blas_import import bf16_tile_gemm
from .conv_bf16 import bf16_operands, bits, packed_rows
from .conv_cf import channels_first, pack_columns
from .conv_cols import BF16
from .conv_views import Data, Geometry, rounded, tap_loops
from .kernel import Scratch, plan_threads, worth_parallel
from .loops import unravel

#: dst positions of the batch (the GEMM's k) the road takes at most, and elements of its
#: columns (T*Cg x K a group: the packed B is as large again)
MAX_K = 4096
MAX_COLS = 1 << 23
#: output channels of a group at least (the tile's rows come 32 at a time)
MIN_OC = 16
#: bytes of a group's float32 dW at least, at unit strides: below, the tile's partial sums
#: (graphc.codegen.conv_weights_bf16) stay in cache (1x1 1024 -> 256 over 2 x 14 x 14
#: positions, 1 MB: 1.03 ms on the tile's partial sums, 0.41 here; 3x3 128 -> 128 over
#: 2 x 28 x 28, 590 KB: 1.1-1.4 ms there, 2.5 here inside ResNet-50's step).  Strided
#: windows, which that road does not take, come here whatever their sums.
MIN_SUMS = 1 << 20
#: rows and columns of dW a work item makes about (its float32 block: 128 KB, in L2; the
#: columns whole panels of 32 and whole channels' taps)
BLOCK_ROWS, BLOCK_COLS = 128, 256
#: B's panels a work item packs
PACK_PANELS = 8


def few_positions(geo: Geometry, x: Data, dy: Data, rounding) -> bool:
    """Does the weight gradient of ``geo`` take this road: src channels first
    (its rows along positions), src and dy bf16 values on graphc's bf16 tile,
    at most MAX_K dst positions in the batch, MIN_OC output channels a group
    and MIN_SUMS bytes of float32 sums a group (any, at other strides)?"""
    k = geo.n * geo.positions
    large = geo.kd * geo.ocg * 4 >= MIN_SUMS or any(s != 1 for s in geo.strides)
    return (bf16_tile_gemm() and bf16_operands(x, dy, rounding) and channels_first(geo, x)
            and k <= MAX_K and geo.kd * k <= MAX_COLS and geo.ocg >= MIN_OC and large)


def emit_backward_weights_cf(kb, geo: Geometry, x: Data, dy: Data, store, rounding=None):
    """dw = the gradient of conv(x, w) w.r.t. w (the module's doc); ``store(g, oc,
    ic, taps, value)`` stores one element of dw."""
    from .bf16_gemm import MR, bf16_panels
    kb.road("bf16_few_positions")
    G, ocg, kd, P = geo.groups, geo.ocg, geo.kd, geo.positions
    K = geo.n * P
    par = worth_parallel(geo.n * P * geo.oc * kd // 8)
    cols = _columns(kb, geo, x, rounding, par)
    # dY as the tile's A: each group's rows (OCg x K, image after image) as bits, then packed
    dyr = kb.workspace(G * ocg * K, "u16", prefix="dyrows")
    with kb.for_(G * ocg, "go", par) as go:
        g = kb.let(go // ocg, "g")
        with kb.for_(geo.n, "n") as n, kb.for_(P, "p") as p:
            pos = [v if v is not None else ir.const(0) for v in unravel(kb, p, geo.small)]
            kb.store(dyr, ir.u64(go * K + n * P + p), bits(rounded(dy.load(n, g * ocg + go % ocg, pos), rounding)))
    ap, apg = packed_rows(kb, G, ocg, K, (0, dyr, ocg * K, K), par, "dypanels")
    blocks = -(-ocg // MR)
    # the columns as the tile's B, stored transposed (a column of B is a row of the columns)
    npan = -(-kd // 32)
    bpg = bf16_panels(kd, K)
    bp = kb.workspace(G * bpg, "u16", prefix="colpanels")
    nbb = -(-npan // PACK_PANELS)
    with kb.for_(G * nbb, "bb", par and G * nbb > 1) as bb:
        g = kb.let(bb // nbb, "g")
        j0 = kb.let((bb % nbb) * PACK_PANELS, "j0")
        kb.let(ir.call("pack_b_bf16", 1, kd, K, cols, g * (kd * K), K, bp, g * bpg, j0,
                       ir.call("min", j0 + PACK_PANELS, npan)), "st")
    # dW by blocks of rows x columns, the columns whole panels and whole input channels (all
    # their taps): each block's whole sum in one call, stored right away, channel by channel
    T = geo.taps
    step = 32 * T // math.gcd(32, T)
    nb = step * max(1, BLOCK_COLS // step)
    mb = min(blocks * MR, max(MR, BLOCK_ROWS * BLOCK_COLS // nb // MR * MR))
    nrb, ncb = -(-ocg // mb), -(-kd // nb)
    with kb.for_(G * nrb * ncb, "t", par and G * nrb * ncb > 1) as t:
        g = kb.let(t // (nrb * ncb), "g")
        r0 = kb.let((t // ncb) % nrb * mb, "r0")
        c0 = kb.let(t % ncb * nb, "c0")
        m = kb.let(ir.call("min", mb, ocg - r0), "m")
        nc = kb.let(ir.call("min", nb, kd - c0), "nc")
        tile = kb.scratch(mb * nb, "f32", par, prefix="dwtile")
        kb.let(ir.call("gemm_bf16_prepacked", m, nc, K, ap, g * apg, ocg, r0, bp, g * bpg, npan, c0 // 32, 0.0,
                       tile.buf, tile.at(0), nc), "st")
        with kb.for_(m, "r") as r, kb.for_(nc // T, "ic") as i:
            row = kb.let(r * nc + i * T, "dr")
            with tap_loops(kb, geo.kernel) as (taps, flat):
                kb.emit(store(g, r0 + r, c0 // T + i, taps, tile[row + flat]))


def _columns(kb, geo: Geometry, x: Data, rounding, par: bool):
    """Every image's columns of each group: (T*Cg x K) bf16 bits, rows channel
    after channel (each channel's taps: as OIX weights lie, so dW's stores run
    along its rows), a block of src rows of an image per work item."""
    G, kd, P = geo.groups, geo.kd, geo.positions
    K = geo.n * P
    W = geo.small[-1]
    R = P // W
    nrb = max(1, min(R, -(-2 * plan_threads() // (G * geo.n))))
    rb = -(-R // nrb)
    nrb = -(-R // rb)
    cols = kb.workspace(G * kd * K, "u16", prefix="wcols")
    with kb.for_(G * geo.n * nrb, "ci", par and G * geo.n * nrb > 1) as t:
        g = kb.let(t // (geo.n * nrb), "g")
        n = kb.let((t // nrb) % geo.n, "n")
        r0 = kb.let(t % nrb * rb, "r0")
        cr = kb.let(ir.call("min", rb, R - r0), "cr")
        panel = Scratch(cols, kb.let(g * (kd * K) + n * P + r0 * W, "cb"))
        pack_columns(kb, geo, x, panel, g, (n, 1), (r0, cr), (ir.const(0), W), K, rounding, BF16, True)
    return cols


__all__ = ["few_positions", "emit_backward_weights_cf", "MAX_K", "MAX_COLS", "MIN_SUMS"]
