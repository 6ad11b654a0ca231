"""The fusion catalog: oneDNN's fusion patterns (../doc/fusion_patterns), the
training patterns, and the seed ops with their neighbours, as small graphs for
the one matching engine (passes/pattern.py).

Each entry is a function building one :class:`Pattern`; :func:`catalog` lists
them.  Each pattern declares the kernel shape its matches lower to (``kernel=``:
eltwise, anchor, staged, attention, views or conv_depthwise) and labels the ops a kernel gives a
part to (the attention roles: ``qk``, ``softmax``, ``pv``, ``reorder``, ...).
Which matches become partitions, and what their kernels keep in registers, is
decided by passes/legality.py from the match and its roles; how a fused
partition lowers, by graphc/codegen/fusion.py.  Patterns whose anchor has no kernel in this build
(MatMul, Convolution, pools) are listed already: legality refuses them until
their kernels exist, and then their post-ops fuse through the same epilogue
hook as every other anchor.

Reshapes and transposes are views (graphc/views.py): a chain of them is one
partition whose output views its input, and around a MatMul or an elementwise
chain they fold into the kernel's strides (the views block at the end).
"""
from __future__ import annotations

from functools import lru_cache

from ..pattern import Pattern
from . import attention, basic, pools, quantized, training, views
from .pieces import BINARY, ELTWISE, REDUCE, UNARY, UNARY_BWD  # noqa: F401 (the kind lists, for tests and passes)

#: every block's builders, in the order the blocks were written (priority decides among matches)
BUILDERS = (basic.BUILDERS + quantized.BUILDERS + attention.BUILDERS + views.BUILDERS + pools.BUILDERS
            + training.BUILDERS)



@lru_cache(maxsize=1)
def catalog() -> tuple[Pattern, ...]:
    return tuple(b() for b in BUILDERS)
