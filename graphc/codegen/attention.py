"""Scaled dot-product attention as one flash-style kernel (the ``attention``
plan of passes/attention_plan.py: MatMul Q@K^T -> scale/mask ops -> SoftMax -> MatMul @V).

The kernel runs ``prange`` over (batch x heads) x blocks of BM query rows.  For
each block it walks the keys in blocks of BN:

* S = Q_blk @ K_blk^T into a BM x BN f32 tile (``gemm_f32``; an f32 operand
  with a unit stride is read in place, any other packed to f32 through
  ``load_nd``, bf16/f16 widened there);
* the ops between the first MatMul and the SoftMax (scale, explicit mask,
  implicit causal mask from GenIndex/GreaterEqual/Select, ...) are computed on
  the tile as the expressions fusion builds (graphc/codegen/fusion.py's
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

Reshapes and transposes of the kernel's inputs (Q, K, V, mask, scale) are views
(:func:`view_strides`): the same buffer read with other strides.

Q, K and V may be computed (sdpa_with_compressed_kv.md's DynamicDequantize of
int8/int4 K/V with grouped scales and zero points, sdpa_quantized.md's
Dequantize of fp8/int8 Q/K/V, TypeCasts): they are PrologueRefs, so the tile
packing loop computes each element through ``load_nd`` (the fusion engine's
``Values``; a per-group scale read at the index divided by the group) and no
dequantized copy exists.  A reshape/transpose after the dequantization is a
:class:`_Reindexed` (the view's index mapped to the computed tensor's index).
Since every query block packs the K/V tiles again, query blocks grow (up to
``BM_PACKED`` rows) while every thread still has a task.  Pointwise ops on the
probabilities (quantized SDPA's Quantize -> Dequantize) need the normalised
probabilities: the two-pass sweep computes them; pointwise ops after the second
MatMul (TypeCast, a Quantize) apply where the output is stored.
"""
from __future__ import annotations

import math
from dataclasses import replace

from . import ir, rules
from .helpers import use_helper
from .fused_values import PrologueRef, Values
from .gemm import Matrix, direct, fpmath_rounding, pack
from .kernel import NUM_THREADS, ArrayRef, as_stored, is_narrow_float, worth_parallel
from .loops import aligned, linear, unravel
from .rules.misc import dropout_keep, dropout_params, philox_words
from ..types import DataType, LogicalTensor, dense_strides
from ..views import view_strides

#: query rows per block (the rows of a tile: one task of the parallel loop)
BM = 64
#: keys per block (the columns of the score tile)
BN = 128
#: most query rows per block when K or V is computed (dequantized) while packed:
#: every query block packs the K/V tiles again, so blocks grow while there are
#: tasks for every thread
BM_PACKED = 256

REORDERS = ("StaticReshape", "StaticTranspose")

# -- views --------------------------------------------------------------------------------
def _view(ref, lt, strides) -> ArrayRef:
    """``ref``'s buffer seen as tensor ``lt`` (its shape) with ``strides``."""
    return ArrayRef(ref.name, LogicalTensor(lt.id, ref.dtype, tuple(lt.shape), tuple(strides)))


class _Reindexed:
    """A reorder's dst whose src is computed (a dequantized K/V: a PrologueRef of
    dense strides), read at a multi-index: ``strides`` (the view's, over the
    src's dense layout) map it to the src's multi-index, each src dim taken
    from the dst dim that walks it alone, else from the offset the dst dims
    make (a merged or split dim: a division and a remainder, each only where
    needed)."""

    def __init__(self, src, lt, strides):
        self.src, self.lt, self.strides = src, lt, tuple(strides)

    dtype = property(lambda self: self.lt.dtype)
    shape = property(lambda self: self.lt.shape)

    def load_nd(self, ivars):
        shape, dense = tuple(self.src.shape), dense_strides(tuple(self.src.shape))
        dims = [(v, n, s) for v, n, s in zip(ivars, self.shape, self.strides) if v is not None and n != 1 and s]
        out = []
        for n, st in zip(shape, dense):
            if n == 1:
                out.append(None)
                continue
            alone = [v for v, m, s in dims if m == n and s == st]
            if alone:
                out.append(alone[0])
                continue
            span = st * n   # dst dims stepping by multiples of it do not move this dim
            part = [(v, m, s) for v, m, s in dims if s % span]
            off = linear([v for v, _, _ in part], [s for _, _, s in part])
            top = sum((m - 1) * s for _, m, s in part)
            if any(s % st for _, _, s in part):
                off = off // st
                top //= st
            out.append(off % n if top >= n else off)
        return self.src.load_nd(out)


