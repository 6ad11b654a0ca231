"""graphc: a oneDNN-Graph-style operation graph compiler lowering to Numba."""
from .errors import (GraphcError, InvalidArguments, InvalidDataType, InvalidGraph, InvalidGraphOp,
                     InvalidShape, RuntimeFault, Unimplemented)
from .compiled import (CompiledGraph, CompiledPartition, FallbackWarning, ReferencePartition, compile,
                       get_constant_tensor_cache, get_constant_tensor_cache_capacity, run, set_constant_tensor_cache,
                       set_constant_tensor_cache_capacity)
from .graph import Graph
from .jsonio import dump_graph, load_graph, save_graph
from .op import Op
from .partition import Partition
from .types import UNKNOWN_NDIMS, DataType, LayoutType, LogicalTensor, PropertyType

__version__ = "0.1.0"

__all__ = ["GraphcError", "InvalidArguments", "InvalidDataType", "InvalidGraph", "InvalidGraphOp", "InvalidShape",
           "RuntimeFault", "Unimplemented", "Graph", "Op", "Partition", "DataType", "LayoutType", "LogicalTensor",
           "PropertyType", "UNKNOWN_NDIMS", "CompiledGraph", "CompiledPartition", "ReferencePartition", "FallbackWarning",
           "compile", "run", "load_graph", "dump_graph", "save_graph", "set_constant_tensor_cache",
           "get_constant_tensor_cache", "set_constant_tensor_cache_capacity", "get_constant_tensor_cache_capacity"]
