"""How Python calls a compiled kernel: through a trampoline shared by every
kernel taking as many arrays of the same dimensions, not an entry point of the
kernel's own.

numba builds, for every function callable from Python, a CPython wrapper that
unboxes its arguments: about 0.02 s of each kernel's cold compile (16% of a
small LayerNorm's).  Kernels are compiled without it (KERNEL_JIT); a
trampoline ``call(address, args)`` is an ordinary numba function of the
kernel's native address and the tuple of its arrays, whose code calls the
kernel through numba's own calling convention: unboxing and the call cost
what calling the kernel's own wrapper cost.  A kernel returns its int64 status
(graphc's kernels end with ``return -1``; a faulting one returns a position).

The trampoline unboxes each array as an :class:`AnyArray` of its dimensions:
numba's array structure, whatever the dtype and layout (at the machine level
an array of any dtype is passed alike), so one trampoline serves every kernel
of as many arrays of those dimensions.  graphc's executables call through
:class:`Span`: each array reaches the kernel as the one dimension the kernel
indexes with its tensor's strides, the span of its elements, whatever its
dimensions and strides, so the caller passes the arrays it holds (no flat
view, bit view or ``as_strided`` made in Python per call), and one trampoline
serves every kernel of as many arrays, whatever their dimensions (one per
tuple of dimensions made 454 in the test suite, each 0.06 s of a cold
compile).  A span is read without a reference of its own (numba's adapter
without its runtime: the caller holds the arrays for the call), as numba's
gufuncs pass their arrays: no allocation per array per call.  The
arrays are not checked against the kernel's types there: graphc checks what it
passes (CompiledPartition's plans), and :class:`Kernel` types the arrays it is
given.
"""
from __future__ import annotations

import functools
import threading

from llvmlite import ir as llvm_ir
from numba import types
from numba.core import cgutils
from numba.core.datamodel.models import ArrayModel
from numba.extending import NativeValue, intrinsic, register_model, unbox


class AnyArray(types.Type):
    """A numpy array of ``ndim`` dimensions, any dtype and layout, as a trampoline
    takes it: numba's array structure (its pointers typed as bytes)."""

    def __init__(self, ndim: int):
        self.ndim = ndim
        self.dtype = types.uint8     # (the data and meminfo pointers' type in ArrayModel)
        super().__init__(name=f"graphc.AnyArray({ndim})")


register_model(AnyArray)(ArrayModel)


@unbox(AnyArray)
def _unbox_any_array(typ, obj, c):
    """numba's unboxing of an array (NRT's adapter), without its itemsize check."""
    native = cgutils.create_struct_proxy(typ)(c.context, c.builder)
    at = native._getpointer()
    err = c.pyapi.nrt_adapt_ndarray_from_python(obj, c.builder.bitcast(at, c.pyapi.voidptr))
    failed = cgutils.is_not_null(c.builder, err)
    with c.builder.if_then(failed, likely=False):
        c.pyapi.err_set_string("PyExc_TypeError", "a kernel's arguments are numpy arrays")
    return NativeValue(c.builder.load(at), is_error=failed)


class Span(types.Type):
    """A numpy array of any dimensions, dtype and layout, as the kernel takes it:
    numba's structure of a one-dimensional array over the span of its elements
    (1 + the sum over dims of (size - 1) x stride, in elements; 0 when it has
    none), unit stride, the same data.  A dense array's span is its size; a
    strided one's reaches its last element (the kernel indexes it with the
    strides of its logical tensor)."""

    def __init__(self):
        self.ndim = 1
        self.dtype = types.uint8
        super().__init__(name="graphc.Span")


register_model(Span)(ArrayModel)

#: numpy's most dimensions (NPY_MAXDIMS of numpy 2; numpy 1 allows 32)
_MAX_DIMS = 64
#: the byte offset of ``nd`` in numpy's array object (PyArrayObject_fields: the object's
#: header, then its data pointer), which numpy's inline PyArray_NDIM reads: numpy's ABI
_ND_OFFSET = 24


