"""Fusion: apply the catalog (passes/catalog.py) with the pattern engine."""
from __future__ import annotations

from .catalog import catalog
from .manager import Pass
from .pattern import match_all


class Fuse(Pass):
    name = "fusion"

    def run(self, ctx):
        if ctx.policy != "fusion":
            return ["policy 'debug': no fusion, one partition per op"]
        g = ctx.graph
        cands = [p for p in catalog()]
        ctx.matches = [m for m in match_all(g, cands)
                       if all(o.id in ctx.live and o.id not in ctx.constant_ops for o in m.ops)]
        return [f"{m.pattern.name}: ops {[o.id for o in m.ops]} ({' -> '.join(o.kind for o in m.ops)})"
                for m in ctx.matches]
