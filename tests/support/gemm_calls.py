"""The GEMM helpers of graphc.codegen.blas called as kernels call them: from
jitted code, through their symbols (graphc.codegen.exported)."""
from numba import njit

from graphc.codegen import blas


@njit
def gemm_f32(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
    return blas.gemm_f32(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc)


@njit
def gemm_bf16(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
    return blas.gemm_bf16(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc)


@njit
def gemm_u8s8(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc):
    return blas.gemm_u8s8(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc)
