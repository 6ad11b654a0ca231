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
from .memory import tune

#: reports of the graphs lowered, appended as they compile (graphc.torch.explain reads them)
REPORTS: list = []


def _compile(gm, example_inputs, inference=False):
    tune()   # (large buffers reused between steps: graphc.torch.memory)
    constants = set()
    if inference:   # parameters and buffers are constant tensors (graphc's constant tensor cache applies)
        import torch
        from ..compiler.constant_cache import CONSTANT_CACHE
        CONSTANT_CACHE.default_on()   # (unless the user chose its state)
        context = torch._guards.TracingContext.try_get()
        static = getattr(getattr(context, "fw_metadata", None), "static_input_indices", None) or []
        names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        constants = {names[i] for i in static if i < len(names)}
    lowered, report = lower(gm, constants)
    REPORTS.append(report)
    return make_boxed_func(lowered.forward)


def _inference(gm, example_inputs):
    return _compile(gm, example_inputs, inference=True)


def graphc(gm, example_inputs, **kwargs):
    """The backend: Dynamo's FX graph -> AOTAutograd -> graphc regions."""
    return aot_autograd(fw_compiler=_compile, bw_compiler=_compile, inference_compiler=_inference,
                        decompositions=decompositions())(gm, example_inputs, **kwargs)
