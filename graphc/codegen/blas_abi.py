"""What the BLAS intrinsics share (graphc.codegen.blas, graphc.codegen.bf16_gemm):
a pointer into a flat array at an element offset, and the check that
arguments are 1-D arrays of one dtype."""
from __future__ import annotations

from llvmlite import ir as llir
from numba import types

VOIDP = llir.IntType(8).as_pointer()


def pointer(context, builder, aty, val, off, offty):
    """An i8* to element ``off`` (of numba type ``offty``) of the array ``val`` (type ``aty``)."""
    data = context.make_array(aty)(context, builder, val).data
    off = context.cast(builder, off, offty, types.intp)
    return builder.bitcast(builder.gep(data, [off]), VOIDP)


def arrays(dtype, *arrs) -> bool:
    """Are ``arrs`` all 1-D arrays of ``dtype``?"""
    return all(isinstance(a, types.Array) and a.dtype == dtype and a.ndim == 1 for a in arrs)
