"""Helpers that kernels call through a symbol, never linked into them.

numba links a jitted callee's LLVM module into each caller and optimizes and
makes machine code of the whole again: every bf16 or int8 kernel re-made the
GEMM drivers of graphc.codegen.bf16_gemm and int8_gemm (packing loops, the
BLIS loop nest, the tile calls), about 0.5 s of each such kernel's compile.
An :class:`Exported` helper is compiled once per process (or loaded from
numba's on-disk cache), for one signature of value types (int64 sizes,
C-contiguous 1-D arrays), and bound to a symbol of its own with llvmlite's
``add_symbol``, as the BLAS libraries are (graphc.codegen.blas).  A kernel
calls it through an intrinsic (:attr:`Exported.call`) that declares the symbol
with numba's calling convention and passes its arguments cast to that
signature: a call, no copy of the helper.

Machine code that calls an unbound symbol crashes the process when it is
loaded, so a helper is bound (loaded or compiled, once per process) before
any code calling it is loaded: when a kernel calling it is typed (the
intrinsic's typing), before a kernel's machine code is taken from the kernel
cache (graphc.codegen.cache: :func:`bind_called`, from the names the kernel's
module calls), and by any other cached function's module before that function
runs (:func:`bind`, as graphc.compiler.cost does).  A process binds only the
helpers its kernels call: from a warm cache in milliseconds each.
"""
from __future__ import annotations

import inspect

from llvmlite import binding as llb
from numba import types
from numba.core import cgutils
from numba.core.compiler_lock import global_compiler_lock
from numba.extending import intrinsic

from .cached_overload import load_cached

#: symbol prefix of the exported helpers
PREFIX = "graphc_x_"
#: name -> Exported
EXPORTED: dict[str, "Exported"] = {}

I64 = types.int64
F64 = types.float64


def array(dtype) -> types.Array:
    """The argument type of a flat buffer of ``dtype``: 1-D, C-contiguous."""
    return types.Array(dtype, 1, "C")


class Exported:
    """Helper ``name`` (a numba dispatcher ``impl``) called by symbol, compiled
    for ``argtypes`` (value types: :data:`I64`, :data:`F64`, :func:`array`)."""

    def __init__(self, name: str, impl, argtypes: tuple):
        self.name = name
        self.symbol = PREFIX + name
        self.impl = impl
        self.argtypes = tuple(argtypes)
        self._cres = None
        self.call = self._intrinsic()

    @property
    def restype(self):
        return types.unliteral(self.bind().signature.return_type)

    def bind(self):
        """Load (or compile) the helper in this process and bind its symbol, once."""
        with global_compiler_lock:
            if self._cres is None:
                if not load_cached(self.impl, self.argtypes):
                    self.impl.compile(self.argtypes)
                cres = self.impl.overloads[self.argtypes]
                llb.add_symbol(self.symbol, cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name))
                self._cres = cres   # (keeps its machine code alive with the process)
            return self._cres

    def _accepts(self, args) -> bool:
        if len(args) != len(self.argtypes):
            return False
        for got, want in zip(args, self.argtypes):
            if isinstance(want, types.Array):
                if not (isinstance(got, types.Array) and got.dtype == want.dtype and got.ndim == 1
                        and got.layout == "C"):
                    return False
            elif not isinstance(types.unliteral(got), (types.Integer, types.Float, types.Boolean)):
                return False
        return True

    def _intrinsic(self):
        exported = self

        def typer(typingctx, *args):
            if not exported._accepts(args):
                return None
            return exported.restype(*args), exported._codegen
        typer.__name__ = self.name
        typer.__signature__ = inspect.Signature(
            [inspect.Parameter("typingctx", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
            + [inspect.Parameter(f"a{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD) for i in range(len(self.argtypes))])
        return intrinsic(typer)

    def _codegen(self, context, builder, signature, args):
        vals = []
        for v, got, want in zip(args, signature.args, self.argtypes):
            # an array passes as it is (its struct is the same whatever its flags)
            vals.append(v if isinstance(want, types.Array) else context.cast(builder, v, got, want))
        restype = self.restype
        fnty = context.call_conv.get_function_type(restype, self.argtypes)
        fn = cgutils.get_or_insert_function(builder.module, fnty, self.symbol)
        status, res = context.call_conv.call_function(builder, fn, restype, self.argtypes, vals)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return res


def export(name: str, impl, argtypes: tuple):
    """The intrinsic kernels call helper ``impl`` through (see :class:`Exported`)."""
    if name in EXPORTED:
        raise ValueError(f"helper {name} is exported already")
    exp = EXPORTED[name] = Exported(name, impl, argtypes)
    return exp.call


def bind(name: str) -> None:
    """Bind exported helper ``name`` in this process (see the module doc)."""
    EXPORTED[name].bind()


def bind_called(source: str) -> None:
    """Bind the exported helpers a kernel's module ``source`` calls (graphc's
    generated text: a helper is called where its name is followed by ``(``)."""
    for name, exp in EXPORTED.items():
        if exp._cres is None and name + "(" in source:
            exp.bind()
