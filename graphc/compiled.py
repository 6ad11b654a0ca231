"""The public names of graphc.compiler (see that package for where each lives),
importable from here as before: ``graphc.compile``, ``graphc.run``,
``CompiledGraph``, ``CompiledPartition``, the constant tensor cache's
functions, and ``into_layout`` for tools that lay arrays out as a compiled
partition takes them."""
from .compiler import (CONSTANT_CACHE, CompiledGraph, CompiledPartition, ConstantTensorCache, FallbackWarning,
                       ReferencePartition, compile, get_constant_tensor_cache, get_constant_tensor_cache_capacity,
                       run, set_constant_tensor_cache, set_constant_tensor_cache_capacity)
from .compiler.layout import into_layout

__all__ = ["CONSTANT_CACHE", "CompiledGraph", "CompiledPartition", "ConstantTensorCache", "FallbackWarning",
           "ReferencePartition", "compile", "run", "get_constant_tensor_cache", "get_constant_tensor_cache_capacity",
           "set_constant_tensor_cache", "set_constant_tensor_cache_capacity", "into_layout"]
