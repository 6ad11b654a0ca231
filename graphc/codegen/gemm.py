"""GEMM-based kernels: the loops around BLAS calls, shared by MatMul and the convolutions.

A kernel computes, for every index of a batch shape, ``C = A @ B`` with
A (M x K) and B (K x N) read from tensors, and hands each element of C to a
store function (the op's output, with its bias and any fused epilogue).

* An operand that is an f32 kernel argument whose matrix has a unit stride
  along one of its two dims goes to BLAS as it lies (transposed or not, any
  leading dimension): no copy.  Any other operand (bf16/f16, a fused
  prologue, an operand rounded for fpmath_mode, odd strides) is *packed*:
  loaded through ``load_nd`` into an f32 panel.  An operand the batch does not
  index is packed once, before the parallel loop.
* C is cut into tiles (batch x row block x column block) that run in
  parallel (``prange``), each GEMM single-threaded (see blas.py).  A tile is
  written by BLAS straight into the output when the output is an f32 argument
  with unit column stride and nothing is applied on store; otherwise into an
  f32 scratch tile that a loop then stores element by element.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from . import ir
from .bf16_gemm import bf16_a_panels, bf16_panels
from .blas_import import bf16_gemm, bf16_tile_gemm
from .kernel import ArrayRef, as_stored, plan_threads, worth_parallel
from ..numerics import fpmath_down
from .loops import linear, unravel
from ..types import DataType

#: elements of C one scratch tile holds at most (4 MB of f32: the epilogue
#: re-reads it from cache); tiles written by BLAS in place have no bound
TILE_ELEMS = 1 << 20
#: f32 elements of the tile a thread's column block (one GEMM, a column block per thread)
#: is computed into at a time when an epilogue reads it: about a quarter of L2
OWN_TILE_ELEMS = 1 << 16
#: columns (a multiple of 32: whole panels) of such a tile at most
OWN_COLS = 256
#: elements of A a thread packs whole for its column block at most (bf16: 4 MB), where
#: the block's tile of C is larger than TILE_ELEMS (made from tiles of L2 under the epilogue)
OWN_A_ELEMS = 1 << 21
#: the rows of a tile from L2 (_tiles_of_l2) are a multiple of this: whole calls of
#: graphc's bf16 tiles (AMX's 32 rows, AVX512-BF16's 8), whose packed A they start in
TILE_ROWS = 32
#: fewest rows of a tile: BLAS packs B again for every call, so short tiles pay
MIN_TILE_ROWS = 64
#: fewest columns of a column-block tile
MIN_TILE_COLS = 256
#: a K this short makes tiles of at most SHORT_K_ROWS rows (see tiles)
SHORT_K = 128
SHORT_K_ROWS = 64


def tiles(nbatch, M, N, in_place, cpus=None, K=None) -> tuple:
    """(rows, cols) of C's tiles: large GEMMs run fastest, so a tile is a whole
    matrix of the batch, cut only as far as it takes to give every core work, and
    (scratch tiles) to stay within TILE_ELEMS.  A matrix wider than tall is cut
    into column blocks: each core then streams its own part of B (the big operand
    then) instead of all of it.  With a short K (<= SHORT_K) a call does little
    work per row of A and C, and blocks of SHORT_K_ROWS rows run faster than a
    whole tall matrix (batched 512x64x64: 0.36 against 0.50 ms per 16 matrices
    on one core; with rows SHORT_K_ROWS floats apart, a transformer's heads read
    in place, 0.44 against 0.71 ms)."""
    cpus = cpus or plan_threads()
    blocks = -(-cpus // nbatch) if nbatch < cpus else 1
    if blocks > 1 and N > M and N >= 2 * MIN_TILE_COLS:
        tm, tn = M, max(MIN_TILE_COLS, -(-N // blocks))
    else:
        tm, tn = max(min(M, MIN_TILE_ROWS), -(-M // blocks)), N
    if K is not None and K <= SHORT_K:
        tm = min(tm, SHORT_K_ROWS)
    if not in_place:
        tn = min(tn, max(256, TILE_ELEMS // max(1, min(tm, MIN_TILE_ROWS))))
        tm = max(1, min(tm, TILE_ELEMS // tn))
    return tm, tn


@dataclass
class Matrix:
    """One GEMM operand or the result, read/written through a tensor.

    ``index(bivars, r, c)`` gives the tensor's multi-index of matrix element
    (r, c) for batch index ``bivars``; ``strides`` are the element strides of
    (r, c) in the tensor's buffer and ``base(bivars)`` the offset of (0, 0)
    (both None when the tensor is not a plain kernel argument or its layout
    does not allow BLAS to read it in place); ``batched`` says whether the
    batch index moves the matrix."""

    ref: object
    rows: int
    cols: int
    index: Callable
    batched: bool = True
    strides: tuple | None = None
    base: Callable | None = None
    #: a function rounding each loaded value (fpmath_mode), or None
    rounding: Callable | None = None


def direct(m: Matrix, dtype: DataType = DataType.f32):
    """(transposed, leading dim) to hand ``m`` to BLAS in place (a ``dtype`` GEMM
    operand), or None."""
    if m.strides is None or m.rounding is not None or type(m.ref) is not ArrayRef or m.ref.dtype is not dtype:
        return None
    rs, cs = m.strides
    if cs == 1 or m.cols == 1:
        ld = rs if m.rows > 1 else m.cols
        if ld >= max(1, m.cols):
            return 0, ld
    if rs == 1 or m.rows == 1:
        ld = cs if m.cols > 1 else m.rows
        if ld >= max(1, m.rows):
            return 1, ld
    return None


def bf16_valued(m: Matrix) -> bool:
    """Are ``m``'s values bf16 numbers (a bf16 tensor, or f32 rounded to bf16 by
    fpmath_mode)?  Two such operands multiply in a bf16 GEMM exactly as in f32."""
    if m.rounding is None:
        return m.ref.dtype is DataType.bf16
    return getattr(m.rounding, "dtype", None) is DataType.bf16


def pack(kb, m: Matrix, bivars, r0, nr, c0, nc, size, parallel, rows_parallel=False, bf16=False):
    """Load rows [r0, r0+nr) x cols [c0, c0+nc) of ``m`` into a row-major f32 panel
    (bf16: of bf16 bits) (a scratch of ``size`` elements, per thread inside a
    ``parallel`` loop); returns the Scratch.  ``rows_parallel``: the rows loop
    itself is parallel (a panel packed once, outside the tile loop, computing a
    fused prologue)."""
    panel = kb.scratch(size, "u16" if bf16 else "f32", parallel, prefix="panel")
    with kb.for_(nr, "r", rows_parallel) as r:
        row = kb.let(r * nc, "pr")
        with kb.for_(nc, "c") as c:
            v = m.ref.load_nd(m.index(bivars, r + r0, c + c0))
            if m.rounding is not None:
                v = m.rounding(v)
            kb.emit(panel.store(row + c, ir.call("f32_to_bf16", ir.f32(v)) if bf16 else ir.f32(v)))
    return panel


def emit_gemm(kb, batch_shape, a: Matrix, b: Matrix, store, out: Matrix | None = None,
              exact_k: int | None = None) -> None:
    """Emit ``for each batch index: C = A @ B; store(bivars, i, j, C[i, j])``.

    ``store(bivars, i, j, value)`` returns the statements storing one element;
    ``out`` (a Matrix over the output with strides and base) lets BLAS write
    C in place when ``store`` would only store the value as it is.
    ``exact_k``: A and B hold integers whose products summed over runs of at
    most exact_k stay exact in f32 (graphc.codegen.quant.exact_chunk); a longer K is
    multiplied a run at a time and the runs added in f64, so C is the exact
    integer sum, as an s32 accumulator holds it."""
    M, K, N = a.rows, a.cols, b.cols
    if empty_product(kb, batch_shape, M, K, N, store, ir.const(0.0, "f32")):
        return
    nbatch = math.prod(batch_shape)
    # bf16 values on both sides: a bf16 GEMM (MKL's, on AMX tiles here), operands
    # read in place when they are bf16 tensors, else packed as bf16
    bf16 = exact_k is None and bf16_gemm() and bf16_valued(a) and bf16_valued(b)
    gemm = "gemm_bf16" if bf16 else "gemm_f32"
    da, db = direct(a, DataType.bf16 if bf16 else DataType.f32), direct(b, DataType.bf16 if bf16 else DataType.f32)
    dc = direct(out) if out is not None else None
    chunks = 1 if exact_k is None or K <= exact_k else -(-K // exact_k)
    if chunks > 1:
        assert da is None and db is None and dc is None, "integer operands are packed"
    if dc is not None and dc[0] == 1:
        dc = None          # BLAS writes C row-major only
    tm, tn = tiles(nbatch, M, N, dc is not None, K=K)
    panels = bf16 and not b.batched and bf16_tile_gemm()
    own = False
    if panels:
        tn = min(N, -(-tn // 32) * 32)        # column tiles start at a panel of the packed B
        blocks = _own_blocks(nbatch, M, K, N, dc is not None)
        if blocks is not None:
            (tm, tn), own = blocks, True
    mt, nt = -(-M // tm), -(-N // tn)
    # a thread's block of C computed from tiles of L2 under the epilogue (_tiles_of_l2)
    l2_tiles = (own or (bf16 and not panels)) and dc is None and chunks == 1 and tm * tn > OWN_TILE_ELEMS
    parallel = nbatch * mt * nt > 1 and worth_parallel(M * N * K * nbatch // 8)
    shared = {}
    for name, m, d in (("a", a, da), ("b", b, db)):
        if d is None and not m.batched:
            shared[name] = pack(kb, m, None, 0, m.rows, 0, m.cols, m.rows * m.cols, False,
                                 m.rows > 1 and worth_parallel(m.rows * m.cols), bf16)
    if panels:
        src = (b.ref.buf, b.base(None), db[1], db[0]) if db is not None else (shared["b"].buf, 0, N, 0)
        if not own:
            bp = bf16_panels_of(kb, K, N, src)
    # C written in place with rows wider than its own (matrices interleaved in
    # rows: a transformer's heads): the batch varies fastest, so the tiles one
    # thread runs in turn share the rows' memory (0.40 against 0.49 ms for 16
    # heads of 512x64x64 in blocks of 32 rows on one core)
    interleaved = dc is not None and dc[1] > N and nbatch > 1 and mt > 1
    with kb.for_(nbatch * mt * nt, "t", parallel) as t:
        bivars, i0, j0, m_, n_ = _tile(kb, t, batch_shape, (M, N), (tm, tn), interleaved)

        def operand(name, mat, d, r0, nr, c0, nc, size):
            """(buffer, offset, ld, transposed) of the sub-matrix rows r0.., cols c0.."""
            if d is not None:
                ta, ld = d
                rs, cs = mat.strides
                off = mat.base(bivars) if mat.batched else mat.base(None)
                return mat.ref.buf, linear([r0, c0], [rs, cs], off), ld, ta
            if name in shared:
                return shared[name].buf, r0 * mat.cols + c0, mat.cols, 0
            panel = pack(kb, mat, bivars, r0, nr, c0, nc, size, parallel, bf16=bf16)
            return panel.buf, panel.at(0), nc, 0
        abuf, aoff, lda, ta = operand("a", a, da, i0, m_, 0, K, tm * K)
        if own:
            bpt = kb.scratch(bf16_panels(tn, K), "u16", parallel, prefix="bpanels")
            npt = kb.let((n_ + 31) // 32, "np")
            sbuf, soff, sld, stb = src
            kb.let(ir.call("pack_b_bf16", stb, n_, K, sbuf, soff + (j0 * sld if stb else j0), sld, bpt.buf, bpt.at(0),
                           0, npt), "st")

            # several blocks of columns from tiles of L2: A packed for the tile once, not per block
            prepacked = l2_tiles and tn > OWN_COLS
            if prepacked:
                apk = kb.scratch(bf16_a_panels(tm, K), "u16", parallel, prefix="apanels")
                kb.let(ir.call("pack_a_bf16", ta, m_, K, abuf, aoff, lda, apk.buf, apk.at(0)), "st")

            def product(cbuf, coff, ldc, rows=m_, r0=None, cols=n_, c0=None):
                # (rows from r0 of A; columns from c0 of the block, a multiple of 32: from its panel)
                jp = 0 if c0 is None else c0 // 32
                if prepacked:
                    return ir.call("gemm_bf16_prepacked", rows, cols, K, apk.buf, apk.at(0), m_,
                                   0 if r0 is None else r0, bpt.buf, bpt.at(0), npt, jp, 0.0, cbuf, coff, ldc)
                a_at = aoff if r0 is None else aoff + (r0 if ta else r0 * lda)
                return ir.call("gemm_bf16_packed", ta, rows, cols, K, abuf, a_at, lda, bpt.buf, bpt.at(0), npt,
                               jp, 0.0, cbuf, coff, ldc)
        elif panels:
            def product(cbuf, coff, ldc):
                return ir.call("gemm_bf16_packed", ta, m_, n_, K, abuf, aoff, lda, bp, 0, -(-N // 32), j0 // 32, 0.0,
                               cbuf, coff, ldc)
        else:
            bbuf, boff, ldb, tb_ = operand("b", b, db, 0, K, j0, n_, K * tn)

            def product(cbuf, coff, ldc, rows=m_, r0=None, cols=n_, c0=None):
                # (rows from r0 of A, columns from c0 of B's block)
                a_at = aoff if r0 is None else aoff + (r0 if ta else r0 * lda)
                b_at = boff if c0 is None else boff + (c0 * ldb if tb_ else c0)
                return ir.call(gemm, ta, tb_, rows, cols, K, abuf, a_at, lda, bbuf, b_at, ldb, 0.0, cbuf, coff, ldc)
        if dc is not None:
            ldc = dc[1]
            coff = linear([i0, j0], out.strides, out.base(bivars))
            kb.let(product(out.ref.buf, coff, ldc), "st")
        elif chunks > 1:
            exact_runs(kb, store, bivars, i0, j0, m_, n_, K, -(-K // chunks), tm * tn, parallel,
                        (abuf, aoff, lda), (bbuf, boff, ldb))
        elif l2_tiles:
            _tiles_of_l2(kb, store, bivars, i0, j0, m_, n_, tn, product, parallel)
        else:
            tile = kb.scratch(tm * tn, "f32", parallel, prefix="tile")
            kb.let(product(tile.buf, tile.at(0), n_), "st")
            _store_tile(kb, store, bivars, i0, j0, m_, n_, tile)


def _own_blocks(nbatch, M, K, N, in_place: bool):
    """(rows, columns) of C each thread computes as one GEMM on graphc's bf16 tile
    with its own packed operands, or None (tiles of C over B packed once, shared).
    A column block per thread, each packing its own panels of B inside its tile
    (B packed once, in parallel, and no loop before the tiles' whose end every
    thread waits for: on oversubscribed cores that wait ran 1024^3 in 24 ms
    against 8 with the packing serial), where its tile of C is small, C is
    written in place, or its A packs in OWN_A_ELEMS (its tile then made from
    tiles of L2).  Taller than wide: a block of rows per thread instead (its part
    of A packed, not all of it on every thread; B whole on each): bf16
    3072x512x768 1.50-1.60 -> 1.16 ms."""
    cols = min(N, -(-(-(-N // plan_threads())) // 32) * 32)    # N / threads, up to a panel
    if nbatch != 1 or not (in_place or M * cols <= TILE_ELEMS or M * K <= OWN_A_ELEMS):
        return None
    rows = -(-(-(-M // plan_threads())) // 32) * 32            # M / threads, whole tiles of rows
    if M >= 2 * N and rows * K <= OWN_A_ELEMS and (in_place or M * cols > OWN_TILE_ELEMS):
        return rows, N
    return M, cols


def _tiles_of_l2(kb, store, bivars, i0, j0, m_, n_, tn, product, parallel) -> None:
    """A thread's block of C (rows [i0, i0 + m_) x columns [j0, j0 + n_)) a block of
    OWN_COLS columns, then of rows, at a time, ``product(cbuf, coff, ldc, rows, r0,
    cols, c0)`` computing each into a tile its epilogue (``store``) then reads while
    it is in L2, the block's part of B staying there for its rows (the whole 512 x
    2048 f32 tile, 4 MB, went to memory and back: MatMul+bias+GELU 512x1024x4096
    bf16 5.35 -> 4.89-5.12 ms on graphc's tile, 3.82 -> 3.38-3.46 on MKL's on AMX)."""
    cb = min(tn, OWN_COLS)
    rb = max(TILE_ROWS, OWN_TILE_ELEMS // cb // TILE_ROWS * TILE_ROWS)     # (whole calls of the tile)
    tile = kb.scratch(rb * cb, "f32", parallel, prefix="tile")
    with kb.for_((n_ + (cb - 1)) // cb, "cbk") as cbk:
        c0 = kb.let(cbk * cb, "c0")
        nc = kb.let(ir.call("min", cb, n_ - c0), "nc")
        with kb.for_((m_ + (rb - 1)) // rb, "rbk") as rbk:
            r0 = kb.let(rbk * rb, "r0")
            mr = kb.let(ir.call("min", rb, m_ - r0), "mr")
            kb.let(product(tile.buf, tile.at(0), nc, mr, r0, nc, c0), "st")
            _store_tile(kb, store, bivars, i0 + r0, j0 + c0, mr, nc, tile)


def _store_tile(kb, store, bivars, i0, j0, m_, n_, tile) -> None:
    """C's rows [i0, i0 + m_) x columns [j0, j0 + n_) from the row-major tile,
    through ``store`` (bias, post-ops, the output's dtype)."""
    with kb.for_(m_, "ii") as ii:
        row = kb.let(ii * n_, "ti")
        i = kb.let(i0 + ii, "i")
        with kb.for_(n_, "jj") as jj:
            kb.emit(store(bivars, i, j0 + jj, tile[row + jj]))


def bf16_panels_of(kb, K, N, src):
    """B (K x N bf16: ``src`` its (buffer, offset, ld, transposed)) packed once into
    the tile's panels (graphc.codegen.bf16_gemm) in a workspace, blocks of panels
    in parallel; returns the workspace."""
    bp = kb.workspace(bf16_panels(N, K), "u16", prefix="bpanels")
    npan = -(-N // 32)
    chunk = max(1, min(npan, 4096 // max(1, K) + 1))     # a few panels of K x 32 a work item
    nch = -(-npan // chunk)
    buf, off, ld, tb = src
    with kb.for_(nch, "pc", nch > 1 and worth_parallel(K * N)) as pc:
        lo = kb.let(pc * chunk, "jlo")
        kb.let(ir.call("pack_b_bf16", tb, N, K, buf, off, ld, bp, 0, lo, ir.call("min", lo + chunk, npan)), "st")
    return bp


def empty_product(kb, batch_shape, M, K, N, store, zero) -> bool:
    """Whether a GEMM of these sizes has no product to compute: C empty (no tile,
    nothing to store) or K = 0 (every element of C an empty sum: ``zero`` stored,
    bias and post-ops applied by ``store``), those stores emitted."""
    if 0 in (M, N, *batch_shape):
        return True
    if K:
        return False
    with kb.for_(math.prod(batch_shape), "tb") as tb:
        bivars = unravel(kb, tb, batch_shape) if batch_shape else []
        with kb.for_(M, "i") as i, kb.for_(N, "j") as j:
            kb.emit(store(bivars, i, j, zero))
    return True


def _tile(kb, t, batch_shape, dims, tile, interleaved=False):
    """Tile ``t`` of C (the batch, then row blocks, then column blocks; with
    ``interleaved`` the batch fastest): (batch ivars, first row, first column,
    rows, columns)."""
    (M, N), (tm, tn) = dims, tile
    nbatch, mt, nt = math.prod(batch_shape), -(-M // tm), -(-N // tn)
    if interleaved:
        rest = kb.let(t % (nbatch * nt), "tr")
        tb = kb.let(rest // nt, "tb")
        i0 = kb.let((t // (nbatch * nt)) * tm, "i0")
        j0 = kb.let((rest % nt) * tn, "j0")
    else:
        tb = kb.let(t // (mt * nt), "tb")
        rest = kb.let(t % (mt * nt), "tr")
        i0 = kb.let((rest // nt) * tm, "i0")
        j0 = kb.let((rest % nt) * tn, "j0")
    m_ = kb.let(ir.call("min", tm, M - i0), "m")
    n_ = kb.let(ir.call("min", tn, N - j0), "n")
    return (unravel(kb, tb, batch_shape) if batch_shape else []), i0, j0, m_, n_


def exact_runs(kb, store, bivars, i0, j0, m_, n_, K, run, size, parallel, a, b):
    """C = A @ B (row-major packed A: m_ x K, B: K x n_) a run of ``run`` columns of
    A (rows of B) at a time, each run's f32 GEMM exact, the runs added into an
    f64 tile that ``store`` then reads (see emit_gemm's ``exact_k``)."""
    (abuf, aoff, lda), (bbuf, boff, ldb) = a, b
    tile = kb.scratch(size, "f32", parallel, prefix="tile")
    acc = kb.scratch(size, "f64", parallel, prefix="acc")
    with kb.for_(-(-K // run), "kr") as kr:
        k0 = kb.let(kr * run, "k0")
        kn = kb.let(ir.call("min", run, K - k0), "kn")
        kb.let(ir.call("gemm_f32", 0, 0, m_, n_, kn, abuf, aoff + k0, lda, bbuf, boff + k0 * ldb, ldb, 0.0,
                       tile.buf, tile.at(0), n_), "st")
        with kb.for_(m_ * n_, "e") as e:
            prev = ir.select(kr.eq(0), ir.const(0.0, "f64"), acc[e])
            kb.emit(acc.store(e, prev + ir.f64(tile[e])))
    with kb.for_(m_, "ii") as ii:
        row = kb.let(ii * n_, "ti")
        i = kb.let(i0 + ii, "i")
        with kb.for_(n_, "jj") as jj:
            kb.emit(store(bivars, i, j0 + jj, acc[row + jj]))


def fpmath_rounding(op):
    """How an f32 op rounds its GEMM inputs under the graph's fpmath_mode (a
    function of the loaded value), or None (graphc.numerics.fpmath_down)."""
    down = fpmath_down(op)
    if down is None:
        return None
    if down == "tf32":
        return _tf32
    dt = DataType(down)

    def rounded(v):
        return as_stored(v, dt)
    rounded.dtype = dt     # what the rounded values are (bf16_valued)
    return rounded


def _tf32(v):
    """An f32 value rounded to nearest even at tf32's 10 mantissa bits (NaN kept)."""
    u = ir.i64(ir.call("f32_to_bits", v))
    r = ir.call("bits_to_f32", (u + 0xFFF + ((u >> 13) & 1)) & 0xFFFFE000)
    return ir.select(ir.call("math.isnan", v), v, r)
