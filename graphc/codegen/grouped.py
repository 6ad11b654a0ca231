"""The reduction planner: the loop nest of ops that reduce a tensor over some
dims, then write every element from the results of its group (norms, softmax,
bias and PReLU gradients, the Reduce ops; with no reduced dim, plain
per-element ops), built as kernel IR by :class:`Nest`.

The main tensor's dims are *kept* (they index independent groups) or
*reduced*.  The dim with the smallest stride becomes the vector lane loop,
innermost everywhere; the other kept dims are the groups, the other reduced
dims the rows (graphc.codegen.reduce_plan: the layout, long lanes cut in tiles
or rows).  A lane reduced (e.g. LayerNorm, BatchNorm NCX) gives one scalar
result per group; a lane kept (e.g. BatchNorm NXC, SoftMax over channels of
NCHW) gives one result per lane, held in [lanes] arrays.

Parallel modes: with many groups, threads take chunks of groups and each group
runs all its passes while its data is in cache; with few groups, every pass
spreads its rows over chunks that keep partial results, combined after.

What passes compute are accumulators (graphc.codegen.accumulators: sums in f32
lanes folded into f64, buffered direct sums, products, keyed maxima), values per
group and column sums.  A short lane alone (under SHORT_LANE, many groups) loops
to a bound hidden from LLVM (fastmath.hidden_int: a short constant trip count
is unrolled into scalar code, never vectorized), its pass of sums a reassociating
helper per sum over the lane (Nest._looped_pass); with ``rows_together`` its
groups go by blocks of BLOCK_ROWS, each step of a group's computation done for
the whole block in turn (independent rows between one row's dependent steps).

graphc.codegen.sum_to plans the other shape of reduction: one pass over a
tensor summing it into several outputs, each keeping its own dims (AddBackward).
"""
from __future__ import annotations

import math
from contextlib import contextmanager

from . import ir
from .accumulators import FOLD_ROWS, LANE_SCALE, SHORT_LANE, Acc, ColumnAcc, Stat, combine
from .fastmath import count_arg, loop_sum_helper
from .helpers import use_helper
from .kernel import KernelBuilder, worth_parallel
from .loops import clamp, i64, let_array, min_of
from .reduce_plan import MAX_CHUNKS, VDim, plan, tensor_vdims

#: fewest groups that are spread over threads; fewer spread their rows instead
MIN_GROUPS = 16
#: fewest elements (groups x lane) a plan takes the short-lane loops for: each sum of
#: a short lane is a helper function of its own, compiled with the kernel (LayerNorm
#: over [4,16,32] compiled in 0.38 s before, 0.69 s with them); below this a kernel
#: runs in microseconds either way, so it keeps the plain loops
SHORT_WORK = 1 << 14
#: groups of short lanes a Nest made with ``rows_together`` runs each step for in turn
#: (independent rows between the dependent steps of one: LayerNorm over rows of 28
#: on one core 4.4 -> ~3.5 ms)
BLOCK_ROWS = 8


def _lets_read(lets, term) -> list:
    """The statements among ``lets`` (Let statements in order) whose names ``term``
    reads, directly or through later ones."""
    need = {e.args[0] for e in ir.walk(term) if e.op == "var"}
    out = []
    for s in reversed(lets):
        if s.target.args[0] in need:
            out.append(s)
            need |= {e.args[0] for e in ir.walk(s.value) if e.op == "var"}
    return out[::-1]


