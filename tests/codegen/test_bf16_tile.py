"""The bf16 GEMM on graphc's tile (gemm_bf16_tiles: AMX's or AVX512-BF16's): every shape,
transpose, offset, leading dim and beta against float64 products of the same
bf16 values; the columns of C past n are left alone.  gemm_bf16_packed with B
packed once (pack_b_bf16) and used by column blocks, as kernels do."""
import ml_dtypes
import numpy as np
import pytest

from graphc.codegen import bf16_gemm, bf16_tile, blas
from support.gemm_calls import bf16_tile_name

# the tile's tests run wherever the CPU has AVX512-BF16; those of kernels' roads where bf16 GEMMs take it
pytestmark = pytest.mark.skipif(not bf16_tile.bind(), reason="the CPU has no AVX512-BF16")
on_the_road = pytest.mark.skipif(not blas.OWN_BF16, reason="bf16 GEMMs run MKL's (AMX) here")


@pytest.mark.parametrize("seed", range(6))
def test_gemm_bf16_equals_the_products_summed(seed):
    rng = np.random.default_rng(seed)
    for _ in range(8):
        m, n, k = (int(v) for v in rng.integers(1, 90, 3))
        if seed < 2:   # over two blocks of pairs: an odd k (A packed), an even one (A read in place)
            k = 2 * bf16_gemm.KC + (3 if seed == 0 else 4)
        ta, tb = (int(v) for v in rng.integers(0, 2, 2))
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(ml_dtypes.bfloat16)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(ml_dtypes.bfloat16)
        abuf = np.concatenate([np.zeros(3, np.uint16), a.view(np.uint16).ravel()])
        bbuf = np.concatenate([np.zeros(5, np.uint16), b.view(np.uint16).ravel()])
        ldc, beta = n + 2, float(rng.integers(0, 2))
        old = rng.standard_normal(7 + m * ldc).astype(np.float32)
        c = old.copy()
        if beta == 0:
            c[7:] = np.nan                        # beta 0: C's old contents are never read
        bf16_gemm.gemm_bf16_tiles(ta, tb, m, n, k, abuf, 3, a.shape[1], bbuf, 5, b.shape[1], beta, c, 7, ldc)
        af, bf = a.astype(np.float64), b.astype(np.float64)
        want = (af.T if ta else af) @ (bf.T if tb else bf)
        if beta:
            want += old[7:].reshape(m, ldc)[:, :n]
        got = c[7:].reshape(m, ldc)
        # f32 sums of k exact products: within k f32 ulps of the largest magnitude
        assert np.abs(got[:, :n] - want).max() <= k * 2.0 ** -23 * max(1.0, np.abs(want).max())
        pad = got[:, n:]
        assert np.array_equal(pad, old[7:].reshape(m, ldc)[:, n:]) if beta else np.isnan(pad).all()


@on_the_road
def test_the_tile_is_the_road_of_bf16_matmuls():
    """A bf16 MatMul's kernel runs on the tile (its impl info says so)."""
    import graphc
    from graphc.builder import GraphBuilder
    b = GraphBuilder()
    x, w = b.tensor("bf16", [40, 70]), b.tensor("bf16", [70, 50])
    y = b.op("MatMul", [x, w], out=[("f32", [40, 50])])[0]
    cg = graphc.compile(b.finalize())
    assert bf16_tile_name() in cg.compiled[0].get_impl_info()
    rng = np.random.default_rng(1)
    xv, wv = (rng.standard_normal(s).astype(ml_dtypes.bfloat16) for s in ((40, 70), (70, 50)))
    got = cg.run({x.id: xv, w.id: wv})[y.id]
    want = xv.astype(np.float64) @ wv.astype(np.float64)
    assert np.abs(got - want).max() <= 70 * 2.0 ** -23 * np.abs(want).max()


@pytest.mark.parametrize("m,n,k,ta", [(37, 100, 70, 0), (64, 96, 2 * bf16_gemm.KC + 6, 0), (19, 45, 33, 1),
                                      (3, 33, 1, 0)])
