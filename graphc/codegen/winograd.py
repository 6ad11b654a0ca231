"""Winograd F(2x2, 3x3) convolution kernels (Lavin and Gray, 2016): 3x3
windows at unit strides, forward (and so the data gradient, a forward
convolution of dy: graphc.codegen.conv.as_forward) and weight gradient.

A 2x2 block of dst comes from a 4x4 patch d of src as
``y = A^T [(G g G^T) * (B^T d B)] A``: the 36 multiplies of the direct
convolution per block and channel pair become 16, done as 16 GEMMs, one per
element e of the 4x4 transform.  The weight gradient is that product's
gradient with respect to g, summed over the blocks:
``dg = G^T [sum over blocks (A dy A^T) * (B^T d B)] G``, where dy is the
block's 2x2 of the output gradient; the sum over blocks is, for each e, a GEMM
over the blocks ``M[e] (Cg x OCg) += V[e]^T (Cg x tiles) @ D[e] (tiles x OCg)``.

Both kernels first copy src (f32, channels last, zero-padded so that every
patch is inside) per image and group, then run work items of up to
WINOGRAD_TILES tiles of one image and group.  The transforms only add and
halve: F(2x2, 3x3)'s error stays within a few ulps of f32.
"""
from __future__ import annotations

from contextlib import contextmanager

from . import ir
from .conv_views import Data, Geometry, Weights, rounded, work_item
from .kernel import plan_threads, worth_parallel

#: tiles of one Winograd work item at most (its transformed src and products stay near L2)
WINOGRAD_TILES = 196
#: padding between the 16 planes of a transformed tile block: planes a power of two apart
#: would map the 16 streams of a transform to the same cache sets
PLANE_PAD = 16


def winograd(geo: Geometry) -> bool:
    """3x3 windows over 2 spatial dims at unit strides and dilations, with enough
    channels for GEMMs to pay: Winograd F(2x2, 3x3)."""
    return (len(geo.kernel) == 2 and geo.kernel == (3, 3) and geo.strides == (1, 1) and geo.dilations == (1, 1)
            and geo.cg >= 16 and geo.ocg >= 16 and geo.positions >= 64)