class _IndexRef:
    """GenIndex's dst, read at a multi-index: the index along its axis."""

    def __init__(self, lt, axis):
        self.lt, self.axis = lt, axis

    dtype = property(lambda self: self.lt.dtype)
    shape = property(lambda self: self.lt.shape)

    def load_nd(self, ivars):
        v = ivars[self.axis]
        return v if v is not None else ir.const(0)


# -- the kernel ------------------------------------------------------------------------------
def _rounding(mm, port):
    """How the MatMul's fpmath_mode rounds its input ``port`` (an f32 one), or None."""
    return fpmath_rounding(mm) if mm.inputs[port].dtype is DataType.f32 else None


def _matrix(ref, transpose, batch, rounding=None) -> Matrix:
    """The matrix (rows x cols of the MatMul's view) of a >= 2-D operand, its batch
    dims broadcast into ``batch``; ``rounding``: fpmath_mode's, applied as it is packed."""
    shape, strides = ref.shape, ref.strides
    lead = tuple(shape[:-2])
    rows, cols = (shape[-1], shape[-2]) if transpose else (shape[-2], shape[-1])
    st = (strides[-1], strides[-2]) if transpose else (strides[-2], strides[-1])

    def index(bv, r, c):
        return aligned(bv, batch, lead) + ([c, r] if transpose else [r, c])

    def base(bv):
        return linear(aligned(bv, batch, lead), strides[:-2])
    return Matrix(ref, rows, cols, index, any(d != 1 for d in lead), st, base, rounding)


def _block(kb, mat, bivars, r0, nr, c0, nc, size, parallel):
    """(buffer, offset, leading dim, transposed) of rows r0.. x cols c0.. of ``mat``:
    in place when BLAS can read it, else packed into an f32 panel (row-major, or
    column-major when the matrix's rows are its contiguous dim)."""
    d = direct(mat)
    if d is not None:
        ta, ld = d
        rs, cs = mat.strides
        return mat.ref.buf, linear([r0, c0], [rs, cs], mat.base(bivars)), ld, ta
    rs, cs = mat.strides if mat.strides is not None else (1, 1)
    if abs(rs) < abs(cs):
        # the rows run along memory (K read as K^T, a dequantized one): packed by
        # columns, so that the loads (and the dequantization) go along memory
        swapped = replace(mat, rows=mat.cols, cols=mat.rows, index=lambda bv, r, c: mat.index(bv, c, r),
                          strides=(cs, rs))
        panel = pack(kb, swapped, bivars, c0, nc, r0, nr, size, parallel)
        return panel.buf, panel.at(0), nr, 1
    panel = pack(kb, mat, bivars, r0, nr, c0, nc, size, parallel)
    return panel.buf, panel.at(0), nc, 0


