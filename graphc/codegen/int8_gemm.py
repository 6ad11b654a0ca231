"""u8 x s8 -> s32 GEMMs on graphc's own tile: AMX-INT8's (graphc.codegen.amx_tile,
32 rows a call) where the CPU has it, else AVX512-VNNI's (graphc.codegen.int8_tile,
8 rows), in the loop order of graphc.codegen.bf16_gemm: B packed once into
panels of 32 columns (``pack_b_u8s8``, which also sums B's columns, the
zero-point compensation's other operand), A a block of MC rows at a time, and
for each B panel (in L1) the tile runs down the block's MR-row slices (in L2),
adding into C in place (a scratch tile only at the edges of m and n).

Packed B (``bp``, s8), for a K of kq_all quads (k, .., k+3) (ceil(k / 4)
rounded up to a multiple of KQ_ALIGN, the quads an AMX tile consumes at a
time) cut in blocks of KC quads and n cut in npan panels: block ``p0`` (its first quad) starts at
``p0 * npan * 128``, panel ``jp`` of it ``jp * kq * 128`` further (kq: the
block's quads), and each quad of a panel is 32 columns' four bytes side by
side; zeros past n and past k.  ``u8s8_panels(n, k)`` is its size.
"""
from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import intrinsic

from . import amx_tile, int8_tile
from .blas_abi import arrays, amx_config, call_symbol, copy_elements, road_tiles, taps_call
from .blas_import import int8_amx_gemm
from .helper_jit import helper_jit

#: the tile's symbols are bound (before any of these functions is compiled or loaded);
#: without AVX512-VNNI only row_sums_u8 runs here (for MKL's road), as a plain loop
OWN = int8_tile.bind()
#: the tile these drivers call: AMX-INT8's where it is the road, else AVX512-VNNI's
#: (the packs are the AVX-512 module's on both roads)
AMX = OWN and int8_amx_gemm() and amx_tile.bind()
#: ``tile(a, a_off, b, b_off, c, c_off, k_steps, lda, ldc, acc)``: C[MR][32] (+)= A @ B, A packed
#: (``_pack_a``) or in its own rows (``_rows``), B packed, from element offsets
MR, _int8_tile, _int8_tile_rows = road_tiles(AMX, (amx_tile.INT8, amx_tile.INT8_ROWS), int8_tile.SYMBOL, int8_tile.MR,
                                              types.uint8, types.int8, types.int32)
#: ``taps(a, a_off, aoffs, b, b_off, bstep, c, c_off, kq, lda, ntaps)``: AMX's batch-reduce tile
_amx_taps = taps_call(amx_tile.INT8_TAPS, types.uint8, types.int8, types.int32)
#: packed k is whole blocks of this many quads (an AMX tile's step; the same on both roads)
KQ_ALIGN = amx_tile.K_STEP

#: quads of k per block of the packed operands (a B panel of KC quads, 32 KB, stays in L1)
KC = 256
#: rows of A packed at a time (MC x 4 KC bytes: 128 KB, in L2)
MC = 128


@intrinsic
def _pack_quads(typingctx, b, b_off, ldb, bp, out_off, npan, pstride, sums, s_off):
    """graphc.codegen.int8_tile's pack: the four rows from ``b[b_off:]`` (``ldb``
    apart, s8) interleaved into npan panels of ``bp`` from ``out_off``,
    ``pstride`` apart, their columns' sums added into ``sums[s_off:]`` (s32)."""
    if not (arrays(types.int8, b, bp) and arrays(types.int32, sums)):
        return None
    sig = types.void(b, b_off, ldb, bp, out_off, npan, pstride, sums, s_off)

    def codegen(context, builder, signature, args):
        call_symbol(context, builder, int8_tile.PACK, signature, args,
                    [("p", 0, 1), ("i", 2), ("p", 3, 4), ("i", 5), ("i", 6), ("p", 7, 8)])
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def _pack_panel_t(typingctx, b, b_off, ldb, bp, out_off, kq, sums, s_off):
    """graphc.codegen.int8_tile's transposed pack: the panel of 32 columns stored
    as rows from ``b[b_off:]`` (``ldb`` apart), kq quads, into ``bp`` from
    ``out_off``, the columns' sums added into ``sums[s_off:]``."""
    if not (arrays(types.int8, b, bp) and arrays(types.int32, sums)):
        return None
    sig = types.void(b, b_off, ldb, bp, out_off, kq, sums, s_off)

    def codegen(context, builder, signature, args):
        call_symbol(context, builder, int8_tile.PACK_T, signature, args,
                    [("p", 0, 1), ("i", 2), ("p", 3, 4), ("i", 5), ("p", 6, 7)])
        return context.get_dummy_value()
    return sig, codegen


