"""Scaled dot-product attention as one flash-style kernel (the ``attention``
plan of passes/attention_plan.py: MatMul Q@K^T -> scale/mask ops -> SoftMax -> MatMul @V).

The kernel runs ``prange`` over (batch x heads) x blocks of BM query rows.  For
each block it walks the keys in blocks of BN:

* S = Q_blk @ K_blk^T into a BM x BN f32 tile (``gemm_f32``; an f32 operand
  with a unit stride is read in place, any other packed to f32 through
  ``load_nd``, bf16/f16 widened there);
* the ops between the first MatMul and the SoftMax (scale, explicit mask,
  implicit causal mask from GenIndex/GreaterEqual/Select, ...) are computed on
  the tile as the expressions fusion builds (graphc/codegen/fused_values.py's
  ``Values``), at each element's (batch, row, column) index;
* online softmax: per row a running max and sum; the accumulator's row is
  rescaled by exp(old max - new max) when the max grows, the tile turned into
  exp(s - max) (``attn_exp_row`` of graphc.codegen.fastmath: vectorised f32 exp and a
  reassociating sum);
* O_blk += P @ V_blk (``gemm_f32`` with beta 1).

At the end O / sum is stored through the output's ``store_nd`` (views of the
output buffer for a StaticReshape/StaticTranspose after the second MatMul,
with its TypeCasts applied on the way).  No S x S matrix exists beyond a tile.

Under an implicit causal mask (GenIndex rows [+ a] [- b] >= GenIndex columns,
Select with a per-tensor fill) whose fill is -inf at run time, a query block
visits only the key blocks up to its last row's diagonal.

When the SoftMax's dst is bf16/f16 (its probabilities rounded before @V, as the
reference rounds them), a first sweep over the keys finds each row's max and
sum and a second computes the rounded probabilities and accumulates P @ V.
The first sweep's scores of the block's rows over all keys are kept for the
second (up to ``SCORES_MAX`` a thread): after the first sweep (its max only)
they are turned into exp(s - max) in place, a row at a time with its sum, and
the second scales them, one exp a score (the two sweeps each took one:
SDPA 2x16x512x64 bf16 5.13 -> 3.03 ms).

With bf16 operands on graphc's AVX512-BF16 tile (``BF16_QK`` / ``BF16_PV``) a
task is a head's run of query blocks: it packs the head's K^T and V into the
tile's panels once (``pack_panels_bf16``), and its blocks multiply Q and the
bf16 probabilities by them (``gemm_bf16_packed``).

Reshapes and transposes of the kernel's inputs (Q, K, V, mask, scale) are views
(:func:`view_strides`): the same buffer read with other strides.

Q, K and V may be computed (sdpa_with_compressed_kv.md's DynamicDequantize of
int8/int4 K/V with grouped scales and zero points, sdpa_quantized.md's
Dequantize of fp8/int8 Q/K/V, TypeCasts): they are PrologueRefs, so the tile
packing loop computes each element through ``load_nd``
(graphc/codegen/fused_values.py's ``Values``; a per-group scale read at the
index divided by the group) and no dequantized copy exists.  A
reshape/transpose after the dequantization is a
:class:`~graphc.codegen.attention_operands.Reindexed` (the view's index mapped
to the computed tensor's index).
Since every query block packs the K/V tiles again, query blocks grow (up to
``BM_PACKED`` rows) while every thread still has a task.  Pointwise ops on the
probabilities (quantized SDPA's Quantize -> Dequantize) need the normalised
probabilities: the two-pass sweep computes them; pointwise ops after the second
MatMul (TypeCast, a Quantize) apply where the output is stored.

The training backward (an attention partition without a SoftMax) is
graphc/codegen/attention_backward.py; what both kernels share (operand views,
GEMM blocks, dropout masks, output stores) graphc/codegen/attention_operands.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from . import ir
from .attention_backward import BK, BQ, lower_attention_backward
from .attention_operands import (REORDERS, ZERO, IndexRef, as_matrix, bf16_pair, dropout_kept, gemm, gemm_block,
                                 inverse_sum, mm_rounding, output_store, pack_block, prologue_views, stored,
                                 tile_operand)
from .bf16_gemm import bf16_panels
from .blas_import import bf16_tile_gemm
from .conv_bf16 import bits
from .fused_values import PrologueRef, Values
from .helpers import use_helper
from .kernel import ArrayRef, Scratch, as_stored, is_narrow_float, plan_threads, worth_parallel
from .loops import unravel
from .rules.misc import dropout_params
from ..types import DataType

#: query rows per block (the rows of a tile: one task of the parallel loop): BM_WIDE while
#: (batch x heads) x blocks still gives every thread two tasks, else BM
BM = 64
BM_WIDE = 128
#: keys per block (the columns of the score tile): BN_WIDE, or BN under an implicit causal
#: mask (a query block skips the key blocks past its diagonal: finer blocks skip more).
#: Wide blocks: fewer, larger products (MHA-bert_large f32 3.15 -> 2.65 ms, GQA 84 -> 76;
#: a causal 2x16x512x64 ran 5.56 -> 6.36 ms with wide key blocks, 5.42 with BN)
BN = 128
BN_WIDE = 384
#: f32 elements of a query block's score tile and output rows at most, when every key is
#: in one block (few keys: Stable Diffusion's 77-token cross attention)
FEW_KEYS_TILE = 1 << 17
#: most query rows per block when K or V is computed (dequantized) while packed:
#: every query block packs the K/V tiles again, so blocks grow while there are
#: tasks for every thread
BM_PACKED = 256

NINF = ir.const(-math.inf, "f32")
#: the score tile's rows start at multiples of this many f32 (a vector of AVX-512)
ROW_ALIGN = 16
#: most elements (uint16) of a head's K^T and V panels a thread's workspace holds (else the
#: bf16 products pack their operands per call, gemm_bf16)
PANELS_MAX = 1 << 23
#: most scores (f32) of a query block's rows over all keys a thread keeps from the first
#: sweep of a two-sweep kernel for its second (else the second computes them again)
SCORES_MAX = 1 << 17

#: Q @ K^T and P @ V multiplied in bf16 (f32 sums) where both operands hold bf16
#: values, instead of ``gemm_f32`` on operands widened to f32.  On graphc's
#: AVX512-BF16 tile each task packs its head's K^T and V into the tile's panels
#: once (``pack_panels_bf16``; K^T gathered by vector code) and every query block
#: multiplies by them (``gemm_bf16_packed``, Q and the bf16 probabilities read in
#: place).  On: measured faster on the tile (docs/performance.md, "bf16 attention
#: tiles": 2x16x512x64 bf16 on one thread 37-40 ms widened to f32, 27 ms on the
#: tile's panels).
BF16_QK = True
BF16_PV = True
#: the same products without the tile's panels (no AVX512-BF16: MKL's bf16 GEMM; or
#: a head's panels past PANELS_MAX): ``gemm_bf16`` packing both operands in every
#: call.  Off: measured slower than sgemm on widened tiles (64-65 against 33 ms).
BF16_UNPACKED = False


def lower_attention(kb, ops, refs, plan) -> None:
    """Emit the attention partition ``ops`` (plan.shape "attention") into ``kb``:
    the forward kernel, or without a SoftMax the training backward's."""
    if not any(o.kind == "SoftMax" for o in ops):
        kb.road("flash_backward")
        return lower_attention_backward(kb, ops, refs, plan)
    kb.road("flash")
    _Forward(kb, ops, refs, plan).emit()


