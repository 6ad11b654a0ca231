"""Partitioning: fused matches (with their kernel plans) and single ops become
groups, ordered so that every group runs after the groups producing its inputs."""
from __future__ import annotations

from ..graph import topological_order
from .manager import Pass

#: ops whose partitions do no computation
MARKERS = ("End",)


class Partitioner(Pass):
    name = "partition"

    def run(self, ctx):
        g = ctx.graph
        group_of: dict[int, int] = {}
        groups = []
        for m in ctx.matches:
            for o in m.ops:
                group_of[o.id] = len(groups)
            groups.append((m.pattern.name, list(m.ops), m.plan))
        for o in g.topo_ops():
            if o.id in group_of or o.id not in ctx.live or o.kind in MARKERS:
                continue
            group_of[o.id] = len(groups)
            groups.append(("", [o], None))
        succ: dict[int, set] = {}
        for a, b in g.edges():
            ga, gb = group_of.get(a), group_of.get(b)
            if ga is not None and gb is not None and ga != gb:
                succ.setdefault(ga, set()).add(gb)
        order = topological_order(range(len(groups)), {k: sorted(v) for k, v in succ.items()})
        ctx.groups = [groups[i] for i in order]
        return [f"partition {i}: {name or 'single op'} {[o.id for o in ops]}"
                for i, (name, ops, _) in enumerate(ctx.groups)]
