"""graphc.grad: training graphs derived from forward graphs.

``tr = graphc.grad(graph, wrt=[ids], outputs=None)`` keeps the forward ops and
adds the backward ops oneDNN Graph defines (ConvolutionBackwardData,
LayerNormBackward, ReLUBackward, ...), emitted by each op's vector-Jacobian
rule (``vjp`` on its schema class in graphc/ops/<family>.py) through an
:class:`~graphc.grad.emitter.Emitter`.  This package imports the core and the
op families only."""
from .driver import TrainingGraph, grad
from .emitter import Emitter

__all__ = ["Emitter", "TrainingGraph", "grad"]
