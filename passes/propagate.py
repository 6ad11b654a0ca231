"""Shape and dtype propagation: every tensor's shape as far as inputs fix it.

``Graph.finalize`` runs each op's shape rule in topological order; this pass
reports the tensors whose declared shapes it resolved and the ones still unknown
(resolved at compile time from concrete inputs)."""
from __future__ import annotations

from .manager import Pass


class Propagate(Pass):
    name = "propagate"

    def run(self, ctx):
        g = ctx.graph
        changes = []
        for op in g.topo_ops():
            for t in op.outputs:
                if not t.is_complete:
                    changes.append(f"tensor {t.id}: shape {list(t.shape)} known at compile time only")
        if not changes:
            changes.append("every tensor shape known")
        return changes
