"""A region of an FX graph compiled by graphc, called from the FX graph as a
module: torch tensors in, torch tensors out, no copies either way
(graphc.interop): the outputs are torch tensors over the arrays graphc wrote."""
from __future__ import annotations

import numpy as np
import torch

from ..interop import as_array, to_torch


class GraphcRegion(torch.nn.Module):
    """Runs ``compiled`` (a graphc CompiledGraph) on the region's inputs (tensor
    ids ``input_ids``, in call order; None for an argument it does not read) and its ``constants`` ({tensor id: array});
    returns the outputs ``output_ids`` as a tuple of torch tensors."""

    def __init__(self, compiled, input_ids, output_ids, constants, aten_nodes: int):
        super().__init__()
        self.compiled = compiled
        self.input_ids = list(input_ids)
        self.output_ids = list(output_ids)
        self.constants = dict(constants)
        self.aten_nodes = aten_nodes      # the ATen nodes it replaces (for explain)

    @property
    def partitions(self) -> int:
        return len(self.compiled.partitions)

    @property
    def kernels(self) -> int:
        return sum(1 for cp in self.compiled.compiled if cp is not None and cp.kernel is not None)

    def forward(self, *args):
        feed = dict(self.constants)
        ins = [as_array(a) for tid, a in zip(self.input_ids, args) if tid is not None]
        feed.update(zip((tid for tid in self.input_ids if tid is not None), ins))
        result = self.compiled.run(feed)
        outs = []
        for tid in self.output_ids:
            r = result[tid]
            t = to_torch(r)
            # an output that is a view of an input (a reshape alone) is copied: the
            # FX graph is functional and may hand it to code that writes it
            if any(np.may_share_memory(r, a) for a in ins):
                t = t.clone()
            outs.append(t)
        return tuple(outs)
