"""gemm_u8s8 (graphc.codegen.blas) on graphc's AVX512-VNNI tile: every shape
(k not a multiple of 4, k = 1, over a block of quads), transpose, offset and
leading dim against int64 products of the same u8 and s8 values, exactly; the
columns of C past n are left alone.  gemm_u8s8_packed with B packed once
(pack_b_u8s8, which also sums B's columns) and used by column blocks, as
kernels do.  The sums of the largest magnitudes: vpdpbusd wraps, never
saturates, and stays exact up to s32."""
import numpy as np
import pytest

from graphc.codegen import blas, int8_gemm, int8_tile
from support import gemm_calls


pytestmark = pytest.mark.skipif(not blas.OWN_INT8, reason="the CPU has no AVX512-VNNI (gemm_u8s8 runs MKL's)")


def _operands(rng, m, n, k, ta, tb):
    a = rng.integers(0, 256, (k, m) if ta else (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (n, k) if tb else (k, n)).astype(np.int8)
    return a, b


def _product(a, b, ta, tb):
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    return (a64.T if ta else a64) @ (b64.T if tb else b64)


@pytest.mark.parametrize("seed", range(6))
def test_gemm_u8s8_equals_the_products_summed(seed):
    rng = np.random.default_rng(seed)
    for _ in range(8):
        m, n, k = (int(v) for v in rng.integers(1, 90, 3))
        if seed < 2:   # over two blocks of quads: a k not a multiple of 4 (A packed), one that is (in place)
            k = 4 * int8_gemm.KC + (3 if seed == 0 else 8)
        elif seed == 2:
            k = int(rng.integers(1, 4))
        ta, tb = (int(v) for v in rng.integers(0, 2, 2))
        a, b = _operands(rng, m, n, k, ta, tb)
        abuf = np.concatenate([np.zeros(3, np.uint8), a.ravel()])
        bbuf = np.concatenate([np.zeros(5, np.int8), b.ravel()])
        ldc = n + 2
        c = np.full(7 + m * ldc, -7, np.int32)
        gemm_calls.gemm_u8s8(ta, tb, m, n, k, abuf, 3, a.shape[1], bbuf, 5, b.shape[1], c, 7, ldc)
        got = c[7:].reshape(m, ldc)
        assert np.array_equal(got[:, :n], _product(a, b, ta, tb)), (m, n, k, ta, tb)
        assert (got[:, n:] == -7).all() and (c[:7] == -7).all()


def test_the_extremes_sum_exactly():
    """255 * -128 over a K of 4096 (-133,693,440) and 255 * 127: the sums of the
    largest products, far from wrapping and never saturated."""
    m, n, k = 9, 33, 4096
    for av, bv in ((255, -128), (255, 127), (0, -128)):
        a = np.full(m * k, av, np.uint8)
        b = np.full(k * n, bv, np.int8)
        c = np.zeros(m * n, np.int32)
        gemm_calls.gemm_u8s8(0, 0, m, n, k, a, 0, k, b, 0, n, c, 0, n)
        assert (c == av * bv * k).all()


def test_empty_and_k_zero():
    c = np.full(6, 5, np.int32)
    gemm_calls.gemm_u8s8(0, 0, 2, 3, 0, np.zeros(1, np.uint8), 0, 1, np.zeros(1, np.int8), 0, 3, c, 0, 3)
    assert (c == 0).all()
    gemm_calls.gemm_u8s8(0, 0, 0, 3, 4, np.zeros(1, np.uint8), 0, 4, np.zeros(12, np.int8), 0, 3, c, 0, 3)


@pytest.mark.parametrize("m,n,k,ta", [(37, 100, 70, 0), (64, 96, 4 * int8_gemm.KC + 6, 0), (19, 45, 33, 1),
                                      (3, 33, 1, 0), (8, 64, 16, 0), (5, 70, 4 * int8_gemm.KC + 64, 0)])
@pytest.mark.parametrize("tb", [0, 1])
def test_packed_b_by_column_blocks(m, n, k, ta, tb):
    """B (stored as it is, or transposed) packed once for all its panels (its
    column sums beside it, the largest magnitudes too); each block of columns
    (from a panel boundary) multiplied on its own."""
    rng = np.random.default_rng(m)
    a, b = _operands(rng, m, n, k, ta, tb)
    b[:, :3] = -128
    npan = (n + 31) // 32
    bp = np.full(int8_gemm.u8s8_panels(n, k) + 4, 7, np.int8)
    sums = np.full(n + 2, 99, np.int32)
    bbuf = np.concatenate([np.zeros(3, np.int8), b.ravel()])
    int8_gemm.pack_b_u8s8(tb, n, k, bbuf, 3, b.shape[1], bp, 4, sums, 1, 0, npan)
    want_sums = b.astype(np.int64).sum(1 if tb else 0)
    assert np.array_equal(sums[1:n + 1], want_sums) and sums[0] == 99 and sums[-1] == 99
    c = np.zeros(m * n, np.int32)
    for jp0, jp1 in ((0, 1), (1, npan)):
        j0, j1 = 32 * jp0, min(n, 32 * jp1)
        int8_gemm.gemm_u8s8_packed(ta, m, j1 - j0, k, a.ravel(), 0, a.shape[1], bp, 4, npan, jp0, c, j0, n)
    assert np.array_equal(c.reshape(m, n), _product(a, b, ta, tb))


@pytest.mark.parametrize("k", [0, 1, 9, 63, 64, 130, 257])
def test_row_sums(k):
    """Rows summed 64 bytes a step (vpsadbw) and the rest one at a time, the
    largest bytes too, from an offset and with rows wider than k."""
    rng = np.random.default_rng(k)
    a = rng.integers(0, 256, (5, k + 3)).astype(np.uint8)
    a[0] = 255
    out = np.zeros(7)
    int8_gemm.row_sums_u8(5, k, a.ravel(), 1, k + 3, out, 2)
    assert np.array_equal(out[2:], a[:, 1:k + 1].astype(np.int64).sum(1)) and (out[:2] == 0).all()


def test_the_switch_turns_the_tile_off(monkeypatch):
    monkeypatch.setenv("GRAPHC_INT8_TILE", "0")
    int8_tile.available.cache_clear()
    try:
        assert not int8_tile.available()
    finally:
        monkeypatch.undo()
        int8_tile.available.cache_clear()
    assert int8_tile.available()
