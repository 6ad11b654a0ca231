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


def bf16_tile_name() -> str:
    """The name a kernel's impl info gives graphc's bf16 tile in this process: AMX's or AVX512-BF16's."""
    from graphc.codegen import bf16_gemm
    return "graphc_amx_bf16_tile" if bf16_gemm.AMX else "graphc_avx512bf16_tile"


def int8_tile_name() -> str:
    """The name a kernel's impl info gives graphc's int8 tile in this process: AMX-INT8's or AVX512-VNNI's."""
    from graphc.codegen import int8_gemm
    return "graphc_amx_int8_tile" if int8_gemm.AMX else "graphc_avx512vnni_tile"