def test_packed_b_by_column_blocks(m, n, k, ta):
    """B packed once for all its panels; each block of columns (from a panel
    boundary) multiplied on its own, with a beta of 2 (C scaled first)."""
    rng = np.random.default_rng(m)
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    npan = (n + 31) // 32
    bp = np.full(bf16_gemm.bf16_panels(n, k) + 4, 7, np.uint16)
    bf16_gemm.pack_b_bf16(0, n, k, b.view(np.uint16).ravel(), 0, n, bp, 4, 0, npan)
    old = rng.standard_normal((m, n)).astype(np.float32)
    c = old.copy().ravel()
    for jp0, jp1 in ((0, 1), (1, npan)):
        j0, j1 = 32 * jp0, min(n, 32 * jp1)
        bf16_gemm.gemm_bf16_packed(ta, m, j1 - j0, k, a.view(np.uint16).ravel(), 0, a.shape[1], bp, 4, npan, jp0,
                                   2.0, c, j0, n)
    af = a.astype(np.float64)
    want = (af.T if ta else af) @ b.astype(np.float64) + 2.0 * old
    assert np.abs(c.reshape(m, n) - want).max() <= k * 2.0 ** -23 * max(1.0, np.abs(want).max()) + 1e-6


@pytest.mark.parametrize("m,n,k,ta", [(100, 70, 77, 0), (256, 300, 2 * bf16_gemm.KC + 64, 0), (64, 64, 600, 1),
                                      (33, 40, 32, 0)])
def test_a_packed_once_for_blocks_of_rows_and_columns(m, n, k, ta):
    """A packed whole (pack_a_bf16, from an offset) and multiplied by blocks: its
    first 32 rows by all of B, the rest from row 32 by B's columns from panel 1,
    each C block where it lies; C elsewhere left alone."""
    rng = np.random.default_rng(m + k)
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    npan = (n + 31) // 32
    bp = np.empty(bf16_gemm.bf16_panels(n, k), np.uint16)
    bf16_gemm.pack_b_bf16(0, n, k, b.view(np.uint16).ravel(), 0, n, bp, 0, 0, npan)
    # (NaN bits where pack_a_bf16 writes nothing: the rows past m up to a whole tile, whose
    # products land in scratch rows never copied out)
    ap = np.full(bf16_gemm.bf16_a_panels(m, k) + 5, 0x7FC0, np.uint16)
    bf16_gemm.pack_a_bf16(ta, m, k, a.view(np.uint16).ravel(), 0, a.shape[1], ap, 5)
    c = np.full((m, n), np.nan, np.float32)
    bf16_gemm.gemm_bf16_prepacked(32, n, k, ap, 5, m, 0, bp, 0, npan, 0, 0.0, c.ravel(), 0, n)
    bf16_gemm.gemm_bf16_prepacked(m - 32, n - 32, k, ap, 5, m, 32, bp, 0, npan, 1, 0.0, c.ravel(), 32 * n + 32, n)
    af = a.astype(np.float64)
    want = (af.T if ta else af) @ b.astype(np.float64)
    bound = k * 2.0 ** -23 * np.abs(want).max()
    assert np.abs(c[:32] - want[:32]).max() <= bound and np.abs(c[32:, 32:] - want[32:, 32:]).max() <= bound
    assert np.isnan(c[32:, :32]).all()


def _packed(bmat, n, k):
    """The packed layout of the module's doc, built in numpy from the k x n matrix
    ``bmat``: for each block of KC pairs, its panels one after the other, each
    pair of a panel 32 (k, k+1) pairs, one per column; zeros past n and past k."""
    kp_all = bf16_gemm.packed_pairs.py_func(k)
    npan = (n + 31) // 32
    full = np.zeros((2 * kp_all, 32 * npan), np.uint16)
    full[:k, :n] = bmat
    out = []
    for p0 in range(0, kp_all, bf16_gemm.KC):
        kp = min(bf16_gemm.KC, kp_all - p0)
        for jp in range(npan):
            blk = full[2 * p0:2 * (p0 + kp), 32 * jp:32 * jp + 32]          # (2 kp) x 32
            out.append(blk.reshape(kp, 2, 32).transpose(0, 2, 1).ravel())  # pair p, column jj, half e
    return np.concatenate(out)


