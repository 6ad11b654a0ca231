"""bf16 GEMMs on graphc's own tile: AMX's (graphc.codegen.amx_tile, 32 rows a
call) where the CPU has it, else AVX512-BF16's (graphc.codegen.bf16_tile, 8
rows), in BLIS's loop order: B packed once into panels of 32 columns
(``pack_b_bf16``: a kernel packs a GEMM's shared B once per call, before its
parallel loop), A a block of MC rows at a time, and for each B panel (in L1)
the tile runs down the block's MR-row slices (in L2), adding into C in place
(a scratch tile only at the edges of m and n).

Packed B (``bp``), for a K of kp_all pairs (k, k+1) (ceil(k / 2) rounded up
to a multiple of KP_ALIGN, the pairs an AMX tile consumes at a time) cut in
blocks of KC pairs and n cut in npan panels: block ``p0`` (its first pair)
starts at ``p0 * npan * 64``, panel ``jp`` of it ``jp * kp * 64`` further
(kp: the block's pairs), and each pair of a panel is 32 (k, k+1) pairs of
bf16, one per column; zeros past n and past k.  ``bf16_panels(n, k)`` is its
size.
"""
from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import intrinsic

from . import amx_tile, bf16_tile
from .blas_abi import arrays, amx_config, call_symbol, copy_elements, road_tiles, taps_call
from .blas_import import bf16_amx_gemm
from .helper_jit import helper_jit

# (the tiles' symbols, before any of these functions is compiled or loaded; the
# packs are the AVX-512 module's on both roads)
bf16_tile.bind()
#: the tile these drivers call: AMX's where it is the road, else AVX512-BF16's
AMX = bf16_amx_gemm() and amx_tile.bind()
#: ``tile(a, a_off, b, b_off, c, c_off, k_steps, lda, ldc, acc)``: C[MR][32] (+)= A @ B, A packed
#: (``_pack_a``) or in its own rows (``_rows``), B packed, from element offsets
MR, _bf16_tile, _bf16_tile_rows = road_tiles(AMX, (amx_tile.BF16, amx_tile.BF16_ROWS), bf16_tile.SYMBOL, bf16_tile.MR,
                                              types.uint16, types.uint16, types.float32)
#: ``taps(a, a_off, aoffs, b, b_off, bstep, c, c_off, kp, lda, ntaps)``: AMX's batch-reduce tile
_amx_taps = taps_call(amx_tile.BF16_TAPS, types.uint16, types.uint16, types.float32)
#: packed k is whole blocks of this many pairs (an AMX tile's step; the same on both roads)
KP_ALIGN = amx_tile.K_STEP

#: pairs of k per block of the packed operands (a B panel of KC pairs, 32 KB, stays in L1)
KC = 256
#: rows of A packed at a time (MC x 2 KC bf16: 128 KB, in L2)
MC = 128


