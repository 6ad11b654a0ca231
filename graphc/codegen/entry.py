"""How Python calls a compiled kernel: through a trampoline shared by every
kernel of the same argument types, not an entry point of the kernel's own.

numba builds, for every function callable from Python, a CPython wrapper that
unboxes its arguments: about 0.02 s of each kernel's cold compile (16% of a
small LayerNorm's).  Kernels are compiled without it (KERNEL_JIT); the
trampoline ``_call(address, args)`` is an ordinary numba function of the
kernel's native address and the tuple of its arrays, compiled once per tuple
of array types (and kept in numba's on-disk cache), whose code calls the
kernel through numba's own calling convention: unboxing and the call cost
what calling the kernel's own wrapper cost.  A kernel returns its int64 status
(graphc's kernels end with ``return -1``; a faulting one returns a position).
"""
from __future__ import annotations

import functools

from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def _native_call(typingctx, fn, args):
    """The int64 kernel at address ``fn`` called on the values of tuple ``args``
    (numba's calling convention: what a numba function calling it would do)."""
    if not isinstance(args, types.BaseTuple):
        return None
    argtys = tuple(args.types)

    def codegen(context, builder, signature, llargs):
        fnaddr, tup = llargs
        values = [builder.extract_value(tup, i) for i in range(len(argtys))]
        fnty = context.call_conv.get_function_type(types.int64, argtys)
        callee = builder.inttoptr(fnaddr, fnty.as_pointer())
        status, out = context.call_conv.call_function(builder, callee, types.int64, argtys, values)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return out
    return types.int64(types.int64, args), codegen


@njit(cache=True, nogil=True)
def _call(fn, args):
    return _native_call(fn, args)


def kernel_entry(kernel, sig: tuple):
    """Dispatcher ``kernel``'s compiled overload for ``sig`` (numba types of its
    arrays; it returns int64) as a callable of the tuple of its arrays:
    ``entry((a0, a1, ...)) -> status``.  (A partial of the trampoline's entry
    point: no Python frame of graphc's between the caller and the machine code.)"""
    from .cache import compile_kernel
    cres = kernel.overloads[sig]
    if types.unliteral(cres.signature.return_type) != types.int64:   # (a literal -1: the same int64)
        raise TypeError(f"a kernel returns int64, not {cres.signature.return_type}")
    address = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    tsig = (types.int64, types.Tuple(sig))
    compile_kernel(_call, tsig)
    entry = functools.partial(_call.overloads[tsig].entry_point, address)
    entry.compiled = cres   # (keeps the kernel's machine code for as long as the entry)
    return entry


class Kernel:
    """A compiled partition's kernel: its numba dispatcher (``dispatcher``; its
    attributes read through), callable from Python on arrays as numba would
    call it, through the trampoline (numba's own call of a function compiled
    without an entry point for Python would crash the process)."""

    __slots__ = ("dispatcher", "__weakref__")

    def __init__(self, dispatcher):
        self.dispatcher = dispatcher

    def __getattr__(self, name):
        return getattr(self.dispatcher, name)

    def __call__(self, *arrays):
        from numba import typeof
        from .cache import compile_kernel
        sig = tuple(typeof(a) for a in arrays)
        compile_kernel(self.dispatcher, sig)
        return kernel_entry(self.dispatcher, sig)(arrays)
