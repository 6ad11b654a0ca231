"""Where MKL's library is, and what it lets kernels do (kept apart from blas.py so
that building kernel source does not load numba's BLAS bindings, MKL or scipy;
the kernel module's import of graphc.codegen.blas does, and sets the thread
limit once: graphc.codegen.helpers declares that line).  The kernel cache keeps
the kernels built against each f32 GEMM library (oneDNN, MKL, OpenBLAS) apart."""
from __future__ import annotations

import functools
import glob
import os
import sys


@functools.cache
def mkl_path() -> str | None:
    """The path of MKL's single dynamic library (libmkl_rt) the ``mkl`` package
    installed into this environment, or None (also with ``GRAPHC_BLAS=openblas``
    in the environment, to compare the two libraries)."""
    if os.environ.get("GRAPHC_BLAS", "").lower() == "openblas":
        return None
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
        found = sorted(glob.glob(os.path.join(prefix, "lib", "libmkl_rt.so*")))
        if found:
            return found[-1]
    return None


#: dnnl_version_t's cpu_runtime values (dnnl_config.h) of builds whose threads nest under numba's
#: OpenMP loops: DNNL_RUNTIME_SEQ and DNNL_RUNTIME_OMP (a call inside a parallel region runs
#: on the calling thread alone)
_DNNL_RUNTIMES = (1, 2)


@functools.cache
def dnnl_path() -> str | None:
    """The path of oneDNN's library (libdnnl, from the ``onednn-cpu-gomp``
    package) when its build runs sequentially or on OpenMP, or None (also with
    ``GRAPHC_BLAS=mkl`` or ``openblas`` in the environment).  Its sgemm
    (``dnnl_sgemm``) runs oneDNN's JIT kernels for the CPU's widest ISA on any
    x86 vendor, where MKL's own takes a generic path on non-Intel CPUs."""
    if os.environ.get("GRAPHC_BLAS", "").lower() in ("mkl", "openblas"):
        return None
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
        for path in sorted(glob.glob(os.path.join(prefix, "lib", "libdnnl.so*")), reverse=True):
            if _dnnl_runtime(path) in _DNNL_RUNTIMES:
                return path
    return None


def _dnnl_runtime(path: str) -> int | None:
    """The CPU threading runtime libdnnl at ``path`` was built with, or None when it does not load."""
    import ctypes

    class Version(ctypes.Structure):
        _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                    ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint), ("gpu_runtime", ctypes.c_uint)]
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    lib.dnnl_version.restype = ctypes.POINTER(Version)
    return lib.dnnl_version().contents.cpu_runtime


def bf16_gemm() -> bool:
    """Can kernels multiply bf16 operands as they are (``gemm_bf16``: graphc's
    AVX512-BF16 tile, graphc.codegen.bf16_tile, or MKL)?"""
    from .bf16_tile import available
    return available() or mkl_path() is not None


@functools.cache
def bf16_tile_gemm() -> bool:
    """Do bf16 GEMMs run on graphc's own tile (graphc.codegen.bf16_gemm: kernels
    then pack a shared B once, ``pack_b_bf16``, and call ``gemm_bf16_packed``)?
    Where the CPU has AMX-BF16 (the tile is AMX's, :func:`bf16_amx_gemm`), or
    AVX512-BF16 and no AMX for MKL's bf16 GEMM (``cblas_gemm_bf16bf16f32``) to
    use, or with ``GRAPHC_BF16_TILE=1``.  ``GRAPHC_BF16_TILE=0`` switches graphc's
    tiles off.  On a Xeon with AMX (2 cores), MKL's AMX GEMM ran a 1024^3 bf16
    MatMul in 1.33 ms against 9.5 on the AVX512-BF16 tile."""
    from .bf16_tile import available
    if not available():
        return False
    return bf16_amx_gemm() or os.environ.get("GRAPHC_BF16_TILE") == "1" or not mkl_bf16_on_amx()


@functools.cache
def bf16_amx_gemm() -> bool:
    """Is graphc's own bf16 tile AMX's (graphc.codegen.amx_tile: the CPU has
    AMX-BF16 and the OS grants it; ``GRAPHC_AMX=0``: no)?"""
    from .amx_tile import available
    from .bf16_tile import available as avx512_bf16
    return avx512_bf16() and available("bf16")


@functools.cache
def int8_amx_gemm() -> bool:
    """Is graphc's own u8 x s8 tile AMX's (the CPU has AMX-INT8; ``GRAPHC_AMX=0``: no)?"""
    from .amx_tile import available
    from .int8_tile import available as vnni
    return vnni() and available("int8")


@functools.cache
def mkl_bf16_on_amx() -> bool:
    """Does MKL's bf16 GEMM run on AMX here (MKL installed, the CPU has AMX-BF16;
    ``GRAPHC_BF16_AMX=0``: taken as no)?"""
    from .llvm_tile import host_has
    return mkl_path() is not None and host_has("amx-bf16", "GRAPHC_BF16_AMX")


@functools.cache
def bf16_conv_gemm() -> bool:
    """Do convolutions of bf16 values multiply them in bf16: on graphc's tile, or
    on MKL's bf16 GEMM where it runs on AMX?  (Elsewhere MKL widens bf16 to f32
    inside its GEMM, and convolutions take their f32 roads.)"""
    return bf16_tile_gemm() or mkl_bf16_on_amx()


def int8_gemm() -> bool:
    """Can kernels multiply u8 by s8 into s32 (``gemm_u8s8``: graphc's AVX512-VNNI
    tile, graphc.codegen.int8_tile, or MKL)?"""
    return int8_tile_gemm() or mkl_path() is not None


def int8_tile_gemm() -> bool:
    """Do u8 x s8 GEMMs run on graphc's own tile (graphc.codegen.int8_gemm: kernels
    then pack a shared B once, ``pack_b_u8s8``, and call ``gemm_u8s8_packed``)?
    Wherever the CPU has AVX512-VNNI; the tile is AMX-INT8's where it has that
    too (:func:`int8_amx_gemm`)."""
    from .int8_tile import available
    return available()
