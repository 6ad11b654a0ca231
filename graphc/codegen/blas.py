"""BLAS from generated kernels: a row-major single-precision GEMM on flat buffers.

``gemm_f32`` calls oneDNN's ``dnnl_sgemm`` (the ``onednn-cpu-gomp``
package: its JIT kernels take the CPU's widest ISA on any x86 vendor) where it
is installed, else Intel MKL's ``cblas_sgemm`` (the ``mkl`` package, the sgemm
torch's MatMul uses), else the sgemm of scipy's OpenBLAS through numba's own
entry point (``numba_xxgemm``, the one ``np.dot`` uses inside njit code);
``GRAPHC_BLAS=mkl`` or ``openblas`` picks one of the others, to compare.  On
this machine (AMD EPYC, AVX-512), where MKL runs its generic code path,
oneDNN's sgemm ran the convolutions' GEMM shapes (64x64x196, 196x64x64) 2.5-3x
faster than MKL's on one core.  bf16 and int8 GEMMs run on graphc's own tiles:
AMX's (graphc.codegen.amx_tile) where the CPU has AMX, else AVX512-BF16's and
AVX512-VNNI's (graphc.codegen.bf16_tile, int8_tile) where it has them, else
MKL's GEMMs.  Unlike ``np.dot``, ``gemm_f32`` takes
leading dimensions, offsets into flat buffers, transposes and ``beta``: a
kernel multiplies sub-matrices of its arguments in place, without copies, and
accumulates into its output.

Kernels call the library through a symbol name (``graphc_dnnl_sgemm`` or
``graphc_cblas_sgemm`` bound to the library's function with llvmlite's ``add_symbol`` when this module is
imported, or ``numba_xxgemm``), never through an address baked into the code,
so they stay cacheable on disk; :data:`BACKEND` names the library, and the
kernel cache keeps the kernels of each library apart.

Threads: kernels parallelise GEMMs themselves (``prange`` over independent
blocks: images, heads, row panels), so BLAS runs single-threaded inside them;
two thread pools in one kernel starve each other on a small machine.  oneDNN's
OpenMP build shares numba's OpenMP pool and, inside a parallel loop, runs a call
on the calling thread (a call outside one may use the pool); MKL is
loaded with its sequential threading layer; :func:`single_threaded_blas`
limits scipy's OpenBLAS to one thread where that is the library.  numpy's own
BLAS (a different library) is left alone.
"""
from __future__ import annotations

import ctypes
import functools

from llvmlite import binding as llb
from llvmlite import ir as llir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import bf16_gemm, bf16_tile, int8_gemm, int8_tile
from .bf16_gemm import gemm_bf16_tiles, transpose_u16
from .blas_abi import VOIDP as _VOIDP, arrays as _arrays, pointer as _pointer
from .blas_import import bf16_tile_gemm, dnnl_path, mkl_path
from .exported import F64, I64, array, export
from .helper_jit import helper_jit
from .int8_gemm import gemm_u8s8_tiles

_CHAR = llir.IntType(8)
_I32 = llir.IntType(32)
_F32 = llir.FloatType()
#: MKL's sequential threading layer (mkl_service.h: MKL_THREADING_SEQUENTIAL)
_MKL_THREADING_SEQUENTIAL = 1
#: cblas enum values (mkl_cblas.h)
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
#: CBLAS_OFFSET: one offset added to every element of C (the int8 GEMM's ``co``)
_FIX_OFFSET = 173


def _load_mkl() -> bool:
    """Load MKL's single dynamic library with the sequential threading layer and
    bind ``graphc_cblas_sgemm`` to its cblas_sgemm; False where there is no MKL."""
    path = mkl_path()
    if path is None:
        return False
    lib = ctypes.CDLL(path)
    lib.MKL_Set_Threading_Layer.argtypes = [ctypes.c_int]
    lib.MKL_Set_Threading_Layer(_MKL_THREADING_SEQUENTIAL)
    llb.add_symbol("graphc_cblas_sgemm", ctypes.cast(lib.cblas_sgemm, ctypes.c_void_p).value)
    llb.add_symbol("graphc_cblas_gemm_bf16", ctypes.cast(lib.cblas_gemm_bf16bf16f32, ctypes.c_void_p).value)
    llb.add_symbol("graphc_cblas_gemm_u8s8", ctypes.cast(lib.cblas_gemm_s8u8s32, ctypes.c_void_p).value)
    return True


