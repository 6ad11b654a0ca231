"""Fusion: apply the catalog (passes/catalog/) with the pattern engine; the
legality pass (passes/legality.py) judges each match and plans its kernel.  The
log lists every fused match with its plan, every match refused with why (where
no shorter match fused instead), and, on a line of its own, every fused
partition whose kernel lowers one op at a time."""
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
        return [f"{m.pattern.name}: ops {_ids(m)} ({' -> '.join(o.kind for o in m.ops)}); "
                f"{m.plan.describe()}" for m in ctx.matches] + \
               [f"{m.pattern.name}: ops {_ids(m)} not fused: {why}" for m, why in rejected
                if not any(o.id in taken for o in m.ops)] + \
               [f"{m.pattern.name}: ops {_ids(m)} lower one op at a time: {m.plan.one_at_a_time}"
                for m in ctx.matches if m.plan.one_at_a_time]


def _ids(m) -> list:
    return [o.id for o in m.ops]
