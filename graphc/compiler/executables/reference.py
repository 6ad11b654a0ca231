"""The reference fallback: a partition graphc cannot compile, run op by op in
the numpy reference (``graphc.compile(graph, fallback="reference")``)."""
from __future__ import annotations

from ...reference import run_op
from .base import Executable


class ReferenceExecutable(Executable):
    """Runs ``ops`` in the numpy reference, on inputs in any layout, into
    arrays of its own (copied into the caller's outputs when given)."""

    allocates_outputs = False
    impl_kind = "reference"
    lays_out_inputs = False

    def __init__(self, ops, inputs, outputs):
        self.ops, self.inputs, self.outputs = ops, inputs, outputs

    def run(self, ins, outs, comm):
        values = {lt.id: a for lt, a in zip(self.inputs, ins)}
        for op in self.ops:
            if op.kind != "End":
                values.update(run_op(op, [values[t.id] for t in op.inputs], comm=comm))
        return [values[lt.id] for lt in self.outputs]
