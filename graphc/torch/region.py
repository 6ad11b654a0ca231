"""A region of an FX graph compiled by graphc, called from the FX graph as a
module: torch tensors in, torch tensors out, no copies either way
(graphc.interop): each output is a torch tensor torch allocated (with the
strides and dtype graphc compiled it for), handed to graphc to write in place."""
from __future__ import annotations

import torch

from ..interop import as_array
from ..types import PropertyType, dense_strides
from .build import DTYPES

#: graphc dtype name -> torch dtype
TORCH_DTYPES = {v: k for k, v in DTYPES.items()}


def _output_layouts(compiled, output_ids) -> list:
    """(shape, strides, torch dtype) of each output as ``compiled`` lays it out
    (the strides the region's builder asked for: the FX node's, where dense)."""
    laid = {lt.id: lt for cp in compiled.compiled if cp is not None for lt in cp.outputs}
    layouts = []
    for tid in output_ids:
        lt = laid.get(tid) or compiled.graph.tensors[tid]
        strides = lt.strides if lt.strides is not None else dense_strides(lt.shape)
        layouts.append((tuple(lt.shape), tuple(strides), TORCH_DTYPES[str(lt.dtype)]))
    return layouts


class GraphcRegion(torch.nn.Module):
    """Runs ``compiled`` (a graphc CompiledGraph) on the region's inputs (tensor
    ids ``input_ids``, in call order; None for an argument it does not read) and its ``constants`` ({tensor id: array});
    returns the outputs ``output_ids`` as a tuple of torch tensors (buffers
    allocated by torch, written by graphc)."""

    def __init__(self, compiled, input_ids, output_ids, constants, aten_nodes: int, views=None):
        super().__init__()
        self.compiled = compiled
        self.input_ids = list(input_ids)
        self.output_ids = list(output_ids)
        #: the inputs graphc reads (an input the region only returns, expanded, is not fed)
        self.fed = set(compiled.graph.input_ports)
        self.constants = {tid: a for tid, a in constants.items() if tid in self.fed}
        self.aten_nodes = aten_nodes      # the ATen nodes it replaces (for explain)
        computed = [tid for tid in dict.fromkeys(self.output_ids) if tid not in self.input_ids]
        self.layouts = dict(zip(computed, _output_layouts(compiled, computed)))
        #: per output: (the position of the region input it is, or None when computed;
        #: the shape a folded expand gives it, as a torch view, or None)
        self.sources = [(self.input_ids.index(tid) if tid not in self.layouts else None, shape)
                        for tid, shape in zip(self.output_ids, views or [None] * len(self.output_ids))]

        #: the arguments that are constant tensors (parameters in inference), and the
        #: (storage, version) of each when the constant outputs were kept
        self.constant_args = [k for k, tid in enumerate(self.input_ids)
                              if tid in self.fed and compiled.graph.tensors[tid].property_type is PropertyType.constant]
        self._seen = None

    def _constants_unchanged(self, args) -> None:
        """Outputs computed from the parameters are kept (the constant tensor cache);
        a parameter changed in place (its version counter moved) or replaced
        drops them, to be computed again."""
        now = tuple((args[k].data_ptr(), args[k]._version) for k in self.constant_args)
        if now != self._seen:
            if self._seen is not None:
                self.compiled.forget_constants()
            self._seen = now

    @property
    def partitions(self) -> int:
        return len(self.compiled.partitions)

    @property
    def kernels(self) -> int:
        return sum(1 for cp in self.compiled.compiled if cp is not None and cp.kernel is not None)

    def forward(self, *args):
        if self.constant_args:
            self._constants_unchanged(args)
        feed = dict(self.constants)
        feed.update((tid, as_array(a)) for tid, a in zip(self.input_ids, args) if tid in self.fed)
        # (an output that is a view of an input, a reshape alone, is written into its
        # own buffer too: the FX graph is functional and may hand it to code that writes it)
        buffers = {tid: torch.empty_strided(shape, strides, dtype=dtype)
                   for tid, (shape, strides, dtype) in self.layouts.items()}
        self.compiled.run(feed, outputs=buffers)
        outs = []
        for tid, (arg, shape) in zip(self.output_ids, self.sources):
            t = buffers[tid] if arg is None else args[arg]
            outs.append(t if shape is None else t.expand(shape))
        return tuple(outs)