class _Tiles:
    """The 2x2 tiles of dst, the padded src copy they read, and the layout of
    the transformed planes.  ``cf`` (channels first, for NCX tensors): the copy
    is (image, group, channel, padded row, column), a plane holds a row of
    tiles per channel (Cg x tiles) and work items are whole rows of tiles, so
    the transforms run along the rows of NCX tensors; else (NXC) the copy is
    channels last and a plane holds a row of channels per tile (tiles x Cg)."""

    def __init__(self, geo: Geometry, nxc: bool):
        oh, ow = geo.small
        self.th, self.tw = -(-oh // 2), -(-ow // 2)
        self.hp, self.wp = 2 * self.th + 2, 2 * self.tw + 2
        self.per = self.hp * self.wp * geo.cg           # one image and group of the copy
        self.per_image = self.th * self.tw
        self.cf = not nxc and self.tw <= WINOGRAD_TILES
        step = self.tw if self.cf else 1                 # work items are whole rows of tiles when cf
        nb = min(self.per_image, max(1, WINOGRAD_TILES // step) * step)
        while nb > max(64, step) and geo.n * geo.groups * -(-self.per_image // nb) < 2 * plan_threads():
            nb = -(-nb // (2 * step)) * step
        self.nb = nb                                    # tiles of one work item at most
        self.blocks = -(-self.per_image // nb)          # work items of one image and group
        self.items = geo.n * geo.groups * self.blocks

    def origin(self, kb, tile):
        """(dst row, dst column) of a tile's top left element."""
        return kb.let((tile // self.tw) * 2, "oy"), kb.let((tile % self.tw) * 2, "ox")

    @contextmanager
    def loop(self, kb, t0, m, channels: int):
        """Loops over the m tiles from t0 and ``channels`` channels, the channels
        outermost when cf (then over rows of tiles, and the tiles of a row
        innermost); yields (channel, tile's offset in the item, dst row, dst column)."""
        if not self.cf:
            with kb.for_(m, "tt") as tt:
                y0, x0 = self.origin(kb, t0 + tt)
                with kb.for_(channels, "ch") as c:
                    yield c, tt, y0, x0
            return
        with kb.for_(channels, "ch") as c:
            with kb.for_(m // self.tw, "tr") as tr:
                y0 = kb.let((t0 // self.tw + tr) * 2, "oy")
                with kb.for_(self.tw, "tc") as tc:
                    yield c, kb.let(tr * self.tw + tc, "tt"), y0, kb.let(tc * 2, "ox")

    def at(self, tt, c, channels: int):
        """Offset of (tile tt, channel c) in a plane of ``channels`` channels."""
        return c * self.nb + tt if self.cf else tt * channels + c

    def ld(self, channels: int):
        """(leading dimension, transposed) of a plane as the (tiles x channels) matrix BLAS reads."""
        return (self.nb, 1) if self.cf else (channels, 0)


def _padded_src(kb, geo: Geometry, x: Data, rounding, t: _Tiles):
    """src copied to f32 and zero-padded (every value written), channels last,
    or channels first when ``t.cf``; rows of the copy in parallel."""
    G, cg, hp, wp = geo.groups, geo.cg, t.hp, t.wp
    xp = kb.workspace(geo.n * G * t.per, "f32", prefix="xp")
    par = worth_parallel(geo.n * geo.c * geo.big_size)
    if t.cf:
        _padded_src_cf(kb, geo, x, rounding, t, xp, par)
        return xp
    with kb.for_(geo.n * G * hp, "t", par) as r:
        n = kb.let(r // (G * hp), "n")
        g = kb.let((r // hp) % G, "g")
        h = kb.let(r % hp - geo.begin[0], "ih")
        row_ok = (h >= 0) & (h < geo.big[0])
        with kb.for_(wp, "j") as j:
            ww = kb.let(j - geo.begin[1], "iw")
            at = kb.let(((n * G + g) * hp + r % hp) * (wp * cg) + j * cg, "xa")
            with kb.if_(row_ok & (ww >= 0) & (ww < geo.big[1])) as st:
                with kb.for_(cg, "ci") as ci:
                    kb.store(xp, ir.u64(at + ci), ir.f32(rounded(x.load(n, g * cg + ci, [h, ww]), rounding)))
                with kb.else_(st):
                    with kb.for_(cg, "ci") as ci:
                        kb.store(xp, ir.u64(at + ci), ir.const(0.0, "f32"))
    return xp


def _padded_src_cf(kb, geo: Geometry, x: Data, rounding, t: _Tiles, xp, par):
    """The channels-first copy: rows of (image, channel, padded row), each the
    zeros left of src, its row, the zeros right of it."""
    hp, wp, b = t.hp, t.wp, geo.begin[1]
    lo, hi = max(0, b), max(max(0, b), min(wp, b + geo.big[1]))   # the columns src fills
    with kb.for_(geo.n * geo.c * hp, "t", par) as r:
        n = kb.let(r // (geo.c * hp), "n")
        c = kb.let((r // hp) % geo.c, "c")
        h = kb.let(r % hp - geo.begin[0], "ih")
        row = kb.let(r * wp, "xr")      # (image, group, channel in group) rows follow (image, channel)
        with kb.if_((h >= 0) & (h < geo.big[0])) as st:
            for j0, j1 in ((0, lo), (hi, wp)):
                if j1 > j0:
                    with kb.for_(j1 - j0, "j") as j:
                        kb.store(xp, ir.u64(row + j0 + j), ir.const(0.0, "f32"))
            if hi > lo:
                with kb.for_(hi - lo, "j") as j:
                    kb.store(xp, ir.u64(row + lo + j), ir.f32(rounded(x.load(n, c, [h, j + (lo - b)]), rounding)))
            with kb.else_(st):
                with kb.for_(wp, "j") as j:
                    kb.store(xp, ir.u64(row + j), ir.const(0.0, "f32"))


def _input_transform(kb, geo: Geometry, t: _Tiles, xp, n, g, t0, m, v, vb, pv):
    """V[e] = (B^T d B)[e] for the tiles t0 + tt (tt < m) of image n, group g:
    plane e at ``vb + e * pv`` (t.at's layout)."""
    cg, wp = geo.cg, t.wp
    with t.loop(kb, t0, m, cg) as (ci, tt, y0, x0):
        if t.cf:
            base = kb.let(((n * geo.groups + g) * cg + ci) * (t.hp * wp) + y0 * wp + x0, "xb")
            step = 1
        else:
            base = kb.let(((n * geo.groups + g) * t.hp + y0) * (wp * cg) + x0 * cg + ci, "xb")
            step = cg
        d = [[kb.let(xp[ir.u64(base + (a * wp + b) * step)], "d") for b in range(4)] for a in range(4)]
        # B^T d B
        rows = [[kb.let(d[0][b] - d[2][b], "bt") for b in range(4)],
                [kb.let(d[1][b] + d[2][b], "bt") for b in range(4)],
                [kb.let(d[2][b] - d[1][b], "bt") for b in range(4)],
                [kb.let(d[1][b] - d[3][b], "bt") for b in range(4)]]
        at = kb.let(vb + t.at(tt, ci, cg), "va")
        for a in range(4):
            r = rows[a]
            vals = [r[0] - r[2], r[1] + r[2], r[2] - r[1], r[1] - r[3]]
            for b in range(4):
                kb.store(v, ir.u64(at + (a * 4 + b) * pv), vals[b])


#: the weight transform's elements count this many times against the parallel threshold
WEIGHT_GATHER = 4


def _transformed_weights(kb, geo: Geometry, w: Weights, rounding):
    """U[g][e][c][oc] = (G g G^T)[e], all groups, once per run."""
    G, cg, ocg = geo.groups, geo.cg, geo.ocg
    u = kb.workspace(G * 16 * cg * ocg, "f32", prefix="wu")
    half = ir.const(0.5, "f32")
    # (each (c, oc) reads its 9 taps a filter apart and stores 16 values cg x ocg apart: a
    # gather, worth two threads from a quarter of the elements a streaming loop needs)
    with kb.for_(G * cg, "gc", worth_parallel(G * cg * ocg * 16 * WEIGHT_GATHER)) as gc:
        g = kb.let(gc // cg, "g")
        c = kb.let(gc % cg, "c")
        with kb.for_(ocg, "oc") as oc:
            k = [[kb.let(ir.f32(rounded(w.load(g, oc, c, [ir.const(a), ir.const(b)]), rounding)), "k")
                  for b in range(3)] for a in range(3)]
            # t = G k (4 x 3), then u = t G^T (4 x 4)
            t4 = [k[0], [kb.let((k[0][b] + k[1][b] + k[2][b]) * half, "gt") for b in range(3)],
                  [kb.let((k[0][b] - k[1][b] + k[2][b]) * half, "gt") for b in range(3)], k[2]]
            for a in range(4):
                r = t4[a]
                vals = [r[0], (r[0] + r[1] + r[2]) * half, (r[0] - r[1] + r[2]) * half, r[2]]
                for b in range(4):
                    kb.store(u, ir.u64(((g * 16 + (a * 4 + b)) * cg + c) * ocg + oc), ir.f32(vals[b]))
    return u


def emit_forward_winograd(kb, geo: Geometry, x: Data, w: Weights, store, rounding=None):
    """dst = conv(x, w) for 3x3 windows at unit strides: ``M[e] = V[e] (tiles x
    Cg) @ U[e] (Cg x OCg)`` per work item, then each dst element
    ``A^T M A`` stored through ``store``."""
    G, cg, ocg = geo.groups, geo.cg, geo.ocg
    oh, ow = geo.small
    t = _Tiles(geo, x.nxc)
    xp = _padded_src(kb, geo, x, rounding, t)
    u = _transformed_weights(kb, geo, w, rounding)
    pv, pm = t.nb * cg + PLANE_PAD, t.nb * ocg + PLANE_PAD
    v, v_base = kb.thread_workspace(16 * pv, "f32", prefix="wv")
    prod, prod_base = kb.thread_workspace(16 * pm, "f32", prefix="wm")
    par = t.items > 1
    with kb.for_(t.items, "t", par) as it:
        n, g, t0, m = work_item(kb, it, geo, t.blocks, t.nb, t.per_image)
        vb, pb = v_base(kb, par), prod_base(kb, par)
        _input_transform(kb, geo, t, xp, n, g, t0, m, v, vb, pv)
        for e in range(16):
            ua = (g * 16 + e) * (cg * ocg)
            if t.cf:    # prod^T (OCg x tiles) = U^T @ V^T
                kb.let(ir.call("gemm_f32", 1, 0, ocg, m, cg, u, ua, ocg, v, vb + e * pv, t.nb, 0.0, prod,
                               pb + e * pm, t.nb), "st")
            else:
                kb.let(ir.call("gemm_f32", 0, 0, m, ocg, cg, v, vb + e * pv, cg, u, ua, ocg, 0.0, prod, pb + e * pm,
                               ocg), "st")
        with t.loop(kb, t0, m, ocg) as (oc, tt, y0, x0):
            at = kb.let(pb + t.at(tt, oc, ocg), "ma")
            mm = [[kb.let(prod[ir.u64(at + (a * 4 + b) * pm)], "m") for b in range(4)] for a in range(4)]
            # A^T mm A
            s0 = [kb.let(mm[0][b] + mm[1][b] + mm[2][b], "at") for b in range(4)]
            s1 = [kb.let(mm[1][b] - mm[2][b] - mm[3][b], "at") for b in range(4)]
            for a, sr in enumerate((s0, s1)):
                for b, val in enumerate((sr[0] + sr[1] + sr[2], sr[1] - sr[2] - sr[3])):
                    pos = [y0 + a, x0 + b]
                    cond = _inside(pos, (a, b), (oh, ow))
                    if cond is not None:
                        with kb.if_(cond):
                            kb.emit(store(n, g * ocg + oc, pos, val))
                    else:
                        kb.emit(store(n, g * ocg + oc, pos, val))


def _inside(pos, offsets, sizes):
    """The condition that a tile's element at ``offsets`` lies inside dst (odd
    sizes leave the last tiles half outside), or None when it always does."""
    conds = [p < s for p, o, s in zip(pos, offsets, sizes) if o and s % 2]
    if not conds:
        return None
    return conds[0] if len(conds) == 1 else conds[0] & conds[1]


def _dy_transform(kb, geo: Geometry, t: _Tiles, dy: Data, rounding, n, g, t0, m, d, db, pd):
    """D[e] = (A dy A^T)[e] for the tiles t0 + tt of image n, group g (dy's 2x2
    block of each tile, 0 past odd dst sizes), in t.at's layout."""
    ocg = geo.ocg
    with t.loop(kb, t0, m, ocg) as (oc, tt, y0, x0):
        c = g * ocg + oc
        blk = []
        for a in range(2):
            row = []
            for b in range(2):
                pos = [y0 + a, x0 + b]
                val = ir.f32(rounded(dy.load(n, c, pos), rounding))
                cond = _inside(pos, (a, b), geo.small)
                row.append(kb.let(val if cond is None else ir.select(cond, val, ir.const(0.0, "f32")), "dy"))
            blk.append(row)
        # A dy (4 x 2), then (A dy) A^T (4 x 4); A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]
        rows = [blk[0], [kb.let(blk[0][b] + blk[1][b], "ad") for b in range(2)],
                [kb.let(blk[0][b] - blk[1][b], "ad") for b in range(2)], [kb.let(-blk[1][b], "ad") for b in range(2)]]
        at = kb.let(db + t.at(tt, oc, ocg), "da")
        for a in range(4):
            p, q = rows[a]
            for b, val in enumerate((p, p + q, p - q, -q)):
                kb.store(d, ir.u64(at + (a * 4 + b) * pd), val)


def emit_backward_weights_winograd(kb, geo: Geometry, x: Data, dy: Data, store, rounding=None):
    """dw = the weight gradient of a 3x3 convolution at unit strides: per work
    item, V (src patches) and D (dy blocks) transformed, then for each e
    ``M[e] += V[e]^T @ D[e]`` into the partial sums of the item's chunk (one
    per thread, items dealt to chunks in turn); at the end the chunks' M added
    up and ``dw = G^T M G`` stored through ``store(g, oc, ic, taps, value)``."""
    G, cg, ocg = geo.groups, geo.cg, geo.ocg
    t = _Tiles(geo, x.nxc)
    xp = _padded_src(kb, geo, x, rounding, t)
    chunks = max(1, min(t.items, plan_threads())) if worth_parallel(geo.n * geo.positions * geo.oc * geo.kd // 8) else 1
    if chunks > 1:
        kb.road("dw_partial_sums")
    size = G * 16 * cg * ocg
    part = kb.workspace(chunks * size, "f32", prefix="part")
    pv, pd = t.nb * cg + PLANE_PAD, t.nb * ocg + PLANE_PAD
    v, v_base = kb.thread_workspace(16 * pv, "f32", prefix="wv")
    d, d_base = kb.thread_workspace(16 * pd, "f32", prefix="wd")
    par = chunks > 1
    with kb.for_(chunks, "ch", par) as ch:
        vb, db = v_base(kb, par), d_base(kb, par)
        with kb.for_(size, "z") as z:
            kb.store(part, ch * size + z, ir.const(0.0, "f32"))
        with kb.for_((t.items - ch + (chunks - 1)) // chunks, "k") as k:
            n, g, t0, m = work_item(kb, kb.let(ch + k * chunks, "it"), geo, t.blocks, t.nb, t.per_image)
            _input_transform(kb, geo, t, xp, n, g, t0, m, v, vb, pv)
            _dy_transform(kb, geo, t, dy, rounding, n, g, t0, m, d, db, pd)
            (ldv, tv), (ldd, td) = t.ld(cg), t.ld(ocg)
            for e in range(16):     # M[e] (Cg x OCg) += V[e]^T @ D[e]
                kb.let(ir.call("gemm_f32", 1 - tv, td, cg, ocg, m, v, vb + e * pv, ldv, d, db + e * pd, ldd, 1.0,
                               part, ch * size + (g * 16 + e) * (cg * ocg), ocg), "st")
    _store_weights(kb, geo, part, chunks, size, store)


def _store_weights(kb, geo: Geometry, part, chunks: int, size: int, store):
    """dw[g][oc][c] = G^T M G, M the sum of the chunks' partial sums."""
    G, cg, ocg = geo.groups, geo.cg, geo.ocg
    half = ir.const(0.5, "f32")
    with kb.for_(G * cg, "gc", worth_parallel(size * chunks)) as gc:
        g = kb.let(gc // cg, "g")
        c = kb.let(gc % cg, "c")
        with kb.for_(ocg, "oc") as oc:
            at = kb.let(g * (16 * cg * ocg) + c * ocg + oc, "pa")
            mm = []
            for e in range(16):
                total = part[at + e * (cg * ocg)]
                for ch in range(1, chunks):
                    total = total + part[at + (ch * size + e * cg * ocg)]
                mm.append(kb.let(total, "m"))
            # G^T M (3 x 4), then (G^T M) G (3 x 3); G^T = [[1, .5, .5, 0], [0, .5, -.5, 0], [0, .5, .5, 1]]
            rows = [[kb.let(mm[b] + (mm[4 + b] + mm[8 + b]) * half, "gm") for b in range(4)],
                    [kb.let((mm[4 + b] - mm[8 + b]) * half, "gm") for b in range(4)],
                    [kb.let((mm[4 + b] + mm[8 + b]) * half + mm[12 + b], "gm") for b in range(4)]]
            for a in range(3):
                r = rows[a]
                vals = (r[0] + (r[1] + r[2]) * half, (r[1] - r[2]) * half, (r[1] + r[2]) * half + r[3])
                for b in range(3):
                    kb.emit(store(g, oc, c, [ir.const(a), ir.const(b)], vals[b]))
