"""graphc: a oneDNN-Graph-style operation graph compiler lowering to Numba.

``import graphc`` loads what building and loading graphs needs; numba (about
0.15 s to import) comes with the first use of a name of graphc.compiler
(compile, run, CompiledGraph, ...), and any other submodule with its first use
as an attribute (``graphc.reference.run``)."""
from .errors import (GraphcError, InvalidArguments, InvalidDataType, InvalidGraph, InvalidGraphOp,
                     InvalidShape, RuntimeFault, Unimplemented)
from . import ops  # noqa: F401  (registers every op kind)
from .builder import Graph
from .grad import TrainingGraph, grad
from .jsonio import dump_graph, load_graph, save_graph
from .op import Op
from .partition import Partition
from .types import UNKNOWN_NDIMS, DataType, LayoutType, LogicalTensor, PropertyType

__version__ = "0.1.0"

#: names imported from their module on first use
_LAZY = {name: "compiler" for name in (
    "CompiledGraph", "CompiledPartition", "FallbackWarning", "ReferencePartition", "compile", "run",
    "get_constant_tensor_cache", "get_constant_tensor_cache_capacity", "set_constant_tensor_cache",
    "set_constant_tensor_cache_capacity")}

__all__ = ["GraphcError", "InvalidArguments", "InvalidDataType", "InvalidGraph", "InvalidGraphOp", "InvalidShape",
           "RuntimeFault", "Unimplemented", "Graph", "Op", "TrainingGraph", "grad", "Partition", "DataType",
           "LayoutType", "LogicalTensor", "PropertyType", "UNKNOWN_NDIMS", "CompiledGraph", "CompiledPartition",
           "ReferencePartition", "FallbackWarning",
           "compile", "run", "load_graph", "dump_graph", "save_graph", "set_constant_tensor_cache",
           "get_constant_tensor_cache", "set_constant_tensor_cache_capacity", "get_constant_tensor_cache_capacity"]


def __getattr__(name: str):
    from importlib import import_module
    from importlib.util import find_spec
    if name in _LAZY:
        value = getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    if not name.startswith("_") and find_spec(f"{__name__}.{name}") is not None:
        return import_module(f"{__name__}.{name}")   # (sets the attribute)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
