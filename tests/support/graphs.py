"""One-op graphs: building them (dtype/shape/strides per port), running them in
graphc's reference, the shapes graphc infers for them, and strided layouts of
their inputs; graphs of given ops (``graph_of``)."""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import numpy as np

from graphc import Graph
from graphc.builder import GraphBuilder, single_op_graph
from graphc.op import Op
from graphc.reference import run
from graphc.types import DataType

from conftest import OP_CORPUS

__all__ = ["SPECS", "channels", "corpus_files", "graph_of", "inferred_shape", "inferred_shapes", "laid_out", "one_op",
           "reference64", "run_graph", "run_one", "run_single", "single_op_graph", "strides"]


def one_op(kind, ins, outs, attrs=None):
    """A finalized one-op graph; each port is (dtype, shape) or (dtype, shape, strides)."""
    b = GraphBuilder()
    in_lts = [b.tensor(*spec) for spec in ins]
    out_lts = [b.tensor(*spec) for spec in outs]
    b.graph.add_op(Op(0, kind, in_lts, out_lts, attrs or {}))
    return b.finalize()


def graph_of(*ops, **settings) -> Graph:
    """A finalized graphc Graph (the public one, ``settings`` its keyword arguments:
    fpmath_mode ...) of ``ops``, added in the order given."""
    g = Graph(**settings)
    for op in ops:
        g.add_op(op)
    return g.finalize()


def run_single(kind, arrays, outs, attrs=None, comm=None):
    """Run a one-op graph on ``arrays`` (dtypes taken from the arrays); ``outs``
    are (dtype, shape) pairs.  Returns the op's outputs in port order."""
    g = single_op_graph(kind, [(DataType.from_numpy(a.dtype), a.shape) for a in arrays], outs, attrs)
    res = run(g, dict(zip(g.input_ports, arrays)), comm=comm)
    return [res[t.id] for t in g.ops[0].outputs]


def run_one(kind, ins, outs, attrs, *arrays):
    """The first output of a one-op graph of ports ``ins`` / ``outs`` ((dtype, shape)
    pairs) run in the reference on ``arrays``."""
    g = single_op_graph(kind, ins, outs, attrs)
    return next(iter(run(g, dict(zip(g.input_ports, arrays))).values()))


def _conv_graph(kind, arrays, attrs, dtype):
    ins = [("s32" if a.dtype.kind in "iu" else dtype, a.shape) for a in arrays]
    return single_op_graph(kind, ins, [(dtype, [-1] * arrays[0].ndim)], attrs)


def run_graph(kind, arrays, attrs, dtype="f32"):
    """The op's one output (of input 0's rank) through the reference, inputs cast
    to ``dtype`` (ints to s32)."""
    g = _conv_graph(kind, arrays, attrs, dtype)
    np_dt = DataType(dtype).np
    feed = [a.astype(np.int32) if a.dtype.kind in "iu" else a.astype(np_dt) for a in arrays]
    return run(g, dict(zip(g.input_ports, feed)))[g.ops[0].outputs[0].id]


def reference64(kind, arrays, outs=None, attrs=None, dtype="f32"):
    """The op's outputs from its reference on float64 arrays, without rounding (for
    gradchecks).  With ``outs`` None: one output of input 0's rank, returned alone."""
    one = outs is None
    outs = [(dtype, [-1] * np.ndim(arrays[0]))] if one else outs
    g = single_op_graph(kind, [(DataType.from_numpy(a.dtype) if a.dtype.kind in "iu" else dtype, a.shape)
                               for a in arrays], outs, attrs)
    op = g.ops[0]
    res = op.schema.reference(op, *[np.asarray(a) for a in arrays])
    return res[0] if one else res


def inferred_shapes(kind, ins, outs, attrs=None):
    """The output shapes graphc infers (``outs``: (dtype, declared shape) pairs)."""
    return [t.shape for t in single_op_graph(kind, ins, outs, attrs).ops[0].outputs]


def inferred_shape(kind, ins, out=None, attrs=None, dtype="f32"):
    """The one output shape graphc infers from ``out`` = (dtype, declared shape), by
    default of input 0's rank; ``ins`` are (dtype, shape) pairs or bare shapes
    (of ``dtype``)."""
    ins = [p if len(p) and isinstance(p[0], str) else (dtype, p) for p in ins]
    out = (dtype, [-1] * len(ins[0][1])) if out is None else out
    return inferred_shapes(kind, ins, [out], attrs)[0]


def laid_out(values: np.ndarray, strides) -> np.ndarray:
    """``values`` copied into an array with the given element strides; the gaps
    hold junk (0x55 bytes), not zeros."""
    span = 1 + sum((d - 1) * s for d, s in zip(values.shape, strides)) if values.size else 1
    bits = np.dtype(f"u{values.itemsize}")  # as_strided does not take ml_dtypes types
    buf = np.full(span, 0x55, dtype=bits)
    out = np.lib.stride_tricks.as_strided(buf, values.shape, [s * values.itemsize for s in strides])
    out[...] = np.ascontiguousarray(values).view(bits)
    return out.view(values.dtype)


def strides(shape, order, pad=1):
    """Element strides of ``shape`` laid out with its dims in ``order`` (outermost
    first), each dim's step ``pad`` times what a dense layout needs (gaps)."""
    out, step = [0] * len(shape), 1
    for d in reversed(order):
        out[d] = step
        step *= shape[d] * pad
    return out


def channels(shape, fmt):
    """The channel count of an NCX or NXC shape."""
    return shape[1] if fmt == "NCX" else shape[-1]


#: the folder of the JSON graphs bundled with graphc (specs/, installed as graphc.specs), found through the package
SPECS = Path(str(files("graphc.specs")))


def corpus_files(names, dtypes=("f32", "bf16", "f16")):
    """Corpus JSONs named ``<name>.json`` under op/<dtype>/ (those that exist)."""
    return [OP_CORPUS / dt / f"{n}.json" for dt in dtypes for n in names if (OP_CORPUS / dt / f"{n}.json").is_file()]
