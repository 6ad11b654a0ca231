"""Canonicalisation: dead-op removal and constant-tensor folding marks.

* An op is live when one of its outputs is a graph output or feeds a live op;
  dead ops get no partition.
* An op whose inputs are all constant-property tensors (or outputs of such ops)
  is constant: its partition is computed once and its outputs cached by
  ``CompiledGraph`` (oneDNN's constant tensor cache).
"""
from __future__ import annotations

from graphc.types import PropertyType

from .manager import Pass


class RemoveDeadOps(Pass):
    name = "dead-op-removal"

    def run(self, ctx):
        g = ctx.graph
        outs = g.output_port_set
        live = set()
        for op in reversed(g.topo_ops()):
            if op.kind == "End" or any(t.id in outs for t in op.outputs) or \
                    any(c in live for t in op.outputs for c, _ in g.consumers.get(t.id, [])):
                live.add(op.id)
        ctx.live = live
        dead = sorted(set(g.ops) - live)
        return [f"op {i} ({g.ops[i].kind}) is dead: no output reaches a graph output" for i in dead]


class MarkConstants(Pass):
    name = "constant-folding"

    def run(self, ctx):
        g = ctx.graph
        const_tensors = {tid for tid, t in g.tensors.items()
                         if t.property_type == PropertyType.constant and tid not in g.producer}
        changes = []
        for op in g.topo_ops():
            if op.id in ctx.live and op.inputs and op.kind != "End" and all(t.id in const_tensors for t in op.inputs):
                ctx.constant_ops.add(op.id)
                const_tensors.update(t.id for t in op.outputs)
                changes.append(f"op {op.id} ({op.kind}) folds: its inputs are constant")
        return changes