@pytest.mark.parametrize("n,k", [(45, 13), (128, 64), (32, 1), (7, 2 * bf16_gemm.KC + 3), (70, 2 * bf16_gemm.KC + 6)])
@pytest.mark.parametrize("tb", [0, 1])
def test_panels_packed_as_the_layout_says(n, k, tb):
    """pack_panels_bf16 and pack_b_bf16 (a plain B a row pair at a time, a
    transposed one a full panel's pairs gathered, each edge column along memory)
    write the layout a numpy construction of it gives, from an offset and a
    leading dim wider than the rows (odd k: the last pair's second half zero;
    columns past n zero); pack_b_bf16 by ranges of panels writes the same."""
    rng = np.random.default_rng(n * k + tb)
    ld = (k if tb else n) + 3
    b = rng.integers(1, 2 ** 16, 5 + (n if tb else k) * ld).astype(np.uint16)
    rows = b[5:].reshape(-1, ld)
    bmat = rows[:n, :k].T if tb else rows[:k, :n]
    size = bf16_gemm.bf16_panels(n, k)
    want = np.full(size + 2, 9, np.uint16)
    want[1:-1] = _packed(bmat, n, k)
    got, by_ranges = np.full(size + 2, 9, np.uint16), np.full(size + 2, 9, np.uint16)
    bf16_gemm.pack_panels_bf16(tb, n, k, b, 5, ld, got, 1)
    npan = (n + 31) // 32
    for lo, hi in ((0, 1), (1, npan)):
        bf16_gemm.pack_b_bf16(tb, n, k, b, 5, ld, by_ranges, 1, lo, hi)
    assert np.array_equal(got, want) and np.array_equal(by_ranges, want)


@on_the_road
@pytest.mark.parametrize("transpose_a", [False, True])
def test_a_column_block_in_tiles_of_l2_under_an_epilogue(transpose_a):
    """A thread's column block (one GEMM, a block of columns per thread) larger
    than OWN_TILE_ELEMS runs in tiles of OWN_COLS columns and of rows, its
    epilogue (bias, GELU) stored from each: uneven last blocks both ways, A
    read transposed too."""
    from graphc.codegen.gemm import OWN_COLS, OWN_TILE_ELEMS
    from support.compiled import bf16_matmul_bias_gelu
    m, k, n = 300, 96, 700
    assert m * 352 > OWN_TILE_ELEMS and n // 2 > OWN_COLS and m > OWN_TILE_ELEMS // OWN_COLS
    cg = bf16_matmul_bias_gelu(m, k, n, transpose_a)
    src = cg.compiled[0].source
    assert len(cg.compiled) == 1 and "for rbk" in src and "for cbk" in src
    # (A packed once for the thread's blocks: pack_a_bf16 before the loops, the blocks' products from it)
    assert src.index("pack_a_bf16(") < src.index("for cbk") < src.index("gemm_bf16_prepacked(")


@on_the_road
@pytest.mark.parametrize("transpose_a", [False, True])
def test_a_row_block_per_thread_when_taller_than_wide(transpose_a):
    """A MatMul at least twice as tall as wide gives each thread a block of rows
    (its part of A packed, B whole), not a block of columns (all of A packed on
    every thread); uneven row blocks and tiles, A read transposed too, the
    epilogue against the reference."""
    from graphc.codegen.kernel import plan_threads
    from support.compiled import bf16_matmul_bias_gelu
    m, k, n = 1030, 72, 260
    cg = bf16_matmul_bias_gelu(m, k, n, transpose_a)
    src = cg.compiled[0].source
    rows = -(-(-(-m // plan_threads())) // 32) * 32
    assert len(cg.compiled) == 1 and f"min({rows}, {m} - " in src and f"min({n}, {n} - " in src
