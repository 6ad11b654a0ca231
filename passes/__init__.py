"""graphc's compiler passes: verification, shape propagation, canonicalisation,
fusion (a declarative pattern catalog) and partitioning, run by a pass manager."""
from __future__ import annotations

import sys

from .canonicalize import MarkConstants, RemoveDeadOps
from .fuse import Fuse
from .manager import Pass, PassContext, PassManager
from .partitioner import Partitioner
from .propagate import Propagate
from .verify import Verify


def pipeline() -> PassManager:
    return PassManager([Verify(), Propagate(), RemoveDeadOps(), MarkConstants(), Fuse(), Partitioner()])


def run_pipeline(graph, policy: str, can_lower, verbose: bool = False, out=None) -> PassContext:
    """Run the passes over a finalized graph; ``can_lower(op)`` tells legality
    which ops this build has kernels for (the compile step passes code
    generation's answer: passes never import code generation)."""
    ctx = pipeline().run(PassContext(graph, policy, can_lower))
    if verbose:
        out = out or sys.stdout
        for name, changes in ctx.log:
            print(f"[{name}]", file=out)
            for c in changes or ["(no change)"]:
                print(f"  {c}", file=out)
    return ctx


__all__ = ["Pass", "PassContext", "PassManager", "pipeline", "run_pipeline"]
