"""Shared by the lowering tests of the binary, reduce, shuffle and misc ops:
one-op graphs with explicit strides, inputs laid out as their logical tensors
say, and compiled-vs-reference comparisons."""
import numpy as np

import graphc
from graphc import reference
from graphc.builder import GraphBuilder
from graphc.fill import make_inputs
from graphc.op import Op
from graphc.tolerances import assert_close

from conftest import OP_CORPUS


def one_op(kind, ins, outs, attrs=None):
    """A finalized one-op graph; each port is (dtype, shape) or (dtype, shape, strides)."""
    b = GraphBuilder()
    in_lts = [b.tensor(*spec) for spec in ins]
    out_lts = [b.tensor(*spec) for spec in outs]
    b.graph.add_op(Op(0, kind, in_lts, out_lts, attrs or {}))
    return b.finalize()


def laid_out(values: np.ndarray, strides) -> np.ndarray:
    """``values`` copied into an array with the given element strides (gaps allowed)."""
    span = 1 + sum((d - 1) * s for d, s in zip(values.shape, strides)) if values.size else 1
    bits = np.dtype(f"u{values.itemsize}")  # as_strided does not take ml_dtypes types
    buf = np.full(span, 0x55, dtype=bits)  # gaps hold junk, not zeros
    out = np.lib.stride_tricks.as_strided(buf, values.shape, [s * values.itemsize for s in strides])
    out[...] = np.ascontiguousarray(values).view(bits)
    return out.view(values.dtype)


def assert_same(actual, expected, what=""):
    """Equal bit patterns, except that any NaN matches any NaN."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    a, e = np.ascontiguousarray(actual), np.ascontiguousarray(expected)
    bits = np.dtype(f"u{a.dtype.itemsize}")
    bad = a.view(bits) != e.view(bits)
    if a.dtype.kind not in "biu" and bad.any():
        bad &= ~(np.isnan(a.astype(np.float64)) & np.isnan(e.astype(np.float64)))
    assert not bad.any(), f"{what}: {bad.sum()} differences: actual {a[bad][:6]}, expected {e[bad][:6]}"


def check_compiled(g, inputs=None, exact=False, what="", seed=0, parallel=False):
    """Run ``g`` compiled and in the reference on the same inputs (``make_inputs(g, seed)``
    by default; laid out with their tensors' strides); compare every output (bit for
    bit when ``exact``) and check each compiled output has its tensor's layout; with
    ``parallel``, check the kernels have a prange.  Returns the outputs."""
    inputs = make_inputs(g, seed) if inputs is None else inputs
    inputs = {tid: laid_out(a, g.tensors[tid].strides) for tid, a in inputs.items()}
    cg = graphc.compile(g)
    assert not parallel or "prange(" in cg.source, what
    got = cg.run(inputs)
    want = reference.run(g, inputs)
    assert got.keys() == want.keys()
    for tid, e in want.items():
        lt, a = g.tensors[tid], got[tid]
        # every compiled output in its tensor's layout (an empty one has none)
        assert a.size == 0 or all(d == 1 or s == t * a.itemsize
                                  for d, s, t in zip(lt.shape, a.strides, lt.strides)), what
        if exact:
            assert_same(a, e, what)
        else:
            assert_close(a, e, lt.dtype, what=what)
    return got


def corpus_files(names, dtypes=("f32", "bf16", "f16")):
    """Corpus JSONs named ``<name>.json`` under op/<dtype>/ (those that exist)."""
    return [OP_CORPUS / dt / f"{n}.json" for dt in dtypes for n in names if (OP_CORPUS / dt / f"{n}.json").is_file()]


def kernel_params(cg) -> list[str]:
    """Parameter names of each compiled partition's kernel (scratch buffers: t<n>)."""
    return [cp.source.split("def kernel(")[1].split(")")[0].split(", ") for cp in cg.compiled]
