"""graphc.torch: a torch.compile backend running ATen graphs in graphc kernels.

``torch.compile(model, backend="graphc")`` (registered through the
``torch_dynamo_backends`` entry point), or ``backend=graphc.torch.backend``.
Modules: ``decompositions`` (what AOTAutograd breaks up), ``table`` (ATen op ->
graphc ops, guards, dtypes; ``table_train``: its rows for training graphs; ``table_index``: integer
and boolean arithmetic, constants, slicing), ``build`` (a region as a graphc graph), ``lower``
(regions found, compiled, put in place), ``region`` (running one), ``memory`` (the C allocator's
setting), ``backend``,
``explain``."""
from . import table_index, table_train  # noqa: F401  (add the index arithmetic and training rows to the table)
from .backend import graphc as backend
from .explain import explain

__all__ = ["backend", "explain"]
