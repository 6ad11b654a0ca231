"""The torch.compile backend ``graphc``: AOTAutograd traces the forward (and
the backward) to ATen FX graphs with graphc's decompositions; each is lowered
(graphc.torch.lower) and run as an FX graph calling graphc regions.

Registered under the ``torch_dynamo_backends`` entry point as ``graphc``, so
``torch.compile(model, backend="graphc")`` needs no import of graphc."""
from __future__ import annotations

from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

from .decompositions import decompositions
from .lower import lower

#: reports of the graphs lowered, appended as they compile (graphc.torch.explain reads them)
REPORTS: list = []


def _compile(gm, example_inputs):
    lowered, report = lower(gm)
    REPORTS.append(report)
    return make_boxed_func(lowered.forward)


def graphc(gm, example_inputs, **kwargs):
    """The backend: Dynamo's FX graph -> AOTAutograd -> graphc regions."""
    return aot_autograd(fw_compiler=_compile, bw_compiler=_compile,
                        decompositions=decompositions())(gm, example_inputs, **kwargs)
