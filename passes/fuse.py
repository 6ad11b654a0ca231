"""Fusion: apply the catalog (passes/catalog.py) with the pattern engine; the
legality pass (passes/legality.py) judges each match and plans its kernel."""
from __future__ import annotations

from .catalog import catalog
from .legality import accept
from .manager import Pass
from .pattern import match_all


class Fuse(Pass):
    name = "fusion"

    def run(self, ctx):
        if ctx.policy != "fusion":
            return ["policy 'debug': no fusion, one partition per op"]
        g = ctx.graph
        rejected: list = []
        ctx.matches = match_all(g, list(catalog()), accept(g, ctx.can_lower, ctx.live, ctx.constant_ops, rejected))
        taken = {o.id for m in ctx.matches for o in m.ops}
        return [f"{m.pattern.name}: ops {[o.id for o in m.ops]} ({' -> '.join(o.kind for o in m.ops)}); "
                f"{m.plan.describe()}" for m in ctx.matches] + \
               [f"{m.pattern.name}: ops {[o.id for o in m.ops]} not fused: {why}" for m, why in rejected
                if not any(o.id in taken for o in m.ops)]   # (not where a shorter match fused instead)
