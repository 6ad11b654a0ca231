"""Where MKL's library is, and what it lets kernels do (kept apart from blas.py so
that building kernel source does not load numba's BLAS bindings, MKL or scipy;
the kernel module's import of graphc.codegen.blas does, and sets the thread
limit once: graphc.codegen.helpers declares that line).  The kernel cache keeps
the kernels built against MKL apart from those built against OpenBLAS."""
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


def bf16_gemm() -> bool:
    """Can kernels multiply bf16 operands as they are (``gemm_bf16``: graphc's
    AVX512-BF16 tile, graphc.codegen.bf16_tile, or MKL)?"""
    from .bf16_tile import available
    return available() or mkl_path() is not None


def int8_gemm() -> bool:
    """Can kernels multiply u8 by s8 into s32 (``gemm_u8s8``: MKL)?"""
    return mkl_path() is not None
