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

    def __init__(self, at: int, out, window=None, inputs=(), constant: bool = False):
        self.at, self.out, self.window = at, out, window
        #: the fast path's checks of input ``at`` (dtype, shape, byte strides) and the inputs'
        #: count; None for a constant partition (its outputs are kept by the compiled partition)
        self._fast = None
        if inputs and not constant and inputs[at].is_complete:
            src = inputs[at]
            dt = np.dtype(src.dtype.np)
            self._fast = (dt, tuple(src.shape), tuple(s * dt.itemsize for s in src.strides), len(inputs))

    def fast_run(self, inputs, outputs):
        """The view of a writeable input laid out as compiled, the inputs in order."""
        fast = self._fast
        if fast is None or outputs is not None or type(inputs) not in (list, tuple) or len(inputs) != fast[3]:
            return None
        a = inputs[self.at]
        if type(a) is not np.ndarray or (a.dtype is not fast[0] and a.dtype != fast[0]) or a.shape != fast[1] \
                or a.strides != fast[2] or not a.flags.writeable:
            return None
        if self.window is not None:
            a = a[self.window]
        return {self.out.id: as_view(a, self.out.shape, self.out.strides)}

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
