"""Sums to shapes: one pass over a tensor summing it into several outputs,
each keeping its own dims (numpy's broadcasting in reverse: AddBackward, the
gradient of a broadcast operand)."""
from __future__ import annotations

import math
from contextlib import ExitStack
from dataclasses import dataclass

from . import ir
from .elementwise import aligned_strides, collapse, emit_elementwise
from .fastmath import sum_helper
from .kernel import ArrayRef, KernelBuilder, plan_threads, worth_parallel
from .loops import let_array, linear, unravel
from ..types import DataType

def chunks() -> int:
    """Parallel work items a sum_to pass splits its work into: 2 per planned
    thread (graphc.codegen.kernel.plan_threads), for balance, 8 at least."""
    return max(8, 2 * plan_threads())


def dense(dims) -> list[int]:
    out, acc = [], 1
    for d in reversed(dims):
        out.append(acc)
        acc *= d
    return out[::-1]


def split_last(dims, strides, most: int = 8192, block: int = 4096):
    """Split a last dim longer than ``most`` into (n / f, f), f <= block, so that its
    rows can spread over threads; unchanged when n has no divisor in [block / 8, block]."""
    n = dims[-1]
    if n <= most:
        return dims, strides
    for f in range(block, block // 8 - 1, -1):
        if n % f == 0:
            return dims[:-1] + [n // f, f], [s[:-1] + [s[-1] * f, s[-1]] for s in strides]
    return dims, strides


def sum_to(kb: KernelBuilder, src: ArrayRef, outs) -> None:
    """Each of ``outs`` gets ``src`` summed over the dims it broadcasts along
    (numpy rules), accumulated in float64 (complex128 for c64) and rounded to
    float32, then to bf16/f16.  One pass over src serves every output whose
    scratch stays small; outputs equal to src are copies."""
    shape = src.shape
    if 0 in shape:
        for o in outs:
            emit_elementwise(kb, [o], [], lambda kb_, vals: [ir.const(0.0)])
        return
    arrs = [src, *outs]
    dims, strides = collapse(shape, [aligned_strides(a, shape) for a in arrs])
    if not dims:
        dims, strides = [1], [[0] for _ in arrs]
    dims, strides = split_last(dims, strides)
    total = math.prod(dims)
    par = worth_parallel(total)
    budget = max(total // 2, 1 << 16)
    pairs = list(zip(outs, strides[1:]))
    copies = [(o, s) for o, s in pairs if all(s)]
    reds = [(o, s) for o, s in pairs if not all(s)]
    plan = _SumPlan(dims, reds, par, budget)
    plans = [plan] if plan.fits or len(reds) < 2 else [_SumPlan(dims, [r], par, budget) for r in reds]
    for n, p in enumerate(plans):
        p.emit(kb, src, strides[0], copies if n == 0 else [])


@dataclass
class _Red:
    """A summed output of a _SumPlan pass: its accumulator spans the dims ``local``."""

    out: ArrayRef
    strides: list
    local: list
    size: int
    acc: ir.Expr
    part: ir.Expr | None
    row: ir.Expr | None = None


class _SumPlan:
    """One pass over src.  The outer dims kept by every summed output run in parallel
    (P); the others (Q) are walked inside each work item into small local
    accumulators; when P alone is too short to share out, Q is also cut into
    ``nch`` chunks whose partial sums a second loop adds up."""

    def __init__(self, dims, reds, par, budget):
        last = len(dims) - 1
        self.dims, self.reds, self.par, self.last = dims, reds, par, last
        self.P = [d for d in range(last) if all(s[d] for _, s in reds)]
        self.Q = [d for d in range(last) if d not in self.P]
        self.nP = math.prod(dims[d] for d in self.P)
        self.nQ = math.prod(dims[d] for d in self.Q)
        # per summed output: the dims its local accumulator spans (kept Q dims, and the last if kept)
        self.local = [[d for d in self.Q if s[d]] + ([last] if s[last] else []) for _, s in reds]
        self.size = [math.prod(dims[d] for d in loc) for loc in self.local]
        self.nch = 1
        if par and reds and self.nP < chunks():
            self.nch = min(self.nQ, -(-chunks() // self.nP))
        per_chunk = self.nP * sum(self.size)
        #: whether the partial sums of every chunk fit in the scratch budget; if not, fewer chunks
        self.fits = self.nch == 1 or per_chunk * self.nch <= budget
        if not self.fits:
            self.nch = max(1, budget // per_chunk)

    def emit(self, kb, src, ssrc, copies):
        dims, P, Q, nch = self.dims, self.P, self.Q, self.nch
        cplx = src.dtype is DataType.c64
        adt = "c128" if cplx else "f64"
        zero = ir.Expr("cast", ("c128", ir.const(0.0)), "c128") if cplx else ir.const(0.0)
        nw = self.nP * nch
        nth = min(nw, chunks()) if self.par else 1
        if nch > 1:
            kb.road("sum_to_chunks")
        reds = [_Red(o, s, loc, size,
                     ir.array(kb.fresh("acc"), adt) if size > 1 else ir.var(kb.fresh("acc"), adt),
                     ir.array(kb.fresh("part"), adt) if nch > 1 else None)
                for (o, s), loc, size in zip(self.reds, self.local, self.size)]
        for r in reds:
            if r.part is not None:
                let_array(kb, r.part, (nw, r.size))
        with kb.for_(nth, "chunk", nth > 1) as t:
            for r in reds:
                if r.size > 1:
                    let_array(kb, r.acc, r.size)
            with kb.for_((t + 1) * nw // nth, "w", start=t * nw // nth) as w:
                p, c = w, None
                if nch > 1:
                    p, c = kb.let(w // nch, "p"), kb.let(w % nch, "c")
                ip = unravel(kb, p, [dims[d] for d in P])
                for r in reds:
                    if r.size == 1:
                        kb.assign(r.acc, zero)
                    else:
                        with kb.for_(r.size, "l") as li:
                            kb.store(r.acc, ir.u64(li), zero)
                lo, hi = (c * self.nQ // nch, (c + 1) * self.nQ // nch) if c is not None else (0, self.nQ)
                with kb.for_(hi, "q", start=lo) as q:
                    iq = unravel(kb, q, [dims[d] for d in Q])
                    self._row(kb, src, ssrc, copies, reds, ip, iq, zero)
                for r in reds:
                    if r.part is not None:
                        if r.size == 1:
                            kb.store(r.part, (w, ir.const(0)), r.acc)
                        else:
                            with kb.for_(r.size, "l") as li:
                                kb.store(r.part, (w, ir.u64(li)), r.acc[ir.u64(li)])
                    else:
                        self._store(kb, r, linear(ip, [r.strides[d] for d in P]),
                                    lambda li, r=r: r.acc if r.size == 1 else r.acc[ir.u64(li)])
        if nch == 1:
            return
        with kb.for_(self.nP, "p", self.par and self.nP > 1) as p:
            ip = unravel(kb, p, [dims[d] for d in P])
            for r in reds:
                def total(li, r=r):
                    v = kb.var(zero, "sum")
                    with kb.for_(nch, "c") as c:
                        kb.assign(v, v + r.part[p * nch + c, ir.u64(li)])
                    return v
                self._store(kb, r, linear(ip, [r.strides[d] for d in P]), total)

    def _row(self, kb, src, ssrc, copies, reds, ip, iq, zero):
        """One row of src (the last dim) at outer indices ip (P dims) and iq (Q dims)."""
        dims, P, Q, last = self.dims, self.P, self.Q, self.last

        def row(strides):
            return linear(iq, [strides[d] for d in Q], linear(ip, [strides[d] for d in P]))
        rs = kb.let(row(ssrc), "rs")
        rcopy = [kb.let(row(s), "rc") for _, s in copies]
        for r in reds:
            lq = [d for d in r.local if d != last]
            r.row = kb.let(linear([iq[Q.index(d)] for d in lq], dense([dims[d] for d in r.local])[:len(lq)]), "rl")
        # sums along the row: one vectorized helper summing the row (in cache after
        # the loop below, which copies and adds into the accumulators of other dims)
        row_sums = [r for r in reds if not r.strides[last]]

        def at(j):
            return linear([j], [ssrc[last]], rs)
        if copies or len(row_sums) < len(reds):
            with kb.for_(dims[last], "j") as j:
                v = kb.let(src.load(at(j)), "v") if len(row_sums) < len(reds) else None
                for (o, s), rc in zip(copies, rcopy):
                    kb.emit(o.store_int(linear([j], [s[last]], rc), src.at(at(j))))
                for r in reds:
                    if r.strides[last]:
                        idx = ir.u64(linear([j], [1], r.row))
                        kb.store(r.acc, idx, r.acc[idx] + v)
        if row_sums:
            total = kb.let(sum_helper(kb, dims[last], lambda j: src.load(at(j)), zero), "rsv")
            for r in row_sums:
                if r.size == 1:
                    kb.assign(r.acc, r.acc + total)
                else:
                    idx = ir.u64(r.row)
                    kb.store(r.acc, idx, r.acc[idx] + total)

    def _store(self, kb, r, base, value):
        """Store ``value(local index)`` at every element of r's local block at ``base``."""
        with ExitStack() as nest:
            ivars = [nest.enter_context(kb.for_(self.dims[d], "u")) for d in r.local]
            v = value(linear(ivars, dense([self.dims[d] for d in r.local])))
            at = linear(ivars, [r.strides[d] for d in r.local], base)
            kb.emit(r.out.store(at, v if r.out.dtype is DataType.c64 else ir.f32(v)))
