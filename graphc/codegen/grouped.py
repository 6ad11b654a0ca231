"""The reduction planner: the loop nest of ops that reduce a tensor over some
dims, then write every element from the results of its group (norms, softmax,
bias and PReLU gradients, the Reduce ops; with no reduced dim, plain
per-element ops), built as kernel IR.

The main tensor's dims are *kept* (they index independent groups) or
*reduced*.  The dim with the smallest stride becomes the vector lane loop,
innermost everywhere; the other kept dims are the groups, the other reduced
dims the rows.  A lane reduced (e.g. LayerNorm, BatchNorm NCX) gives one
scalar result per group; a lane kept (e.g. BatchNorm NXC, SoftMax over
channels of NCHW) gives one result per lane, held in [lanes] arrays.  A kept
lane longer than ``MAX_LANES`` is cut into tiles of ``LANE_TILE`` lanes, the
tiles becoming groups (so that the scratch arrays stay small); a reduced lane
longer than that with no other reduced dim is split into rows of a divisor of
its length (so that f32 lanes sum it and threads can share its rows).

Parallel modes: with many groups, threads take chunks of groups and each group
runs all its passes while its data is in cache; with few groups, every pass
spreads its rows over chunks that keep partial results, combined after.

Accumulators (:class:`Acc`) are sums, products, or maxima / minima.  Sums
accumulate in f32 lane arrays (which vectorize) folded into f64 every
``FOLD_ROWS`` rows or so: a lane never sums 2 * FOLD_ROWS f32 terms (a pass
sweeping at most FOLD_ROWS rows per chunk needs no fold).  A sum over
the lane alone (no rows: LayerNorm or SoftMax along the last dim) stores its
terms in a buffer (float32 for float32 terms, else float64), which the ``fsum32``
helper adds up in f32 runs of 1024 terms and those in float64 (``fsum``: float64
terms in float64), vectorized.  A short lane alone (under SHORT_LANE, many groups)
loops to a bound hidden from LLVM (fastmath.hidden_int: a short constant trip count
is unrolled into scalar code, never vectorized), its pass of sums a reassociating
helper per sum over the lane (Nest._looped_pass); with ``rows_together`` its
groups go by blocks of BLOCK_ROWS, each step of a group's computation done for
the whole block in turn (independent rows between one row's dependent steps).
Products run in f64; maxima and minima in the lanes' f32.  A direct maximum
(reduced lane, no rows) runs on int32 keys ordered as the floats are
(fastmath.key_f32): LLVM vectorizes an integer max reduction, not a float one
with NaN semantics (about 7x faster over a 1024-float row).

:func:`sum_to` plans the other shape of reduction: one pass over a tensor
summing it into several outputs, each keeping its own dims (AddBackward).
"""
from __future__ import annotations

import math
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import numba

from . import ir
from .elementwise import aligned_strides, collapse, emit_elementwise
from .fastmath import count_arg, loop_sum_helper, sum_helper
from .helpers import use_helper
from .kernel import ArrayRef, KernelBuilder, worth_parallel
from .loops import linear, unravel
from ..types import DataType

#: fewest groups that are spread over threads; fewer spread their rows instead
MIN_GROUPS = 16
#: most chunks of work (each owns its scratch and partial results)
MAX_CHUNKS = 64
#: rows a lane sums in f32 before folding into its f64 total
FOLD_ROWS = 128
#: shortest reduced lane whose direct sum goes through a buffer and fsum; shorter ones
#: (in groups mode) are short lanes (see the module doc), or with few groups, when
#: declared short_scalar, an f64 scalar sum (over rows of 1024 the buffer is faster)
SHORT_LANE = 64
#: fewest elements (groups x lane) a plan takes the short-lane loops for: each sum of
#: a short lane is a helper function of its own, compiled with the kernel (LayerNorm
#: over [4,16,32] compiled in 0.38 s before, 0.69 s with them); below this a kernel
#: runs in microseconds either way, so it keeps the plain loops
SHORT_WORK = 1 << 14
#: groups of short lanes a Nest made with ``rows_together`` runs each step for in turn
#: (independent rows between the dependent steps of one: LayerNorm over rows of 28
#: on one core 4.4 -> ~3.5 ms)
BLOCK_ROWS = 8
#: longest kept lane held whole in scratch arrays; longer ones are cut in tiles
MAX_LANES = 4096
#: lanes of a tile of a long kept lane
LANE_TILE = 1024


