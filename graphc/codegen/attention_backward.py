"""sdpa.md's training backward (the attention plan of passes/attention_plan.py's
``_backward_plan``) as one flash-style kernel:

* a first parallel loop: D = ReduceSum(O * dO) per query row (a scratch of
  batch x S_q values);
* per tile (BQ query rows x BK keys), S = Q K^T and dP = dO V^T by
  ``gemm_f32``, then the pointwise ops (scale, mask, Subtract stats, Exp,
  Dropouts with the forward's Philox numbers, dS = P * (dP - D), its scale
  and TypeCasts) on each element: the tile holds the dV MatMul's src and
  dP's the dQ / dK MatMuls' src (dM, when it leaves, stored from there);
* sweep 1, parallel over batch x key blocks: dV += P^T dO and dK += dS^T Q
  accumulate in the task's own tiles (no two tasks write one key row).
  GQA/MQA (gqa.md: K/V broadcast over the query heads of a group, dK and dV
  ReduceSums of the MatMuls over those batch axes): a task owns a key block
  of one K/V head and loops over the query heads of its group, so their sum
  is made in its tiles (no race, no per-head dK/dV in memory); a bf16/f16
  MatMul dst rounds each head's part before it is added, as the graph does;
* sweep 2, parallel over batch x query blocks: dQ += dS K (the tile
  recomputed: S and dP again rather than atomics or an S x S buffer).

Reorders of the inputs (gqa.md's 4-D GQA: reshaped to 5-D) are views of
their buffers, reorders after dQ, dK, dV the strides they are stored with
(graphc/codegen/attention_operands.py).  The forward kernel is
graphc/codegen/attention.py, which dispatches here for a partition without a
SoftMax.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from . import ir
from .attention_operands import (ZERO, IndexRef, as_matrix, bf16_pair, dropout_kept, gemm, gemm_block, output_store,
                                 pack_block, prologue_views, stored, tile_operand)
from .bf16_gemm import bf16_panels
from .blas_import import bf16_tile_gemm
from .conv_bf16 import bits
from .fused_values import Values
from .kernel import ArrayRef, Scratch, as_stored, is_narrow_float, plan_threads, worth_parallel
from .loops import linear, unravel
from .rules.misc import dropout_params
from ..types import DataType, dense_strides

#: query rows and keys per block of the backward kernel
BQ, BK = 64, 64


def lower_attention_backward(kb, ops, refs, plan) -> None:
    """Emit the attention backward partition ``ops`` (the module's kernel) into ``kb``."""
    _Backward(kb, ops, refs, plan).emit()


@dataclass
class _Tiles:
    """A task's scratch tiles: S, then the dV MatMul's src (``stile``); dP, then
    the dQ/dK MatMuls' src (``ptile``); the Philox words of each Dropout's
    params (``words``, by the params' tensor ids).  Where those MatMuls
    multiply bf16 values, their srcs as bf16 bits instead (``pbits``: P^T,
    keys x queries; ``dbits``: dS^T in sweep 1, dS in sweep 2), each laid out
    as the GEMM reads it (no transposed pack of A)."""

    stile: Scratch
    ptile: Scratch
    words: dict
    pbits: Scratch | None = None
    dbits: Scratch | None = None
    #: sweep 1's bf16 bits row by row (stored along memory), then moved into pbits / dbits
    #: transposed 16 x 16 at a time (graphc.codegen.bf16_gemm.transpose_u16)
    prows: Scratch | None = None
    drows: Scratch | None = None


@dataclass
class _KeyTask:
    """A task of sweep 1: keys j0.. (n of them) of one K/V head (``ovars``: its
    batch index but the summed axes), with its dK/dV accumulators and, for a
    narrow dK/dV MatMul dst summed over heads, one head's part (``head``, by
    MatMul id)."""

    ovars: list
    j0: ir.Expr
    n: ir.Expr
    tiles: _Tiles
    dk_acc: Scratch
    dv_acc: Scratch
    head: dict


class _Backward:
    """The backward kernel of one attention partition: its operands, the
    gradients it writes, its Dropouts and blocks, decided from the plan;
    :meth:`emit` writes it."""

    def __init__(self, kb, ops, refs, plan):
        self.kb, self.ops, self.plan = kb, ops, plan
        byid = {o.id: o for o in ops}
        self.qk, self.dpm, self.dvm, self.dqm, self.dkm, rsum = (byid[i] for i in plan.anchors[:6])
        self.local = dict(refs)
        #: the partition's one-element inputs (scales, a mask's fill): read once a tile, not
        #: once an element (their loads, beside the element loop's stores, kept LLVM from
        #: vectorizing it: too many pairs of arrays to check for overlap)
        self.scalars = sorted({t.id: t for o in ops for t in o.inputs if isinstance(refs.get(t.id), ArrayRef)
                               and all(d == 1 for d in t.shape)}.items())
        self.values = Values(ops, self.local)
        prologue_views(ops, self.local, self.values, plan.prologue)   # (4-D GQA: Q, K, ... reshaped to 5-D)
        for o in ops:   # an implicit causal mask: GenIndex's dst is its index
            if o.kind == "GenIndex":
                self.local[o.outputs[0].id] = IndexRef(o.outputs[0], o.attr("axis") % len(o.outputs[0].shape))
        self.score = self.qk.outputs[0]
        self.sshape = tuple(self.score.shape)
        self.batch = self.sshape[:-2]
        self.sq, self.skv = self.sshape[-2], self.sshape[-1]
        self.nbatch = math.prod(self.batch)
        self._matrices()
        self._gradients(byid)
        self._dropouts()
        self.red, self.r_out = rsum.inputs[0], rsum.outputs[0]
        self._blocking()

    def _matrices(self) -> None:
        """The GEMM operands: Q, K, dO, V of the S and dP tiles, and the dV, dK, dQ
        MatMuls' second operands (dO, Q, K as those MatMuls read them)."""
        local, batch, qk, dpm = self.local, self.batch, self.qk, self.dpm
        self.q = as_matrix(local[qk.inputs[0].id], qk.attr("transpose_a"), batch)
        self.k = as_matrix(local[qk.inputs[1].id], qk.attr("transpose_b"), batch)
        self.do = as_matrix(local[dpm.inputs[0].id], dpm.attr("transpose_a"), batch)
        self.v = as_matrix(local[dpm.inputs[1].id], dpm.attr("transpose_b"), batch)
        self.do_b = as_matrix(local[self.dvm.inputs[1].id], self.dvm.attr("transpose_b"), batch)
        self.q_b = as_matrix(local[self.dkm.inputs[1].id], self.dkm.attr("transpose_b"), batch)
        self.k_b = as_matrix(local[self.dqm.inputs[1].id], self.dqm.attr("transpose_b"), batch)
        self.d, self.dvd = self.q.cols, self.do.cols
        # bf16 GEMMs (f32 sums) where both operands hold bf16 values: the S and dP tiles
        # for bf16 Q, K, dO, V; the gradients' where the MatMuls' srcs (P, dS) are bf16
        # too (the graph's TypeCasts), their tiles then bf16 bits
        self.s_bf16, self.dp_bf16 = bf16_pair(self.q, self.k), bf16_pair(self.do, self.v)
        # (on graphc's tile: its AVX-512 module transposes the bits tiles)
        dvs, dqs = self.dvm.inputs[0], self.dqm.inputs[0]
        own = bf16_tile_gemm()
        self.p_bf16 = own and dvs.dtype is DataType.bf16 and bf16_pair(self.do_b)
        self.ds_bf16 = own and dqs.dtype is DataType.bf16 and self.dkm.inputs[0].id == dqs.id and \
            bf16_pair(self.q_b, self.k_b)

    def _gradients(self, byid) -> None:
        """``sums``: {dK/dV MatMul id: the ReduceSum over the heads sharing K/V
        (GQA/MQA), or None}; ``extra``: the tensors the partition writes besides
        the gradients (dM, stored from the tile)."""
        plan, dkm, dvm = self.plan, self.dkm, self.dvm
        self.sums = sums = {m.id: next((byid[i] for i in plan.anchors[6:]
                                        if byid[i].inputs[0].id == m.outputs[0].id), None) for m in (dkm, dvm)}
        grads = {self.dqm.outputs[0].id} | {(sums[m.id] or m).outputs[0].id for m in (dkm, dvm)}
        self.extra = [t for o in self.ops for t in o.outputs if plan.roles.get(t.id) == "written"
                      and t.id not in grads and o.id not in plan.epilogue]

    def _dropouts(self) -> None:
        """The Dropouts and, once per params (seed, offset, probability), their
        kernel values (graphc.codegen.rules.misc.dropout_params)."""
        self.drops = [o for o in self.ops if o.kind == "Dropout"]
        self.dparams = {}
        for o in self.drops:
            key = tuple(t.id for t in o.inputs[1:])
            if key not in self.dparams:
                self.dparams[key] = dropout_params(self.kb, *(self.local[t] for t in key))

    def _blocking(self) -> None:
        """Sweep 1's tasks ((batch dims but the heads summed) x key blocks), block
        sizes and counts, and whether the loops run in parallel."""
        batch, sq, skv, dk_sum = self.batch, self.sq, self.skv, self.sums[self.dkm.id]
        self.sum_axes = sorted({a % len(self.sshape) for a in dk_sum.attr("axes")}) if dk_sum is not None else []
        self.outer = [a for a in range(len(batch)) if a not in self.sum_axes]
        self.nouter = math.prod(batch[a] for a in self.outer)
        self.ngroup = math.prod(batch[a] for a in self.sum_axes)
        self.parallel = worth_parallel(self.nbatch * sq * skv * (2 * self.d + 2 * self.dvd) // 8)
        self.bq, bk = min(BQ, sq), min(BK, skv)
        while self.parallel and bk > 16 and self.nouter * -(-skv // bk) < plan_threads():   # (MQA: one K/V head)
            bk //= 2
        self.bk = bk
        self.nqb, self.nkb = -(-sq // self.bq), -(-skv // bk)

    # -- the kernel ------------------------------------------------------------------------
    def emit(self) -> None:
        self.dsum = self._row_dots()
        self._key_sweep()
        self._query_sweep()
        self.kb.ret(-1)

    def _row_dots(self) -> Scratch:
        """D = ReduceSum(O * dO) of every query row, into a scratch."""
        kb, batch, sq, red = self.kb, self.batch, self.sq, self.red
        n = self.nbatch * sq
        dsum = kb.scratch(n, "f32", False, prefix="dsum")
        with kb.for_(n, "t", self.parallel and n > 1) as t:
            bivars = unravel(kb, kb.let(t // sq, "tb"), batch) if batch else []
            i = kb.let(t % sq, "i")
            acc = kb.var(ZERO, "ac")
            with kb.for_(red.shape[-1], "c") as c:
                kb.assign(acc, acc + ir.f32(self.values.at(red.id, red, list(bivars) + [i, c], tuple(red.shape))))
            kb.emit(dsum.store(t, stored(acc, self.r_out.dtype)))
        return dsum

    def _scratches(self, first_sweep: bool) -> _Tiles:
        kb, size, parallel, bq, bk = self.kb, self.bq * self.bk, self.parallel, self.bq, self.bk
        # (the transposed tiles: rows of whole blocks of 16 queries; a row-major one read by whole
        # blocks of 16 past its last row and column)
        bits = lambda on, prefix, n: kb.scratch(n, "u16", parallel, prefix=prefix) if on else None  # noqa: E731
        across, rows = _up16(bk) * _up16(bq), _up16(bq) * bk + _up16(bk) - bk
        ds_across = first_sweep and self.ds_bf16
        return _Tiles(kb.scratch(size, "f32", parallel, prefix="stile"),
                      kb.scratch(size, "f32", parallel, prefix="ptile"),
                      {key: kb.scratch(4 * (self.bk // 4 + 2), "int", parallel, prefix="rw") for key in self.dparams},
                      bits(first_sweep and self.p_bf16, "pbits", across),
                      bits(self.ds_bf16, "dbits", across if ds_across else size),
                      bits(first_sweep and self.p_bf16, "prows", rows), bits(ds_across, "drows", rows))

    def _accumulators(self, *sizes) -> list:
        """Scratches of ``sizes`` f32 elements, cleared."""
        accs = [self.kb.scratch(n, "f32", self.parallel, prefix="gacc") for n in sizes]
        for acc, n in zip(accs, sizes):
            with self.kb.for_(n, "z") as z:
                self.kb.emit(acc.store(z, ZERO))
        return accs

    def _panels(self, bivars, j0, n_) -> list:
        """K^T and V^T of the key block j0.. (n_ keys) packed into the tile's panels
        (graphc.codegen.bf16_gemm) where their products multiply bf16 on graphc's
        tile, else None: for the S and dP products of a run of query blocks."""
        kb, out = self.kb, []
        for mat, ld, bf16 in ((self.k, self.d, self.s_bf16), (self.v, self.dvd, self.dp_bf16)):
            if not (bf16 and bf16_tile_gemm()):
                out.append(None)
                continue
            pan = kb.scratch(bf16_panels(self.bk, ld), "u16", self.parallel, prefix="bpan")
            pack_block(kb, mat, bivars, 0, ld, j0, n_, ld * self.bk, self.parallel, pan, 0)
            out.append(pan)
        return out

    def _tile(self, bivars, tb, i0, m_, j0, n_, tiles, first_sweep, panels=(None, None)) -> None:
        """S and dP of the tile (query rows i0.., keys j0..; K^T and V^T packed in
        ``panels`` where :meth:`_panels` packed them), then per element the dV
        MatMul's src into ``tiles.stile`` (first sweep) and the dQ/dK MatMuls' src
        into ``tiles.ptile``."""
        kb, bk, sq, skv = self.kb, self.bk, self.sq, self.skv
        for mat_a, mat_b, out, ld, bf16, pan in ((self.q, self.k, tiles.stile, self.d, self.s_bf16, panels[0]),
                                                 (self.do, self.v, tiles.ptile, self.dvd, self.dp_bf16, panels[1])):
            abuf, aoff, lda, ta = a = gemm_block(kb, mat_a, bivars, i0, m_, 0, ld, self.bq * ld, self.parallel, bf16)
            if pan is not None:
                kb.let(ir.call("gemm_bf16_packed", ta, m_, n_, ld, abuf, aoff, lda, pan.buf, pan.at(0),
                               (n_ + 31) // 32, 0, 0.0, out.buf, out.at(0), bk), "st")
                continue
            b = gemm_block(kb, mat_b, bivars, 0, ld, j0, n_, ld * bk, self.parallel, bf16)
            gemm(kb, a, b, m_, n_, ld, 0.0, out, bk, bf16)
        scalars = {tid: kb.let(self.local[tid].load_nd([None] * len(t.shape)), "sc") for tid, t in self.scalars}
        with kb.for_(m_, "r") as r:
            row = kb.let(r * bk, "sr")
            i = kb.let(i0 + r, "i")
            keeps = {key: dropout_kept(kb, tiles.words[key], prm, (tb * sq + i) * skv + j0, n_)
                     for key, prm in self.dparams.items()}
            dval = kb.let(self.dsum[tb * sq + i], "dd")
            with kb.for_(n_, "jj") as jj:
                self._tile_element(list(bivars) + [i, j0 + jj], row + jj, jj, tiles, keeps, dval, first_sweep,
                                   scalars)
        for rows, across in ((tiles.prows, tiles.pbits), (tiles.drows, tiles.dbits)):
            if rows is not None:   # keys x queries, 16 x 16 at a time
                with kb.for_((m_ + 15) // 16, "rb") as rb:
                    kb.let(ir.call("transpose_u16", rows.buf, rows.at(rb * 16 * bk), bk, across.buf,
                                   across.at(rb * 16), _up16(self.bq), (n_ + 15) // 16), "st")

    def _tile_element(self, ivars, at, jj, tiles, keeps, dval, first_sweep, scalars) -> None:
        """Element ``at`` of the tiles (key jj of the block, at ``ivars``): the
        pointwise ops from S, dP and D (``dval``) with the Dropouts' keep masks
        ``keeps``; the first sweep also stores the extra outputs (dM)."""
        kb, values, sshape, score = self.kb, self.values, self.sshape, self.score
        s_, dp_ = tiles.stile[at], tiles.ptile[at]
        with values.binding({**scalars, score.id: stored(s_, score.dtype), self.dpm.outputs[0].id: dp_,
                             self.r_out.id: dval}):
            for o in self.drops:
                key = tuple(t.id for t in o.inputs[1:])
                x = values.at(o.inputs[0].id, o.inputs[0], ivars, sshape)
                y = ir.select(keeps[key](jj), x * self.dparams[key][1], 0.0)
                values.bound[o.outputs[0].id] = stored(y, o.outputs[0].dtype)
            dvs, dqs = self.dvm.inputs[0], self.dqm.inputs[0]
            # (bf16 srcs as their bits: a rounded value's own, no rounding again)
            if first_sweep:
                pe = values.at(dvs.id, dvs, ivars, sshape)
                pv = kb.let(bits(pe) if self.p_bf16 else ir.f32(pe), "pv")
            de = values.at(dqs.id, dqs, ivars, sshape)
            dsv = kb.let(bits(de) if self.ds_bf16 else ir.f32(de), "dsv")
            if first_sweep:
                for t in self.extra:
                    kb.emit(self.local[t.id].store_nd(ivars, values.at(t.id, t, ivars, sshape)))
        if first_sweep:
            kb.emit(tiles.prows.store(at, pv) if self.p_bf16 else tiles.stile.store(at, pv))
        if self.ds_bf16:
            kb.emit((tiles.drows if first_sweep else tiles.dbits).store(at, dsv))
        else:
            kb.emit(tiles.ptile.store(at, dsv))

    # -- sweep 1: dK and dV of a key block ---------------------------------------------------
    def _key_sweep(self) -> None:
        """dK and dV of a key block of one K/V head per task (GQA/MQA: summed over
        the query heads of its group, the ReduceSum's axes, within the task)."""
        kb = self.kb
        tasks = self.nouter * self.nkb
        with kb.for_(tasks, "t", self.parallel and tasks > 1) as t:
            task = self._key_task(t)
            if self.ngroup > 1:
                with kb.for_(self.ngroup, "g") as g:
                    bivars = self._key_block(task, unravel(kb, g, [self.batch[a] for a in self.sum_axes]))
            else:
                bivars = self._key_block(task, [None] * len(self.sum_axes))
            self._store_key_grads(task, bivars)

    def _key_task(self, t) -> _KeyTask:
        kb, bk, d, dvd, dvm, dkm = self.kb, self.bk, self.d, self.dvd, self.dvm, self.dkm
        # a narrow dK/dV MatMul dst rounds each head's part before the ReduceSum adds them
        per_head = [m for m in (dvm, dkm) if self.sums[m.id] is not None and is_narrow_float(m.outputs[0].dtype)]
        to = kb.let(t // self.nkb, "to")
        j0 = kb.let((t % self.nkb) * bk, "b0")
        n_ = kb.let(ir.call("min", bk, self.skv - j0), "nb")
        ovars = unravel(kb, to, [self.batch[a] for a in self.outer]) if self.outer else []
        tiles = self._scratches(True)
        dk_acc, dv_acc = self._accumulators(bk * d, bk * dvd)
        head = {m.id: kb.scratch(bk * w, "f32", self.parallel, prefix="hacc") for m, w in ((dvm, dvd), (dkm, d))
                if m in per_head}
        return _KeyTask(ovars, j0, n_, tiles, dk_acc, dv_acc, head)

    def _key_block(self, task, gvars) -> list:
        """One query head's part (``gvars``: its index along the summed axes): its
        query blocks' P^T dO and dS^T Q; returns its batch index."""
        kb, bq, d, dvd, parallel = self.kb, self.bq, self.d, self.dvd, self.parallel
        bivars = [None] * len(self.batch)
        for a, v_ in zip(self.outer, task.ovars):
            bivars[a] = v_
        for a, v_ in zip(self.sum_axes, gvars):
            bivars[a] = v_
        tb = kb.let(linear(bivars, dense_strides(self.batch)), "tb")
        parts = []
        for acc, mm, w in ((task.dv_acc, self.dvm, dvd), (task.dk_acc, self.dkm, d)):
            h = task.head.get(mm.id)
            if h is not None:
                with kb.for_(task.n * w, "z") as z:
                    kb.emit(h.store(z, ZERO))
            parts.append(h or acc)
        panels = self._panels(bivars, task.j0, task.n)   # (once for the head's query blocks)
        with kb.for_(self.nqb, "qb") as qb:
            i0 = kb.let(qb * bq, "i0")
            m_ = kb.let(ir.call("min", bq, self.sq - i0), "m")
            self._tile(bivars, tb, i0, m_, task.j0, task.n, task.tiles, True, panels)
            tl = task.tiles
            for acc, mat, w, src, bf16 in zip(parts, (self.do_b, self.q_b), (dvd, d), (tl.pbits or tl.stile,
                                              tl.dbits or tl.ptile), (self.p_bf16, self.ds_bf16)):
                b = gemm_block(kb, mat, bivars, i0, m_, 0, w, bq * w, parallel, bf16)
                # (P^T / dS^T: bf16 bits laid out transposed, else the f32 tile read transposed)
                a = tile_operand(src, _up16(bq), 0) if bf16 else tile_operand(src, self.bk, 1)
                gemm(kb, a, b, task.n, w, m_, 1.0, acc, w, bf16)
        for acc, mm, w in ((task.dv_acc, self.dvm, dvd), (task.dk_acc, self.dkm, d)):
            h = task.head.get(mm.id)
            if h is not None:   # the head's dst as the MatMul rounds it, added up
                with kb.for_(task.n * w, "z") as z:
                    kb.emit(acc.store(z, acc[z] + as_stored(h[z], mm.outputs[0].dtype)))
        return bivars

    def _store_key_grads(self, task, bivars) -> None:
        """The task's dV and dK rows into the outputs (of the ReduceSums under GQA/MQA)."""
        kb = self.kb
        for a in self.sum_axes:   # the K/V head's index: the summed axes at 0
            bivars[a] = None
        for acc, mm, w in ((task.dv_acc, self.dvm, self.dvd), (task.dk_acc, self.dkm, self.d)):
            dst = self.sums[mm.id] or mm
            store = output_store(self.ops, self.local, self.plan.epilogue, dst.outputs[0])
            oivars = list(bivars) if dst is mm or dst.attr("keep_dims") else \
                [v_ for a, v_ in enumerate(bivars) if a not in self.sum_axes]
            with kb.for_(task.n, "jj") as jj:
                with kb.for_(w, "c") as c:
                    kb.emit(store(oivars + [task.j0 + jj, c], acc[jj * w + c]))

    # -- sweep 2: dQ of a query block --------------------------------------------------------
    def _query_sweep(self) -> None:
        """dQ += dS K of a query block per task, the tiles recomputed."""
        kb, bq, bk, d, sq = self.kb, self.bq, self.bk, self.d, self.sq
        tasks = self.nbatch * self.nqb
        with kb.for_(tasks, "t", self.parallel and tasks > 1) as t:
            tb = kb.let(t // self.nqb, "tb")
            i0 = kb.let((t % self.nqb) * bq, "b0")
            bivars = unravel(kb, tb, self.batch) if self.batch else []
            m_ = kb.let(ir.call("min", bq, sq - i0), "nb")
            tiles = self._scratches(False)
            (dq_acc,) = self._accumulators(bq * d)
            with kb.for_(self.nkb, "kv") as kv:
                j0 = kb.let(kv * bk, "j0")
                n_ = kb.let(ir.call("min", bk, self.skv - j0), "n")
                self._tile(bivars, tb, i0, m_, j0, n_, tiles, False)
                k = gemm_block(kb, self.k_b, bivars, j0, n_, 0, d, bk * d, self.parallel, self.ds_bf16)
                gemm(kb, tile_operand(tiles.dbits or tiles.ptile, bk), k, m_, d, n_, 1.0, dq_acc, d, self.ds_bf16)
            store = output_store(self.ops, self.local, self.plan.epilogue, self.dqm.outputs[0])
            with kb.for_(m_, "r") as r:
                with kb.for_(d, "c") as c:
                    kb.emit(store(list(bivars) + [i0 + r, c], dq_acc[r * d + c]))


def _up16(n: int) -> int:
    return -(-n // 16) * 16


__all__ = ["lower_attention_backward", "BQ", "BK"]
