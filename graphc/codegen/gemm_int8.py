"""Integer GEMM kernels: ``C = (A - za) @ (B - zb)`` on u8 x s8 -> s32 products,
the zero points applied afterwards (oneDNN's compensation), for MatMuls whose
operands are static s8/u8 Dequantizes (graphc/codegen/rules/matmul.py).

Two roads, the same sums:

* graphc's AVX512-VNNI tile (graphc.codegen.int8_tile, driven by
  graphc.codegen.int8_gemm) where the CPU has it: B packed once into the
  tile's panels of 4-k quads (its column sums computed on the way), read from
  the kernel argument where it is one (s8), in parallel blocks of panels; A
  read in place where it is a u8 argument, else packed; each tile of C
  multiplied into an s32 scratch that the epilogue then stores.
* MKL's cblas_gemm_s8u8s32 (graphc.codegen.blas.gemm_u8s8) elsewhere, on
  packed panels of A and B.

Either way the s32 sums are exact while 255 * 128 * K < S32_LIMIT (``fits_s32``:
A' is u8 and B' s8 whatever the zero points; the caller checks), and ``store`` gets the f64 value
sum (A' - za')(B' - zb') = P - zb' RA - za' CB + K za' zb', where A' = A +
shifts[0] (u8) and B' = B + shifts[1] (s8), P = A' @ B', RA the row sums of
A' and CB the column sums of B'.
"""
from __future__ import annotations

import math

from . import ir
from .blas_import import int8_tile_gemm
from .gemm import Matrix, _tile, direct, empty_product, tiles
from .int8_gemm import u8s8_panels
from .kernel import worth_parallel
from .loops import linear
from ..types import DataType

#: an int8 GEMM's sums are s32: |sums| below this
S32_LIMIT = 1 << 31


def fits_s32(k: int) -> bool:
    """Are the s32 sums of ``k`` products of a u8 (0..255) and an s8 (-128..127)
    exact, whatever the values?"""
    return 255 * 128 * k < S32_LIMIT


def shifts_of(src_dtype: DataType, weights_dtype: DataType) -> tuple[int, int]:
    """The shifts bringing A (src) to u8 and B (weights) to s8: 128 for s8 src,
    -128 for u8 weights, else 0 (the module doc's shifts)."""
    return (0 if src_dtype is DataType.u8 else 128, 0 if weights_dtype is DataType.s8 else -128)


def compensated(product, ra, cb, zb, k: int, za2: float, no_zb: bool) -> ir.Expr:
    """sum (A' - za')(B' - zb') over a row of A' and a column of B' (f64), from
    their s32 ``product``, A's row sum ``ra`` and B's column sum ``cb``
    (``zb``: the column's zero point zb'; ``no_zb``: zb' is 0)."""
    acc = ir.f64(product)
    if za2 != 0:
        acc = acc - za2 * cb
    if not no_zb:
        acc = acc - zb * ra + float(k) * za2 * zb
    return acc


def emit_int8_gemm(kb, batch_shape, a: Matrix, b: Matrix, za: float, zb, shifts, store) -> None:
    """``store(bivars, i, j, C[i, j])`` (f64) for ``C = (A - za) @ (B - zb)``, A and B
    integer matrices (their refs load the quantized values), za a number, zb(j)
    the zero point of column j (see the module's doc)."""
    M, K, N = a.rows, a.cols, b.cols
    if empty_product(kb, batch_shape, M, K, N, store, ir.const(0.0, "f64")):
        return
    if int8_tile_gemm():
        _on_tile(kb, batch_shape, a, b, za, zb, shifts, store)
    else:
        _on_mkl(kb, batch_shape, a, b, za, zb, shifts, store)


def _packed(kb, m: Matrix, bivars, r0, nr, c0, nc, ld, size, par, elem, shift, rows_par=False):
    """Rows [r0, r0 + nr) x cols [c0, c0 + nc) of ``m`` plus ``shift``, as ``elem``
    (u8 / i8), into a row-major panel of ``size`` elements with rows ``ld``
    apart (zeros in columns nc..ld: rows running to a multiple of 4, for the
    tile)."""
    panel = kb.scratch(size, elem, par, prefix="ipanel")
    with kb.for_(nr, "r", rows_par) as r:
        row = kb.let(r * ld, "pr")
        with kb.for_(nc, "c") as c:
            v = ir.i64(m.ref.load_nd(m.index(bivars, r + r0, c + c0))) + shift
            kb.emit(panel.store(row + c, ir.cast(v, elem)))
        if isinstance(ld, int) and isinstance(nc, int) and ld > nc:
            with kb.for_(ld - nc, "c") as c:
                kb.emit(panel.store(row + nc + c, ir.cast(ir.const(0), elem)))
    return panel


