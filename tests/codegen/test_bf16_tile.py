"""gemm_bf16 (graphc.codegen.blas) on graphc's AVX512-BF16 tile: every shape,
transpose, offset, leading dim and beta against float64 products of the same
bf16 values; the columns of C past n are left alone."""
import ml_dtypes
import numpy as np
import pytest

from graphc.codegen import blas

pytestmark = pytest.mark.skipif(not blas.OWN_BF16, reason="the CPU has no AVX512-BF16 (gemm_bf16 runs MKL's)")


@pytest.mark.parametrize("seed", range(6))
def test_gemm_bf16_equals_the_products_summed(seed):
    rng = np.random.default_rng(seed)
    for _ in range(8):
        m, n, k = (int(v) for v in rng.integers(1, 90, 3))
        if seed == 0:
            k = 2 * blas._KC + 3                  # an odd k over two blocks of pairs
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
        blas.gemm_bf16(ta, tb, m, n, k, abuf, 3, a.shape[1], bbuf, 5, b.shape[1], beta, c, 7, ldc)
        af, bf = a.astype(np.float64), b.astype(np.float64)
        want = (af.T if ta else af) @ (bf.T if tb else bf)
        if beta:
            want += old[7:].reshape(m, ldc)[:, :n]
        got = c[7:].reshape(m, ldc)
        # f32 sums of k exact products: within k f32 ulps of the largest magnitude
        assert np.abs(got[:, :n] - want).max() <= k * 2.0 ** -23 * max(1.0, np.abs(want).max())
        pad = got[:, n:]
        assert np.array_equal(pad, old[7:].reshape(m, ldc)[:, n:]) if beta else np.isnan(pad).all()


def test_the_tile_is_the_road_of_bf16_matmuls():
    """A bf16 MatMul's kernel runs on the tile (its impl info says so)."""
    import graphc
    from graphc.builder import GraphBuilder
    b = GraphBuilder()
    x, w = b.tensor("bf16", [40, 70]), b.tensor("bf16", [70, 50])
    y = b.op("MatMul", [x, w], out=[("f32", [40, 50])])[0]
    cg = graphc.compile(b.finalize())
    assert "graphc_avx512bf16_tile" in cg.compiled[0].get_impl_info()
    rng = np.random.default_rng(1)
    xv, wv = (rng.standard_normal(s).astype(ml_dtypes.bfloat16) for s in ((40, 70), (70, 50)))
    got = cg.run({x.id: xv, w.id: wv})[y.id]
    want = xv.astype(np.float64) @ wv.astype(np.float64)
    assert np.abs(got - want).max() <= 70 * 2.0 ** -23 * np.abs(want).max()
