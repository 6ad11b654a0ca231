"""GroupNorm over channels-last memory: a reduction planner of its own (see
:class:`ChannelsLast`), taken when the channel dim has the smallest stride
(:func:`channels_innermost`); other layouts go through the general planner
(graphc.codegen.grouped.Nest).  It shares the general planner's chunk bound
(``MAX_CHUNKS``), its f32-then-f64 folding period (``FOLD_ROWS``) and its
clamped prange index (``clamp(i64(...))``)."""
from __future__ import annotations

import math
from contextlib import contextmanager

from . import ir
from .accumulators import FOLD_ROWS
from .kernel import plan_threads, worth_parallel
from .loops import clamp, i64, min_of, unravel
from .moments import inv_std
from .reduce_plan import MAX_CHUNKS


def channels_innermost(ref, ca: int) -> bool:
    """Whether the channel dim of ``ref`` (longer than 1) has a smaller stride than
    every other dim longer than 1 (channels-last memory), and ``ref`` is not empty."""
    shape, st = ref.shape, ref.strides
    return shape[ca] > 1 and 0 not in shape and any(d != 1 for i, d in enumerate(shape) if i != ca) and all(
        abs(st[ca]) < abs(st[i]) for i, d in enumerate(shape) if i != ca and d != 1)


class ChannelsLast:
    """GroupNorm whose channels are innermost in memory: each pass sweeps the
    positions (the dims but batch and channel) in memory order with the C
    channels as the vector lane.  Chunks of positions (of one batch item each)
    run in parallel.  One read of ``src`` gives both moments: per chunk and
    channel, blocks of FOLD_ROWS positions sum ``x - pivot`` and its square in
    f32 lanes (``pivot``: the chunk's running mean rounded to f32; for its first
    block, the mean of LEAD leading positions), each block folded in f64 into
    the chunk's running mean and M2 (Chan's formula); after the chunks, each group's mean and variance combine
    its chunks per channel, then its channels, the same way (in f64).  Then the
    normalizing pass with a per-channel scale and shift.  When the batch items
    alone keep the threads equally busy (or the kernel is serial), a chunk is a
    whole batch item and runs all of it in one loop, its normalizing pass
    sweeping the positions backward (what the statistics read last is in cache)."""

    #: positions whose mean is the first block's pivot
    LEAD = 4

    def __init__(self, kb, src, ca: int, groups: int):
        self.kb, self.src, self.ca, self.groups = kb, src, ca, groups
        self.N, self.C = src.shape[0], src.shape[ca]
        self.per = self.C // groups
        # the position dims, outermost in memory first
        self.pos = sorted((i for i in range(1, len(src.shape)) if i != ca), key=lambda i: -abs(src.strides[i]))
        self.pshape = [src.shape[i] for i in self.pos]
        self.S = math.prod(self.pshape)
        self.count = self.per * self.S
        self.par = worth_parallel(self.N * self.C * self.S)
        self.whole = not self.par or self.N % plan_threads() == 0 or self.N >= 8 * plan_threads()
        # position blocks per batch item
        self.B = 1 if self.whole else max(1, min(self.S, MAX_CHUNKS // self.N))
        self.K = self.N * self.B
        if self.B > 1:
            kb.road("position_blocks")

    def _bounds(self, b):
        """The first and past-the-last position of position block ``b`` of a batch item."""
        B, S = self.B, self.S
        return b * S // B, (b + 1) * S // B

    @contextmanager
    def _chunks(self):
        """A loop over the chunks (parallel when worth it); yields (chunk, batch index,
        first position, past the last)."""
        kb = self.kb
        with kb.for_(self.K, "k", self.par and self.K > 1) as raw:
            k = kb.let(clamp(i64(raw), self.K - 1), "k")
            n = kb.let(k // self.B, "n")
            lo, hi = (kb.let(v, nm) for v, nm in zip(self._bounds(k - n * self.B), ("lo", "hi")))
            yield k, n, lo, hi

    @contextmanager
    def _positions(self, n, lo, hi, backward=False):
        """A loop over positions lo..hi-1 (``backward``: hi-1 down to lo) and the channels;
        yields (index of the element, channel)."""
        kb = self.kb
        with kb.for_(hi, "p", start=lo) as p:
            pv = unravel(kb, lo + hi - 1 - p if backward else p, self.pshape)
            with kb.for_(self.C, "c") as c:
                iv = [None] * len(self.src.shape)
                iv[0], iv[self.ca] = n, c
                for i, v in zip(self.pos, pv):
                    iv[i] = v
                yield iv, c

    def _moments(self, k, n, lo, hi):
        """Chunk ``k``'s position count and each channel's running mean and M2 (at
        k * C + channel in ``self.mean`` and ``self.m2``, zero before)."""
        kb, C, src, mean, m2 = self.kb, self.C, self.src, self.mean, self.m2
        kb.store(self.cnt, k, ir.f64(hi - lo))
        pivot, s1, s2 = (kb.alloc(C, "f32", fill=0, prefix=p) for p in ("pivot", "dsum", "dsq"))
        lead = kb.let(min_of(hi, lo + self.LEAD), "lead")
        with self._positions(n, lo, lead) as (iv, c):
            kb.store(pivot, c, pivot[c] + src.load_nd(iv))
        with kb.for_(C, "c") as c:
            kb.store(pivot, c, pivot[c] / ir.f32(lead - lo))
        with kb.for_((hi - lo + (FOLD_ROWS - 1)) // FOLD_ROWS, "u") as u:
            p0 = kb.let(lo + u * FOLD_ROWS, "p")
            p1 = kb.let(min_of(hi, p0 + FOLD_ROWS), "p")
            with self._positions(n, p0, p1) as (iv, c):
                d = kb.let(src.load_nd(iv) - pivot[c], "d")
                kb.store(s1, c, s1[c] + d)
                kb.store(s2, c, s2[c] + d * d)
            # Chan: the block (nb positions) joins the na before it (no division per channel)
            nb, na = kb.let(ir.f64(p1 - p0), "nb"), kb.let(ir.f64(p0 - lo), "na")
            w, rnb = kb.let(nb / (na + nb), "w"), kb.let(1.0 / nb, "rnb")
            cross = kb.let(na * w, "cw")
            with kb.for_(C, "c") as c:
                at = kb.let(k * C + c, "at")
                t, ma = kb.let(ir.f64(s1[c]), "t"), kb.let(mean[at], "ma")
                delta = kb.let(ir.f64(pivot[c]) + t * rnb - ma, "dl")
                mk = kb.let(ma + delta * w, "mk")
                kb.store(mean, at, mk)
                kb.store(m2, at, m2[at] + (ir.f64(s2[c]) - t * t * rnb) + delta * delta * cross)
                kb.store(pivot, c, ir.f32(mk))
                kb.store(s1, c, ir.const(0.0, "f32"))
                kb.store(s2, c, ir.const(0.0, "f32"))

    def _per_group(self, op, n, gamma, beta, stat_outs):
        """Batch item ``n``'s group statistics (Chan, in f64: its chunks per channel with
        the channel as the vector lane, then the group's channels), stored in
        ``stat_outs``, and each channel's f32 mean, scale and shift."""
        kb, C, per, B, S = self.kb, self.C, self.per, self.B, self.S
        chm, chq = self.chm, self.chq
        with kb.for_(B, "b") as b, kb.for_(C, "c") as c:
            k = kb.let(n * B + b, "k")
            kb.store(chm, n * C + c, chm[n * C + c] + self.cnt[k] * self.mean[k * C + c])
        with kb.for_(C, "c") as c:
            kb.store(chm, n * C + c, chm[n * C + c] / S)
        with kb.for_(B, "b") as b, kb.for_(C, "c") as c:
            k, at = kb.let(n * B + b, "k"), kb.let(n * C + c, "at")
            dm = kb.let(self.mean[k * C + c] - chm[at], "dm")
            kb.store(chq, at, chq[at] + self.m2[k * C + c] + self.cnt[k] * dm * dm)
        with kb.for_(self.groups, "g") as g:
            tot = kb.var(ir.const(0.0), "tot")
            with kb.for_(per, "j") as j:
                kb.assign(tot, tot + chm[n * C + g * per + j])
            m = kb.let(tot / per, "m")
            kb.assign(tot, ir.const(0.0))
            with kb.for_(per, "j") as j:
                at = kb.let(n * C + g * per + j, "at")
                dm = kb.let(chm[at] - m, "dm")
                kb.assign(tot, tot + chq[at] + S * dm * dm)
            var = kb.let(ir.call("max", tot / self.count, 0.0), "var")
            m32 = kb.let(ir.f64(ir.f32(m)), "m32")
            inv = kb.let(ir.f64(ir.f32(inv_std(var, op.attr("epsilon")))), "inv")
            sh = kb.let(ir.f64(ir.f32((m32 - m) * inv)), "sh")
            for out, v in zip(stat_outs, (m, var)):
                kb.emit(out.store_nd([n, g], v))
            with kb.for_(per, "j") as j:
                c = kb.let(g * per + j, "c")
                a, b = inv, sh
                if gamma is not None:
                    gm = kb.let(ir.f64(gamma.load_nd([c])), "gm")
                    a, b = inv * gm, sh * gm + ir.f64(beta.load_nd([c]))
                at = kb.let(n * C + c, "at")
                kb.store(self.mc, at, ir.f32(m32))
                kb.store(self.scale, at, ir.f32(a))
                kb.store(self.shift, at, ir.f32(b))

    def emit(self, op, dst, gamma, beta, stat_outs):
        kb, C, N, K = self.kb, self.C, self.N, self.K
        # per chunk: positions; per chunk and channel: running mean and M2
        self.cnt = kb.alloc(K, "f64", prefix="cnt")
        self.mean, self.m2 = (kb.alloc(K * C, "f64", fill=0, prefix=p) for p in ("mean", "m2"))
        # per batch item and channel: mean and M2 over the positions (f64); the group
        # mean rounded to f32, scale and shift (f32)
        self.chm, self.chq = (kb.alloc(N * C, "f64", fill=0, prefix=p) for p in ("chm", "chq"))
        self.mc, self.scale, self.shift = (kb.alloc(N * C, "f32", prefix=p) for p in ("mc", "scale", "shift"))

        def normalize(n, lo, hi):
            # a whole batch item backward: the positions its statistics read last are the
            # likeliest still in cache (corpus gnorm 0.32 -> 0.27 ms); chunks of positions
            # (in cache whole) forward
            with self._positions(n, lo, hi, backward=self.whole) as (iv, c):
                at = n * C + c
                y = (self.src.load_nd(iv) - self.mc[at]) * self.scale[at] + self.shift[at]
                kb.emit(dst.store_nd(iv, y))

        if self.whole:
            with self._chunks() as (k, n, lo, hi):
                self._moments(k, n, lo, hi)
                self._per_group(op, n, gamma, beta, stat_outs)
                normalize(n, lo, hi)
            return
        with self._chunks() as (k, n, lo, hi):
            self._moments(k, n, lo, hi)
        with kb.for_(N, "n") as n:
            self._per_group(op, n, gamma, beta, stat_outs)
        with self._chunks() as (k, n, lo, hi):
            normalize(n, lo, hi)