@dataclass
class _QueryBlock:
    """One task of the forward kernel: query rows i0.. (m of them) of batch tb."""

    tb: ir.Expr
    i0: ir.Expr
    m: ir.Expr
    bivars: list
    q: tuple            # Q's block as a GEMM operand (gemm_block)
    stile: Scratch      # the scores, then the probabilities, of a key block
    acc: Scratch        # the output rows, unnormalised
    rmax: Scratch       # each row's running max
    rsum: Scratch       # each row's running sum of exp(s - max)
    words: Scratch | None   # a Dropout's Philox words of a row of the tile
    ptile: Scratch | None   # the probabilities as bf16 bits, for P @ V in bf16
    kpan: Scratch | None = None   # the head's K^T packed into the bf16 tile's panels, a key block at a time
    vpan: Scratch | None = None   # the head's V, likewise
    scores: Scratch | None = None   # the block's scores over all keys (rows skv apart), kept for the second sweep


class _Forward:
    """The forward kernel of one attention partition: its operands, tile sizes
    and sweeps decided from the plan; :meth:`emit` writes it."""

    def __init__(self, kb, ops, refs, plan):
        self.kb, self.ops = kb, ops
        byid = {o.id: o for o in ops}
        mm1, sm, mm2 = (byid[i] for i in plan.anchors)
        self.mm1, self.sm, self.mm2 = mm1, sm, mm2
        self.drop = drop = next((o for o in ops if o.kind == "Dropout"), None)
        self.local = local = dict(refs)
        self.values = Values(ops, local, kb)
        # JAX's O^T = V^T @ P^T: the probabilities transposed into input 1, the output transposed
        self.pin = pin = 0 if _computed_from(ops, mm2.inputs[0], sm) else 1
        self.operands = (mm1.inputs[0], mm1.inputs[1], mm2.inputs[1 - pin])
        self._operand_refs(plan)
        self.score = score = mm1.outputs[0]
        self.sshape = sshape = tuple(score.shape)
        self.batch = batch = sshape[:-2]
        self.sq, self.skv = sshape[-2], sshape[-1]
        self.q = as_matrix(local[mm1.inputs[0].id], mm1.attr("transpose_a"), batch, mm_rounding(mm1, 0))
        self.k = as_matrix(local[mm1.inputs[1].id], mm1.attr("transpose_b"), batch, mm_rounding(mm1, 1))
        self.v = as_matrix(local[mm2.inputs[1 - pin].id], not mm2.attr("transpose_a") if pin else
                           mm2.attr("transpose_b"), batch, mm_rounding(mm2, 1 - pin))
        self.d, self.dv = self.q.cols, self.v.cols
        self.p_dt = sm.outputs[0].dtype
        self.probs = (drop or sm).outputs[0]
        # pointwise ops on the probabilities (Quantize -> Dequantize); the transposed ones go in as they are
        self.p_chain = not pin and mm2.inputs[0].id != self.probs.id
        self.p_round = mm_rounding(mm2, pin)   # fpmath_mode rounds the (normalised) f32 probabilities
        self.two_pass = is_narrow_float(self.p_dt) or self.p_chain or self.p_round is not None
        # bf16 GEMMs (f32 sums) where both operands hold bf16 values: Q @ K^T for bf16
        # Q and K; P @ V for bf16 V and probabilities rounded to bf16 (the second
        # sweep's, as the SoftMax's bf16 dst or fpmath_mode rounds them)
        self.qk_bf16 = BF16_QK and bf16_pair(self.q, self.k)
        p_in = mm2.inputs[pin]
        p_bf16 = getattr(self.p_round, "dtype", None) is DataType.bf16 if self.p_round is not None else \
            p_in.dtype is DataType.bf16
        self.pv_bf16 = BF16_PV and self.two_pass and p_bf16 and bf16_pair(self.v)
        self.inf_as_zero = sm.attr("mode") == "inf_as_zero"
        store = output_store(ops, local, plan.epilogue, mm2.outputs[0])
        # O's row i, column c; transposed (O^T's row c, column i) when P^T went in
        self.store = (lambda iv, v: store(iv[:-2] + [iv[-1], iv[-2]], v)) if pin else store
        self._blocking()
        use_helper(kb, "attn_exp_row")   # (after exp_le0_f32, which it calls)
        for h in ("key_max_f32", "f32_of_key"):   # (the score rows' maxima)
            use_helper(kb, h)
        self.dparams = dropout_params(kb, *(local[t.id] for t in drop.inputs[1:])) if drop else None

    def _operand_refs(self, plan) -> None:
        """How the kernel reads what is no argument: the input reorders as views,
        GenIndex's dst as its index, and Q/K/V computed in the partition
        (dequantized) as PrologueRefs, computed while their tiles are packed."""
        local, values = self.local, self.values
        prologue_views(self.ops, local, values, plan.prologue)
        for o in self.ops:
            if o.kind == "GenIndex":
                t = o.outputs[0]
                local[t.id] = IndexRef(t, o.attr("axis") % len(t.shape))
        for t in self.operands:
            if t.id not in local:
                local[t.id] = PrologueRef(t, values)

    def _blocking(self) -> None:
        """Query and key block sizes, their counts, and whether tasks run in parallel."""
        sq, skv = self.sq, self.skv
        self.nbatch = nbatch = math.prod(self.batch)
        wide = nbatch * -(-sq // BM_WIDE) >= 2 * plan_threads()
        #: (the Select, the GreaterEqual) of an implicit causal mask, or None
        self.causal = _causal_pattern(self.ops, self.sm)
        bn = BN if self.causal is not None else BN_WIDE
        bm, self.bn = min(BM_WIDE if wide else BM, sq), min(bn, skv)
        if any(not isinstance(self.local[t.id], ArrayRef) for t in self.operands[1:]):
            while 2 * bm <= BM_PACKED and bm < sq and nbatch * -(-sq // (2 * bm)) >= plan_threads():
                bm *= 2
            bm = min(bm, sq)
        if skv <= self.bn:   # one key block: taller query blocks, larger products, fewer calls
            while 2 * bm < sq and 2 * bm * (skv + self.dv) <= FEW_KEYS_TILE \
                    and nbatch * -(-sq // (2 * bm)) >= 2 * plan_threads():
                bm *= 2
        self.bm = bm
        self.mt, self.kt = -(-sq // bm), -(-skv // self.bn)
        #: the score tile's row stride: whole vectors, so that a row's exps run without a tail
        self.ld = -(-self.bn // ROW_ALIGN) * ROW_ALIGN
        self.keep = self.two_pass and bm * skv <= SCORES_MAX
        # the bf16 products on graphc's tile: each key block's K^T and V packed into
        # its panels once per head (per task: a head's run of query blocks)
        self.perk, self.perv = bf16_panels(self.bn, self.d), bf16_panels(self.dv, self.bn)
        size = self.kt * (self.perk * self.qk_bf16 + self.perv * self.pv_bf16)
        self.panels = (self.qk_bf16 or self.pv_bf16) and bf16_tile_gemm() and size <= PANELS_MAX
        if not self.panels and not BF16_UNPACKED:
            self.qk_bf16 = self.pv_bf16 = False
        # query blocks per task: a head's, split while there are fewer tasks than twice the threads
        self.groups = min(self.mt, -(-2 * plan_threads() // nbatch)) if self.panels else self.mt
        self.per = -(-self.mt // self.groups)
        tasks = nbatch * (self.groups if self.panels else self.mt)
        self.parallel = tasks > 1 and worth_parallel(nbatch * sq * skv * (self.d + self.dv) // 8)

    # -- the kernel ------------------------------------------------------------------------
    def emit(self) -> None:
        """A parallel loop over (batch x heads) x query blocks (with the tile's
        panels: over (batch x heads) x runs of query blocks, the head's K^T and V
        packed first); each block walks the key blocks once (online softmax), or
        twice when the probabilities are needed normalised (rounded to a narrow
        dtype, pointwise ops on them, fpmath_mode)."""
        kb = self.kb
        if not self.panels:
            with kb.for_(self.nbatch * self.mt, "t", self.parallel) as t:
                tb = kb.let(t // self.mt, "tb")
                self._block(tb, t % self.mt, unravel(kb, tb, self.batch) if self.batch else [], None)
            return kb.ret(-1)
        with kb.for_(self.nbatch * self.groups, "t", self.parallel) as t:
            tb = kb.let(t // self.groups, "tb")
            qb0 = kb.let((t % self.groups) * self.per, "qb0")
            qb1 = kb.let(ir.call("min", self.mt, qb0 + self.per), "qb1")
            bivars = unravel(kb, tb, self.batch) if self.batch else []
            last = kb.let(ir.call("min", self.sq, qb1 * self.bm) - 1, "lr")
            kt_pack = _causal_blocks(kb, self.causal, self.local, self.values, bivars, last, self.bn, self.kt,
                                     self.skv)
            panels = self._pack_head(bivars, kt_pack)
            with kb.for_(qb1, "qb", start=qb0) as qb:
                self._block(tb, qb, bivars, panels)
        kb.ret(-1)

    def _block(self, tb, qb, bivars, panels) -> None:
        """Query block ``qb`` of batch ``tb``: its key sweeps and its rows stored."""
        kb = self.kb
        blk = self._query_block(tb, qb, bivars, panels)
        kt_run = _causal_blocks(kb, self.causal, self.local, self.values, blk.bivars,
                                blk.i0 + blk.m - 1, self.bn, self.kt, self.skv)
        if not self.two_pass:
            with kb.for_(kt_run, "kv") as kv:
                j0, n_ = self._scores(blk, kv, lambda r, j0, n_, mx: self._update_stats(blk, r, j0, n_, mx, True))
                self._pv(blk, kv, j0, n_)
        else:
            with kb.for_(kt_run, "kv") as kv:
                self._scores(blk, kv, lambda r, j0, n_, mx: self._update_stats(blk, r, j0, n_, mx, False))
            if self.keep:   # the kept scores turned into exp(s - max) once, each row's sum with them
                nk = min(self.skv, kt_run * self.bn) if isinstance(kt_run, int) else \
                    kb.let(ir.call("min", self.skv, kt_run * self.bn), "nk")
                self._exp_rows(blk, nk)
            with kb.for_(kt_run, "kv") as kv:
                if self.keep:   # the first sweep's scores
                    j0 = kb.let(kv * self.bn, "j0")
                    n_ = kb.let(ir.call("min", self.bn, self.skv - j0), "n")
                else:
                    j0, n_ = self._scores(blk, kv)
                self._probabilities(blk, j0, n_)
                self._pv(blk, kv, j0, n_)
        self._store_rows(blk)

    def _pack_head(self, bivars, kt_pack):
        """The key blocks [0, kt_pack) of the head ``bivars``: K^T (d x keys, the B of
        Q K^T) and V (keys x dv) packed into the tile's panels (graphc.codegen.bf16_gemm),
        a key block's panels ``perk`` / ``perv`` elements apart; returns (kpan, vpan)."""
        kb, bn, d, dv, parallel = self.kb, self.bn, self.d, self.dv, self.parallel
        kpan = kb.scratch(self.kt * self.perk, "u16", parallel, prefix="kpan") if self.qk_bf16 else None
        vpan = kb.scratch(self.kt * self.perv, "u16", parallel, prefix="vpan") if self.pv_bf16 else None
        with kb.for_(kt_pack, "kv") as kv:
            j0 = kb.let(kv * bn, "j0")
            n_ = kb.let(ir.call("min", bn, self.skv - j0), "n")
            if kpan is not None:
                pack_block(kb, self.k, bivars, 0, d, j0, n_, d * bn, parallel, kpan, kv * self.perk)
            if vpan is not None:
                pack_block(kb, self.v, bivars, j0, n_, 0, dv, bn * dv, parallel, vpan, kv * self.perv)
        return kpan, vpan

    def _query_block(self, tb, qb, bivars, panels) -> _QueryBlock:
        """Query block ``qb`` of batch ``tb``: its indexes, Q's block, its scratch tiles,
        the running max, sum and output rows cleared."""
        kb, bm, bn, dv, parallel = self.kb, self.bm, self.bn, self.dv, self.parallel
        i0 = kb.let(qb * bm, "i0")
        m_ = kb.let(ir.call("min", bm, self.sq - i0), "m")
        q = gemm_block(kb, self.q, bivars, i0, m_, 0, self.d, bm * self.d, parallel, self.qk_bf16)
        blk = _QueryBlock(tb, i0, m_, bivars, q,
                          stile=kb.scratch(bm * self.ld, "f32", parallel, prefix="stile"),
                          acc=kb.scratch(bm * dv, "f32", parallel, prefix="oacc"),
                          rmax=kb.scratch(bm, "f32", parallel, prefix="rmax"),
                          rsum=kb.scratch(bm, "f32", parallel, prefix="rsum"),
                          words=kb.scratch(4 * (bn // 4 + 2), "int", parallel, prefix="rw") if self.drop else None,
                          ptile=kb.scratch(bm * self.ld, "u16", parallel, prefix="ptile") if self.pv_bf16 else None,
                          kpan=panels[0] if panels else None, vpan=panels[1] if panels else None,
                          scores=kb.scratch(bm * self.skv, "f32", parallel, prefix="scores") if self.keep else None)
        with kb.for_(m_, "r") as r:
            kb.emit(blk.rmax.store(r, NINF))
            kb.emit(blk.rsum.store(r, ZERO))
            with kb.for_(dv, "c") as c:
                kb.emit(blk.acc.store(r * dv + c, ZERO))
        return blk

    def _kept(self, blk, i, j0, n_):
        """keep(jj): whether the Dropout keeps the probability of row i, key j0 + jj."""
        return dropout_kept(self.kb, blk.words, self.dparams, (blk.tb * self.sq + i) * self.skv + j0, n_)

    def _scores(self, blk, kv, per_row=None):
        """The tile's scores: S = Q K^T, then the ops up to the SoftMax, and
        ``per_row(r, j0, n, mx)`` after each row with its max ``mx``; returns (j0, n)
        of the key block."""
        kb, bn, values, score, src = self.kb, self.bn, self.values, self.score, self.sm.inputs[0]
        j0 = kb.let(kv * bn, "j0")
        n_ = kb.let(ir.call("min", bn, self.skv - j0), "n")
        tile, ld, c0 = self._tile(blk, j0)
        if blk.kpan is not None:   # K^T's panels of this key block
            qbuf, qoff, ldq, ta = blk.q
            kb.let(ir.call("gemm_bf16_packed", ta, blk.m, n_, self.d, qbuf, qoff, ldq, blk.kpan.buf,
                           blk.kpan.at(kv * self.perk), (n_ + 31) // 32, 0, 0.0, tile.buf, tile.at(c0), ld), "st")
        else:
            k = gemm_block(kb, self.k, blk.bivars, 0, self.d, j0, n_, self.d * bn, self.parallel, self.qk_bf16)
            gemm(kb, blk.q, k, blk.m, n_, self.d, 0.0, tile, ld, self.qk_bf16, c0)
        with kb.for_(blk.m, "r") as r:
            row = kb.let(r * ld + c0, "sr")
            i = kb.let(blk.i0 + r, "i")
            # (the row's max on int32 keys (fastmath.key_f32): an integer maximum vectorizes,
            # a float one with NaN semantics does not)
            mk = kb.var(ir.call("key_f32", NINF, dt="int"), "mk") if per_row else None
            with kb.for_(n_, "jj") as jj:
                with values.binding({score.id: stored(tile[row + jj], score.dtype)}):
                    s = kb.let(ir.f32(values.at(src.id, src, list(blk.bivars) + [i, j0 + jj], self.sshape)), "sv")
                kb.emit(tile.store(row + jj, s))
                if per_row:
                    kb.assign(mk, ir.call("key_max_f32", mk, s, dt="int"))
            if per_row:
                per_row(r, j0, n_, kb.let(ir.call("f32_of_key", mk, dt="f32"), "mx"))
        return j0, n_

    def _tile(self, blk, j0):
        """(scratch, leading dim, first element) of key block j0's scores: the tile,
        or the block's columns of the scores kept for the second sweep."""
        return (blk.scores, self.skv, j0) if blk.scores is not None else (blk.stile, self.ld, 0)

    def _update_stats(self, blk, r, j0, n_, mx, rescale) -> None:
        """Row r's running max and sum from the tile's row of max ``mx`` (left
        holding exp(s - max)); with ``rescale`` (one pass) the output row rescaled
        and the dropped probabilities zeroed."""
        kb, stile = self.kb, blk.stile
        old = kb.let(blk.rmax[r], "mo")
        new = kb.let(ir.select(mx > old, mx, old), "mn")
        if blk.scores is not None:   # (kept scores: the max only; _exp_rows after the sweep)
            kb.emit(blk.rmax.store(r, new))
            return
        row = kb.let(r * self.ld, "sr")
        # a row masked so far (max -inf) counts from 0: its exps are 0, not NaN
        safe = kb.let(ir.select(new.eq(-math.inf), ZERO, new), "ms")
        alpha = kb.let(ir.call("exp_le0_f32", old - safe), "al")
        # (the row out to whole vectors with -inf (exp 0): no scalar tail)
        whole = kb.let((n_ + (ROW_ALIGN - 1)) // ROW_ALIGN * ROW_ALIGN, "nv")
        with kb.for_(whole, "jp", start=n_) as jp:
            kb.emit(stile.store(row + jp, NINF))
        part = kb.let(ir.call("attn_exp_row", stile.buf, stile.at(row), whole, safe, dt="f32"), "ps")
        kb.emit(blk.rmax.store(r, new))
        kb.emit(blk.rsum.store(r, blk.rsum[r] * alpha + part))
        if self.drop and rescale:   # the row's sum counts every key; @V sees the kept ones scaled
            keep = self._kept(blk, kb.let(blk.i0 + r, "i"), j0, n_)
            with kb.for_(n_, "jj") as jj:
                kb.emit(stile.store(row + jj, ir.select(keep(jj), stile[row + jj] * ir.f32(self.dparams[1]), ZERO)))
        if rescale:
            with kb.if_(alpha < 1.0):
                with kb.for_(self.dv, "c") as c:
                    kb.emit(blk.acc.store(r * self.dv + c, blk.acc[r * self.dv + c] * alpha))

    def _exp_rows(self, blk, nk) -> None:
        """The kept scores of the block's rows (keys [0, nk)) replaced by exp(s -
        max) at their final max, and each row's sum of them: one exp per score
        (the second sweep then scales them), not one in each sweep."""
        kb = self.kb
        with kb.for_(blk.m, "r") as r:
            mr = kb.let(blk.rmax[r], "mr")
            safe = kb.let(ir.select(mr.eq(-math.inf), ZERO, mr), "ms")
            kb.emit(blk.rsum.store(r, ir.call("attn_exp_row", blk.scores.buf, blk.scores.at(r * self.skv), nk, safe,
                                              dt="f32")))

    def _probabilities(self, blk, j0, n_) -> None:
        """The second sweep's tile: the normalised probabilities, as the SoftMax's dst
        holds them, dropped, through the pointwise ops after them, rounded."""
        kb, stile, values, drop, mm2 = self.kb, blk.stile, self.values, self.drop, self.mm2
        tile, ld, c0 = self._tile(blk, j0)
        with kb.for_(blk.m, "r") as r:
            row = kb.let(r * self.ld, "sr")
            src = kb.let(r * ld + c0, "sc") if blk.scores is not None else row
            if blk.scores is None:
                mr = kb.let(blk.rmax[r], "mr")
                safe = kb.let(ir.select(mr.eq(-math.inf), ZERO, mr), "ms")
            inv = kb.let(inverse_sum(blk.rsum[r], self.inf_as_zero), "iv")
            keep = self._kept(blk, kb.let(blk.i0 + r, "i"), j0, n_) if drop else None
            with kb.for_(n_, "jj") as jj:
                # (kept scores hold exp(s - max) already: _exp_rows)
                e = tile[src + jj] if blk.scores is not None else ir.call("exp_le0_f32", tile[src + jj] - safe)
                p = as_stored(e * inv, self.p_dt)
                if drop:
                    p = stored(ir.select(keep(jj), p * self.dparams[1], 0.0), drop.outputs[0].dtype)
                if self.p_chain:
                    with values.binding({self.probs.id: p}):
                        p = values.at(mm2.inputs[0].id, mm2.inputs[0], list(blk.bivars) + [blk.i0 + r, j0 + jj],
                                      self.sshape)
                if self.p_round is not None:
                    p = self.p_round(ir.f32(p))
                if self.pv_bf16:   # bf16 values: their bits, exactly (a rounded value's own bits)
                    kb.emit(blk.ptile.store(row + jj, bits(p)))
                else:
                    kb.emit(stile.store(row + jj, ir.f32(p)))

    def _pv(self, blk, kv, j0, n_) -> None:
        """O_blk += P V_blk of the key block kv (keys j0.., n_ of them)."""
        bf16 = self.pv_bf16
        if blk.vpan is not None:   # V's panels of this key block
            self.kb.let(ir.call("gemm_bf16_packed", 0, blk.m, self.dv, n_, blk.ptile.buf, blk.ptile.at(0), self.ld,
                                blk.vpan.buf, blk.vpan.at(kv * self.perv), (self.dv + 31) // 32, 0, 1.0, blk.acc.buf,
                                blk.acc.at(0), self.dv), "st")
            return
        v = gemm_block(self.kb, self.v, blk.bivars, j0, n_, 0, self.dv, self.bn * self.dv, self.parallel, bf16)
        gemm(self.kb, tile_operand(blk.ptile if bf16 else blk.stile, self.ld), v, blk.m, self.dv, n_, 1.0, blk.acc,
             self.dv, bf16)

    def _store_rows(self, blk) -> None:
        """O / sum into the output (through its epilogue), and the SoftMax's stats
        (max + log(sum)) when the partition writes them."""
        kb, sm, dv, inf_as_zero = self.kb, self.sm, self.dv, self.inf_as_zero
        stats = self.local[sm.outputs[1].id] if len(sm.outputs) > 1 else None
        with kb.for_(blk.m, "r") as r:
            i = kb.let(blk.i0 + r, "i")
            if stats is not None:   # max + log(sum): NaN for a row all -inf (as the reference), -inf if inf_as_zero
                mr = kb.let(blk.rmax[r], "mr")
                lse = ir.select(mr.eq(-math.inf), ir.const(-math.inf if inf_as_zero else math.nan, "f32"),
                                mr + ir.call("np.log", blk.rsum[r]))
                kb.emit(stats.store_nd(list(blk.bivars) + [i, None], lse))
            inv = kb.let(inverse_sum(blk.rsum[r], inf_as_zero), "iv") if not self.two_pass else None
            with kb.for_(dv, "c") as c:
                o = blk.acc[r * dv + c]
                kb.emit(self.store(list(blk.bivars) + [i, c], o * inv if inv is not None else o))


def _causal_pattern(ops, sm):
    """(the Select, the GreaterEqual) of an implicit causal mask on the SoftMax's src
    (Select(GreaterEqual(row [+ a] [- b], col), x, fill), the fill per tensor), else None."""
    producer = {t.id: o for o in ops for t in o.outputs}
    sel = producer.get(sm.inputs[0].id)
    if sel is None or sel.kind != "Select" or sel.inputs[2].id in producer or \
            any(d != 1 for d in sel.inputs[2].shape):
        return None
    ge = producer.get(sel.inputs[0].id)
    if ge is None or ge.kind != "GreaterEqual" or not _gen_index(producer.get(ge.inputs[1].id), 1):
        return None
    o = producer.get(ge.inputs[0].id)
    while o is not None and o.kind in ("Add", "Subtract"):   # row + a - b: increasing in the row
        prods = [producer.get(t.id) for t in o.inputs]
        if o.kind == "Subtract" and prods[1] is not None or o.kind == "Add" and all(p is not None for p in prods):
            return None
        if any(d != 1 for t, p in zip(o.inputs, prods) if p is None for d in t.shape):
            return None
        o = next(p for p in prods if p is not None) if any(prods) else None
    return (sel, ge) if _gen_index(o, 0) else None


def _causal_blocks(kb, causal, local, values, bivars, last_row, bn, kt, skv):
    """The key blocks the query block must visit: all ``kt``, or, under an implicit
    causal mask (``causal``: _causal_pattern's match, a per-tensor fill that is
    -inf at run time), those left of the last row's diagonal (the keys past it
    have probability 0 in every row)."""
    if causal is None:
        return kt
    sel, ge = causal
    shape = tuple(ge.inputs[0].shape)
    diag = kb.let(values.at(ge.inputs[0].id, ge.inputs[0], list(bivars) + [last_row, ir.const(0)], shape), "dg")
    fill = local[sel.inputs[2].id].load_nd([None] * len(sel.inputs[2].shape))
    # keys j <= diag are kept in some row of the block; blocks past them are skipped
    upto = kb.let(ir.call("min", skv, ir.call("max", 0, diag + 1)), "kj")
    return kb.let(ir.select(fill.eq(-math.inf), (upto + (bn - 1)) // bn, ir.const(kt)), "kt")


def _computed_from(ops, t, op) -> bool:
    """Whether tensor ``t`` is computed (within ``ops``) from an output of ``op``."""
    producer = {x.id: o for o in ops for x in o.outputs}
    stack, seen = [t.id], set()
    while stack:
        o = producer.get(stack.pop())
        if o is None or o.id in seen:
            continue
        if o.id == op.id:
            return True
        seen.add(o.id)
        stack.extend(x.id for x in o.inputs)
    return False


def _gen_index(op, last) -> bool:
    """``op`` is a GenIndex over the rows (last=0) or the columns (last=1) of its dst."""
    return op is not None and op.kind == "GenIndex" and \
        op.attr("axis") % len(op.outputs[0].shape) == len(op.outputs[0].shape) - 2 + last


__all__ = ["lower_attention", "REORDERS", "BM", "BM_WIDE", "BN", "BN_WIDE", "BM_PACKED", "PANELS_MAX", "SCORES_MAX", "BQ", "BK"]
