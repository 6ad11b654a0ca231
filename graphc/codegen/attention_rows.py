"""Attention contracted over the softmax's rows, as one kernel (the ``attention_rows``
plan of passes/attention_plan.py; oneDNN's float_mqa_jax_fusion, JAX's MQA).

The graph: S = Q @ K [.., M, H*N], split by heads ([.., M, H, N] -> [.., H, M, N]),
the score ops, SoftMax over the last axis (each row of a query's scores over the
keys), the probabilities merged back to [.., M, H*N] and O = V @ P [.., Dv, H*N]:
the second MatMul sums over the queries (the softmax's rows), not over the keys.
An online softmax cannot run here (each output column needs every row's
normalised probability), but a row's softmax is whole once its row of scores
is: the kernel runs ``prange`` over (batch x heads) and, for each, walks the
queries in blocks of BM whole rows:

* S_blk = Q_blk @ K_h (``gemm_f32``; K_h is K's columns of head h, a view: K
  read with the head's stride, no copy), the score ops on the tile (the
  expressions fusion builds, at each element's (batch, head, row, column)),
  each row's max, exp and sum, the row normalised (and rounded as the
  SoftMax's dst holds it);
* O_h += V_blk @ P_blk (``gemm_f32`` with beta 1) into a Dv x N accumulator.

At the end O_h is stored into the output's columns of head h (through the
reorders and pointwise ops after the second MatMul).  The tiles hold BM whole
rows of scores; no M x N matrix exists.
"""
from __future__ import annotations

import math

from . import ir
from .attention_operands import (REORDERS, ZERO, IndexRef, as_matrix, gemm, gemm_block, inverse_sum, mm_rounding,
                                 output_store, prologue_views, stored, tile_operand)
from .fastmath import count_arg
from .fused_values import Values
from .helpers import use_helper
from .kernel import ArrayRef, worth_parallel
from .loops import unravel
from ..types import LogicalTensor

#: query rows per block (whole rows of scores: a BM x N tile)
BM = 64

NINF = ir.const(-math.inf, "f32")


def lower_attention_rows(kb, ops, refs, plan) -> None:
    """Emit the attention partition ``ops`` (plan.shape "attention_rows") into ``kb``."""
    kb.road("flash_rows")
    _Rows(kb, ops, refs, plan).emit()


def views_after(ops, t) -> list:
    """The chain of reorders (StaticReshape, StaticTranspose) that reads ``t``, in order."""
    chain = []
    while True:
        nxt = [o for o in ops if o.kind in REORDERS and o.inputs[0].id == t.id]
        if len(nxt) != 1:
            return chain
        chain.append(nxt[0])
        t = nxt[0].outputs[0]


def headed(ref, nb, heads, split=None) -> ArrayRef:
    """``ref`` (lead dims, then a matrix) seen as ``nb`` batch dims (size-1 ones added in
    front), a heads dim, then the matrix: the heads broadcast (``split`` None) or split
    off the front of matrix dim ``split`` (-1 or -2: its columns of head h are a block)."""
    shape, strides = list(ref.shape), list(ref.strides)
    pad = nb - (len(shape) - 2)
    lead, lead_st = [1] * pad + shape[:-2], [0] * pad + strides[:-2]
    mat, mat_st = shape[-2:], strides[-2:]
    h, h_st = 1, 0
    if split is not None:
        part = mat[split] // heads
        h, h_st = heads, part * mat_st[split]
        mat[split] = part
    return ArrayRef(ref.name, LogicalTensor(ref.lt.id, ref.dtype, tuple(lead + [h] + mat), tuple(lead_st + [h_st] + mat_st)))


