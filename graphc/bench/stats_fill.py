"""Softmax statistics consistent with the scores, for training-backward graphs.

sdpa.md's backward recomputes the probabilities as Exp(scores - stats), the stats
(max + log(sum of exp)) coming from the forward.  Random stats make Exp overflow (the
corpus's torchbench backward: every gradient non-finite, compiled and reference then
disagree only on which infinities became NaN).  As a forward would, the stats input
is set to the log-sum-exp of the scores the graph computes from its other inputs."""
from __future__ import annotations

import numpy as np

from .. import reference


def _stats_inputs(graph) -> list:
    """(Subtract op, stats tensor id) for each Exp(Subtract(x, stats)) whose stats are a
    graph input with a last dim of 1 and whose x is computed."""
    found = []
    for op in graph.topo_ops():
        if op.kind != "Exp" or op.inputs[0].id not in graph.producer:
            continue
        sub = graph.ops[graph.producer[op.inputs[0].id][0]]
        if sub.kind != "Subtract":
            continue
        x, s = sub.inputs
        if s.id in graph.input_ports and x.id in graph.producer and s.shape and s.shape[-1] == 1 \
                and len(s.shape) == len(x.shape):
            found.append((sub, s.id))
    return found


def _upstream(graph, tid) -> list:
    """The ops computing tensor ``tid``, in topological order."""
    need, stack = set(), [tid]
    while stack:
        t = stack.pop()
        if t in graph.producer:
            o = graph.ops[graph.producer[t][0]]
            if o.id not in need:
                need.add(o.id)
                stack.extend(x.id for x in o.inputs)
    return [o for o in graph.topo_ops() if o.id in need]


def consistent_stats(graph, inputs: dict) -> dict:
    """``inputs`` with each softmax-stats input (:func:`_stats_inputs`) replaced by the
    log-sum-exp over the last axis of the scores the graph computes from the others."""
    for sub, sid in _stats_inputs(graph):
        x = sub.inputs[0]
        values = dict(inputs)
        for o in _upstream(graph, x.id):
            values.update(reference.run_op(o, [values[t.id] for t in o.inputs]))
        s = np.asarray(values[x.id], dtype=np.float64)
        top = np.max(s, axis=-1, keepdims=True)
        safe = np.where(np.isfinite(top), top, 0.0)
        with np.errstate(divide="ignore"):
            lse = safe + np.log(np.sum(np.exp(s - safe), axis=-1, keepdims=True))
        inputs = dict(inputs)
        inputs[sid] = np.broadcast_to(lse, graph.tensors[sid].shape).astype(inputs[sid].dtype)
    return inputs


__all__ = ["consistent_stats"]
