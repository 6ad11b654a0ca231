"""The compile step and the runtime: partitions become executables, and
compiled graphs run them.  One job per module:

=========================  ===========================================================
``build``                  a partition -> a CompiledPartition holding its executable
``specialize``             op copies for concrete inputs and for values of value inputs
``any_layout``             the strides chosen for tensors of layout ``any``
``jit``                    kernel source -> machine code; calling it (the kernel lock)
``executables/``           what runs a partition: a kernel, a view, a collective, a
                           kernel compiled per values, the numpy reference
``compiled_partition``     the caller's arrays checked, laid out, bound to the executable
``compiled_graph``         every partition compiled, run in order; failures told to the group
``layout``                 array layout helpers (allocate, into_layout, flat views)
``constant_cache``         oneDNN's constant tensor cache
``cost``                   bytes moved, FLOPs, the machine's limits (bench --mode=P, profile)
``profile``                CompiledGraph.profile: time, share, bytes, fraction of a limit per partition
``progress``               the progress bar of a long compile on a terminal
=========================  ===========================================================

(The package is ``compiler``, not ``compile``: ``graphc.compile`` is the function
that compiles a graph, and a submodule of that name would replace it.)

Importing it with numba's compiler off (``NUMBA_DISABLE_JIT=1``) raises
Unimplemented naming the setting (graphc.partition.require_jit)."""
from ..partition import require_jit

require_jit()   # (before code generation, which compiles its helpers when imported)

from .compiled_graph import CompiledGraph, FallbackWarning, compile, run  # noqa: A004
from .compiled_partition import CompiledPartition, ReferencePartition
from .constant_cache import (CONSTANT_CACHE, ConstantTensorCache, get_constant_tensor_cache,
                             get_constant_tensor_cache_capacity, set_constant_tensor_cache,
                             set_constant_tensor_cache_capacity)

__all__ = ["CompiledGraph", "CompiledPartition", "ReferencePartition", "FallbackWarning", "compile", "run",
           "CONSTANT_CACHE", "ConstantTensorCache", "get_constant_tensor_cache",
           "get_constant_tensor_cache_capacity", "set_constant_tensor_cache", "set_constant_tensor_cache_capacity"]