@dataclass
class VDim:
    """One loop dim: extent, stride in the main tensor (orders the loops), kept or reduced."""

    extent: int
    stride: int
    kept: bool


def tensor_vdims(ref, kept) -> list[VDim]:
    """The main tensor's own dims, those in ``kept`` kept."""
    return [VDim(d, s, i in kept) for i, (d, s) in enumerate(zip(ref.shape, ref.strides))]


def _prod(xs) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def _divisor(n: int):
    """The lanes of the rows a long reduced lane of ``n`` splits into: a divisor of n
    in [MAX_LANES / 8, MAX_LANES], the largest giving at least 4 rows per chunk;
    None if n has none."""
    lo = MAX_LANES // 8
    for top in (min(MAX_LANES, n // (4 * MAX_CHUNKS)), MAX_LANES):
        f = next((f for f in range(top, lo - 1, -1) if n % f == 0), None)
        if f is not None:
            return f
    return None


def i64(v: ir.Expr) -> ir.Expr:
    """``np.int64(v)`` even for an int-typed name (a prange index LLVM cannot bound)."""
    return ir.Expr("cast", ("int", v), "int")


def min_of(*xs) -> ir.Expr:
    return ir.call("min", *xs)


def clamp(v, hi: int) -> ir.Expr:
    return min_of(ir.call("max", v, 0), hi)


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


@dataclass
class MergedView(ArrayRef):
    """A plain kernel argument seen with some adjacent dims merged (see merged_views)."""

    view_shape: tuple = ()
    view_strides: tuple = ()

    @property
    def shape(self):
        return self.view_shape

    @property
    def strides(self):
        return self.view_strides


def merged_views(refs, apart):
    """``refs`` (kernel arguments of one shape, but size 1 along the dims of
    ``apart`` in some) as views whose adjacent dims, neither in ``apart`` and
    contiguous in every ref, are merged into one (so that e.g. SoftMax over the
    channels of NCHW runs lanes of H*W instead of W); returns (views, the index
    in the views of each dim).  Unchanged unless every ref is a plain argument:
    a fused ref (prologue, epilogue) computes other tensors at its indices,
    which may broadcast."""
    refs = list(refs)
    same = (refs, list(range(len(refs[0].shape)) if refs else []))
    if not refs or any(type(r) is not ArrayRef for r in refs):
        return same
    shape = refs[0].shape
    if any(len(r.shape) != len(shape) or any(a != b for k, (a, b) in enumerate(zip(r.shape, shape)) if k not in apart)
           for r in refs):
        return same
    groups = []   # runs of dims merged, in order
    for k in range(len(shape)):
        prev = groups[-1] if groups else None
        if prev is not None and k not in apart and prev[-1] not in apart and all(
                r.strides[prev[-1]] == r.shape[k] * r.strides[k] for r in refs):
            prev.append(k)
        else:
            groups.append([k])
    if len(groups) == len(shape):
        return same
    views = [MergedView(r.name, r.lt, tuple(math.prod(r.shape[k] for k in g) for g in groups),
                        tuple(r.strides[g[-1]] for g in groups)) for r in refs]
    return views, [i for i, g in enumerate(groups) for _ in g]


def let_array(kb: KernelBuilder, target: ir.Expr, shape, fill=None) -> ir.Let:
    """Bind ``target`` (an array variable) to a new scratch array (see KernelBuilder.alloc);
    returns the statement."""
    elem = target.dt[4:]
    t = ir.typename(elem)
    if fill is None:
        value = ir.call("np.empty", shape, t)
    else:
        value = ir.call("np.zeros", shape, t)
    stmt = ir.Let(target, value)
    kb.emit(stmt)
    return stmt


#: kind -> (identity, the type of its lane arrays)
KINDS = {"sum": (0.0, "f32"), "prod": (1.0, "f64"), "max": (-math.inf, "f32"),
         "nanmax": (-math.inf, "f32"), "nanmin": (math.inf, "f32")}


def combine(kind: str, a, b) -> ir.Expr:
    """Two partial results of a ``kind`` reduction combined.  ``max`` is Python's
    (a NaN may be skipped), ``nanmax`` / ``nanmin`` numpy's (NaN propagates)."""
    if kind == "sum":
        return a + b
    if kind == "prod":
        return a * b
    return ir.call({"max": "max", "nanmax": "np.maximum", "nanmin": "np.minimum"}[kind], a, b)


class Acc:
    """A reduction over the reduced dims: ``kind`` one of :data:`KINDS`; declared
    with ``Nest.acc``, computed by a ``Nest.pass_`` naming it."""

    def __init__(self, nest: "Nest", kind: str, short_scalar: bool = False):
        if kind not in KINDS:
            raise ValueError(f"no such reduction: {kind}")
        self.nest, self.kind = nest, kind
        self.short_scalar = short_scalar
        ident, self.lane_dt = KINDS[kind]
        self.ident = ident
        fresh = nest.kb.fresh
        direct_dt = "f64" if kind in ("sum", "prod") else "f32"
        self.lanes = ir.array(fresh("va"), self.lane_dt)   # [L]: partial per lane
        self.total = ir.array(fresh("vt"), "f64")          # sums: [L] folded per lane
        #: a direct f32 maximum runs on int32 keys (key_max_f32), which vectorize
        self.keyed = kind == "max"
        self.local = ir.var(fresh("t"), "int" if self.keyed else direct_dt)  # scalar partial (reduced lane, no rows)
        self.part = ir.array(fresh("vp"), "f64")           # rows mode: each chunk's result
        self.result = ir.array(fresh("vr"), "f64")         # rows mode, kept lane: the lanes' results
        # direct sum: the terms, summed by fsum into f64; an f32 buffer while the terms
        # are f32 (exact, and the loop computing them vectorizes twice as wide as
        # with f64 stores), made f64 by the first f64 term (see add)
        self.terms = ir.array(fresh("vb"), "f32")
        self.terms_lets: list[ir.Let] = []
        #: a looped pass's term (see Nest._looped_pass), recorded by add
        self.term: ir.Expr | None = None
        self.recording = False
        if nest.mode == "rows":
            sdt = "f64"
        else:
            sdt = direct_dt
        self.scalar = ir.var(fresh("s"), sdt)               # the group's result (reduced lane)

    @property
    def direct(self) -> bool:
        """Reduced lane and no rows: accumulate into a scalar."""
        return not self.nest.lane_kept and self.nest.R == 1

    @property
    def looped(self) -> bool:
        """A sum over a short lane (Nest.short_lane): its pass may run as a
        reassociating helper over the lane (Nest._looped_pass)."""
        return self.kind == "sum" and self.nest.short_lane

    @property
    def buffered(self) -> bool:
        """A direct sum: its terms go to a buffer that fsum adds up after the pass;
        unless declared short_scalar with a lane shorter than SHORT_LANE, then
        added to an f64 scalar as the pass goes (the buffer's loops cost more
        than they save for a pass computing one short sum; a pass computing
        several, e.g. LayerNormBackward's, is faster through buffers)."""
        return (self.direct and self.kind == "sum" and not self.looped
                and not (self.short_scalar and self.nest.L < SHORT_LANE))

    @property
    def local_value(self) -> ir.Expr:
        """The scalar partial as a value (a keyed maximum: its float)."""
        return ir.call("f32_of_key", self.local, dt="f32") if self.keyed else self.local

    def init_local(self) -> None:
        """Start the scalar partial at the identity."""
        if self.keyed:
            for h in ("key_max_f32", "f32_of_key"):
                use_helper(self.nest.kb, h)
            self.nest.kb.assign(self.local, ir.call("key_f32", ir.const(-math.inf, "f32"), dt="int"))
        else:
            self.nest.kb.assign(self.local, self.identity(self.local.dt))

    def _term(self, expr):
        return ir.f64(expr) if self.kind == "prod" else expr

    def add(self, expr: ir.Expr) -> None:
        """Accumulate ``expr`` (the current element's term) in a pass."""
        kb, lv = self.nest.kb, self.nest.lv
        if self.recording:
            if self.term is not None:
                raise ValueError("a looped pass adds one term per accumulator")
            self.term = expr
        elif self.buffered:
            self.buffer(expr)
        elif self.direct and self.keyed:
            kb.assign(self.local, ir.call("key_max_f32", self.local, ir.f32(expr), dt="int"))
        elif self.direct:
            kb.assign(self.local, combine(self.kind, self.local, self._term(expr)))
        else:
            kb.store(self.lanes, lv, combine(self.kind, self.lanes[lv], self._term(expr)))

    def buffer(self, expr: ir.Expr) -> None:
        """Store the term in the buffer (made f64 by the first f64 term)."""
        if expr.dt != "f32" and self.terms.dt != "arr:f64":
            self.terms = ir.array(self.terms.args[0], "f64")
            for stmt in self.terms_lets:
                stmt.target, stmt.value = self.terms, ir.call("np.empty", self.nest.L, ir.typename("f64"))
        self.nest.kb.store(self.terms, self.nest.lv, expr)

    @property
    def folds(self) -> bool:
        """A sum over more rows per sweep than f32 lanes take: folded into f64 totals."""
        return self.kind == "sum" and not self.direct and self.nest.sweep_rows > FOLD_ROWS

    def lane_result(self) -> ir.Expr:
        """The current lane's result inside a pass's chunk (a sum: f64)."""
        lv = self.nest.lv
        if self.folds:
            return self.total[lv]
        return ir.f64(self.lanes[lv]) if self.kind == "sum" else self.lanes[lv]

    @property
    def value(self) -> ir.Expr:
        """The result for the group (a kept lane: for the lane); valid after the pass."""
        n = self.nest
        if not n.lane_kept:
            return self.result[n.kv] if n.block > 1 else self.scalar
        return self.result[n.lv] if n.mode == "rows" else self.lane_result()

    def identity(self, dt: str) -> ir.Expr:
        return ir.const(self.ident, dt)


class Stat:
    """A value per group (a kept lane: per lane), set in ``per_group`` blocks."""

    def __init__(self, nest: "Nest", dtype: str):
        self.nest, self.dtype = nest, dtype
        name = nest.kb.fresh("st")
        self.arr = ir.array(name, dtype)
        self.var = ir.var(name, dtype)
        #: rows together: the group's value read once in a pass (a load from the
        #: array in the lane loop would be repeated: stores might alias it)
        self.held = ir.var(nest.kb.fresh("sv"), dtype)

    @property
    def ref(self) -> ir.Expr:
        n = self.nest
        if n.lane_kept:
            return self.arr[n.lv]
        if n.block > 1:
            return self.held if n.in_pass else self.arr[n.kv]
        return self.var

    def set(self, expr) -> None:
        """Set the value (converted to the stat's type)."""
        v, n = ir.cast(expr, self.dtype), self.nest
        if n.lane_kept or n.block > 1:
            n.kb.store(self.arr, n.lv if n.lane_kept else n.kv, v)
        else:
            n.kb.assign(self.var, v)


class ColumnAcc:
    """A sum over the groups at each position of the reduced dims (e.g. diff_gamma);
    ``add`` in passes, ``Nest.columns`` / ``value`` after the groups."""

    def __init__(self, nest: "Nest"):
        self.nest = nest
        self.name = ir.array(nest.kb.fresh("col"), "f64")

    @property
    def width(self) -> int:
        n = self.nest
        return n.R if n.lane_kept else n.R * n.L

    @property
    def _index(self) -> ir.Expr:
        n = self.nest
        if n.R == 1:
            return ir.const(0) if n.lane_kept else n.lv
        row = clamp(n.row_index, n.R - 1)   # bounded, as Nest._loop_chunks explains
        return row if n.lane_kept else row * n.L + n.lv

    def add(self, expr) -> None:
        at = (self.nest.chv, self._index)
        self.nest.kb.store(self.name, at, self.name[at] + expr)

    @property
    def value(self) -> ir.Expr:
        """The sum at the current position (in ``Nest.columns``)."""
        return self.name[ir.const(0), self._index]


@dataclass
class Plan:
    """How a Nest lays out its vdims (see the module doc): the lane (None: no live
    dim), a long lane split in two dims ((lane, factor, extent), the outer dim
    appended to vdims), the group and row dims, and the extents of the lane, the
    groups and the rows."""

    vdims: list
    lane: int | None
    split: tuple | None
    group_dims: list
    row_dims: list
    L: int
    G: int
    R: int

    @property
    def lane_kept(self) -> bool:
        return self.lane is None or self.vdims[self.lane].kept


def plan(vdims: list[VDim]) -> Plan:
    """The planner's layout of ``vdims``: the live dim of smallest stride the lane,
    a long kept lane cut into LANE_TILE tiles (a group dim), a long reduced lane
    alone into rows of a divisor of its length."""
    live = [i for i, d in enumerate(vdims) if d.extent != 1]
    order = sorted(live, key=lambda i: (-abs(vdims[i].stride), i))
    lane = order[-1] if order else None
    split = None
    if lane is not None:
        n, st = vdims[lane].extent, vdims[lane].stride
        if vdims[lane].kept and n > MAX_LANES and any(not vdims[i].kept for i in live):
            # a long kept lane: tiles of LANE_TILE lanes (the last one shorter), a group dim
            split = (lane, LANE_TILE, n)
        elif not vdims[lane].kept and n > MAX_LANES and all(vdims[i].kept for i in order[:-1]):
            # a long reduced lane alone: rows of f lanes (a divisor of n), which
            # f32 lanes sum and threads can share
            f = _divisor(n)
            if f is not None:
                split = (lane, f, n)
        if split is not None:
            f = split[1]
            vdims = list(vdims) + [VDim(-(-n // f), st * f, vdims[lane].kept)]
            vdims[lane] = VDim(f, st, vdims[lane].kept)
            order = sorted(order[:-1] + [len(vdims) - 1], key=lambda i: (-abs(vdims[i].stride), i)) + [lane]
    group_dims = [i for i in order[:-1] if vdims[i].kept]
    row_dims = [i for i in order[:-1] if not vdims[i].kept]
    return Plan(vdims, lane, split, group_dims, row_dims, vdims[lane].extent if order else 1,
                _prod(vdims[i].extent for i in group_dims), _prod(vdims[i].extent for i in row_dims))


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
    def acc(self, kind: str = "sum", short_scalar: bool = False) -> Acc:
        """A reduction of ``kind``; ``short_scalar``: as a direct sum over a lane
        shorter than SHORT_LANE, added to an f64 scalar as the pass goes (see
        Acc.buffered; for a pass computing that sum alone)."""
        a = Acc(self, kind, short_scalar)
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
        return _prod(d.extent for d in self.vdims if not d.kept)

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
        than SHORT_LANE <= FOLD_ROWS terms, as the planner's f32 lanes), then f64.
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
                zero = ir.const(0.0, "f32" if a.term.dt == "f32" else "f64")
                lets = _lets_read(body, a.term)
                kb.assign(a.local, ir.f64(loop_sum_helper(kb, self.lane_stop, self.lv, lets, a.term, zero)))
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
            dt = a.terms.dt[4:]
            kb.assign(a.local, ir.f64(loop_sum_helper(kb, self.lane_stop, self.lv, [], a.terms[self.lv],
                                                      ir.const(0.0, dt))))

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
                    self.kb.store(a.total, self.lv, a.total[self.lv] + a.lanes[self.lv])
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
                arr = a.total if a.folds else a.lanes
                kb.assign(a.scalar, ir.call("fsum", arr, count_arg(self.L)))
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


# ---------------------------------------------------------------- sums to shapes
#: parallel work items a sum_to pass splits its work into (a few per thread, for balance)
CHUNKS = max(8, 2 * numba.config.NUMBA_NUM_THREADS)


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
        if par and reds and self.nP < CHUNKS:
            self.nch = min(self.nQ, -(-CHUNKS // self.nP))
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
        nth = min(nw, CHUNKS) if self.par else 1
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