def lower_attention(kb, ops, refs, plan) -> None:
    """Emit the attention partition ``ops`` (plan.shape "attention") into ``kb``."""
    if not any(o.kind == "SoftMax" for o in ops):
        return lower_attention_backward(kb, ops, refs, plan)
    byid = {o.id: o for o in ops}
    mm1, sm, mm2 = (byid[i] for i in plan.anchors)
    drop = next((o for o in ops if o.kind == "Dropout"), None)
    local = dict(refs)
    values = Values(ops, local, kb)
    _prologue_views(ops, local, values, plan.prologue)
    for o in ops:
        if o.kind == "GenIndex":
            t = o.outputs[0]
            local[t.id] = _IndexRef(t, o.attr("axis") % len(t.shape))
    operands = (mm1.inputs[0], mm1.inputs[1], mm2.inputs[1])
    for t in operands:   # Q/K/V computed (dequantized) while their tiles are packed
        if t.id not in local:
            local[t.id] = PrologueRef(t, values)

    score = mm1.outputs[0]
    sshape = tuple(score.shape)
    batch = sshape[:-2]
    sq, skv = sshape[-2], sshape[-1]
    q = _matrix(local[mm1.inputs[0].id], mm1.attr("transpose_a"), batch, _rounding(mm1, 0))
    k = _matrix(local[mm1.inputs[1].id], mm1.attr("transpose_b"), batch, _rounding(mm1, 1))
    v = _matrix(local[mm2.inputs[1].id], mm2.attr("transpose_b"), batch, _rounding(mm2, 1))
    d, dv = q.cols, v.cols
    p_dt = sm.outputs[0].dtype
    probs = (drop or sm).outputs[0]
    p_chain = mm2.inputs[0].id != probs.id   # pointwise ops on the probabilities (Quantize -> Dequantize)
    p_round = _rounding(mm2, 0)              # fpmath_mode rounds the (normalised) f32 probabilities
    two_pass = is_narrow_float(p_dt) or p_chain or p_round is not None
    inf_as_zero = sm.attr("mode") == "inf_as_zero"
    store = _output_store(ops, local, plan.epilogue, mm2.outputs[0])

    nbatch = math.prod(batch)
    bm, bn = min(BM, sq), min(BN, skv)
    if any(not isinstance(local[t.id], ArrayRef) for t in operands[1:]):
        while 2 * bm <= BM_PACKED and bm < sq and nbatch * -(-sq // (2 * bm)) >= NUM_THREADS:
            bm *= 2
        bm = min(bm, sq)
    mt, kt = -(-sq // bm), -(-skv // bn)
    parallel = nbatch * mt > 1 and worth_parallel(nbatch * sq * skv * (d + dv) // 8)
    use_helper(kb, "attn_exp_row")   # (after exp_le0_f32, which it calls)
    ninf = ir.const(-math.inf, "f32")
    dparams = dropout_params(kb, *(local[t.id] for t in drop.inputs[1:])) if drop else None

    with kb.for_(nbatch * mt, "t", parallel) as t:
        tb = kb.let(t // mt, "tb")
        i0 = kb.let((t % mt) * bm, "i0")
        m_ = kb.let(ir.call("min", bm, sq - i0), "m")
        bivars = unravel(kb, tb, batch) if batch else []
        qbuf, qoff, ldq, tq = _block(kb, q, bivars, i0, m_, 0, d, bm * d, parallel)
        stile = kb.scratch(bm * bn, "f32", parallel, prefix="stile")
        acc = kb.scratch(bm * dv, "f32", parallel, prefix="oacc")
        rmax = kb.scratch(bm, "f32", parallel, prefix="rmax")
        rsum = kb.scratch(bm, "f32", parallel, prefix="rsum")
        words = kb.scratch(4 * (bn // 4 + 2), "int", parallel, prefix="rw") if drop else None   # 32-bit words

        def kept(i, j0, n_):
            return _kept(kb, words, dparams, (tb * sq + i) * skv + j0, n_)
        with kb.for_(m_, "r") as r:
            kb.emit(rmax.store(r, ninf))
            kb.emit(rsum.store(r, ir.const(0.0, "f32")))
            with kb.for_(dv, "c") as c:
                kb.emit(acc.store(r * dv + c, ir.const(0.0, "f32")))

        j0_ = [None]   # the key block scores() is at

        def scores(kv, per_row=None):
            """The tile's scores: S = Q K^T, then the ops up to the SoftMax, and
            ``per_row(r, n, mx)`` after each row with its max ``mx``; returns (j0, n)
            of the key block."""
            j0 = kb.let(kv * bn, "j0")
            j0_[0] = j0
            n_ = kb.let(ir.call("min", bn, skv - j0), "n")
            kbuf, koff, ldk, tk = _block(kb, k, bivars, 0, d, j0, n_, d * bn, parallel)
            kb.let(ir.call("gemm_f32", tq, tk, m_, n_, d, qbuf, qoff, ldq, kbuf, koff, ldk, 0.0,
                           stile.buf, stile.at(0), bn), "st")
            with kb.for_(m_, "r") as r:
                row = kb.let(r * bn, "sr")
                i = kb.let(i0 + r, "i")
                mx = kb.var(ninf, "mx") if per_row else None
                with kb.for_(n_, "jj") as jj:
                    raw = stile[row + jj]
                    values.bound = {score.id: as_stored(raw, score.dtype) if is_narrow_float(score.dtype) else raw}
                    try:
                        s = kb.let(ir.f32(values.at(sm.inputs[0].id, sm.inputs[0], list(bivars) + [i, j0 + jj],
                                                    sshape)), "sv")
                    finally:
                        values.bound = {}
                    kb.emit(stile.store(row + jj, s))
                    if per_row:
                        kb.assign(mx, ir.select(s > mx, s, mx))
                if per_row:
                    per_row(r, n_, mx)
            return j0, n_

        def update_stats(r, n_, mx, rescale):
            """Row r's running max and sum from the tile's row of max ``mx`` (left
            holding exp(s - max))."""
            row = kb.let(r * bn, "sr")
            old = kb.let(rmax[r], "mo")
            new = kb.let(ir.select(mx > old, mx, old), "mn")
            # a row masked so far (max -inf) counts from 0: its exps are 0, not NaN
            safe = kb.let(ir.select(new.eq(-math.inf), ir.const(0.0, "f32"), new), "ms")
            alpha = kb.let(ir.call("exp_le0_f32", old - safe), "al")
            part = kb.let(ir.call("attn_exp_row", stile.buf, stile.at(row), n_, safe, dt="f32"), "ps")
            kb.emit(rmax.store(r, new))
            kb.emit(rsum.store(r, rsum[r] * alpha + part))
            if drop and rescale:   # the row's sum counts every key; @V sees the kept ones scaled
                keep = kept(kb.let(i0 + r, "i"), j0_[0], n_)
                with kb.for_(n_, "jj") as jj:
                    kb.emit(stile.store(row + jj, ir.select(keep(jj), stile[row + jj] * ir.f32(dparams[1]),
                                                            ir.const(0.0, "f32"))))
            if rescale:
                with kb.if_(alpha < 1.0):
                    with kb.for_(dv, "c") as c:
                        kb.emit(acc.store(r * dv + c, acc[r * dv + c] * alpha))

        def pv(j0, n_):
            vbuf, voff, ldv, tv = _block(kb, v, bivars, j0, n_, 0, dv, bn * dv, parallel)
            kb.let(ir.call("gemm_f32", 0, tv, m_, dv, n_, stile.buf, stile.at(0), bn, vbuf, voff, ldv, 1.0,
                           acc.buf, acc.at(0), dv), "st")

        kt_run = _causal_blocks(kb, ops, local, values, sm, bivars, i0 + m_ - 1, bn, kt, skv)
        if not two_pass:
            with kb.for_(kt_run, "kv") as kv:
                j0, n_ = scores(kv, lambda r, n_, mx: update_stats(r, n_, mx, True))
                pv(j0, n_)
        else:
            with kb.for_(kt_run, "kv") as kv:
                scores(kv, lambda r, n_, mx: update_stats(r, n_, mx, False))
            with kb.for_(kt_run, "kv") as kv:
                j0, n_ = scores(kv)
                with kb.for_(m_, "r") as r:
                    row = kb.let(r * bn, "sr")
                    mr = kb.let(rmax[r], "mr")
                    safe = kb.let(ir.select(mr.eq(-math.inf), ir.const(0.0, "f32"), mr), "ms")
                    inv = kb.let(_inverse(rsum[r], inf_as_zero), "iv")
                    keep = kept(kb.let(i0 + r, "i"), j0, n_) if drop else None
                    with kb.for_(n_, "jj") as jj:
                        p = as_stored(ir.call("exp_le0_f32", stile[row + jj] - safe) * inv, p_dt)
                        if drop:
                            p = ir.select(keep(jj), p * dparams[1], 0.0)
                            if is_narrow_float(drop.outputs[0].dtype):
                                p = as_stored(p, drop.outputs[0].dtype)
                        if p_chain:
                            values.bound = {probs.id: p}
                            try:
                                p = values.at(mm2.inputs[0].id, mm2.inputs[0], list(bivars) + [i0 + r, j0 + jj],
                                              sshape)
                            finally:
                                values.bound = {}
                        if p_round is not None:
                            p = p_round(ir.f32(p))
                        kb.emit(stile.store(row + jj, ir.f32(p)))
                pv(j0, n_)
        stats = local[sm.outputs[1].id] if len(sm.outputs) > 1 else None
        with kb.for_(m_, "r") as r:
            i = kb.let(i0 + r, "i")
            if stats is not None:   # max + log(sum): NaN for a row all -inf (as the reference), -inf if inf_as_zero
                mr = kb.let(rmax[r], "mr")
                lse = ir.select(mr.eq(-math.inf), ir.const(-math.inf if inf_as_zero else math.nan, "f32"),
                                mr + ir.call("np.log", rsum[r]))
                kb.emit(stats.store_nd(list(bivars) + [i, None], lse))
            inv = kb.let(_inverse(rsum[r], inf_as_zero), "iv") if not two_pass else None
            with kb.for_(dv, "c") as c:
                o = acc[r * dv + c]
                kb.emit(store(list(bivars) + [i, c], o * inv if inv is not None else o))
    kb.ret(-1)


def _kept(kb, words, dparams, e0, n_):
    """keep(jj): whether a Dropout of params ``dparams`` keeps element e0 + jj of its
    src (row-major), for jj < n_: the Philox words of those elements go to the
    scratch ``words`` first (the Dropout op's own scheme, graphc/ops/misc.py)."""
    e0 = kb.let(e0, "e0")
    first = kb.let(e0 // 4, "fb")
    philox_words(kb, words.store, first, (e0 + n_ + 3) // 4 - first, dparams[2], dparams[3])
    skip = kb.let(e0 - first * 4, "sk")
    return lambda jj: dropout_keep(words[skip + jj], dparams[0])


#: query rows and keys per block of the backward kernel
BQ, BK = 64, 64


def lower_attention_backward(kb, ops, refs, plan) -> None:
    """sdpa.md's training backward (the attention plan of
    passes/attention_plan.py's ``_backward_plan``) as one flash-style kernel:

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
    their buffers, reorders after dQ, dK, dV the strides they are stored with."""
    byid = {o.id: o for o in ops}
    qk, dpm, dvm, dqm, dkm, rsum = (byid[i] for i in plan.anchors[:6])
    local = dict(refs)
    values = Values(ops, local)
    _prologue_views(ops, local, values, plan.prologue)   # (4-D GQA: Q, K, ... reshaped to 5-D)
    score = qk.outputs[0]
    sshape = tuple(score.shape)
    batch = sshape[:-2]
    sq, skv = sshape[-2], sshape[-1]
    nbatch = math.prod(batch)
    q = _matrix(local[qk.inputs[0].id], qk.attr("transpose_a"), batch)
    k = _matrix(local[qk.inputs[1].id], qk.attr("transpose_b"), batch)
    do = _matrix(local[dpm.inputs[0].id], dpm.attr("transpose_a"), batch)
    v = _matrix(local[dpm.inputs[1].id], dpm.attr("transpose_b"), batch)
    do_b = _matrix(local[dvm.inputs[1].id], dvm.attr("transpose_b"), batch)
    q_b = _matrix(local[dkm.inputs[1].id], dkm.attr("transpose_b"), batch)
    k_b = _matrix(local[dqm.inputs[1].id], dqm.attr("transpose_b"), batch)
    d, dvd = q.cols, do.cols
    # GQA/MQA: dK and dV are ReduceSums of the dK/dV MatMuls over the heads sharing K/V
    sums = {m.id: next((byid[i] for i in plan.anchors[6:] if byid[i].inputs[0].id == m.outputs[0].id), None)
            for m in (dkm, dvm)}
    grads = {dqm.outputs[0].id} | {(sums[m.id] or m).outputs[0].id for m in (dkm, dvm)}
    extra = [t for o in ops for t in o.outputs if plan.roles.get(t.id) == "written" and t.id not in grads
             and o.id not in plan.epilogue]
    drops = [o for o in ops if o.kind == "Dropout"]
    dparams = {}
    for o in drops:
        key = tuple(t.id for t in o.inputs[1:])
        if key not in dparams:
            dparams[key] = dropout_params(kb, *(local[t] for t in key))
    red, r_out = rsum.inputs[0], rsum.outputs[0]
    # the dK/dV sweep's tasks: (batch dims but the heads summed) x key blocks
    sum_axes = sorted({a % len(sshape) for a in sums[dkm.id].attr("axes")}) if sums[dkm.id] is not None else []
    outer = [a for a in range(len(batch)) if a not in sum_axes]
    nouter, ngroup = math.prod(batch[a] for a in outer), math.prod(batch[a] for a in sum_axes)
    parallel = worth_parallel(nbatch * sq * skv * (2 * d + 2 * dvd) // 8)
    bq, bk = min(BQ, sq), min(BK, skv)
    while parallel and bk > 16 and nouter * -(-skv // bk) < NUM_THREADS:   # (MQA: one K/V head)
        bk //= 2
    nqb, nkb = -(-sq // bq), -(-skv // bk)
    dsum = kb.scratch(nbatch * sq, "f32", False, prefix="dsum")
    with kb.for_(nbatch * sq, "t", parallel and nbatch * sq > 1) as t:
        bivars = unravel(kb, kb.let(t // sq, "tb"), batch) if batch else []
        i = kb.let(t % sq, "i")
        acc = kb.var(ir.const(0.0, "f32"), "ac")
        with kb.for_(red.shape[-1], "c") as c:
            kb.assign(acc, acc + ir.f32(values.at(red.id, red, list(bivars) + [i, c], tuple(red.shape))))
        kb.emit(dsum.store(t, as_stored(acc, r_out.dtype) if is_narrow_float(r_out.dtype) else acc))

    def tile(bivars, tb, i0, m_, j0, n_, stile, ptile, words, first_sweep):
        """S and dP of the tile, then per element the dV MatMul's src into ``stile``
        (first sweep) and the dQ/dK MatMuls' src into ``ptile``."""
        for mat_a, mat_b, out, ld in ((q, k, stile, d), (do, v, ptile, dvd)):
            abuf, aoff, lda, ta = _block(kb, mat_a, bivars, i0, m_, 0, ld, bq * ld, parallel)
            bbuf, boff, ldb, tb_ = _block(kb, mat_b, bivars, 0, ld, j0, n_, ld * bk, parallel)
            kb.let(ir.call("gemm_f32", ta, tb_, m_, n_, ld, abuf, aoff, lda, bbuf, boff, ldb, 0.0,
                           out.buf, out.at(0), bk), "st")
        with kb.for_(m_, "r") as r:
            row = kb.let(r * bk, "sr")
            i = kb.let(i0 + r, "i")
            keeps = {key: _kept(kb, words[key], prm, (tb * sq + i) * skv + j0, n_) for key, prm in dparams.items()}
            dval = kb.let(dsum[tb * sq + i], "dd")
            with kb.for_(n_, "jj") as jj:
                ivars = list(bivars) + [i, j0 + jj]
                s_, dp_ = stile[row + jj], ptile[row + jj]
                values.bound = {score.id: as_stored(s_, score.dtype) if is_narrow_float(score.dtype) else s_,
                                dpm.outputs[0].id: dp_, r_out.id: dval}
                try:
                    for o in drops:
                        key = tuple(t.id for t in o.inputs[1:])
                        x = values.at(o.inputs[0].id, o.inputs[0], ivars, sshape)
                        y = ir.select(keeps[key](jj), x * dparams[key][1], 0.0)
                        values.bound[o.outputs[0].id] = \
                            as_stored(y, o.outputs[0].dtype) if is_narrow_float(o.outputs[0].dtype) else y
                    pv = kb.let(ir.f32(values.at(dvm.inputs[0].id, dvm.inputs[0], ivars, sshape)), "pv") \
                        if first_sweep else None
                    dsv = kb.let(ir.f32(values.at(dqm.inputs[0].id, dqm.inputs[0], ivars, sshape)), "dsv")
                    if first_sweep:
                        for t in extra:
                            kb.emit(local[t.id].store_nd(ivars, values.at(t.id, t, ivars, sshape)))
                finally:
                    values.bound = {}
                if first_sweep:
                    kb.emit(stile.store(row + jj, pv))
                kb.emit(ptile.store(row + jj, dsv))

    def scratches():
        stile = kb.scratch(bq * bk, "f32", parallel, prefix="stile")
        ptile = kb.scratch(bq * bk, "f32", parallel, prefix="ptile")
        words = {key: kb.scratch(4 * (bk // 4 + 2), "int", parallel, prefix="rw") for key in dparams}
        return stile, ptile, words

    def task(t, nblk, blk, size):
        """(batch index, its ivars, first row/key, count) of task ``t`` over blocks of ``blk``."""
        tb = kb.let(t // nblk, "tb")
        start = kb.let((t % nblk) * blk, "b0")
        return tb, (unravel(kb, tb, batch) if batch else []), start, kb.let(ir.call("min", blk, size - start), "nb")

    def accumulators(*sizes):
        accs = [kb.scratch(n, "f32", parallel, prefix="gacc") for n in sizes]
        for acc, n in zip(accs, sizes):
            with kb.for_(n, "z") as z:
                kb.emit(acc.store(z, ir.const(0.0, "f32")))
        return accs

    # sweep 1: dK and dV of a key block of one K/V head (GQA/MQA: summed over the
    # query heads of its group, the ReduceSum's axes, within the task)
    # a narrow dK/dV MatMul dst rounds each head's part before the ReduceSum adds them
    per_head = [m for m in (dvm, dkm) if sums[m.id] is not None and is_narrow_float(m.outputs[0].dtype)]
    bstrides = dense_strides(batch)
    with kb.for_(nouter * nkb, "t", parallel and nouter * nkb > 1) as t:
        to = kb.let(t // nkb, "to")
        j0 = kb.let((t % nkb) * bk, "b0")
        n_ = kb.let(ir.call("min", bk, skv - j0), "nb")
        ovars = unravel(kb, to, [batch[a] for a in outer]) if outer else []
        stile, ptile, words = scratches()
        dk_acc, dv_acc = accumulators(bk * d, bk * dvd)
        head = {m.id: kb.scratch(bk * w, "f32", parallel, prefix="hacc") for m, w in ((dvm, dvd), (dkm, d))
                if m in per_head}

        def key_block(gvars):
            """One query head's part: its query blocks' P^T dO and dS^T Q."""
            bivars = [None] * len(batch)
            for a, v_ in zip(outer, ovars):
                bivars[a] = v_
            for a, v_ in zip(sum_axes, gvars):
                bivars[a] = v_
            tb = kb.let(linear(bivars, bstrides), "tb")
            parts = []
            for acc, mm, w in ((dv_acc, dvm, dvd), (dk_acc, dkm, d)):
                h = head.get(mm.id)
                if h is not None:
                    with kb.for_(n_ * w, "z") as z:
                        kb.emit(h.store(z, ir.const(0.0, "f32")))
                parts.append(h or acc)
            with kb.for_(nqb, "qb") as qb:
                i0 = kb.let(qb * bq, "i0")
                m_ = kb.let(ir.call("min", bq, sq - i0), "m")
                tile(bivars, tb, i0, m_, j0, n_, stile, ptile, words, True)
                for acc, mat, w, src in zip(parts, (do_b, q_b), (dvd, d), (stile, ptile)):
                    bbuf, boff, ldb, tb_ = _block(kb, mat, bivars, i0, m_, 0, w, bq * w, parallel)
                    kb.let(ir.call("gemm_f32", 1, tb_, n_, w, m_, src.buf, src.at(0), bk, bbuf, boff, ldb, 1.0,
                                   acc.buf, acc.at(0), w), "st")
            for acc, mm, w in ((dv_acc, dvm, dvd), (dk_acc, dkm, d)):
                h = head.get(mm.id)
                if h is not None:   # the head's dst as the MatMul rounds it, added up
                    with kb.for_(n_ * w, "z") as z:
                        kb.emit(acc.store(z, acc[z] + as_stored(h[z], mm.outputs[0].dtype)))
            return bivars
        if ngroup > 1:
            with kb.for_(ngroup, "g") as g:
                bivars = key_block(unravel(kb, g, [batch[a] for a in sum_axes]))
        else:
            bivars = key_block([None] * len(sum_axes))
        for a in sum_axes:   # the K/V head's index: the summed axes at 0
            bivars[a] = None
        for acc, mm, w in ((dv_acc, dvm, dvd), (dk_acc, dkm, d)):
            dst = sums[mm.id] or mm
            store = _output_store(ops, local, plan.epilogue, dst.outputs[0])
            oivars = list(bivars) if dst is mm or dst.attr("keep_dims") else [v_ for a, v_ in enumerate(bivars)
                                                                            if a not in sum_axes]
            with kb.for_(n_, "jj") as jj:
                with kb.for_(w, "c") as c:
                    kb.emit(store(oivars + [j0 + jj, c], acc[jj * w + c]))
    # sweep 2: dQ of a query block
    with kb.for_(nbatch * nqb, "t", parallel and nbatch * nqb > 1) as t:
        tb, bivars, i0, m_ = task(t, nqb, bq, sq)
        stile, ptile, words = scratches()
        (dq_acc,) = accumulators(bq * d)
        with kb.for_(nkb, "kv") as kv:
            j0 = kb.let(kv * bk, "j0")
            n_ = kb.let(ir.call("min", bk, skv - j0), "n")
            tile(bivars, tb, i0, m_, j0, n_, stile, ptile, words, False)
            kbuf, koff, ldk, tk = _block(kb, k_b, bivars, j0, n_, 0, d, bk * d, parallel)
            kb.let(ir.call("gemm_f32", 0, tk, m_, d, n_, ptile.buf, ptile.at(0), bk, kbuf, koff, ldk, 1.0,
                           dq_acc.buf, dq_acc.at(0), d), "st")
        store = _output_store(ops, local, plan.epilogue, dqm.outputs[0])
        with kb.for_(m_, "r") as r:
            with kb.for_(d, "c") as c:
                kb.emit(store(list(bivars) + [i0 + r, c], dq_acc[r * d + c]))
    kb.ret(-1)


def _causal_blocks(kb, ops, local, values, sm, bivars, last_row, bn, kt, skv):
    """The key blocks the query block must visit: all ``kt``, or, under an implicit
    causal mask (the SoftMax's src a Select(GreaterEqual(row [+ a] [- b], col), x,
    fill) with a per-tensor fill that is -inf at run time), those left of the
    last row's diagonal (the keys past it have probability 0 in every row)."""
    producer = {t.id: o for o in ops for t in o.outputs}
    sel = producer.get(sm.inputs[0].id)
    if sel is None or sel.kind != "Select" or sel.inputs[2].id in producer or \
            any(d != 1 for d in sel.inputs[2].shape):
        return kt
    ge = producer.get(sel.inputs[0].id)
    if ge is None or ge.kind != "GreaterEqual" or not _gen_index(producer.get(ge.inputs[1].id), 1):
        return kt
    o = producer.get(ge.inputs[0].id)
    while o is not None and o.kind in ("Add", "Subtract"):   # row + a - b: increasing in the row
        prods = [producer.get(t.id) for t in o.inputs]
        if o.kind == "Subtract" and prods[1] is not None or o.kind == "Add" and all(p is not None for p in prods):
            return kt
        if any(d != 1 for t, p in zip(o.inputs, prods) if p is None for d in t.shape):
            return kt
        o = next(p for p in prods if p is not None) if any(prods) else None
    if not _gen_index(o, 0):
        return kt
    shape = tuple(ge.inputs[0].shape)
    diag = kb.let(values.at(ge.inputs[0].id, ge.inputs[0], list(bivars) + [last_row, ir.const(0)], shape), "dg")
    fill = local[sel.inputs[2].id].load_nd([None] * len(sel.inputs[2].shape))
    # keys j <= diag are kept in some row of the block; blocks past them are skipped
    upto = kb.let(ir.call("min", skv, ir.call("max", 0, diag + 1)), "kj")
    return kb.let(ir.select(fill.eq(-math.inf), (upto + (bn - 1)) // bn, ir.const(kt)), "kt")


def _gen_index(op, last) -> bool:
    """``op`` is a GenIndex over the rows (last=0) or the columns (last=1) of its dst."""
    return op is not None and op.kind == "GenIndex" and \
        op.attr("axis") % len(op.outputs[0].shape) == len(op.outputs[0].shape) - 2 + last


def _inverse(s, inf_as_zero):
    return ir.select(s.eq(0.0), ir.const(0.0, "f32"), 1.0 / s) if inf_as_zero else 1.0 / s


def _prologue_views(ops, local, values, prologue):
    """The reorders ``prologue`` of the kernel's inputs as views of their buffers in
    ``local`` (of a computed K/V: a _Reindexed read of it)."""
    for o in ops:   # ops are in topological order
        if o.id in prologue:
            src = local.get(o.inputs[0].id) or PrologueRef(o.inputs[0], values)
            if isinstance(src, ArrayRef):
                local[o.outputs[0].id] = _view(src, o.outputs[0], view_strides(o, src.shape, src.strides))
            else:   # a reorder of a computed K/V (or of such a reorder)
                base = src.src if isinstance(src, _Reindexed) else src
                st = src.strides if isinstance(src, _Reindexed) else dense_strides(tuple(src.shape))
                local[o.outputs[0].id] = _Reindexed(base, o.outputs[0], view_strides(o, tuple(src.shape), st))


def _output_store(ops, local, epilogue, t):
    """store(ivars, value) of tensor ``t`` at its index, through the reorders and
    pointwise ops (TypeCasts, a Quantize) of ``epilogue`` after it into the
    partition's output."""
    chain = []
    while True:
        nxt = next((o for o in ops if o.id in epilogue and o.inputs[0].id == t.id), None)
        if nxt is None:
            break
        chain.append(nxt)
        t = nxt.outputs[0]
    first = chain[0].inputs[0] if chain else t
    final = t
    ref = local[final.id]
    shape, strides = tuple(final.shape), tuple(ref.strides)
    for o in reversed(chain):
        if o.kind in REORDERS:
            strides = view_strides(o, shape, strides, forward=False)
            shape = tuple(o.inputs[0].shape)
    out = _view(ref, first, strides)
    pointwise = [o for o in chain if o.kind not in REORDERS]

    def store(ivars, value):
        if is_narrow_float(first.dtype):
            value = as_stored(value, first.dtype)
        for o in pointwise:   # TypeCasts, a Quantize: each value as its tensor holds it
            value = rules.source(o, value)
            if is_narrow_float(o.outputs[0].dtype):
                value = as_stored(value, o.outputs[0].dtype)
        return out.store_nd(ivars, value)
    return store


__all__ = ["lower_attention", "REORDERS", "BM", "BN"]
