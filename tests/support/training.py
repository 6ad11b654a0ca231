"""Training graphs (graphc.grad) against torch.autograd: the compiled training
graph's forward outputs and gradients against float64 torch on the very values
graphc reads, at the dtype's ORACLE tolerance (graphc.tolerances)."""
from __future__ import annotations

import numpy as np

import graphc
from graphc.builder import GraphBuilder
from graphc.fill import make_inputs
from graphc.tolerances import ORACLE

from .compare import assert_close
from .torch_conv import data, n64, t64


def training_inputs(g, tr, seed=0, inputs=None) -> dict:
    """{tensor id: array} for the training graph: the forward inputs as
    graphc.fill makes them (``inputs`` overriding), the seeds standard-normal."""
    feed = make_inputs(g, seed)
    feed.update(inputs or {})
    rng = np.random.default_rng(seed + 1)
    for sid in tr.seeds.values():
        lt = tr.graph.tensors[sid]
        feed[sid] = data(rng, lt.shape, lt.dtype.value)
    return feed


def torch_training(g, tr, feed, torch_fn, wrt, outputs=None):
    """(forward outputs {id: float64 array}, gradients {wrt id: float64 array}) of
    ``torch_fn`` (the graph's inputs in input-port order -> its ``outputs``, by
    default its output ports, in that order) in float64, the loss being
    sum(seed * output)."""
    import torch
    args = {tid: t64(feed[tid], grad=tid in wrt) if g.tensors[tid].dtype.is_float else torch.from_numpy(feed[tid])
            for tid in g.input_ports}
    outs = torch_fn(*args.values())
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    ids = g.output_ports if outputs is None else outputs
    loss = sum((o * t64(feed[tr.seeds[oid]])).sum() for oid, o in zip(ids, outs) if oid in tr.seeds)
    loss.backward()
    return ({oid: n64(o) for oid, o in zip(ids, outs)},
            {w: n64(args[w].grad) if args[w].grad is not None else np.zeros(feed[w].shape) for w in wrt})


def check_training(g, wrt, torch_fn, inputs=None, seed=0, outputs=None, tol_dtype=None):
    """graphc.grad of forward graph ``g``, compiled and run, against
    torch.autograd of ``torch_fn``, each value at its dtype's tolerance (or
    ``tol_dtype``'s, for graphs whose values pass through a narrower type);
    returns the training graph and the outputs."""
    tr = graphc.grad(g, wrt, outputs)
    feed = training_inputs(g, tr, seed, inputs)
    got = graphc.compile(tr.graph).run(feed)
    want, grads = torch_training(g, tr, feed, torch_fn, wrt, outputs)
    for oid, w in want.items():
        assert_close(got[oid], w, tol_dtype or g.tensors[oid].dtype, ORACLE, what=f"forward output {oid}")
    for w, e in grads.items():
        assert_close(got[tr.grad_out(w)], e, tol_dtype or g.tensors[w].dtype, ORACLE, what=f"gradient of {w}")
    return tr, got


def chain(ins, ops, **graph_kw):
    """A finalized graph: ``ins`` (dtype, shape) inputs, then ``ops``: (kind,
    input indices into the tensors so far, attrs[, out dtypes]) each adding its
    outputs (one of input 0's dtype by default; a dtype or a list of them) to
    the tensors; returns (graph, tensors)."""
    b = GraphBuilder(**graph_kw)
    ts = [b.tensor(dt, shape) for dt, shape in ins]
    for kind, idx, attrs, *dtypes in ops:
        src = [ts[i] for i in idx]
        outs = dtypes[0] if dtypes else src[0].dtype
        outs = outs if isinstance(outs, list) else [outs]
        ts.extend(b.op(kind, src, [(dt, None) for dt in outs], attrs))
    return b.finalize(), ts
