"""A partition of views (graphc.views), or of one StaticSlice: its output is its
input's buffer (a window of it) seen through other strides; no data moves."""
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

    def __init__(self, at: int, out, window=None):
        self.at, self.out, self.window = at, out, window

    def inplace_pairs(self):
        # the output may be the input's buffer itself, seen through the view (not a window of it)
        return [(self.at, 0)] if self.window is None else []

    def run(self, ins, outs, comm):
        a = ins[self.at]
        if self.window is not None:   # a StaticSlice: the window's first element starts the view
            a = a[self.window]
        v = as_view(a, self.out.shape, self.out.strides)
        u = outs[0]
        if u is None:
            return [v]
        if not np.may_share_memory(u, a):   # (else it is the view itself: checked by the compiled partition)
            u[...] = v
        return [u]
