"""Lowering of the distributed LayerNorm's local ops (graphc/ops/distributed.py):
LayerNormPreAllGather's per-row statistics and LayerNormPostAllGather's merge
and normalisation.  AllGather between them is a collective, not a kernel: the
compile step runs it (graphc.compiler.executables.collective)."""
from __future__ import annotations

import math

from .. import ir
from ..fastmath import sum_helper
from ..kernel import worth_parallel
from ..loops import linear, unravel
from . import Rule


def emit_rows(kb, x, body):
    """A loop over the rows of ``x`` ([..., W]), in parallel when worth it;
    ``body(lead)`` emits one row's code given the indices of its leading dims."""
    rows = math.prod(x.shape[:-1])
    with kb.for_(rows, "r", worth_parallel(rows * x.shape[-1]) and rows > 1) as r:
        body(unravel(kb, r, x.shape[:-1]))


class LayerNormPreAllGather(Rule):
    kinds = ("LayerNormPreAllGather",)

    def lower(self, op, kb, ins, outs, values):
        """Per row (rows in parallel): the mean, then M2 around it, both summed in
        float64 by vectorized helpers (the row is in cache for the second sum)."""
        x, stats = ins[0], outs[0]
        w = x.shape[-1]

        def row(lead):
            bx = kb.let(x.offset(lead + [None]), "bx")

            def at(j):
                return x.load(linear([j], [x.strides[-1]], bx))
            mean = kb.let(sum_helper(kb, w, at) / w, "mean")
            m2 = kb.let(sum_helper(kb, w, lambda j: (at(j) - mean) ** 2), "m2")
            kb.emit(stats.store(stats.offset(lead + [0]), mean))
            kb.emit(stats.store(stats.offset(lead + [1]), m2))
        emit_rows(kb, x, row)


class LayerNormPostAllGather(Rule):
    kinds = ("LayerNormPostAllGather",)

    def lower(self, op, kb, ins, outs, values):
        """Per row (rows in parallel): Chan's merge of the P (mean, M2) pairs in
        float64, then dst = (x - mean) * rstd [* gamma + beta] along the row, in
        float64 rounded to float32 (then to bf16/f16: the loop stays vectorized).
        src is read through load_nd and dst written through store_nd (fusion)."""
        x, y = ins[0], outs[0]
        stats, *affine = ins[1:]
        w, shards = x.shape[-1], stats.shape[-1] // 2
        eps = float(op.attr("epsilon"))

        def row(lead):
            bs = kb.let(stats.offset(lead + [None]), "bs")

            def stat(p, k):
                return stats.load(linear([2 * p + k], stats.strides[-1:], bs))
            mean = kb.var(ir.const(0.0, "f64"), "mean")
            with kb.for_(shards, "p") as p:
                kb.assign(mean, mean + stat(p, 0))
            kb.assign(mean, mean / shards)
            m2 = kb.var(ir.const(0.0, "f64"), "m2")
            with kb.for_(shards, "p") as p:
                kb.assign(m2, m2 + (stat(p, 1) + w * (stat(p, 0) - mean) ** 2))
            rstd = kb.let(1.0 / ir.call("math.sqrt", m2 / (shards * w) + eps), "rstd")
            with kb.for_(w, "j") as j:
                v = (x.load_nd(lead + [j]) - mean) * rstd
                if affine:
                    g, b = (t.load(t.offset([j])) for t in affine)
                    v = v * g + b
                kb.emit(y.store_nd(lead + [j], ir.f32(v)))
        emit_rows(kb, x, row)