@unbox(Span)
def _unbox_span(typ, obj, c):
    """The span of array ``obj``: numba's adapter without its runtime
    (``numba_adapt_ndarray``: no meminfo allocated, the caller holds the array)
    fills an array structure wide enough for any dimensions with the data,
    itemsize, size, then the sizes and the strides of its ``nd`` dimensions."""
    builder, context = c.builder, c.context
    intp = context.get_value_type(types.intp)
    wide = cgutils.create_struct_proxy(AnyArray(_MAX_DIMS))(context, builder)
    at = wide._getpointer()
    fnty = llvm_ir.FunctionType(llvm_ir.IntType(32), [c.pyapi.pyobj, c.pyapi.voidptr])
    adapt = cgutils.get_or_insert_function(builder.module, fnty, "numba_adapt_ndarray")
    err = builder.call(adapt, (obj, builder.bitcast(at, c.pyapi.voidptr)))
    failed = cgutils.is_not_null(builder, err)
    with builder.if_then(failed, likely=False):
        c.pyapi.err_set_string("PyExc_TypeError", "a kernel's arguments are numpy arrays")
    nd_slot = cgutils.alloca_once_value(builder, intp(0))
    with builder.if_then(builder.not_(failed), likely=True):
        nd_at = builder.gep(builder.bitcast(obj, cgutils.int8_t.as_pointer()), [cgutils.int32_t(_ND_OFFSET)])
        builder.store(builder.sext(builder.load(builder.bitcast(nd_at, cgutils.int32_t.as_pointer())), intp), nd_slot)
    nd = builder.load(nd_slot)
    # the sizes, then the strides, of the nd dims, one after the other from the shape field
    dims = builder.bitcast(cgutils.gep_inbounds(builder, at, 0, 5), intp.as_pointer())
    one, zero = intp(1), intp(0)
    extent = cgutils.alloca_once_value(builder, zero)
    with cgutils.for_range(builder, nd) as loop:
        size = builder.load(builder.gep(dims, [loop.index]))
        stride = builder.load(builder.gep(dims, [builder.add(nd, loop.index)]))
        builder.store(builder.add(builder.load(extent), builder.mul(builder.sub(size, one), stride)), extent)
    itemsize = builder.select(failed, one, wide.itemsize)
    span = builder.add(builder.sdiv(builder.load(extent), itemsize), one)
    span = builder.select(builder.icmp_signed("==", wide.nitems, zero), zero, span)
    dst = cgutils.create_struct_proxy(AnyArray(1))(context, builder)
    dst.meminfo, dst.parent, dst.itemsize, dst.data = wide.meminfo, wide.parent, wide.itemsize, wide.data
    dst.nitems = span
    dst.shape = cgutils.pack_array(builder, [span])
    dst.strides = cgutils.pack_array(builder, [wide.itemsize])
    return NativeValue(dst._getvalue(), is_error=failed)


@intrinsic
def _native_call(typingctx, fn, args):
    """The int64 kernel at address ``fn`` called on the values of tuple ``args``
    (numba's calling convention: what a numba function calling it would do),
    each Span as the one-dimensional array the kernel takes."""
    if not isinstance(args, types.BaseTuple):
        return None
    argtys = tuple(args.types)
    flat = tuple(AnyArray(1) if isinstance(t, Span) else t for t in argtys)

    def codegen(context, builder, signature, llargs):
        fnaddr, tup = llargs
        values = [builder.extract_value(tup, i) for i in range(len(argtys))]
        fnty = context.call_conv.get_function_type(types.int64, flat)
        callee = builder.inttoptr(fnaddr, fnty.as_pointer())
        status, out = context.call_conv.call_function(builder, callee, types.int64, flat, values)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return out
    return types.int64(types.int64, args), codegen


#: the trampolines made so far, by argument types (a few: kept for the life of the process)
_trampolines: dict = {}
_lock = threading.Lock()


def _trampoline(tsig: tuple):
    """The trampoline dispatcher for ``tsig`` (int64 address, tuple of AnyArray),
    compiled.  Each is a module of its own in the kernel cache folder, named by
    its text, which names its argument types: numba's on-disk index of one function
    shared by every signature is rewritten by each process adding one, and two
    processes adding at once can leave an entry pointing at the other's code."""
    fn = _trampolines.get(tsig)
    if fn is None:
        from .cache import compile_kernel, load_function
        source = ("# generated by graphc: the trampoline of kernels taking " + str(tsig[1]) + "\n"
                  "from numba import njit\n"
                  "from graphc.codegen.entry import _native_call\n\n\n"
                  "@njit(cache=True, nogil=True)\n"
                  "def call(fn, args):\n"
                  "    return _native_call(fn, args)\n")
        with _lock:
            fn = _trampolines.get(tsig)
            if fn is None:
                fn = load_function(source, "call")
                compile_kernel(fn, tsig)
                if tsig not in fn.overloads:
                    raise RuntimeError(f"no trampoline compiled for {tsig}")
                _trampolines[tsig] = fn
    return fn


def kernel_entry(kernel, sig: tuple, spans: bool = False):
    """Dispatcher ``kernel``'s compiled overload for ``sig`` (numba types of its
    arrays; it returns int64) as a callable of the tuple of its arrays:
    ``entry((a0, a1, ...)) -> status``, each passed as ``sig`` types it.  With
    ``spans``, a kernel of one-dimensional arrays takes arrays of any
    dimensions and layout, in any dtype of the kernel's width: the trampoline
    hands each to the kernel as the one-dimensional span of its elements
    (:class:`Span`; no flat view made in Python).  (A partial of the
    trampoline's entry point: no Python frame of graphc's between the caller
    and the machine code.)"""
    cres = kernel.overloads[sig]
    if types.unliteral(cres.signature.return_type) != types.int64:   # (a literal -1: the same int64)
        raise TypeError(f"a kernel returns int64, not {cres.signature.return_type}")
    if not all(isinstance(t, types.Array) for t in sig):
        raise TypeError(f"a kernel takes arrays, not {sig}")
    if spans and not all(t.ndim == 1 for t in sig):
        raise TypeError(f"a kernel taking spans takes one-dimensional arrays, not {sig}")
    address = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    args = (Span(),) * len(sig) if spans else tuple(AnyArray(t.ndim) for t in sig)
    tsig = (types.int64, types.Tuple(args))
    call = _trampoline(tsig).overloads[tsig]
    entry = functools.partial(call.entry_point, address)
    entry.compiled = (cres, call)   # (keeps both machine codes for as long as the entry)
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