@helper_jit(cache=True, nogil=True)
def packed_quads(k):
    """The quads of k of a packed operand: ceil(k / 4) rounded up to KQ_ALIGN."""
    return -(-((k + 3) // 4) // KQ_ALIGN) * KQ_ALIGN


def u8s8_panels(n: int, k: int) -> int:
    """Bytes of B packed for the tile (``pack_b_u8s8``)."""
    return packed_quads.py_func(k) * ((n + 31) // 32) * 128


@helper_jit(cache=True, nogil=True)
def pack_b_u8s8(tb, n, k, b, b_off, ldb, bp, bp_off, sums, s_off, jp_lo, jp_hi):
    """Pack panels [jp_lo, jp_hi) of B (k x n, s8; ``tb``: stored transposed,
    element (kk, j) at ``b[b_off + j * ldb + kk]``) into ``bp`` from ``bp_off``
    (the layout of the module's doc), and write the sums of those columns of B
    (s32) into ``sums[s_off + j]``: the full panels' full quads by the tile
    module's vector packs (four rows of B at a time; stored transposed, a
    panel's quads gathered from its 32 rows), element by element at the edges."""
    kq_all = packed_quads(k)
    npan = (n + 31) // 32
    j_hi = min(n, 32 * jp_hi)
    for j in range(32 * jp_lo, j_hi):
        sums[s_off + j] = 0
    fast_hi = max(jp_lo, min(jp_hi, n // 32))     # panels [jp_lo, fast_hi) are full
    for p0 in range(0, kq_all, KC):
        kq = min(KC, kq_all - p0)
        blk = bp_off + p0 * npan * 128
        kqf = min(kq, (k - 4 * p0) // 4)         # the block's full quads
        if tb != 0:
            for jp in range(jp_lo, fast_hi):
                _pack_panel_t(b, b_off + 32 * jp * ldb + 4 * p0, ldb, bp, blk + jp * kq * 128, kqf, sums,
                              s_off + 32 * jp)
        for p in range(kq):
            kk = 4 * (p0 + p)
            lo = jp_lo
            if p < kqf and fast_hi > jp_lo:
                if tb == 0:
                    _pack_quads(b, b_off + kk * ldb + 32 * jp_lo, ldb, bp, blk + jp_lo * kq * 128 + p * 128,
                                fast_hi - jp_lo, kq * 128, sums, s_off + 32 * jp_lo)
                lo = fast_hi
            for jp in range(lo, jp_hi):
                out = blk + jp * kq * 128 + p * 128
                for jj in range(32):
                    j = jp * 32 + jj
                    for e in range(4):
                        v = np.int8(0)
                        if j < n and kk + e < k:
                            v = b[b_off + (kk + e) * ldb + j] if tb == 0 else b[b_off + j * ldb + kk + e]
                            sums[s_off + j] += v
                        bp[out + 4 * jj + e] = v
    return 0


@helper_jit(cache=True, nogil=True)
def _a_at(r, q, lp):
    """Where element (r, q) of a block of A packed with rows of lp bytes lies: on
    AMX's road in tiles of 16 rows x 64 k (graphc.codegen.bf16_gemm._a_at's
    layout, in bytes), else row-major."""
    if AMX:
        return (r >> 4) * 16 * lp + (q >> 6) * 1024 + (r & 15) * 64 + (q & 63)
    return r * lp + q


@helper_jit(cache=True, nogil=True)
def _pack_a(ta, m, k, a, a_off, lda, i0, mb, k0, kq, ap, ap_off):
    """Rows [i0, i0 + mb) of A, columns [k0, k0 + 4 kq), into ``ap`` from ``ap_off``
    as ``_a_at`` places them (zeros past k; the rows after mb up to a multiple of
    MR are left as they are: their products land in rows of the scratch tile
    never copied out, and the tiles' integer products raise nothing)."""
    lp = 4 * kq
    qn = min(lp, k - k0)
    if ta == 0:
        whole = qn // 64 * 64     # runs of 64 k, contiguous in both layouts
        for r in range(mb):
            src = a_off + (i0 + r) * lda + k0
            for q0 in range(0, whole, 64):
                copy_elements(ap, ap_off + _a_at(r, q0, lp), a, src + q0, 64)
            for q in range(whole, qn):
                ap[ap_off + _a_at(r, q, lp)] = a[src + q]
    else:
        for q in range(qn):
            src = a_off + (k0 + q) * lda + i0
            for r in range(mb):
                ap[ap_off + _a_at(r, q, lp)] = a[src + r]
    for r in range(mb):
        for q in range(qn, lp):
            ap[ap_off + _a_at(r, q, lp)] = 0


@helper_jit(cache=True, nogil=True)
def _in_place(ta, m, k, lda):
    """Does the tile read A's rows where they lie: not transposed, its packed quads
    of k in its rows (m rows: MR), and on AMX's road rows whose stride lets L1 hold
    a tile's lines?"""
    return ta == 0 and m == MR and k % (4 * KQ_ALIGN) == 0 and (not AMX or lda % amx_tile.CONFLICT_STRIDE != 0)


@helper_jit(cache=True, nogil=True)
def gemm_u8s8_packed(ta, m, n, k, a, a_off, lda, bp, bp_off, npan_all, jp0, c, c_off, ldc):
    """Row-major ``C[m, n] = op(A)[m, k] @ B[k, n]`` with A u8 (as in
    blas.gemm_u8s8), C s32, and B packed by pack_b_u8s8 into ``bp`` from
    ``bp_off``, npan_all panels wide, this product's columns from panel
    ``jp0``: the exact sums while they fit in s32."""
    if m <= 0 or n <= 0:
        return 0
    if k <= 0:
        for i in range(m):
            for j in range(n):
                c[c_off + i * ldc + j] = 0
        return 0
    if AMX:
        amx_config()   # (this thread's tiles, for the calls below)
    kq_all = packed_quads(k)
    npan = (n + 31) // 32
    kcq = min(kq_all, KC)
    # A read in place when its packed quads of k lie in its rows: only a last
    # slice of fewer than MR rows is packed (zero rows after it); on AMX's road,
    # where the rows' stride lets L1 hold a tile's lines
    inplace = _in_place(ta, MR, k, lda)
    ap = np.empty((MR if inplace else min(MC, -(-m // MR) * MR)) * 4 * kcq, np.uint8)
    tile = np.empty(MR * 32, np.int32)
    for p0 in range(0, kq_all, KC):
        kq = min(KC, kq_all - p0)
        lp = 4 * kq
        acc = 1 if p0 > 0 else 0
        blk = bp_off + p0 * npan_all * 128
        for i0 in range(0, m, MC):
            mb = min(MC, m - i0)
            full = mb // MR * MR if inplace else 0     # rows read in place
            if not inplace:
                _pack_a(ta, m, k, a, a_off, lda, i0, mb, 4 * p0, kq, ap, 0)
            elif full < mb:
                _pack_a(ta, m, k, a, a_off, lda, i0 + full, mb - full, 4 * p0, kq, ap, 0)
            for jp in range(npan):
                bo = blk + (jp0 + jp) * kq * 128
                j0 = jp * 32
                nj = min(32, n - j0)
                for ir in range(0, mb, MR):
                    rows = inplace and ir < full
                    whole = nj == 32 and ir + MR <= mb
                    cb, co, ld_c, ac = (c, c_off + (i0 + ir) * ldc + j0, ldc, acc) if whole else (tile, 0, 32, 0)
                    if rows:
                        _int8_tile_rows(a, a_off + (i0 + ir) * lda + 4 * p0, bp, bo, cb, co, kq, lda, ld_c, ac)
                    else:
                        _int8_tile(ap, (ir - full) * lp, bp, bo, cb, co, kq, 16 * lp if AMX else lp, ld_c, ac)
                    if whole:
                        continue
                    for r in range(min(MR, mb - ir)):
                        row = c_off + (i0 + ir + r) * ldc + j0
                        for jj in range(nj):
                            c[row + jj] = c[row + jj] + tile[r * 32 + jj] if acc else tile[r * 32 + jj]
    return 0


def block_pack_bytes(k: int) -> int:
    """Bytes of the scratch ``u8s8_block`` packs A's rows into (one block of k)."""
    return MR * 4 * min(packed_quads.py_func(k), KC)


@helper_jit(cache=True, nogil=True)
def u8s8_begin():
    """Load the calling thread's tile configuration for the ``u8s8_block`` calls
    after it (AMX's road; nothing to do on AVX512-VNNI's)."""
    if AMX:
        amx_config()
    return 0


@helper_jit(cache=True, nogil=True)
def u8s8_block(m, k, a, a_off, lda, ap, ap_off, bp, bp_off, npan_all, jp, c, c_off):
    """One tile of C, for an epilogue to store while it is in L1: ``C[MR x 32]`` at
    ``c[c_off:]`` (rows 32 apart; its rows past m undefined) = ``A[m, k] @`` the 32
    columns of panel ``jp`` of B packed by pack_b_u8s8 (``npan_all`` panels from
    ``bp_off``), m <= MR.  A (u8, rows ``lda`` apart from ``a_off``) is read in
    place where gemm_u8s8_packed reads it so, else packed into ``ap`` from
    ``ap_off`` (``block_pack_bytes(k)``).  ``u8s8_begin`` first, on this thread."""
    kq_all = packed_quads(k)
    inplace = _in_place(0, m, k, lda)
    for p0 in range(0, kq_all, KC):
        kq = min(KC, kq_all - p0)
        lp = 4 * kq
        bo = bp_off + p0 * npan_all * 128 + jp * kq * 128
        acc = 1 if p0 > 0 else 0
        if inplace:
            _int8_tile_rows(a, a_off + 4 * p0, bp, bo, c, c_off, kq, lda, 32, acc)
        else:
            _pack_a(0, m, k, a, a_off, lda, 0, m, 4 * p0, kq, ap, ap_off)
            _int8_tile(ap, ap_off, bp, bo, c, c_off, kq, 16 * lp if AMX else lp, 32, acc)
    return 0


@helper_jit(cache=True, nogil=True)
def taps_in_registers(k, lda):
    """Does ``u8s8_taps`` sum its taps' products in AMX's tile registers, for A
    of k columns (bytes) in rows lda apart: on AMX's road, k whole steps of the
    tile in one block (A read in place), the rows a stride L1 holds."""
    return AMX and k % (4 * KQ_ALIGN) == 0 and k // 4 <= KC and lda % amx_tile.CONFLICT_STRIDE != 0


@helper_jit(cache=True, nogil=True)
def u8s8_taps(m, k, a, a_off, lda, aoffs, ap, ap_off, bp, bp_off, bstep, npan_all, jp, c, c_off):
    """One tile of C, as ``u8s8_block`` makes it, from the sum of ``len(aoffs)``
    products (a convolution's taps): ``C[MR x 32]`` at ``c[c_off:]`` (s32, rows
    32 apart) = the sum over taps t of ``A_t[m, k] @`` panel ``jp`` of B_t, A_t
    the u8 rows of ``a`` from ``a_off + aoffs[t]`` (``lda`` apart), B_t packed by
    pack_b_u8s8 from ``bp_off + t * bstep``.  Where ``taps_in_registers``, the
    taps' products are summed in AMX's tile registers in one call: then MR rows
    of every A_t are read, the caller's rows past m included (their products
    land in C's rows past m).  Else a ``u8s8_block`` per tap, summed.
    ``u8s8_begin`` first, on this thread."""
    if taps_in_registers(k, lda):
        kq = k // 4
        _amx_taps(a, a_off, aoffs, bp, bp_off + jp * kq * 128, bstep, c, c_off, kq, lda, len(aoffs))
        return 0
    part = np.empty(MR * 32, np.int32)
    for t in range(len(aoffs)):
        u8s8_block(m, k, a, a_off + aoffs[t], lda, ap, ap_off, bp, bp_off + t * bstep, npan_all, jp,
                   c if t == 0 else part, c_off if t == 0 else 0)
        if t > 0:
            for i in range(MR * 32):
                c[c_off + i] += part[i]
    return 0


@helper_jit(cache=True, nogil=True)
def gemm_u8s8_tiles(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc):
    """blas.gemm_u8s8 on the tile: B packed (for this call), then gemm_u8s8_packed."""
    npan = (n + 31) // 32
    bp = np.empty(packed_quads(k) * npan * 128, np.int8)
    sums = np.empty(max(1, n), np.int32)
    pack_b_u8s8(tb, n, k, b, b_off, ldb, bp, 0, sums, 0, 0, npan)
    return gemm_u8s8_packed(ta, m, n, k, a, a_off, lda, bp, 0, npan, 0, c, c_off, ldc)


@intrinsic
def _row_sums(typingctx, m, k, a, a_off, lda, out, o_off):
    """graphc.codegen.int8_tile's row sums: rows [0, m) of ``a[a_off:]`` (u8, k
    columns, ``lda`` apart) summed into ``out[o_off:]`` (f64)."""
    if not (arrays(types.uint8, a) and arrays(types.float64, out)):
        return None
    sig = types.void(m, k, a, a_off, lda, out, o_off)

    def codegen(context, builder, signature, args):
        call_symbol(context, builder, int8_tile.ROW_SUMS, signature, args,
                    [("p", 2, 3), ("i", 4), ("i", 0), ("i", 1), ("p", 5, 6)])
        return context.get_dummy_value()
    return sig, codegen


if OWN:
    @helper_jit(cache=True, nogil=True)
    def row_sums_u8(m, k, a, a_off, lda, out, o_off):
        """The sums of rows [0, m) of A (u8, k columns, rows ``lda`` apart from
        ``a_off``) into ``out[o_off + i]`` (f64): the zero-point compensation of B's."""
        _row_sums(m, k, a, a_off, lda, out, o_off)
        return 0
else:
    @helper_jit(cache=True, nogil=True)
    def row_sums_u8(m, k, a, a_off, lda, out, o_off):
        """row_sums_u8 without the tile module's vpsadbw: a loop."""
        for i in range(m):
            s = 0
            for q in range(k):
                s += np.int32(a[a_off + i * lda + q])
            out[o_off + i] = s
        return 0


__all__ = ["AMX", "MR", "KQ_ALIGN", "KC", "MC", "block_pack_bytes", "packed_quads", "u8s8_panels", "pack_b_u8s8",
           "gemm_u8s8_packed", "gemm_u8s8_tiles", "row_sums_u8", "u8s8_begin", "u8s8_block", "u8s8_taps",
           "taps_in_registers"]
