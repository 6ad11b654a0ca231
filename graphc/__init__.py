"""graphc: a oneDNN-Graph-style operation graph compiler lowering to Numba."""
from .errors import (GraphcError, InvalidArguments, InvalidDataType, InvalidGraph, InvalidGraphOp,
                     InvalidShape, RuntimeFault, Unimplemented)
from .compiled import CompiledGraph, CompiledPartition, compile, run
from .graph import Graph
from .jsonio import dump_graph, load_graph, save_graph
from .op import Op
from .partition import Partition
from .types import DataType, LayoutType, LogicalTensor, PropertyType

__version__ = "0.1.0"

__all__ = ["GraphcError", "InvalidArguments", "InvalidDataType", "InvalidGraph", "InvalidGraphOp", "InvalidShape",
           "RuntimeFault", "Unimplemented", "Graph", "Op", "Partition", "DataType", "LayoutType", "LogicalTensor",
           "PropertyType", "CompiledGraph", "CompiledPartition", "compile", "run", "load_graph", "dump_graph", "save_graph"]
