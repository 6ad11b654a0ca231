"""Generated kernel source to machine code, and calling it.

``compile_source`` loads a kernel's source (through graphc's kernel cache),
compiles it for the numba signature its argument plan gives, and returns the
kernel and its entry point.  ``call_kernel`` runs an entry point, under one
lock while numba's threading layer is not known to be thread-safe."""
from __future__ import annotations

import threading

import numba
import numpy as np
from numba.core import types as nbtypes
from numba.np.numpy_support import from_dtype

from ..codegen.cache import compile_kernel, load_kernel
from ..codegen.entry import Kernel, kernel_entry
from ..codegen.ir import NP_TYPE



def signature(arg_plan, in_lts, out_lts) -> tuple:
    """The numba signature of a kernel with argument plan ``arg_plan``
    (graphc.lowering.build_kernel): one flat C array per argument, in the dtype
    the kernel sees (bit views for bf16/f16/f8; workspaces by element type)."""
    sig = []
    for kind, ref in arg_plan:
        if kind == "ws":
            dt = np.dtype(NP_TYPE[ref[1]])
        else:
            lt = in_lts[ref] if kind == "in" else out_lts[ref] if kind == "out" else ref
            dt = np.dtype(lt.dtype.info.kernel_np)
        sig.append(nbtypes.Array(from_dtype(dt), 1, "C"))
    return tuple(sig)


def prepare_source(source: str, arg_plan, in_lts, out_lts) -> tuple:
    """(dispatcher, signature): the kernel of ``source`` loaded (not compiled) and
    the signature it compiles for (:func:`compile_source`, or a KernelBatch)."""
    return load_kernel(source), signature(arg_plan, in_lts, out_lts)


def entry_of(dispatcher, sig) -> tuple:
    """(Kernel, entry) of a dispatcher compiled for ``sig``: the entry point calls
    it on a tuple of the arrays its plan names, of any dimensions and layout
    (graphc.codegen.entry's spans)."""
    return Kernel(dispatcher), kernel_entry(dispatcher, sig, spans=True)


def compile_source(source: str, arg_plan, in_lts, out_lts):
    """(Kernel, entry): the kernel of ``source`` compiled for its arguments, and
    the entry point that calls it on a tuple of the arrays its plan names, as
    they are laid out (graphc.codegen.entry)."""
    dispatcher, sig = prepare_source(source, arg_plan, in_lts, out_lts)
    compile_kernel(dispatcher, sig)
    return entry_of(dispatcher, sig)


_KERNEL_LOCK = threading.Lock()
_LAYER_SAFE = None   # numba's threading layer is thread-safe (tbb, omp); None until known


def call_serial(kernel, args):
    """Run a kernel that runs no loop on numba's threads: no threading layer is
    involved, so calls from several threads need no lock."""
    return kernel(tuple(args))


def call_kernel(kernel, args):
    """Run a kernel (graphc.codegen.entry.kernel_entry) on ``args``.  numba's
    workqueue threading layer aborts the process when parallel kernels launch
    from several threads at once: until numba reports a thread-safe layer (tbb or
    omp, which it prefers when available), kernel calls take one lock."""
    global _LAYER_SAFE
    if _LAYER_SAFE:
        return kernel(tuple(args))
    with _KERNEL_LOCK:
        status = kernel(tuple(args))
        if _LAYER_SAFE is None:
            try:
                _LAYER_SAFE = numba.threading_layer() in ("tbb", "omp")
            except ValueError:  # no parallel kernel has run yet
                pass
        return status