class _Rows:
    """The kernel of one ``attention_rows`` partition: its operands as matrices per
    (batch, head), the scores' expression, the output's store; :meth:`emit` writes it."""

    def __init__(self, kb, ops, refs, plan):
        self.kb = kb
        byid = {o.id: o for o in ops}
        mm1, sm, mm2 = (byid[i] for i in plan.anchors)
        self.sm = sm
        self.local = local = dict(refs)
        self.values = Values(ops, local, kb)
        prologue_views(ops, local, self.values, plan.prologue)
        for o in ops:
            if o.kind == "GenIndex":
                t = o.outputs[0]
                local[t.id] = IndexRef(t, o.attr("axis") % len(t.shape))
        sviews = views_after(ops, mm1.outputs[0])
        self.score = (sviews[-1] if sviews else mm1).outputs[0]
        self.sshape = sshape = tuple(self.score.shape)
        self.batch = sshape[:-2]
        self.sq, self.skv = sshape[-2], sshape[-1]
        q, k, v = (local[t.id] for t in (mm1.inputs[0], mm1.inputs[1], mm2.inputs[0]))
        nb = len(mm1.outputs[0].shape) - 2
        if sviews:   # the scores split by heads: K's columns of head h, Q and V broadcast over the heads
            heads = sshape[nb]
            q, v = headed(q, nb, heads), headed(v, nb, heads)
            k = headed(k, nb, heads, -2 if mm1.attr("transpose_b") else -1)
        self.q = as_matrix(q, mm1.attr("transpose_a"), self.batch, mm_rounding(mm1, 0))
        self.k = as_matrix(k, mm1.attr("transpose_b"), self.batch, mm_rounding(mm1, 1))
        self.v = as_matrix(v, mm2.attr("transpose_a"), self.batch, mm_rounding(mm2, 0))
        self.d, self.dv = self.q.cols, self.v.rows
        self.p_dt = sm.outputs[0].dtype
        self.p_round = mm_rounding(mm2, 1)
        self.inf_as_zero = sm.attr("mode") == "inf_as_zero"
        store = output_store(ops, local, plan.epilogue, mm2.outputs[0])
        skv = self.skv
        # O_h's row c, column j: the output's row c, column h * N + j
        self.store = (lambda iv, val: store(iv[:nb] + [iv[-2], iv[nb] * skv + iv[-1]], val)) if sviews else store
        use_helper(kb, "attn_exp_row")

    def emit(self) -> None:
        """A parallel loop over (batch x heads); each walks its query blocks once."""
        kb, sq, skv, d, dv = self.kb, self.sq, self.skv, self.d, self.dv
        nbatch = math.prod(self.batch)
        parallel = nbatch > 1 and worth_parallel(nbatch * sq * skv * (d + dv) // 8)
        bm = min(BM, sq)
        with kb.for_(nbatch, "t", parallel) as t:
            bivars = unravel(kb, t, self.batch) if self.batch else []
            stile = kb.scratch(bm * skv, "f32", parallel, prefix="stile")
            acc = kb.scratch(dv * skv, "f32", parallel, prefix="oacc")
            with kb.for_(dv * skv, "e") as e:
                kb.emit(acc.store(e, ZERO))
            k = gemm_block(kb, self.k, bivars, 0, d, 0, skv, d * skv, parallel)
            with kb.for_(-(-sq // bm), "qb") as qb:
                i0 = kb.let(qb * bm, "i0")
                m_ = kb.let(ir.call("min", bm, sq - i0), "m")
                q = gemm_block(kb, self.q, bivars, i0, m_, 0, d, bm * d, parallel)
                gemm(kb, q, k, m_, skv, d, 0.0, stile, skv)
                with kb.for_(m_, "r") as r:
                    self._row(stile, bivars, kb.let(i0 + r, "i"), kb.let(r * skv, "sr"))
                v = gemm_block(kb, self.v, bivars, 0, dv, i0, m_, dv * bm, parallel)
                gemm(kb, v, tile_operand(stile, skv), dv, skv, m_, 1.0, acc, skv)
            with kb.for_(dv, "c") as c:
                with kb.for_(skv, "j") as j:
                    kb.emit(self.store(list(bivars) + [c, j], acc[c * skv + j]))
        kb.ret(-1)

    def _row(self, stile, bivars, i, row) -> None:
        """Row ``i`` of the scores (at ``row`` in the tile): the score ops, then the
        SoftMax's probabilities, as its dst holds them, in place."""
        kb, skv, score, src = self.kb, self.skv, self.score, self.sm.inputs[0]
        mx = kb.var(NINF, "mx")
        with kb.for_(skv, "jj") as jj:
            with self.values.binding({score.id: stored(stile[row + jj], score.dtype)}):
                s = kb.let(ir.f32(self.values.at(src.id, src, list(bivars) + [i, jj], self.sshape)), "sv")
            kb.emit(stile.store(row + jj, s))
            kb.assign(mx, ir.select(s > mx, s, mx))
        # a row all -inf counts from 0: its exps are 0 (NaN after 1/0, or 0 if inf_as_zero)
        safe = kb.let(ir.select(mx.eq(-math.inf), ZERO, mx), "ms")
        total = kb.let(ir.call("attn_exp_row", stile.buf, stile.at(row), count_arg(skv), safe, dt="f32"), "ps")
        inv = kb.let(inverse_sum(total, self.inf_as_zero), "iv")
        with kb.for_(skv, "jj") as jj:
            p = stored(stile[row + jj] * inv, self.p_dt)
            if self.p_round is not None:
                p = self.p_round(ir.f32(p))
            kb.emit(stile.store(row + jj, ir.f32(p)))


__all__ = ["lower_attention_rows", "BM", "views_after", "headed"]