def _zero_points(za, zb, shifts):
    """(za', zb'(j), whether zb' is 0 for every column): the zero points of the shifted operands."""
    za2 = float(za + shifts[0])

    def zb2(j):
        return zb(j) + float(shifts[1])
    z0 = zb(ir.const(0))
    no_zb = shifts[1] == 0 and z0.op == "const" and z0.args[0] == 0
    return za2, zb2, no_zb


def _epilogue(kb, store, bivars, i0, j0, m_, n_, ct, ra, cb, cj, K, za2, zb2, no_zb):
    """Store C's tile [i0, i0 + m_) x [j0, j0 + n_) from its s32 products ``ct``
    (rows n_ apart), the compensation applied (``ra``: A's row sums by tile row,
    ``cb[cj + jj]``: B's column sums)."""
    with kb.for_(m_, "ii") as ii:
        row = kb.let(ii * n_, "ti")
        rai = None if no_zb else kb.let(ra[ii], "ra")
        with kb.for_(n_, "jj") as jj:
            j = kb.let(j0 + jj, "j")
            z = None if no_zb else kb.let(zb2(j), "zb")
            kb.emit(store(bivars, i0 + ii, j, compensated(ct[row + jj], rai, cb[cj + jj], z, K, za2, no_zb)))


def _on_tile(kb, batch_shape, a, b, za, zb, shifts, store):
    """The VNNI tile's road (see the module's doc)."""
    M, K, N = a.rows, a.cols, b.cols
    nbatch = math.prod(batch_shape)
    tm, tn = tiles(nbatch, M, N, False, K=K)
    tn = min(N, -(-tn // 32) * 32)        # column tiles start at a panel of the packed B
    mt, nt = -(-M // tm), -(-N // tn)
    parallel = nbatch * mt * nt > 1 and worth_parallel(M * N * K * nbatch // 32)
    za2, zb2, no_zb = _zero_points(za, zb, shifts)
    da = direct(a, DataType.u8) if shifts[0] == 0 else None
    da = da if da is not None and da[0] == 0 else None       # (row sums read A's rows in place)
    db = direct(b, DataType.s8) if shifts[1] == 0 else None
    K4, npan = -(-K // 4) * 4, -(-N // 32)

    def b_source(bivars, j0, n_, par):
        """(buffer, offset, ld, transposed) of B's columns j0.. (s8)."""
        if db is not None:
            tb, ld = db
            off = b.base(bivars) if b.batched else b.base(None)
            return b.ref.buf, linear([0, j0], b.strides, off), ld, tb
        nc = N if bivars is None else n_
        panel = _packed(kb, b, bivars, 0, K, j0, nc, nc, K * (N if bivars is None else tn), par, "i8", shifts[1],
                        bivars is None and K > 1 and worth_parallel(K * N))
        return panel.buf, panel.at(0), nc, 0
    if not b.batched:
        # B packed once, blocks of panels in parallel (its column sums beside it)
        bp = kb.workspace(u8s8_panels(N, K), "i8", prefix="bpanels")
        cb = kb.workspace(N, "i32", prefix="bsums")
        buf, off, ld, tb = b_source(None, 0, N, False)
        chunk = max(1, min(npan, 8192 // max(1, K) + 1))
        nch = -(-npan // chunk)
        with kb.for_(nch, "pc", nch > 1 and worth_parallel(K * N)) as pc:
            lo = kb.let(pc * chunk, "jlo")
            kb.let(ir.call("pack_b_u8s8", tb, N, K, buf, off, ld, bp, 0, cb, 0, lo, ir.call("min", lo + chunk, npan)),
                   "st")
    with kb.for_(nbatch * mt * nt, "t", parallel) as t:
        bivars, i0, j0, m_, n_ = _tile(kb, t, batch_shape, (M, N), (tm, tn))
        ra = None if no_zb else kb.scratch(tm, "f64", parallel, prefix="isum")
        if da is not None:
            abuf, lda = a.ref.buf, da[1]
            aoff = kb.let(linear([i0, 0], a.strides, a.base(bivars) if a.batched else a.base(None)), "ao")
        else:
            ap = _packed(kb, a, bivars, i0, m_, 0, K, K4, tm * K4, parallel, "u8", shifts[0])
            abuf, aoff, lda = ap.buf, ap.at(0), K4
        if ra is not None:
            kb.let(ir.call("row_sums_u8", m_, K, abuf, aoff, lda, ra.buf, ra.at(0)), "st")
        if b.batched:
            bpt = kb.scratch(u8s8_panels(tn, K), "i8", parallel, prefix="bpanels")
            cbt = kb.scratch(tn, "i32", parallel, prefix="bsums")
            buf, off, ld, tb = b_source(bivars, j0, n_, parallel)
            npt = kb.let((n_ + 31) // 32, "np")
            kb.let(ir.call("pack_b_u8s8", tb, n_, K, buf, off, ld, bpt.buf, bpt.at(0), cbt.buf, cbt.at(0), 0, npt),
                   "st")
            bpb, bpo, nall, jp0, cbs, cj = bpt.buf, bpt.at(0), npt, ir.const(0), cbt, cbt.at(0)
        else:
            bpb, bpo, nall, jp0, cbs, cj = bp, ir.const(0), npan, j0 // 32, cb, j0
        ct = kb.scratch(tm * tn, "i32", parallel, prefix="itile")
        kb.let(ir.call("gemm_u8s8_packed", 0, m_, n_, K, abuf, aoff, lda, bpb, bpo, nall, jp0, ct.buf, ct.at(0), n_),
               "st")
        _epilogue(kb, store, bivars, i0, j0, m_, n_, ct, ra, cbs, cj, K, za2, zb2, no_zb)


def _on_mkl(kb, batch_shape, a, b, za, zb, shifts, store):
    """MKL's road: panels of A + shifts[0] (u8) and B + shifts[1] (s8) handed to gemm_u8s8."""
    M, K, N = a.rows, a.cols, b.cols
    nbatch = math.prod(batch_shape)
    tm, tn = tiles(nbatch, M, N, False, K=K)
    mt, nt = -(-M // tm), -(-N // tn)
    parallel = nbatch * mt * nt > 1 and worth_parallel(M * N * K * nbatch // 32)
    za2, zb2, no_zb = _zero_points(za, zb, shifts)

    def col_sums(panel, nr, nc, size, par):
        """s32 sums of the panel's columns (rows added in turn: the loads run along rows)."""
        out = kb.scratch(size, "i32", par, prefix="isum")
        with kb.for_(nc, "s") as x:
            kb.emit(out.store(x, ir.const(0)))
        with kb.for_(nr, "e") as e, kb.for_(nc, "s") as x:
            kb.emit(out.store(x, out[x] + panel[e * nc + x]))
        return out
    shared = None
    if not b.batched:
        bp = _packed(kb, b, None, 0, K, 0, N, N, K * N, False, "i8", shifts[1], K > 1 and worth_parallel(K * N))
        shared = bp, col_sums(bp, K, N, N, False)
    with kb.for_(nbatch * mt * nt, "t", parallel) as t:
        bivars, i0, j0, m_, n_ = _tile(kb, t, batch_shape, (M, N), (tm, tn))
        ap = _packed(kb, a, bivars, i0, m_, 0, K, K, tm * K, parallel, "u8", shifts[0])
        ra = None if no_zb else kb.scratch(tm, "f64", parallel, prefix="isum")
        if ra is not None:
            kb.let(ir.call("row_sums_u8", m_, K, ap.buf, ap.at(0), K, ra.buf, ra.at(0)), "st")
        if shared is not None:
            (bp, cb), boff, ldb, cj = shared, j0, N, j0
        else:
            bp = _packed(kb, b, bivars, 0, K, j0, n_, n_, K * tn, parallel, "i8", shifts[1])
            cb, boff, ldb, cj = col_sums(bp, K, n_, tn, parallel), ir.const(0), n_, ir.const(0)
        ct = kb.scratch(tm * tn, "i32", parallel, prefix="itile")
        kb.let(ir.call("gemm_u8s8", 0, 0, m_, n_, K, ap.buf, ap.at(0), K, bp.buf, bp.at(0) + boff, ldb,
                       ct.buf, ct.at(0), n_), "st")
        _epilogue(kb, store, bivars, i0, j0, m_, n_, ct, ra, cb, cj, K, za2, zb2, no_zb)


__all__ = ["S32_LIMIT", "compensated", "emit_int8_gemm", "fits_s32", "shifts_of"]
