"""The numba pipeline graphc compiles its kernels with: numba's nopython
pipeline without the passes for Python that generated kernels never contain
(with blocks, closures and inner functions, array expressions) and without
dead-branch pruning (a kernel has no branch on a constant), about 6% of a
kernel's cold compile.  A kernel's source is graphc's own (graphc.codegen.
kernel), so what it contains is known; the test suite compiles every kind."""
from __future__ import annotations

from numba.core.compiler import CompilerBase, DefaultPassBuilder
from numba.core.typed_passes import NopythonRewrites
from numba.core.untyped_passes import (DeadBranchPrune, InlineClosureLikes, MakeFunctionToJitFunction,
                                       WithLifting)

_LEFT_OUT = (WithLifting, InlineClosureLikes, MakeFunctionToJitFunction, DeadBranchPrune, NopythonRewrites)


class KernelCompiler(CompilerBase):
    """numba's nopython pipeline less the passes of _LEFT_OUT (the pipeline_class
    of a kernel without numba's prange, and the compiler of its loop functions:
    graphc.codegen.launch)."""

    def define_pipelines(self):
        pm = DefaultPassBuilder.define_nopython_pipeline(self.state)
        pm.passes = [(p, d) for p, d in pm.passes if p not in _LEFT_OUT]
        pm._finalized = False
        pm.finalize()
        return [pm]