def _load_dnnl() -> bool:
    """Bind ``graphc_dnnl_sgemm`` to oneDNN's dnnl_sgemm; False where there is no
    oneDNN (blas_import.dnnl_path)."""
    path = dnnl_path()
    if path is None:
        return False
    lib = ctypes.CDLL(path)
    llb.add_symbol("graphc_dnnl_sgemm", ctypes.cast(lib.dnnl_sgemm, ctypes.c_void_p).value)
    return True


_MKL = _load_mkl()
#: "dnnl", "mkl" or "openblas": the library ``gemm_f32`` calls
BACKEND = "dnnl" if _load_dnnl() else "mkl" if _MKL else "openblas"
if not _MKL:
    from numba.np.linalg import ensure_blas
    ensure_blas()   # scipy's cython_blas must be importable before numba_xxgemm is first called
#: bf16 GEMMs on graphc's own tile (AMX's or AVX512-BF16's, driven by graphc.codegen.bf16_gemm)
#: where it is the road (blas_import.bf16_tile_gemm)
OWN_BF16 = bf16_tile.bind() and bf16_tile_gemm()
#: u8 x s8 GEMMs on graphc's own tile (AMX-INT8's or AVX512-VNNI's, driven by
#: graphc.codegen.int8_gemm), where the CPU has AVX512-VNNI
OWN_INT8 = int8_tile.bind()
# (numba's on-disk cache keys functions by their source, not by the library they were built
# against: these helpers are cached in the kernel cache's version folder, graphc.codegen.helper_cache,
# which is apart for each library, cache_folder._runtime_digest)


def _sizes(context, builder, args, sig_args):
    """(i32(i), flag(i)): argument i as MKL's 32-bit int, and as a CBLAS_TRANSPOSE
    (nonzero: transposed)."""
    def i32(i):
        return context.cast(builder, args[i], sig_args[i], types.int32)

    def flag(i):
        is_t = builder.icmp_signed("!=", i32(i), llir.Constant(_I32, 0))
        return builder.select(is_t, llir.Constant(_I32, _TRANS), llir.Constant(_I32, _NO_TRANS))
    return i32, flag