@intrinsic
def _pack_rows(typingctx, b, off0, off1, bp, out_off, npan, pstride):
    """graphc.codegen.bf16_tile's pack: rows ``b[off0:]`` and ``b[off1:]`` (uint16)
    interleaved into npan panels of ``bp`` from ``out_off``, ``pstride`` apart."""
    if not arrays(types.uint16, b, bp):
        return None
    sig = types.void(b, off0, off1, bp, out_off, npan, pstride)

    def codegen(context, builder, signature, args):
        call_symbol(context, builder, bf16_tile.PACK, signature, args,
                    [("p", 0, 1), ("p", 0, 2), ("p", 3, 4), ("i", 5), ("i", 6)])
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def _pack_cols(typingctx, b, b_off, bp, out_off, ldb, kp):
    """graphc.codegen.bf16_tile's transposed pack: one full panel (32 rows of
    ``b`` from ``b_off``, ``ldb`` apart, as columns of B) into ``bp`` from
    ``out_off``, kp pairs of k."""
    if not arrays(types.uint16, b, bp):
        return None
    sig = types.void(b, b_off, bp, out_off, ldb, kp)

    def codegen(context, builder, signature, args):
        call_symbol(context, builder, bf16_tile.PACK_T, signature, args, [("p", 0, 1), ("p", 2, 3), ("i", 4), ("i", 5)])
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def transpose_u16(typingctx, src, s_off, lds, dst, d_off, ldd, nblk):
    """graphc.codegen.bf16_tile's transpose: ``nblk`` 16 x 16 blocks of 16-bit
    values, block b's rows 16 values of ``src`` from ``s_off + 16 b`` (rows
    ``lds`` apart), stored transposed into ``dst`` from ``d_off`` (its row p at
    ``(16 b + p) ldd`` further); returns 0.  A kernel's copy of channels-first
    bf16 src into rows of positions (graphc.codegen.conv_cols.VirtualRows)."""
    if not arrays(types.uint16, src, dst):
        return None
    sig = types.int64(src, s_off, lds, dst, d_off, ldd, nblk)

    def codegen(context, builder, signature, args):
        call_symbol(context, builder, bf16_tile.TRANSPOSE, signature, args,
                    [("p", 0, 1), ("i", 2), ("p", 3, 4), ("i", 5), ("i", 6)])
        return context.get_constant(types.int64, 0)
    return sig, codegen


