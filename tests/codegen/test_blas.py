"""gemm_f32 (graphc/codegen/blas.py) against numpy on the library it binds
(oneDNN, MKL or OpenBLAS: blas.BACKEND): transposes, offsets, leading
dimensions, beta 0 over garbage and beta 1 accumulating, empty products; and
GRAPHC_BLAS choosing the library."""
import os
import subprocess
import sys

import numpy as np
import pytest

from graphc.codegen import blas
from support import gemm_calls



def _matrix(rng, rows, cols, ld, off, transposed):
    """A flat buffer holding a (rows x cols) matrix at ``off`` with leading
    dimension ``ld`` (stored transposed when asked), NaN around it; the matrix."""
    m = rng.standard_normal((rows, cols)).astype(np.float32)
    stored = m.T if transposed else m
    buf = np.full(off + stored.shape[0] * ld, np.nan, np.float32)
    for i, row in enumerate(stored):
        buf[off + i * ld: off + i * ld + len(row)] = row
    return buf, m


@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_gemm_f32(ta, tb, beta):
    rng = np.random.default_rng(ta * 2 + tb)
    m, n, k = 37, 20, 53
    a, am = _matrix(rng, m, k, (m if ta else k) + 3, 5, ta)
    b, bm = _matrix(rng, k, n, (k if tb else n) + 2, 7, tb)
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    c = np.full(3 + m * (n + 4), np.nan, np.float32)
    for i in range(m):
        c[3 + i * (n + 4): 3 + i * (n + 4) + n] = c0[i] if beta else np.nan
    gemm_calls.gemm_f32(ta, tb, m, n, k, a, 5, (m if ta else k) + 3, b, 7, (k if tb else n) + 2, beta, c, 3, n + 4)
    got = np.stack([c[3 + i * (n + 4): 3 + i * (n + 4) + n] for i in range(m)])
    want = am.astype(np.float64) @ bm + (c0 if beta else 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert np.isnan(c[:3]).all()     # nothing written before C


def test_gemm_f32_empty_k():
    c = np.full(6, np.nan, np.float32)
    gemm_calls.gemm_f32(0, 0, 2, 3, 0, np.zeros(1, np.float32), 0, 1, np.zeros(1, np.float32), 0, 3, 0.0, c, 0, 3)
    np.testing.assert_array_equal(c, np.zeros(6, np.float32))


@pytest.mark.parametrize("name", ["mkl", "openblas"])
def test_graphc_blas_picks_the_library(name):
    """GRAPHC_BLAS=mkl / openblas passes over oneDNN (MKL when it is installed)."""
    env = dict(os.environ, GRAPHC_BLAS=name)
    out = subprocess.run([sys.executable, "-c", "from graphc.codegen import blas; print(blas.BACKEND)"],
                         capture_output=True, text=True, env=env, check=True).stdout.split()[-1]
    assert out == name or (name == "mkl" and out == "openblas")


def test_gemm_bf16_on_this_machines_road():
    """gemm_bf16 as kernels call it, on the road this machine takes (MKL's bf16
    GEMM where the CPU has AMX, else graphc's tile or MKL): bf16 products summed
    in f32, beta 0 and 1, offsets and leading dims."""
    import ml_dtypes
    rng = np.random.default_rng(3)
    m, n, k = 45, 70, 90
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    want = a.astype(np.float64) @ b.astype(np.float64)
    abuf = np.concatenate([np.zeros(2, np.uint16), a.view(np.uint16).ravel()])
    bbuf = np.concatenate([np.zeros(3, np.uint16), b.view(np.uint16).ravel()])
    for beta in (0.0, 1.0):
        c = np.full(1 + m * (n + 1), 0.5 if beta else np.nan, np.float32)
        gemm_calls.gemm_bf16(0, 0, m, n, k, abuf, 2, k, bbuf, 3, n, beta, c, 1, n + 1)
        got = c[1:].reshape(m, n + 1)[:, :n]
        assert np.abs(got - (want + 0.5 * beta)).max() <= k * 2.0 ** -22 * np.abs(want).max()
        assert (c[0] == 0.5) if beta else np.isnan(c[0])     # nothing written before C