def _cblas(symbol: str, operand):
    """An intrinsic calling MKL's row-major ``C = op(A) op(B) + beta C`` through
    ``symbol`` (cblas_sgemm's argument list, 32-bit sizes: MKL's LP64
    interface), A and B 1-D arrays of ``operand`` and C of float32, each
    pointer at the given element offset; ta/tb nonzero transpose."""
    @intrinsic
    def call(typingctx, ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
        if not (_arrays(operand, a, b) and _arrays(types.float32, c)):
            return None
        sig = types.int32(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc)

        def codegen(context, builder, signature, args):
            sa = signature.args
            fnty = llir.FunctionType(llir.VoidType(), [_I32, _I32, _I32, _I32, _I32, _I32, _F32, _VOIDP, _I32,
                                                       _VOIDP, _I32, _F32, _VOIDP, _I32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, symbol)
            i32, flag = _sizes(context, builder, args, sa)
            builder.call(fn, [llir.Constant(_I32, _ROW_MAJOR), flag(0), flag(1), i32(2), i32(3), i32(4),
                              llir.Constant(_F32, 1.0), _pointer(context, builder, sa[5], args[5], args[6], sa[6]),
                              i32(7), _pointer(context, builder, sa[8], args[8], args[9], sa[9]), i32(10),
                              context.cast(builder, args[11], sa[11], types.float32),
                              _pointer(context, builder, sa[12], args[12], args[13], sa[13]), i32(14)])
            return llir.Constant(_I32, 0)
        return sig, codegen
    return call


_cblas_sgemm = _cblas("graphc_cblas_sgemm", types.float32)
#: bf16 operands (their uint16 bits), f32 products summed in f32 (AMX tiles on this CPU)
_cblas_gemm_bf16 = _cblas("graphc_cblas_gemm_bf16", types.uint16)


@intrinsic
def _cblas_gemm_u8s8(typingctx, ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc):
    """MKL's row-major int8 GEMM (cblas_gemm_s8u8s32): ``C = op(A) op(B)`` with A
    u8, B s8 and C s32 (1-D arrays, pointers at the given element offsets), no
    offsets, alpha 1 and beta 0: the exact integer sums (VNNI / AMX here)."""
    if not (_arrays(types.uint8, a) and _arrays(types.int8, b) and _arrays(types.int32, c)):
        return None
    sig = types.int32(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc)

    def codegen(context, builder, signature, args):
        sa = signature.args
        i8 = llir.IntType(8)
        fnty = llir.FunctionType(llir.VoidType(), [_I32, _I32, _I32, _I32, _I32, _I32, _I32, _F32, _VOIDP, _I32, i8,
                                                   _VOIDP, _I32, i8, _F32, _VOIDP, _I32, _VOIDP])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "graphc_cblas_gemm_u8s8")
        i32, flag = _sizes(context, builder, args, sa)
        zero_c = cgutils.alloca_once_value(builder, llir.Constant(_I32, 0))
        builder.call(fn, [llir.Constant(_I32, _ROW_MAJOR), flag(0), flag(1), llir.Constant(_I32, _FIX_OFFSET),
                          i32(2), i32(3), i32(4), llir.Constant(_F32, 1.0),
                          _pointer(context, builder, sa[5], args[5], args[6], sa[6]), i32(7), llir.Constant(i8, 0),
                          _pointer(context, builder, sa[8], args[8], args[9], sa[9]), i32(10), llir.Constant(i8, 0),
                          llir.Constant(_F32, 0.0), _pointer(context, builder, sa[11], args[11], args[12], sa[12]),
                          i32(13), builder.bitcast(zero_c, _VOIDP)])
        return llir.Constant(_I32, 0)
    return sig, codegen


@intrinsic
def _xxgemm(typingctx, ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
    """Column-major sgemm through numba's ``numba_xxgemm`` (scipy's OpenBLAS):
    C = op(A) op(B) + beta C, arguments as in _cblas_sgemm."""
    if not _arrays(types.float32, a, b, c):
        return None
    sig = types.int32(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc)

    def codegen(context, builder, signature, args):
        (ta_, tb_, m_, n_, k_, a_, aoff, lda_, b_, boff, ldb_, beta_, c_, coff, ldc_) = args
        intp = context.get_value_type(types.intp)
        fnty = llir.FunctionType(llir.IntType(32), [_CHAR, _CHAR, _CHAR, intp, intp, intp, _VOIDP, _VOIDP, intp,
                                                    _VOIDP, intp, _VOIDP, _VOIDP, intp])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "numba_xxgemm")

        def flag(v, vty):
            v = context.cast(builder, v, vty, types.intp)
            is_t = builder.icmp_signed("!=", v, llir.Constant(intp, 0))
            return builder.select(is_t, llir.Constant(_CHAR, ord("t")), llir.Constant(_CHAR, ord("n")))

        def size(v, vty):
            return context.cast(builder, v, vty, types.intp)

        alpha_slot = cgutils.alloca_once_value(builder, llir.Constant(_F32, 1.0))
        beta_slot = cgutils.alloca_once_value(builder, context.cast(builder, beta_, signature.args[11],
                                                                    types.float32))
        sa = signature.args
        return builder.call(fn, [
            llir.Constant(_CHAR, ord("s")), flag(ta_, sa[0]), flag(tb_, sa[1]),
            size(m_, sa[2]), size(n_, sa[3]), size(k_, sa[4]),
            builder.bitcast(alpha_slot, _VOIDP), _pointer(context, builder, sa[5], a_, aoff, sa[6]), size(lda_, sa[7]),
            _pointer(context, builder, sa[8], b_, boff, sa[9]), size(ldb_, sa[10]), builder.bitcast(beta_slot, _VOIDP),
            _pointer(context, builder, sa[12], c_, coff, sa[13]), size(ldc_, sa[14])])
    return sig, codegen


@intrinsic
def _dnnl_sgemm(typingctx, ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
    """oneDNN's row-major ``C = op(A) op(B) + beta C`` (dnnl_sgemm: 'N'/'T'
    flags, 64-bit sizes, alpha 1), arguments as in _cblas_sgemm.  Inside a
    parallel loop of numba's OpenMP layer it runs on the calling thread."""
    if not _arrays(types.float32, a, b, c):
        return None
    sig = types.int32(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc)

    def codegen(context, builder, signature, args):
        sa = signature.args
        i64 = llir.IntType(64)
        fnty = llir.FunctionType(_I32, [_CHAR, _CHAR, i64, i64, i64, _F32, _VOIDP, i64, _VOIDP, i64, _F32, _VOIDP,
                                        i64])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "graphc_dnnl_sgemm")

        def flag(i):
            v = context.cast(builder, args[i], sa[i], types.intp)
            is_t = builder.icmp_signed("!=", v, llir.Constant(i64, 0))
            return builder.select(is_t, llir.Constant(_CHAR, ord("T")), llir.Constant(_CHAR, ord("N")))

        def size(i):
            return context.cast(builder, args[i], sa[i], types.int64)
        return builder.call(fn, [flag(0), flag(1), size(2), size(3), size(4), llir.Constant(_F32, 1.0),
                                 _pointer(context, builder, sa[5], args[5], args[6], sa[6]), size(7),
                                 _pointer(context, builder, sa[8], args[8], args[9], sa[9]), size(10),
                                 context.cast(builder, args[11], sa[11], types.float32),
                                 _pointer(context, builder, sa[12], args[12], args[13], sa[13]), size(14)])
    return sig, codegen


if BACKEND == "dnnl":
    @helper_jit(cache=True, nogil=True)
    def _sgemm(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
        return _dnnl_sgemm(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc)
elif BACKEND == "mkl":
    @helper_jit(cache=True, nogil=True)
    def _sgemm(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
        return _cblas_sgemm(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc)
else:
    @helper_jit(cache=True, nogil=True)
    def _sgemm(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
        # row-major C = A B is column-major C^T = B^T A^T: swap the operands
        return _xxgemm(tb, ta, n, m, k, b, b_off, ldb, a, a_off, lda, beta, c, c_off, ldc)


@helper_jit(cache=True, nogil=True)
def _empty_product(m, n, k, beta, c, c_off, ldc):
    """Handle a product with no dims to multiply (m, n or k zero): C = beta C;
    True when there was nothing else to do."""
    if m <= 0 or n <= 0:
        return True
    if k > 0:
        return False
    for i in range(m):
        for j in range(n):
            c[c_off + i * ldc + j] = c[c_off + i * ldc + j] * beta if beta != 0 else 0.0
    return True


@helper_jit(cache=True, nogil=True)
def _gemm_f32(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
    """Row-major ``C[m, n] = op(A)[m, k] @ op(B)[k, n] + beta * C`` on flat float32
    buffers: element (i, j) of A is ``a[a_off + i * lda + j]``, or with ``ta``
    ``a[a_off + j * lda + i]`` (A stored transposed); the same for B with
    ``tb``; C's (i, j) is ``c[c_off + i * ldc + j]``.  ``beta`` 0 overwrites C
    (its old contents may be anything), 1 accumulates.  Nothing is checked here:
    callers pass offsets and sizes derived from validated shapes."""
    if _empty_product(m, n, k, beta, c, c_off, ldc):
        return 0
    return _sgemm(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc)


@helper_jit(cache=True, nogil=True)
def _gemm_bf16(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
    """``gemm_f32`` with A and B bf16 (uint16 buffers of their bits) and C f32,
    f32 products summed in f32: graphc's own tile where it is the road (AMX's or
    AVX512-BF16's: graphc.codegen.bf16_gemm, blas_import.bf16_tile_gemm), else
    MKL's cblas_gemm_bf16bf16f32 (see blas_import.bf16_gemm)."""
    if _empty_product(m, n, k, beta, c, c_off, ldc):
        return 0
    if OWN_BF16:
        return gemm_bf16_tiles(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc)
    return _cblas_gemm_bf16(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc)


@helper_jit(cache=True, nogil=True)
def _gemm_u8s8(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc):
    """Row-major ``C[m, n] = op(A)[m, k] @ op(B)[k, n]`` with A u8, B s8 and C s32
    (flat buffers as in gemm_f32), the exact sums while they fit in s32:
    graphc's own tile where the CPU has AVX512-VNNI (AMX-INT8's where it has that:
    graphc.codegen.int8_gemm), else MKL's int8 GEMM (see blas_import.int8_gemm)."""
    if m <= 0 or n <= 0:
        return 0
    if k <= 0:
        for i in range(m):
            for j in range(n):
                c[c_off + i * ldc + j] = 0
        return 0
    if OWN_INT8:
        return gemm_u8s8_tiles(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc)
    return _cblas_gemm_u8s8(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc)


# -- the GEMM drivers kernels call by symbol (graphc.codegen.exported): compiled once, not linked
#    into each kernel.  Arrays: bf16 as uint16 bits, u8/s8 operands, f32/s32 results.
_U16A, _F32A = array(types.uint16), array(types.float32)
_U8A, _S8A, _S32A, _F64A = array(types.uint8), array(types.int8), array(types.int32), array(types.float64)
_I64A = array(types.int64)
gemm_f32 = export("gemm_f32", _gemm_f32, (I64,) * 5 + (_F32A, I64, I64, _F32A, I64, I64, F64, _F32A, I64, I64))
gemm_bf16 = export("gemm_bf16", _gemm_bf16, (I64,) * 5 + (_U16A, I64, I64, _U16A, I64, I64, F64, _F32A, I64, I64))
gemm_bf16_packed = export("gemm_bf16_packed", bf16_gemm.gemm_bf16_packed,
                          (I64,) * 4 + (_U16A, I64, I64, _U16A, I64, I64, I64, F64, _F32A, I64, I64))
pack_b_bf16 = export("pack_b_bf16", bf16_gemm.pack_b_bf16, (I64,) * 3 + (_U16A, I64, I64, _U16A, I64, I64, I64))
gemm_bf16_prepacked = export("gemm_bf16_prepacked", bf16_gemm.gemm_bf16_prepacked,
                             (I64,) * 3 + (_U16A, I64, I64, I64, _U16A, I64, I64, I64, F64, _F32A, I64, I64))
pack_a_bf16 = export("pack_a_bf16", bf16_gemm.pack_a_bf16, (I64,) * 3 + (_U16A, I64, I64, _U16A, I64))
pack_a_rows_bf16 = export("pack_a_rows_bf16", bf16_gemm.pack_a_rows_bf16,
                          (I64,) * 3 + (_U16A, I64, I64, I64, I64, _U16A, I64))
bf16_begin = export("bf16_begin", bf16_gemm.bf16_begin, ())
bf16_block = export("bf16_block", bf16_gemm.bf16_block,
                    (I64,) * 2 + (_U16A, I64, I64, _U16A, I64, _U16A, I64, I64, I64, I64, _F32A, I64))
bf16_taps = export("bf16_taps", bf16_gemm.bf16_taps,
                   (I64,) * 2 + (_U16A, I64, I64, _I64A, _U16A, I64, _U16A, I64, I64, I64, I64, _F32A, I64))
bf16_weight_taps = export("bf16_weight_taps", bf16_gemm.bf16_weight_taps,
                          (I64, _U16A, I64, I64, _I64A, _U16A, I64, I64, I64, I64, _F32A, I64, I64, I64))
pack_panels_bf16 = export("pack_panels_bf16", bf16_gemm.pack_panels_bf16, (I64,) * 3 + (_U16A, I64, I64, _U16A, I64))
gemm_u8s8 = export("gemm_u8s8", _gemm_u8s8, (I64,) * 5 + (_U8A, I64, I64, _S8A, I64, I64, _S32A, I64, I64))
gemm_u8s8_packed = export("gemm_u8s8_packed", int8_gemm.gemm_u8s8_packed,
                          (I64,) * 4 + (_U8A, I64, I64, _S8A, I64, I64, I64, _S32A, I64, I64))
pack_b_u8s8 = export("pack_b_u8s8", int8_gemm.pack_b_u8s8,
                     (I64,) * 3 + (_S8A, I64, I64, _S8A, I64, _S32A, I64, I64, I64))
row_sums_u8 = export("row_sums_u8", int8_gemm.row_sums_u8, (I64, I64, _U8A, I64, I64, _F64A, I64))
u8s8_begin = export("u8s8_begin", int8_gemm.u8s8_begin, ())
u8s8_block = export("u8s8_block", int8_gemm.u8s8_block,
                    (I64,) * 2 + (_U8A, I64, I64, _U8A, I64, _S8A, I64, I64, I64, _S32A, I64))
u8s8_taps = export("u8s8_taps", int8_gemm.u8s8_taps,
                   (I64,) * 2 + (_U8A, I64, I64, _I64A, _U8A, I64, _S8A, I64, I64, I64, I64, _S32A, I64))


@functools.cache
def single_threaded_blas() -> None:
    """Limit scipy's OpenBLAS (where it is the one gemm_f32 calls) to one thread,
    once; MKL was loaded sequential."""
    if BACKEND == "mkl":
        return
    from threadpoolctl import ThreadpoolController
    import scipy.linalg.cython_blas  # noqa: F401  (loads the library threadpoolctl must find)
    blas = [lc for lc in ThreadpoolController().lib_controllers if lc.user_api == "blas"]
    # scipy's wheels bundle their own OpenBLAS; where scipy shares one BLAS with numpy, limit that one
    own = [lc for lc in blas if "scipy.libs" in lc.filepath or "scipy/.libs" in lc.filepath]
    for lc in own or blas:
        lc.set_num_threads(1)
