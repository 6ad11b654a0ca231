"""Executables: what computes a compiled partition's outputs, one class per kind.

=====================  =============================================================
``KernelExecutable``    a generated kernel (kernel.py)
``ViewExecutable``      a partition of views: no data moves (view.py)
``AllGatherExecutable`` a collective on the group's communicator (collective.py)
``PerValuesExecutable`` a kernel compiled per values of value inputs (per_values.py)
``ReferenceExecutable`` the numpy reference, for what graphc cannot compile (reference.py)
=====================  =============================================================

All implement :class:`Executable` (base.py); graphc.compiler.build chooses one
when a partition compiles, and the CompiledPartition holds it."""
from .base import Executable
from .collective import AllGatherExecutable, CollectiveExecutable, collective_of
from .kernel import KernelExecutable
from .per_values import PerValuesExecutable
from .reference import ReferenceExecutable
from .view import ViewExecutable

__all__ = ["Executable", "KernelExecutable", "ViewExecutable", "CollectiveExecutable", "AllGatherExecutable",
           "PerValuesExecutable", "ReferenceExecutable", "collective_of"]
