"""Compiled graphs against graphc's reference: inputs laid out as their logical
tensors say with junk in the gaps, a one-partition graph run into junk-filled
output buffers (so every element must be written), each output checked for its
tensor's layout and compared by ``assert_outputs``."""
from __future__ import annotations

import ml_dtypes
import numpy as np

import graphc
from graphc import reference
from graphc.fill import make_inputs
from graphc.codegen.outline import runs_parallel

from .compare import assert_outputs
from .graphs import laid_out

JUNK = 0x55


def _junk(lt) -> np.ndarray:
    """A buffer for output ``lt`` in its layout, every byte (gaps too) JUNK."""
    dense = np.empty(lt.shape, lt.dtype.np)
    return laid_out(np.full(dense.shape, JUNK, np.dtype(f"u{dense.itemsize}")).view(dense.dtype), lt.strides)


def compiled_vs_reference(g, inputs=None, exact=False, what="", seed=0, parallel=False, policy="fusion"):
    """(compiled graph, its outputs) of ``g`` compiled under ``policy`` and run on
    ``inputs`` (``make_inputs(g, seed)`` by default; laid out with their tensors'
    strides, junk in the gaps), checked against the reference on the same inputs:
    bit for bit when ``exact``, else within graphc.tolerances.COMPILED.  A graph
    of one partition runs that partition into junk-filled output buffers; each
    output of a whole-graph run must have its tensor's layout.  With
    ``parallel``, the kernels must run loops on several threads."""
    inputs = make_inputs(g, seed) if inputs is None else inputs
    inputs = {tid: laid_out(np.asarray(a), g.tensors[tid].strides) for tid, a in inputs.items()}
    cg = graphc.compile(g, policy)
    assert not parallel or runs_parallel(cg), what
    want = reference.run(g, inputs)
    got = cg.run(inputs)
    for tid, a in got.items():  # every compiled output in its tensor's layout (an empty one has none)
        lt = g.tensors[tid]
        assert a.size == 0 or all(d == 1 or s == t * a.itemsize
                                  for d, s, t in zip(lt.shape, a.strides, lt.strides)), f"{what} tensor {tid}"
    dtypes = {tid: g.tensors[tid].dtype for tid in want}
    assert_outputs(got, want, dtypes, exact=exact, what=what)
    (cp, *more) = cg.compiled
    if not more and cp is not None and cp.kernel is not None and all(lt.is_complete for lt in cp.outputs):
        outs = {lt.id: _junk(lt) for lt in cp.outputs}
        into = cp.execute({t.id: inputs[t.id] for t in cp.inputs}, outputs=outs)
        assert_outputs({tid: into[tid] for tid in want}, want, dtypes, exact=exact, what=f"{what} (junk outputs)")
    return cg, got


def check_compiled(g, inputs=None, exact=False, what="", seed=0, parallel=False, policy="fusion"):
    """``compiled_vs_reference``'s checks; returns the compiled outputs."""
    return compiled_vs_reference(g, inputs, exact, what, seed, parallel, policy)[1]


def only_compiled(g):
    """The CompiledPartition of a graph that compiles to one partition."""
    import graphc
    cg = graphc.compile(g)
    assert len(cg.compiled) == 1
    return cg.compiled[0]


def kernel_params(cg) -> list[list[str]]:
    """Parameter names of each compiled partition's kernel (scratch buffers: t<n>)."""
    return [cp.source.split("def kernel(")[1].split(")")[0].split(", ") for cp in cg.compiled]


def normal_inputs(g, seed=0):
    """Inputs from a normal distribution (rounded to each tensor's dtype): sums of
    products that are not exact in bf16, unlike make_inputs' small integers."""
    rng = np.random.default_rng(seed)
    out = {}
    for tid, a in make_inputs(g, seed).items():
        v = rng.standard_normal(np.shape(a))
        out[tid] = v.astype(ml_dtypes.bfloat16) if g.tensors[tid].dtype.name == "bf16" else v.astype(a.dtype)
    return out


def bf16_matmul_bias_gelu(m: int, k: int, n: int, transpose_a: bool):
    """bf16 MatMul (A ``m x k``, read transposed with ``transpose_a``) + bias ->
    GELU, compiled and checked against the reference; its CompiledGraph."""
    from graphc.builder import GraphBuilder
    b = GraphBuilder()
    x = b.tensor("bf16", [k, m] if transpose_a else [m, k])
    y = b.op("MatMul", [x, b.tensor("bf16", [k, n]), b.tensor("bf16", [n])], out=[("bf16", [m, n])],
             attrs={"transpose_a": transpose_a})[0]
    b.op("GELU", [y])
    return compiled_vs_reference(b.finalize())[0]