class Nest:
    """Plans and emits the loops (see the module doc).  ``to_real`` maps the
    loop indices (one expression per vdim, None where the extent is 1) to index
    expressions of the main tensor's dims; by default vdims are its dims."""

    def __init__(self, kb: KernelBuilder, vdims: list[VDim], to_real=None, rows_together: bool = False):
        """``rows_together``: a short lane's groups go by blocks of BLOCK_ROWS, each
        pass and per_group block running for every group of the block in turn;
        for a lowering that emits code only in those blocks."""
        self.kb = kb
        self.to_real = to_real or list
        p = plan(vdims)
        vdims = p.vdims
        self.vdims, self.lane, self.split = vdims, p.lane, p.split
        self.lane_kept = p.lane_kept
        self.group_dims, self.row_dims = p.group_dims, p.row_dims
        self.L, self.G, self.R = p.L, p.G, p.R
        if not worth_parallel(self.G * self.R * self.L):
            self.mode, self.chunks = "groups", 1
        elif self.G >= MIN_GROUPS:
            self.mode, self.chunks = "groups", min(self.G, MAX_CHUNKS)
        else:
            self.mode, self.chunks = "rows", max(1, min(self.R, MAX_CHUNKS))
        if self.mode == "rows" and self.chunks > 1:
            kb.road("row_chunks")   # (each group's rows summed in chunks, the partial sums added in order)
        #: the most rows a pass sweeps in one chunk
        self.sweep_rows = -(-self.R // self.chunks) if self.mode == "rows" else self.R
        self.names = [ir.var(kb.fresh("i")) if d.extent != 1 else None for d in vdims]
        self.lv = self.names[self.lane] if self.lane is not None else ir.var(kb.fresh("l"))
        # the lane loop's extent: a tiled lane's last tile is shorter
        self.lane_stop = ir.const(self.L)
        self.row_index = ir.const(0)   # the flat row index in the current loop (set by _rows)
        self.chv = ir.var(kb.fresh("ch"))
        #: groups a block holds (see rows_together), the index in the block, its first group and size
        self.block = BLOCK_ROWS if rows_together and self.short_lane and self.G > BLOCK_ROWS else 1
        self.kv = ir.var(kb.fresh("k"))
        self.block_start = self.block_size = None
        self.in_pass = False
        self.accs: list[Acc] = []
        self.stats: list[Stat] = []
        self.cols: list[ColumnAcc] = []

    # -- declarations (before ``groups``) ------------------------------------------------
    def acc(self, kind: str = "sum", short_scalar: bool = False, lane_dt: str | None = None) -> Acc:
        """A reduction of ``kind``; ``short_scalar``: as a direct sum over a lane
        shorter than SHORT_LANE, added to an f64 scalar as the pass goes (see
        Acc.buffered; for a pass computing that sum alone); ``lane_dt``: the type
        of its lane arrays, if not its kind's (f64 for a sum of f64 terms)."""
        a = Acc(self, kind, short_scalar, lane_dt)
        self.accs.append(a)
        return a

    def stat(self, dtype: str = "f32") -> Stat:
        s = Stat(self, dtype)
        self.stats.append(s)
        return s

    def column_acc(self) -> ColumnAcc:
        c = ColumnAcc(self)
        self.cols.append(c)
        return c

    # -- what the body sees --------------------------------------------------------------
    @property
    def iv(self) -> list:
        """Index expressions of the main tensor's dims: group dims are valid in the
        group, the lane too in ``per_group`` blocks of a kept lane, all in passes."""
        names = list(self.names)
        if self.split is not None:
            lane, f, _ = self.split
            outer = names.pop()
            if outer is not None:
                names[lane] = outer * f + names[lane] if names[lane] is not None else outer * f
        return self.to_real(names)

    @property
    def reduced_count(self) -> int:
        """Elements per group (the divisor of a mean)."""
        return math.prod(d.extent for d in self.vdims if not d.kept)

    # -- emission --------------------------------------------------------------------------
    def _lanes(self):
        """The loop over the lanes."""
        return self.kb.for_var(self.lv, self.lane_stop)

    @contextmanager
    def _loop_chunks(self):
        """The loop over chunks (a prange when there are several).  Its index, which
        indexes scratch arrays, is clamped to [0, chunks): LLVM cannot bound a
        prange index, and an index it cannot prove non-negative makes numba wrap
        negative indices, which turns vector loads and stores into gathers."""
        kb = self.kb
        with kb.for_(self.chunks, self.chv.args[0] + "_", self.chunks > 1) as raw:
            kb.assign(self.chv, clamp(i64(raw), self.chunks - 1))
            yield

    def _chunk(self, total: int):
        """This chunk's share [lo, hi) of ``total`` items."""
        if self.chunks == 1:
            return ir.const(0), ir.const(total)
        c, v = self.chunks, self.chv
        return v * total // c, (v + 1) * total // c

    def _decompose(self, flat, dims) -> None:
        """Set the indices of ``dims`` (outer to inner) from a flat index."""
        kb = self.kb
        q = kb.let(flat, "q")
        for k in range(len(dims) - 1, 0, -1):
            kb.assign(self.names[dims[k]], q % self.vdims[dims[k]].extent)
            q = kb.let(q // self.vdims[dims[k]].extent, "q")
        kb.assign(self.names[dims[0]], q)
        outer = len(self.vdims) - 1
        if self.split is not None and outer in dims and self.split[2] % self.split[1]:
            _, f, n = self.split
            self.lane_stop = kb.let(min_of(f, n - self.names[outer] * f), "nl")

    def _alloc(self, accs) -> None:
        kb = self.kb
        for a in accs:
            if a.buffered or a.looped:
                a.terms_lets.append(let_array(kb, a.terms, self.L))
            if not a.direct:
                let_array(kb, a.lanes, self.L)
                if a.folds:
                    let_array(kb, a.total, self.L)

    @contextmanager
    def groups(self):
        """The loop over groups: code inside runs once per group."""
        kb = self.kb
        for c in self.cols:
            let_array(kb, c.name, (self.chunks, c.width), fill=0)
        if self.mode == "rows":
            self._alloc_stats()
            if self.lane_kept:
                for a in self.accs:
                    let_array(kb, a.result, self.L)
            with kb.for_(self.G, "g") as g:
                if self.group_dims:
                    self._decompose(g, self.group_dims)
                yield
            return
        with self._loop_chunks():
            yield from self._chunk_groups()
        self.lane_stop = ir.const(self.L)   # (the hidden bound is the chunk's: see columns)

    def _chunk_groups(self):
        """groups: a chunk's groups (or blocks of groups: rows together)."""
        kb = self.kb
        self._alloc_stats()
        self._alloc(self.accs)
        if self.short_lane:
            # the lane loops' bound hidden from LLVM, so that they vectorize (fastmath.hidden_int)
            self.lane_stop = kb.let(ir.call("hidden_int", self.L, dt="int"), "nl")
        if self.block > 1:
            for a in self.accs:
                let_array(kb, a.result, self.block)
            B = self.block
            lo, hi = self._chunk(-(-self.G // B))
            with kb.for_(hi, "b", start=lo) as blk:
                self.block_start = kb.let(blk * B, "gb")
                self.block_size = kb.let(min_of(B, self.G - self.block_start), "bn")
                yield
            return
        lo, hi = self._chunk(self.G)
        with kb.for_(hi, "g", start=lo) as g:
            if self.group_dims:
                self._decompose(g, self.group_dims)
            yield

    @contextmanager
    def _each_group(self):
        """Rows together (see __init__): a loop over the block's groups, else nothing."""
        if self.block == 1:
            yield
            return
        with self.kb.for_var(self.kv, self.block_size):
            if self.group_dims:
                self._decompose(self.block_start + self.kv, self.group_dims)
            yield

    @property
    def short_lane(self) -> bool:
        """A reduced lane shorter than SHORT_LANE, alone (no rows), in groups mode, of
        at least SHORT_WORK elements in all."""
        return not self.lane_kept and self.R == 1 and self.L < SHORT_LANE and self.mode == "groups" \
            and self.split is None and self.G * self.L >= SHORT_WORK

    def _alloc_stats(self) -> None:
        if self.lane_kept or self.block > 1:
            for s in self.stats:
                let_array(self.kb, s.arr, self.L if self.lane_kept else self.block)

    @contextmanager
    def per_group(self):
        """Code computing per-group values (a kept lane: per-lane values)."""
        if self.lane_kept:
            with self._lanes():
                yield
        else:
            with self._each_group():
                yield

    @contextmanager
    def pass_(self, *accs):
        """One sweep over the group's elements, the body innermost (``iv`` valid),
        computing ``accs``."""
        kb = self.kb
        if self.mode == "groups":
            with self._each_group():
                if self.block > 1:
                    for s in self.stats:
                        kb.emit(ir.Let(s.held, s.arr[self.kv]))
                self.in_pass = True
                try:
                    if accs and all(a.looped for a in accs) and self.lane_stop.op != "const":
                        yield from self._looped_pass(accs)
                    else:
                        self._init(accs)
                        yield from self._rows(accs, ir.const(0), ir.const(self.R))
                finally:
                    self.in_pass = False
                self._group_results(accs)
            return
        for a in accs:
            let_array(kb, a.part, self.chunks if a.direct else (self.chunks, self.L))
        with self._loop_chunks():
            self._alloc(accs)
            self._init(accs)
            yield from self._rows(accs, *self._chunk(self.R))
            for a in accs:
                if a.direct:
                    kb.emit(ir.Store(a.part, self.chv, a.local_value))
                    continue
                with self._lanes():
                    kb.emit(ir.Store(a.part, (self.chv, self.lv), a.lane_result()))
        # the chunks' results combined (in loops: numba's sums over array views are slow)
        c = ir.var(kb.fresh("c"))
        for a in accs:
            if a.direct:
                kb.assign(a.scalar, a.identity("f64"))
                with kb.for_var(c, self.chunks):
                    kb.assign(a.scalar, combine(a.kind, a.scalar, a.part[c]))
                continue
            if self.lane_kept:
                with self._lanes():
                    kb.store(a.result, self.lv, a.identity("f64"))
                with kb.for_var(c, self.chunks), self._lanes():
                    kb.store(a.result, self.lv, combine(a.kind, a.result[self.lv], a.part[c, self.lv]))
            else:
                kb.assign(a.scalar, a.identity("f64"))
                with kb.for_var(c, self.chunks), self._lanes():
                    kb.assign(a.scalar, combine(a.kind, a.scalar, a.part[c, self.lv]))

    def _looped_pass(self, accs):
        """A pass of short direct sums (Acc.looped): its body is recorded, and when it
        is only lets, each sum is a reassociating helper looping over the lane to
        the hidden lane bound (fastmath.loop_sum_helper, hidden_int), which LLVM
        vectorizes into partial sums (a strict f64 running sum is one chain of
        dependent adds, ~4 cycles a term).  f32 terms sum in f32 partials (fewer
        than SHORT_LANE <= FOLD_ROWS terms, scaled as the planner's f32 lanes), then f64.
        Otherwise (the body stores, e.g. SoftMax keeping its exps) the lane loop runs
        the body and buffers the terms, which such a helper then sums."""
        kb, body = self.kb, []
        for a in accs:
            a.recording, a.term = True, None
        try:
            with kb._into_body(body):
                yield self.iv
        finally:
            for a in accs:
                a.recording = False
        if all(isinstance(s, ir.Let) for s in body) and all(a.term is not None for a in accs):
            for a in accs:
                kb.assign(a.local, self._lane_sum(_lets_read(body, a.term), a.term))
            return
        with self._lanes():
            kb.emit(body)
            for a in accs:
                if a.term is not None:
                    a.buffer(a.term)
        for a in accs:
            if a.term is None:
                kb.assign(a.local, a.identity(a.local.dt))
                continue
            kb.assign(a.local, self._lane_sum([], a.terms[self.lv]))

    def _lane_sum(self, lets, term) -> ir.Expr:
        """The f64 sum over the lane of ``term`` (after ``lets``), a reassociating
        helper: f32 terms in an f32 partial, each times LANE_SCALE (fewer than
        SHORT_LANE of them: no overflow where the f64 sum has none), f64 ones in f64."""
        if term.dt != "f32":
            return ir.f64(loop_sum_helper(self.kb, self.lane_stop, self.lv, lets, term, ir.const(0.0, "f64")))
        part = loop_sum_helper(self.kb, self.lane_stop, self.lv, lets, term * LANE_SCALE, ir.const(0.0, "f32"))
        return ir.f64(part) * (1 / LANE_SCALE)

    def _init(self, accs) -> None:
        kb = self.kb
        for a in accs:
            if a.direct and not a.buffered:
                a.init_local()
        lanes = [a for a in accs if not a.direct]
        if lanes:
            with self._lanes():
                for a in lanes:
                    kb.store(a.lanes, self.lv, a.identity(a.lane_dt))
                    if a.folds:
                        kb.store(a.total, self.lv, ir.const(0.0))

    def _rows(self, accs, lo, hi):
        """Rows lo..hi (flat indices over the row dims), the lane loop inside each
        (yields at the body).  The innermost row dim is a loop of its own, a sweep;
        the other row dims' indices are set once per sweep.  f32 lane sums fold into
        f64 after each sweep that brings a lane's count of terms to FOLD_ROWS (so
        that, a sweep taking at most FOLD_ROWS rows, the count stays below twice it)."""
        kb = self.kb
        sums = [a for a in accs if a.folds]
        if not self.row_dims:
            self.row_index = ir.const(0)
            with self._lanes():
                yield self.iv
            self._fold(sums)
            for a in accs:
                if a.buffered:
                    # f32 terms in f32 runs (fastmath.fsum32), f64 ones in f64
                    fsum = "fsum32" if a.terms.dt == "arr:f32" else "fsum"
                    use_helper(kb, fsum)
                    kb.assign(a.local, ir.call(fsum, a.terms, count_arg(self.L)))
            return
        inner, outer = self.row_dims[-1], self.row_dims[:-1]
        ext = self.vdims[inner].extent
        r = kb.var(lo, "r")
        count = kb.var(ir.const(0), "k") if sums else None
        with kb.while_(r < hi):
            q = kb.let(r // ext, "q")
            j0 = kb.let(r - q * ext, "j")
            if outer:
                self._decompose(q, outer)
            n = kb.let(min_of(ext - j0, hi - r, FOLD_ROWS) if sums and ext > FOLD_ROWS else min_of(ext - j0, hi - r),
                       "n")
            j = self.names[inner]
            self.row_index = r + j - j0
            with kb.for_var(j, j0 + n, start=j0), self._lanes():
                yield self.iv
            kb.assign(r, r + n)
            if sums:
                kb.assign(count, count + n)
                with kb.if_(count >= FOLD_ROWS):
                    self._fold(sums)
                    kb.assign(count, ir.const(0))
        self._fold(sums)

    def _fold(self, sums) -> None:
        if sums:
            with self._lanes():
                for a in sums:
                    self.kb.store(a.total, self.lv, a.total[self.lv] + a.unscaled(a.lanes[self.lv]))
                    self.kb.store(a.lanes, self.lv, ir.const(0.0, "f32"))

    def _group_results(self, accs) -> None:
        """Groups mode, reduced lane: each accumulator's scalar from its lanes."""
        kb = self.kb
        for a in accs:
            if a.direct and self.block > 1:
                kb.store(a.result, self.kv, ir.f64(a.local_value))
            elif a.direct:
                kb.assign(a.scalar, a.local_value)
            elif not self.lane_kept and a.kind == "sum" and self.lane_stop.op == "const":
                # the lanes' f64 sum reassociated (vectorized; a strict sum of L terms is a
                # chain of L dependent adds): fastmath.fsum, compiled once per process,
                # not a helper of the kernel's own
                if a.folds:
                    kb.assign(a.scalar, ir.call("fsum", a.total, count_arg(self.L)))
                else:
                    kb.assign(a.scalar, a.unscaled(ir.call("fsum", a.lanes, count_arg(self.L))))
            elif not self.lane_kept:
                kb.assign(a.scalar, a.identity(a.scalar.dt))
                with self._lanes():
                    kb.assign(a.scalar, combine(a.kind, a.scalar, a.lane_result()))

    @contextmanager
    def columns(self):
        """After ``groups``: a loop over the reduced positions, where column
        accumulators' ``value`` is their sum; yields the index expressions."""
        kb = self.kb
        for col in self.cols:   # every chunk's sums into chunk 0's
            with kb.for_(self.chunks, "c", start=1) as c, kb.for_(col.width, "w") as w:
                kb.store(col.name, (ir.const(0), w), col.name[ir.const(0), w] + col.name[c, w])
        with kb.for_(self.R, "r") as r:
            self.row_index = r
            if self.row_dims:
                self._decompose(r, self.row_dims)
            if self.lane_kept:
                yield self.iv
            else:
                with self._lanes():
                    yield self.iv


@contextmanager
def each_element(kb: KernelBuilder, ref):
    """A loop over every element of ``ref`` (nothing reduced); yields its index expressions."""
    nest = Nest(kb, tensor_vdims(ref, set(range(len(ref.shape)))))
    with nest.groups(), nest.pass_() as iv:
        yield iv
