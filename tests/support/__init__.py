"""graphc's test helper layer, one place for what the tests share:

- ``compare``: ``assert_same`` (bit for bit, any dtype), ``assert_close`` (the
  dtype-aware tolerances of graphc.tolerances, shapes checked first),
  ``assert_close_each`` (the same tolerances per element) and ``assert_outputs``, the one loop comparing a set of outputs (compiled vs
  reference, or reference vs torch);
- ``graphs``: one-op graphs (``one_op``, ``single_op_graph``), graphs of given ops
  (``graph_of``), running one op in the reference (``run_single``,
  ``run_one``, ``run_graph``, ``reference64``), inferred shapes, strided layouts
  (``laid_out``, ``strides``), corpus files, the bundled specs (``SPECS``);
- ``compiled``: ``check_compiled``, compiled partitions vs the reference with
  junk in input gaps and output buffers;
- ``torch_conv``: storage dtypes, random data (``data``, ``uniform``) and exact torch <->
  numpy copies;
- ``gradcheck``: float64 finite differences against analytic gradients (``grads_match``:
  an op's backward reference against its forward one).

Imported from their own modules: ``fusion`` (``one_partition``, the one fused
partition of a graph and its plan; ``dequantize``), ``windows`` (convolution and
pooling against torch), ``sdpa`` and ``sdpa_gqa`` (attention graphs), ``framework_forms``
(the forms frameworks dump around a compute op, each one partition), ``mpi``,
``threads`` (a group of threads with an mpi4py-like communicator), ``distributed_training``
(the distributed LayerNorm's gradient on one member against torch).

Tolerances are not written here: they come from graphc.tolerances."""
from .compare import assert_close, assert_close_each, assert_outputs, assert_same
from .compiled import check_compiled, compiled_vs_reference, kernel_params
from .gradcheck import assert_grad_close, grads_match, numeric_grad
from .graphs import (SPECS, channels, corpus_files, graph_of, inferred_shape, inferred_shapes, laid_out, one_op,
                     reference64, run_graph, run_one, run_single, single_op_graph, strides)
from .torch_conv import NP, data, n64, t64, to_numpy, to_torch, torch_dtype, uniform

__all__ = ["NP", "SPECS", "assert_close", "assert_close_each", "assert_grad_close", "assert_outputs", "assert_same",
           "channels", "check_compiled", "compiled_vs_reference", "corpus_files", "data", "grads_match", "graph_of",
           "inferred_shape", "inferred_shapes", "kernel_params", "laid_out", "n64", "numeric_grad", "one_op",
           "reference64", "run_graph", "run_one", "run_single", "single_op_graph", "strides", "t64", "to_numpy",
           "to_torch", "torch_dtype", "uniform"]
