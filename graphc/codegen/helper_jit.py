"""How graphc's compiled helpers (the functions generated kernels call) are made.

numba compiles a jitted function called from other jitted code once per tuple of
the call's argument types, and it types an integer constant in the caller as a
literal of its value (``Literal[int](36)``).  A helper called with constants
(a GEMM's sizes and leading dimensions, a transpose flag, a row length) was
compiled again for every kernel whose constants differed: the conv kernels'
``gemm_f32`` took about 0.3 s of each kernel's 0.7 s compile.  :func:`by_value`
types those calls by value (``int64``), so each helper compiles once per tuple
of value types.  LLVM still sees the constants: a helper linked into a kernel
is inlined there (graphc.codegen.runtime.llvm_inlined) or, for the GEMM drivers,
branches on them at run time once per call.
"""
from __future__ import annotations

from numba import njit, types


def by_value(dispatcher):
    """``dispatcher`` (a numba dispatcher) compiled from jitted callers for the
    unliteral types of their arguments (``Literal[int](8)`` -> ``int64``)."""
    typed = dispatcher.get_call_template

    def get_call_template(args, kws):
        return typed(tuple(types.unliteral(a) for a in args), {k: types.unliteral(v) for k, v in kws.items()})
    dispatcher.get_call_template = get_call_template
    return dispatcher


def helper_jit(**options):
    """``njit(**options)`` for a helper kernels call: compiled by value (:func:`by_value`)."""
    return lambda fn: by_value(njit(**options)(fn))
