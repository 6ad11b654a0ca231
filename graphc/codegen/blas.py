"""BLAS from generated kernels: a row-major single-precision GEMM on flat buffers.

``gemm_f32`` calls the sgemm of scipy's OpenBLAS through numba's own entry
point (``numba_xxgemm``, the one ``np.dot`` uses inside njit code), so kernels
calling it stay cacheable on disk.  Unlike ``np.dot`` it takes leading
dimensions, offsets into flat buffers, transposes and ``beta``: a kernel
multiplies sub-matrices of its arguments in place, without copies, and
accumulates into its output.

Threads: kernels parallelise GEMMs themselves (``prange`` over independent
blocks: images, heads, row panels), so BLAS must run single-threaded inside
them; two thread pools in one kernel starve each other on a small machine.
:func:`single_threaded_blas` limits scipy's OpenBLAS to one thread; the
runtime calls it before the first kernel that multiplies runs.  numpy's own
BLAS (a different library) is left alone.
"""
from __future__ import annotations

import functools

from llvmlite import ir as llir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.linalg import ensure_blas

_CHAR = llir.IntType(8)
_VOIDP = llir.IntType(8).as_pointer()


@intrinsic
def _sgemm(typingctx, ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
    """Column-major sgemm: C = op(A) op(B) + beta C with A, B, C pointers at the
    given element offsets of 1-D float32 arrays; ta/tb nonzero transpose."""
    for arr in (a, b, c):
        if not (isinstance(arr, types.Array) and arr.dtype == types.float32 and arr.ndim == 1):
            return None
    sig = types.int32(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc)

    def codegen(context, builder, signature, args):
        (ta_, tb_, m_, n_, k_, a_, aoff, lda_, b_, boff, ldb_, beta_, c_, coff, ldc_) = args
        intp = context.get_value_type(types.intp)
        fnty = llir.FunctionType(llir.IntType(32), [_CHAR, _CHAR, _CHAR, intp, intp, intp, _VOIDP, _VOIDP, intp,
                                                    _VOIDP, intp, _VOIDP, _VOIDP, intp])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "numba_xxgemm")
        f32 = context.get_value_type(types.float32)

        def ptr(aty, val, off, offty):
            data = context.make_array(aty)(context, builder, val).data
            off = context.cast(builder, off, offty, types.intp)
            return builder.bitcast(builder.gep(data, [off]), _VOIDP)

        def flag(v, vty):
            v = context.cast(builder, v, vty, types.intp)
            is_t = builder.icmp_signed("!=", v, llir.Constant(intp, 0))
            return builder.select(is_t, llir.Constant(_CHAR, ord("t")), llir.Constant(_CHAR, ord("n")))

        def size(v, vty):
            return context.cast(builder, v, vty, types.intp)

        alpha_slot = cgutils.alloca_once_value(builder, llir.Constant(f32, 1.0))
        beta_slot = cgutils.alloca_once_value(builder, context.cast(builder, beta_, signature.args[11],
                                                                    types.float32))
        sa = signature.args
        return builder.call(fn, [
            llir.Constant(_CHAR, ord("s")), flag(ta_, sa[0]), flag(tb_, sa[1]),
            size(m_, sa[2]), size(n_, sa[3]), size(k_, sa[4]),
            builder.bitcast(alpha_slot, _VOIDP), ptr(sa[5], a_, aoff, sa[6]), size(lda_, sa[7]),
            ptr(sa[8], b_, boff, sa[9]), size(ldb_, sa[10]), builder.bitcast(beta_slot, _VOIDP),
            ptr(sa[12], c_, coff, sa[13]), size(ldc_, sa[14])])
    return sig, codegen


ensure_blas()   # scipy's cython_blas must be importable before numba_xxgemm is first called


@njit(cache=True, nogil=True)
def gemm_f32(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
    """Row-major ``C[m, n] = op(A)[m, k] @ op(B)[k, n] + beta * C`` on flat float32
    buffers: element (i, j) of A is ``a[a_off + i * lda + j]``, or with ``ta``
    ``a[a_off + j * lda + i]`` (A stored transposed); the same for B with
    ``tb``; C's (i, j) is ``c[c_off + i * ldc + j]``.  ``beta`` 0 overwrites C
    (its old contents may be anything), 1 accumulates.  Nothing is checked here:
    callers pass offsets and sizes derived from validated shapes."""
    if m <= 0 or n <= 0:
        return 0
    if k <= 0:
        for i in range(m):
            for j in range(n):
                c[c_off + i * ldc + j] = c[c_off + i * ldc + j] * beta if beta != 0 else 0.0
        return 0
    # row-major C = A B is column-major C^T = B^T A^T: swap the operands
    return _sgemm(tb, ta, n, m, k, b, b_off, ldb, a, a_off, lda, beta, c, c_off, ldc)


@functools.cache
def single_threaded_blas() -> None:
    """Limit scipy's OpenBLAS (the one gemm_f32 calls) to one thread, once."""
    from threadpoolctl import ThreadpoolController
    import scipy.linalg.cython_blas  # noqa: F401  (loads the library threadpoolctl must find)
    blas = [lc for lc in ThreadpoolController().lib_controllers if lc.user_api == "blas"]
    # scipy's wheels bundle their own OpenBLAS; where scipy shares one BLAS with numpy, limit that one
    own = [lc for lc in blas if "scipy.libs" in lc.filepath or "scipy/.libs" in lc.filepath]
    for lc in own or blas:
        lc.set_num_threads(1)
