"""Running one op of the seed families in graphc's reference, for the seed-op tests."""
from __future__ import annotations

import numpy as np

from graphc.builder import single_op_graph
from graphc.reference import run
from graphc.types import DataType


def run_single(kind, arrays, outs, attrs=None, comm=None):
    """Run a one-op graph on ``arrays`` (dtypes taken from the arrays); ``outs``
    are (dtype, shape) pairs.  Returns the op's outputs in port order."""
    g = single_op_graph(kind, [(DataType.from_numpy(a.dtype), a.shape) for a in arrays], outs, attrs)
    res = run(g, dict(zip(g.input_ports, arrays)), comm=comm)
    return [res[t.id] for t in g.ops[0].outputs]


def reference64(kind, arrays, outs, attrs=None, dtype="f32"):
    """The op's reference on float64 arrays, without rounding (for gradchecks)."""
    g = single_op_graph(kind, [(DataType.from_numpy(a.dtype) if a.dtype.kind in "iu" else dtype, a.shape)
                               for a in arrays], outs, attrs)
    op = g.ops[0]
    return op.schema.reference(op, *[np.asarray(a) for a in arrays])
