"""Running one conv or pooling op in graphc's reference, for the conv/pool tests."""
from __future__ import annotations

import numpy as np

from graphc.builder import single_op_graph
from graphc.reference import run
from graphc.types import DataType

import seed_util


def _graph(kind, arrays, attrs, dtype):
    ins = [("s32" if a.dtype.kind in "iu" else dtype, a.shape) for a in arrays]
    return single_op_graph(kind, ins, [(dtype, [-1] * arrays[0].ndim)], attrs)


def run_graph(kind, arrays, attrs, dtype="f32"):
    """The op's one output through graphc.reference.run, inputs cast to ``dtype`` (ints to s32)."""
    g = _graph(kind, arrays, attrs, dtype)
    np_dt = DataType(dtype).np
    feed = [a.astype(np.int32) if a.dtype.kind in "iu" else a.astype(np_dt) for a in arrays]
    return run(g, dict(zip(g.input_ports, feed)))[g.ops[0].outputs[0].id]


def reference64(kind, arrays, attrs):
    """The op's one output from its reference on float64 arrays, without rounding (for gradchecks)."""
    return seed_util.reference64(kind, arrays, [("f32", [-1] * arrays[0].ndim)], attrs)[0]


def inferred_shape(kind, shapes, attrs, dtype="f32"):
    """The output shape graphc infers for inputs of ``shapes`` (-1 allowed)."""
    g = single_op_graph(kind, [(dtype, s) for s in shapes], [(dtype, [-1] * len(shapes[0]))], attrs)
    return g.ops[0].outputs[0].shape
