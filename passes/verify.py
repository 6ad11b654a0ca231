"""Verification: the graph is finalized and every op satisfies its schema."""
from __future__ import annotations

from graphc.errors import InvalidGraph

from .manager import Pass


class Verify(Pass):
    name = "verify"

    def run(self, ctx):
        g = ctx.graph
        if not g.finalized:
            g.finalize()
        for op in g.ops.values():
            if op.schema is None:
                raise InvalidGraph("op was not validated", op=op)
            for t in op.inputs:
                if t.id not in g.producer and t.id not in g.input_port_set:
                    raise InvalidGraph("input tensor is neither produced nor a graph input", op=op,
                                       where=f"tensor {t.id}")
        return [f"{len(g.ops)} ops verified"]