@helper_jit(cache=True, nogil=True)
def packed_pairs(k):
    """The pairs of k of a packed operand: ceil(k / 2) rounded up to KP_ALIGN."""
    return -(-((k + 1) // 2) // KP_ALIGN) * KP_ALIGN


def bf16_panels(n: int, k: int) -> int:
    """Elements (uint16) of B packed for the tile (``pack_b_bf16``)."""
    return packed_pairs.py_func(k) * ((n + 31) // 32) * 64


@helper_jit(cache=True, nogil=True)
def pack_b_bf16(tb, n, k, b, b_off, ldb, bp, bp_off, jp_lo, jp_hi):
    """Pack panels [jp_lo, jp_hi) of B (k x n; ``tb``: stored transposed, element
    (kk, j) at ``b[b_off + j * ldb + kk]``) into ``bp`` from ``bp_off`` (the
    layout of the module's doc): a row pair at a time across the full panels
    (the tile module's vector pack), element by element at the edges; B stored
    transposed (column j of B a row of k, as a Linear's weights): a full panel's
    whole pairs gathered at a time (the module's transposed pack), each edge
    column's pairs read along memory."""
    kp_all = packed_pairs(k)
    npan = (n + 31) // 32
    fast_hi = min(jp_hi, n // 32) if tb == 0 else jp_lo
    whole = k // 2   # pairs with both halves in B (an odd k ends on a half pair)
    for p0 in range(0, kp_all, KC):
        kp = min(KC, kp_all - p0)
        blk = bp_off + p0 * npan * 64
        if tb != 0:
            nw = max(0, min(kp, whole - p0))
            for jp in range(jp_lo, jp_hi):
                _pack_panel_t(n, k, b, b_off, ldb, bp, blk + jp * kp * 64, jp, p0, kp, nw)
            continue
        for p in range(kp):
            kk = 2 * (p0 + p)
            lo = jp_lo
            if kk + 1 < k and fast_hi > jp_lo:
                r0 = b_off + kk * ldb + 32 * jp_lo
                _pack_rows(b, r0, r0 + ldb, bp, blk + jp_lo * kp * 64 + p * 64, fast_hi - jp_lo, kp * 64)
                lo = fast_hi
            for jp in range(lo, jp_hi):
                out = blk + jp * kp * 64 + p * 64
                for jj in range(32):
                    j = jp * 32 + jj
                    for e in range(2):
                        v = np.uint16(0)
                        if j < n and kk + e < k:
                            v = b[b_off + (kk + e) * ldb + j] if tb == 0 else b[b_off + j * ldb + kk + e]
                        bp[out + 2 * jj + e] = v
    return 0


@helper_jit(cache=True, nogil=True)
def _pack_panel_t(n, k, b, b_off, ldb, bp, out, jp, p0, kp, nw):
    """Panel jp of a block of kp pairs (from pair p0; nw of them whole) of B stored
    transposed into ``bp`` from ``out``: the whole pairs gathered where the
    panel's 32 columns are whole, else column by column; then the pairs past
    them (an odd k's last half pair, zeros past k; zeros past n)."""
    full = jp * 32 + 32 <= n
    if full:
        _pack_cols(b, b_off + jp * 32 * ldb + 2 * p0, bp, out, ldb, nw)
        if nw == kp:
            return
    for jj in range(32):
        j = jp * 32 + jj
        o = out + 2 * jj
        if j >= n:
            for p in range(kp):
                bp[o + p * 64] = 0
                bp[o + p * 64 + 1] = 0
            continue
        src = b_off + j * ldb + 2 * p0
        for p in range(nw if full else 0, nw):
            bp[o + p * 64] = b[src + 2 * p]
            bp[o + p * 64 + 1] = b[src + 2 * p + 1]
        for p in range(nw, kp):     # an odd k's last half pair, then zeros
            half = 2 * (p0 + p) < k
            bp[o + p * 64] = b[src + 2 * p] if half else 0
            bp[o + p * 64 + 1] = 0


@helper_jit(cache=True, nogil=True)
def pack_panels_bf16(tb, n, k, b, b_off, ldb, bp, bp_off):
    """All panels of B (k x n) packed by ``pack_b_bf16`` (``tb``: stored
    transposed, as K is the B of an attention's Q K^T)."""
    return pack_b_bf16(tb, n, k, b, b_off, ldb, bp, bp_off, 0, (n + 31) // 32)


@helper_jit(cache=True, nogil=True)
def _a_at(r, q, lp):
    """Where element (r, q) of a block of A packed with rows of lp bf16 lies: on
    AMX's road in tiles of 16 rows x 32 k (1 KB, what one tile register holds;
    a tile's rows 64 bytes apart, so a load touches no more than its lines), a
    group of 16 rows' tiles in the order of k; else row-major."""
    if AMX:
        return (r >> 4) * 16 * lp + (q >> 5) * 512 + (r & 15) * 32 + (q & 31)
    return r * lp + q


@helper_jit(cache=True, nogil=True)
def _pack_a(ta, m, k, a, a_off, lda, i0, mb, k0, kp, ap, ap_off):
    """Rows [i0, i0 + mb) of A, columns [k0, k0 + 2 kp), into ``ap`` from
    ``ap_off`` as ``_a_at`` places them (zeros past k: a NaN there would make
    NaN of a zero of packed B; the rows after mb up to a multiple of MR are left
    as they are: their products land in rows of the scratch tile never copied
    out, and ``tdpbf16ps`` / ``vdpbf16ps`` raise no exceptions)."""
    lp = 2 * kp
    qn = min(lp, k - k0)
    if ta == 0:
        whole = qn // 32 * 32     # runs of 32 k, contiguous in both layouts
        for r in range(mb):
            src = a_off + (i0 + r) * lda + k0
            for q0 in range(0, whole, 32):
                copy_elements(ap, ap_off + _a_at(r, q0, lp), a, src + q0, 32)
            for q in range(whole, qn):
                ap[ap_off + _a_at(r, q, lp)] = a[src + q]
    else:
        # A stored transposed (a column of A a row of memory, a weight gradient's dY^T):
        # 16 x 16 blocks transposed in registers, the edges value by value
        r16, q16 = mb // 16 * 16, qn // 16 * 16
        for r in range(0, r16, 16):
            for q in range(0, q16, 16):
                d = ap_off + ((r >> 4) * 16 * lp + (q >> 5) * 512 + (q & 31) if AMX else r * lp + q)
                transpose_u16(a, a_off + (k0 + q) * lda + i0 + r, lda, ap, d, 32 if AMX else lp, 1)
        for q in range(qn):
            src = a_off + (k0 + q) * lda + i0
            for r in range(0 if q >= q16 else r16, mb):
                ap[ap_off + _a_at(r, q, lp)] = a[src + r]
    for r in range(mb):
        for q in range(qn, lp):
            ap[ap_off + _a_at(r, q, lp)] = 0


@helper_jit(cache=True, nogil=True)
def _begin(m, n, k, beta, c, c_off, ldc):
    """What both drivers do first: C = beta * C where beta is neither 0 nor 1
    (the tiles then add into it), or zeros where k is 0 (0: zeros, never reading
    C); then, on AMX's road, this thread's tile configuration.  False: nothing
    more to do."""
    if m <= 0 or n <= 0:
        return False
    if k <= 0 or (beta != 0 and beta != 1):
        for i in range(m):
            for j in range(n):
                c[c_off + i * ldc + j] = c[c_off + i * ldc + j] * beta if beta != 0 else 0.0
        if k <= 0:
            return False
    if AMX:
        amx_config()   # (this thread's tiles, for the driver's calls)
    return True


@helper_jit(cache=True, nogil=True)
def _sweep(a, a_at, lda, full, ap, ap_at, lp, mb, kp, bp, bo, npan, n, c, c_at, ldc, acc, tile):
    """One block of k (kp pairs) of one block of mb rows of A into C: for each
    panel of B (from element ``bo``, kp * 64 apart), the tile down the rows, the
    first ``full`` read in A's own rows (from ``a_at``, ``lda`` apart), the rest
    packed (``ap`` from ``ap_at``, rows of lp); C's rows from ``c_at``."""
    for jp in range(npan):
        j0 = jp * 32
        nj = min(32, n - j0)
        for ir in range(0, mb, MR):
            whole = nj == 32 and ir + MR <= mb
            cb, co, ld_c, ac = (c, c_at + ir * ldc + j0, ldc, acc) if whole else (tile, 0, 32, 0)
            if ir < full:
                _bf16_tile_rows(a, a_at + ir * lda, bp, bo + jp * kp * 64, cb, co, kp, lda, ld_c, ac)
            else:
                _bf16_tile(ap, ap_at + (ir - full) * lp, bp, bo + jp * kp * 64, cb, co, kp, 16 * lp if AMX else lp,
                           ld_c, ac)
            if whole:
                continue
            for r in range(min(MR, mb - ir)):
                row = c_at + (ir + r) * ldc + j0
                for jj in range(nj):
                    c[row + jj] = c[row + jj] + tile[r * 32 + jj] if acc else tile[r * 32 + jj]


@helper_jit(cache=True, nogil=True)
def gemm_bf16_packed(ta, m, n, k, a, a_off, lda, bp, bp_off, npan_all, jp0, beta, c, c_off, ldc):
    """Row-major ``C[m, n] = op(A)[m, k] @ B[k, n] + beta * C`` (A bf16 as in
    blas.gemm_f32, C float32) with B packed by pack_b_bf16 into ``bp`` from
    ``bp_off``, npan_all panels wide, this product's columns from panel ``jp0``."""
    if not _begin(m, n, k, beta, c, c_off, ldc):
        return 0
    kp_all = packed_pairs(k)
    npan = (n + 31) // 32
    kcp = min(kp_all, KC)
    # A read in place (rows lda apart) when its packed pairs of k lie in its
    # rows: only a last slice of fewer than MR rows is packed (zero rows after
    # it); on AMX's road, where the rows' stride lets L1 hold a tile's lines
    inplace = ta == 0 and k % (2 * KP_ALIGN) == 0 and (not AMX or (lda * 2) % amx_tile.CONFLICT_STRIDE != 0)
    if inplace and m % MR == 0 and n % 32 == 0:
        # (no row packed, no edge tile: nothing allocated, A and C stand in for the buffers;
        # the attention backward's 64 x 64 tiles spent a tenth of their time allocating)
        ap, tile = a, c
    else:
        ap = np.empty((MR if inplace else min(MC, -(-m // MR) * MR)) * 2 * kcp, np.uint16)
        tile = np.empty(MR * 32, np.float32)
    for p0 in range(0, kp_all, KC):
        kp = min(KC, kp_all - p0)
        acc = 1 if p0 > 0 or beta != 0 else 0
        for i0 in range(0, m, MC):
            mb = min(MC, m - i0)
            full = mb // MR * MR if inplace else 0     # rows read in place
            if full < mb:
                _pack_a(ta, m, k, a, a_off, lda, i0 + full, mb - full, 2 * p0, kp, ap, 0)
            _sweep(a, a_off + i0 * lda + 2 * p0, lda, full, ap, 0, 2 * kp, mb, kp, bp,
                   bp_off + p0 * npan_all * 64 + jp0 * kp * 64, npan, n, c, c_off + i0 * ldc, ldc, acc, tile)
    return 0


def bf16_a_panels(m: int, k: int) -> int:
    """Elements (uint16) of A packed whole (``pack_a_bf16``)."""
    return -(-m // MR) * MR * 2 * packed_pairs.py_func(k)


@helper_jit(cache=True, nogil=True)
def pack_a_bf16(ta, m, k, a, a_off, lda, ap, ap_off):
    """All of A (m x k, as in gemm_bf16_packed) packed for the tile into ``ap``
    from ``ap_off``: for each block of KC pairs of k, its m rows (room for a
    multiple of MR) as the drivers pack a block (``_a_at``), block ``p0`` (its
    first pair) from ``ap_off + mp * 2 * p0`` (mp: m rounded up to MR).  A
    kernel packs a thread's A once when it multiplies it by several blocks of
    B's columns (``gemm_bf16_prepacked``), rather than once per block."""
    return pack_a_rows_bf16(ta, m, k, a, a_off, lda, 0, m, ap, ap_off)


@helper_jit(cache=True, nogil=True)
def pack_a_rows_bf16(ta, m, k, a, a_off, lda, r0, nr, ap, ap_off):
    """Rows [r0, r0 + nr) of A (r0 a multiple of MR) packed where pack_a_bf16
    puts them: a kernel packs a shared A (a convolution's weights) a block of
    rows per thread."""
    mp = -(-m // MR) * MR
    kp_all = packed_pairs(k)
    for p0 in range(0, kp_all, KC):
        kp = min(KC, kp_all - p0)
        _pack_a(ta, m, k, a, a_off, lda, r0, nr, 2 * p0, kp, ap, ap_off + mp * 2 * p0 + r0 * 2 * kp)
    return 0


@helper_jit(cache=True, nogil=True)
def gemm_bf16_prepacked(m, n, k, ap, ap_off, m_all, r0, bp, bp_off, npan_all, jp0, beta, c, c_off, ldc):
    """gemm_bf16_packed with A packed by pack_a_bf16 (``m_all`` rows, from
    ``ap_off``): this product's m rows from its row ``r0`` (a multiple of MR)."""
    mp = -(-m_all // MR) * MR
    if not _begin(m, n, k, beta, c, c_off, ldc):
        return 0
    kp_all = packed_pairs(k)
    npan = (n + 31) // 32
    tile = np.empty(MR * 32, np.float32)
    for p0 in range(0, kp_all, KC):
        kp = min(KC, kp_all - p0)
        acc = 1 if p0 > 0 or beta != 0 else 0
        for i0 in range(0, m, MC):
            _sweep(ap, 0, 0, 0, ap, ap_off + mp * 2 * p0 + (r0 + i0) * 2 * kp, 2 * kp, min(MC, m - i0), kp, bp,
                   bp_off + p0 * npan_all * 64 + jp0 * kp * 64, npan, n, c, c_off + i0 * ldc, ldc, acc, tile)
    return 0


def block_pack_elems(k: int) -> int:
    """Elements (uint16) of the scratch ``bf16_block`` packs A's rows into (one block of k)."""
    return MR * 2 * min(packed_pairs.py_func(k), KC)


@helper_jit(cache=True, nogil=True)
def bf16_begin():
    """Load the calling thread's tile configuration for the ``bf16_block`` calls
    after it (AMX's road; nothing to do on AVX512-BF16's)."""
    if AMX:
        amx_config()
    return 0


@helper_jit(cache=True, nogil=True)
def bf16_block(m, k, a, a_off, lda, ap, ap_off, bp, bp_off, npan_all, jp, acc, c, c_off):
    """One tile of C, for a kernel to sum several products into (``acc``: add to
    it, else overwrite it) and store while it is in L1: ``C[MR x 32]`` at
    ``c[c_off:]`` (float32, rows 32 apart; its rows past m undefined) (+)=
    ``A[m, k] @`` the 32 columns of panel ``jp`` of B packed by pack_b_bf16
    (``npan_all`` panels from ``bp_off``), m <= MR.  A (bf16 bits, rows ``lda``
    apart from ``a_off``) is read in place where gemm_bf16_packed reads it so,
    else packed into ``ap`` from ``ap_off`` (``block_pack_elems(k)``).
    ``bf16_begin`` first, on this thread."""
    kp_all = packed_pairs(k)
    inplace = m == MR and k % (2 * KP_ALIGN) == 0 and (not AMX or (lda * 2) % amx_tile.CONFLICT_STRIDE != 0)
    for p0 in range(0, kp_all, KC):
        kp = min(KC, kp_all - p0)
        lp = 2 * kp
        bo = bp_off + p0 * npan_all * 64 + jp * kp * 64
        ac = 1 if p0 > 0 or acc != 0 else 0
        if inplace:
            _bf16_tile_rows(a, a_off + 2 * p0, bp, bo, c, c_off, kp, lda, 32, ac)
        else:
            _pack_a(0, m, k, a, a_off, lda, 0, m, 2 * p0, kp, ap, ap_off)
            _bf16_tile(ap, ap_off, bp, bo, c, c_off, kp, 16 * lp if AMX else lp, 32, ac)
    return 0


def row_stride(k: int) -> int:
    """The elements between rows of a kernel's own copy of k-wide rows that the
    tile reads in place: k, or k + 32 where k's bytes are a multiple of the
    stride at which AMX's tile loads conflict in L1 (amx_tile.CONFLICT_STRIDE:
    a 256-channel bf16 row is 512 bytes)."""
    return k + 32 if AMX and (2 * k) % amx_tile.CONFLICT_STRIDE == 0 else k


@helper_jit(cache=True, nogil=True)
def taps_in_registers(k, lda):
    """Does ``bf16_taps`` sum its taps' products in AMX's tile registers, for A
    of k columns in rows lda apart: on AMX's road, k whole steps of the tile in
    one block (A read in place), the rows a stride L1 holds."""
    return AMX and k % (2 * KP_ALIGN) == 0 and k // 2 <= KC and (lda * 2) % amx_tile.CONFLICT_STRIDE != 0


@helper_jit(cache=True, nogil=True)
def bf16_taps(m, k, a, a_off, lda, aoffs, ap, ap_off, bp, bp_off, bstep, npan_all, jp, c, c_off):
    """One tile of C, as ``bf16_block`` makes it, from the sum of ``len(aoffs)``
    products (a convolution's taps): ``C[MR x 32]`` at ``c[c_off:]`` (rows 32
    apart) = the sum over taps t of ``A_t[m, k] @`` panel ``jp`` of B_t, A_t the
    rows of ``a`` from ``a_off + aoffs[t]`` (``lda`` apart), B_t packed by
    pack_b_bf16 from ``bp_off + t * bstep``.  Where ``taps_in_registers``, the
    taps' products are summed in AMX's tile registers in one call (C stored
    once): then MR rows of every A_t are read, the caller's rows past m
    included (their products land in C's rows past m).  Else a ``bf16_block``
    per tap.  ``bf16_begin`` first, on this thread."""
    if taps_in_registers(k, lda):
        kp = k // 2
        _amx_taps(a, a_off, aoffs, bp, bp_off + jp * kp * 64, bstep, c, c_off, kp, lda, len(aoffs))
        return 0
    for t in range(len(aoffs)):
        bf16_block(m, k, a, a_off + aoffs[t], lda, ap, ap_off, bp, bp_off + t * bstep, npan_all, jp, 1 if t > 0 else 0,
                   c, c_off)
    return 0


#: pairs of k of a step of ``bf16_weight_taps``: a B panel's and a tile of A rows' lines (with
#: the taps' halo) stay in L1 while every tap's product reads them
WEIGHT_KP = 128


@helper_jit(cache=True, nogil=True)
def bf16_weight_taps(m, a, a_off, lda, aoffs, bp, bp_off, kp, npan, acc, c, c_off, ldc, cstep):
    """A block of k of a convolution's weight gradient, one product per tap: for
    each tap t, ``C_t[m x 32 npan] (+)= A_t[m, 2 kp] @ B`` (``acc``: add to C_t,
    else overwrite it), A_t the rows of ``a`` from ``a_off + aoffs[t]`` (``lda``
    apart, read in place: m a multiple of MR, rows past the caller's channels
    included), B packed by pack_b_bf16 (npan panels, kp pairs, from ``bp_off``),
    C_t float32 from ``c_off + t * cstep`` (rows ``ldc`` apart, whole panels).
    kp a multiple of KP_ALIGN; on AMX's road lda a stride L1 holds
    (``taps_in_registers``).  A step of WEIGHT_KP pairs at a time, and in it
    every tap's product of one tile of C's A rows and B panel after the other:
    the taps' A rows overlap (a row offset apart) and their B is the same.
    ``bf16_begin`` first, on this thread."""
    for p0 in range(0, kp, WEIGHT_KP):
        ks = min(WEIGHT_KP, kp - p0)
        ac = 1 if p0 > 0 or acc != 0 else 0
        for i0 in range(0, m, MR):
            for jp in range(npan):
                for t in range(len(aoffs)):
                    _bf16_tile_rows(a, a_off + aoffs[t] + i0 * lda + 2 * p0, bp, bp_off + jp * kp * 64 + p0 * 64, c,
                                    c_off + t * cstep + i0 * ldc + jp * 32, ks, lda, ldc, ac)
    return 0


@helper_jit(cache=True, nogil=True)
def gemm_bf16_tiles(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
    """blas.gemm_bf16 on the tile: B packed (for this call; stored transposed, a
    full panel's pairs gathered at a time), then gemm_bf16_packed."""
    npan = (n + 31) // 32
    bp = np.empty(packed_pairs(k) * npan * 64, np.uint16)
    pack_panels_bf16(tb, n, k, b, b_off, ldb, bp, 0)
    return gemm_bf16_packed(ta, m, n, k, a, a_off, lda, bp, 0, npan, 0, beta, c, c_off, ldc)


__all__ = ["AMX", "MR", "KP_ALIGN", "KC", "MC", "packed_pairs", "bf16_panels", "bf16_a_panels", "pack_b_bf16",
           "pack_panels_bf16", "pack_a_bf16", "pack_a_rows_bf16", "gemm_bf16_packed", "gemm_bf16_prepacked", "gemm_bf16_tiles",
           "block_pack_elems", "bf16_begin", "bf16_block", "bf16_taps", "bf16_weight_taps", "row_stride", "taps_in_registers",
           "transpose_u16"]
