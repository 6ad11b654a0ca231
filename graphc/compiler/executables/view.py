"""A partition of views (graphc.views): its output is its input's buffer seen
through other strides; no data moves."""
from __future__ import annotations

import numpy as np

from ...views import as_view
from .base import Executable


class ViewExecutable(Executable):
    """The output is input ``at``'s buffer seen as ``out`` (a LogicalTensor with
    the view's strides); a caller-given output gets a copy, none when it is that
    very view (the in-place port)."""

    is_view = True
    impl_kind = "view"
    allocates_outputs = False

    def __init__(self, at: int, out):
        self.at, self.out = at, out

    def inplace_pairs(self):
        return [(self.at, 0)]   # the output may be the input's buffer itself, seen through the view

    def run(self, ins, outs, comm):
        a = ins[self.at]
        v = as_view(a, self.out.shape, self.out.strides)
        u = outs[0]
        if u is None:
            return [v]
        if not np.may_share_memory(u, a):   # (else it is the view itself: checked by the compiled partition)
            u[...] = v
        return [u]
