"""The loop nest of ops that reduce a tensor over some dims, then write every
element from the statistics of its group (norms, softmax, bias and PReLU
gradients; with no reduced dim, plain per-element ops).

The main tensor's dims are *kept* (they index independent groups) or
*reduced*.  The dim with the smallest stride becomes the vector lane loop,
innermost everywhere; the other kept dims are the groups, the other reduced
dims the rows.  A lane reduced (e.g. LayerNorm, BatchNorm NCX) gives one
scalar statistic per group; a lane kept (e.g. BatchNorm NXC, SoftMax over
channels of NCHW) gives one statistic per lane, held in [lanes] arrays.

Parallel modes: with many groups, threads take chunks of groups and each group
runs all its passes while its data is in cache; with few groups, every pass
spreads its rows over chunks that keep partial results, combined after.

Sums accumulate in f32 lane arrays (which vectorize) folded into f64 every
``FOLD_ROWS`` rows or so: a lane never sums 2 * FOLD_ROWS f32 terms.  A sum over
the lane alone (no rows: LayerNorm or SoftMax along the last dim) stores its
terms in a float64 buffer, which the ``fsum`` helper adds up vectorized.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

from .fastmath import use_helper
from .kernel import KernelBuilder, worth_parallel

#: fewest groups that are spread over threads; fewer spread their rows instead
MIN_GROUPS = 16
#: most chunks of work (each owns its scratch and partial results)
MAX_CHUNKS = 64
#: rows a lane sums in f32 before folding into its f64 total
FOLD_ROWS = 128


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


class Acc:
    """A reduction over the reduced dims, "sum" or "max"; declared with
    ``Nest.acc``, computed by a ``Nest.pass_`` naming it."""

    def __init__(self, nest: "Nest", kind: str):
        self.nest, self.kind = nest, kind
        fresh = nest.kb.fresh
        self.lanes = fresh("va")     # f32 [L]: partial per lane
        self.total = fresh("vt")     # f64 [L]: folded sums per lane
        self.local = fresh("t")      # scalar partial (reduced lane, no rows)
        self.scalar = fresh("s")     # the group's result (reduced lane)
        self.part = fresh("vp")      # rows mode: each chunk's result
        self.result = fresh("vr")    # rows mode, kept lane: the lanes' results
        self.terms = fresh("vb")     # direct sum: f64 [L], the terms, summed by fsum

    @property
    def direct(self) -> bool:
        """Reduced lane and no rows: accumulate into a scalar."""
        return not self.nest.lane_kept and self.nest.R == 1

    @property
    def buffered(self) -> bool:
        """A direct sum: its terms go to a buffer that fsum adds up after the pass."""
        return self.direct and self.kind == "sum"

    def add(self, expr: str) -> str:
        """Statement accumulating ``expr`` (the current element's term) in a pass."""
        if self.buffered:
            return f"{self.terms}[{self.nest.lv}] = {expr}"
        target = self.local if self.direct else f"{self.lanes}[{self.nest.lv}]"
        if self.kind == "max":
            return f"{target} = max({target}, {expr})"
        return f"{target} += {expr}"

    @property
    def lane_result(self) -> str:
        """Array of the per-lane results inside a pass's chunk."""
        return self.total if self.kind == "sum" else self.lanes

    @property
    def value(self) -> str:
        """The result for the group (a kept lane: for the lane); valid after the pass."""
        n = self.nest
        if not n.lane_kept:
            return self.scalar
        return f"{self.result if n.mode == 'rows' else self.lane_result}[{n.lv}]"

    def combine(self, a: str, b: str) -> str:
        return f"max({a}, {b})" if self.kind == "max" else f"{a} + {b}"

    @property
    def identity(self) -> str:
        return "np.float32(-np.inf)" if self.kind == "max" else "0.0"


class Stat:
    """A value per group (a kept lane: per lane), set in ``per_group`` blocks."""

    def __init__(self, nest: "Nest", dtype: str):
        self.nest, self.dtype = nest, dtype
        self.name = nest.kb.fresh("st")

    @property
    def ref(self) -> str:
        return f"{self.name}[{self.nest.lv}]" if self.nest.lane_kept else self.name

    def set(self, expr: str) -> str:
        return f"{self.ref} = {self.dtype}({expr})"


class ColumnAcc:
    """A sum over the groups at each position of the reduced dims (e.g. diff_gamma);
    ``add`` in passes, ``Nest.columns`` / ``value`` after the groups."""

    def __init__(self, nest: "Nest"):
        self.nest = nest
        self.name = nest.kb.fresh("col")

    @property
    def width(self) -> int:
        n = self.nest
        return n.R if n.lane_kept else n.R * n.L

    @property
    def _index(self) -> str:
        n = self.nest
        row = f"min(max({n.row_index}, 0), {n.R - 1})"   # bounded, as Nest._loop_chunks explains
        return row if n.lane_kept else f"{row} * {n.L} + {n.lv}"

    def add(self, expr: str) -> str:
        return f"{self.name}[{self.nest.chv}, {self._index}] += {expr}"

    @property
    def value(self) -> str:
        """The sum at the current position (in ``Nest.columns``)."""
        return f"{self.name}[0, {self._index}]"


class Nest:
    """Plans and emits the loops (see the module doc).  ``to_real`` maps the
    loop index names (one per vdim, None where the extent is 1) to index
    expressions of the main tensor's dims; by default vdims are its dims."""

    def __init__(self, kb: KernelBuilder, vdims: list[VDim], to_real=None):
        self.kb = kb
        self.vdims = vdims
        self.to_real = to_real or list
        live = [i for i, d in enumerate(vdims) if d.extent != 1]
        order = sorted(live, key=lambda i: (-abs(vdims[i].stride), i))
        self.lane = order[-1] if order else None
        self.lane_kept = self.lane is None or vdims[self.lane].kept
        self.group_dims = [i for i in order[:-1] if vdims[i].kept]
        self.row_dims = [i for i in order[:-1] if not vdims[i].kept]
        self.L = vdims[self.lane].extent if order else 1
        self.G = _prod(vdims[i].extent for i in self.group_dims)
        self.R = _prod(vdims[i].extent for i in self.row_dims)
        if not worth_parallel(self.G * self.R * self.L):
            self.mode, self.chunks = "groups", 1
        elif self.G >= MIN_GROUPS:
            self.mode, self.chunks = "groups", min(self.G, MAX_CHUNKS)
        else:
            self.mode, self.chunks = "rows", max(1, min(self.R, MAX_CHUNKS))
        self.names = [kb.fresh("i") if d.extent != 1 else None for d in vdims]
        self.lv = self.names[self.lane] if self.lane is not None else kb.fresh("l")
        self.row_index = "0"   # the flat row index in the current loop (set by _rows)
        self.chv = kb.fresh("ch")
        self.accs: list[Acc] = []
        self.stats: list[Stat] = []
        self.cols: list[ColumnAcc] = []

    # -- declarations (before ``groups``) ------------------------------------------------
    def acc(self, kind: str = "sum") -> Acc:
        a = Acc(self, kind)
        self.accs.append(a)
        return a

    def stat(self, dtype: str = "np.float32") -> Stat:
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
        return self.to_real(self.names)

    @property
    def reduced_count(self) -> int:
        """Elements per group (the divisor of a mean)."""
        return _prod(d.extent for d in self.vdims if not d.kept)

    # -- emission --------------------------------------------------------------------------
    @contextmanager
    def _loop_chunks(self):
        """The loop over chunks (a prange when there are several).  Its index, which
        indexes scratch arrays, is clamped to [0, chunks): LLVM cannot bound a
        prange index, and an index it cannot prove non-negative makes numba wrap
        negative indices, which turns vector loads and stores into gathers."""
        raw = self.kb.fresh(self.chv + "_")
        with self.kb.loop(raw, self.chunks, self.chunks > 1):
            self.kb.line(f"{self.chv} = min(max(np.int64({raw}), 0), {self.chunks - 1})")
            yield

    def _chunk(self, total: int) -> tuple[str, str]:
        """This chunk's share [lo, hi) of ``total`` items."""
        if self.chunks == 1:
            return "0", str(total)
        c, v = self.chunks, self.chv
        return f"{v} * {total} // {c}", f"({v} + 1) * {total} // {c}"

    def _decompose(self, flat: str, dims) -> None:
        """Set the index names of ``dims`` (outer to inner) from a flat index."""
        kb = self.kb
        q = kb.fresh("q")
        kb.line(f"{q} = {flat}")
        for k in range(len(dims) - 1, 0, -1):
            name, ext = self.names[dims[k]], self.vdims[dims[k]].extent
            kb.line(f"{name} = {q} % {ext}")
            kb.line(f"{q} = {q} // {ext}")
        kb.line(f"{self.names[dims[0]]} = {q}")

    def _alloc(self, accs) -> None:
        for a in accs:
            if a.buffered:
                use_helper(self.kb, "fsum")
                self.kb.line(f"{a.terms} = np.empty({self.L}, np.float64)")
            if not a.direct:
                self.kb.line(f"{a.lanes} = np.empty({self.L}, np.float32)")
                if a.kind == "sum":
                    self.kb.line(f"{a.total} = np.empty({self.L}, np.float64)")

    @contextmanager
    def groups(self):
        """The loop over groups: code inside runs once per group."""
        kb = self.kb
        for c in self.cols:
            kb.line(f"{c.name} = np.zeros(({self.chunks}, {c.width}))")
        g = kb.fresh("g")
        if self.mode == "rows":
            self._alloc_stats()
            if self.lane_kept:
                for a in self.accs:
                    kb.line(f"{a.result} = np.empty({self.L}, np.float64)")
            with kb.loop(g, self.G):
                if self.group_dims:
                    self._decompose(g, self.group_dims)
                yield
            return
        with self._loop_chunks():
            self._alloc_stats()
            self._alloc(self.accs)
            with kb.loop(g, ", ".join(self._chunk(self.G))):
                if self.group_dims:
                    self._decompose(g, self.group_dims)
                yield

    def _alloc_stats(self) -> None:
        if self.lane_kept:
            for s in self.stats:
                self.kb.line(f"{s.name} = np.empty({self.L}, {s.dtype})")

    @contextmanager
    def per_group(self):
        """Code computing per-group values (a kept lane: per-lane values)."""
        if self.lane_kept and self.lane is not None:
            with self.kb.loop(self.lv, self.L):
                yield
        else:
            yield

    @contextmanager
    def pass_(self, *accs):
        """One sweep over the group's elements, the body innermost (``iv`` valid),
        computing ``accs``."""
        kb = self.kb
        if self.mode == "groups":
            self._init(accs)
            yield from self._rows(accs, "0", str(self.R))
            self._group_results(accs)
            return
        for a in accs:
            kb.line(f"{a.part} = np.empty({self.chunks})" if a.direct else
                    f"{a.part} = np.empty(({self.chunks}, {self.L}))")
        with self._loop_chunks():
            self._alloc(accs)
            self._init(accs)
            yield from self._rows(accs, *self._chunk(self.R))
            for a in accs:
                if a.direct:
                    kb.line(f"{a.part}[{self.chv}] = {a.local}")
                    continue
                with kb.loop(self.lv, self.L):
                    kb.line(f"{a.part}[{self.chv}, {self.lv}] = {a.lane_result}[{self.lv}]")
        # the chunks' results combined (in loops: numba's sums over array views are slow)
        c = kb.fresh("c")
        for a in accs:
            if a.direct:
                kb.line(f"{a.scalar} = {a.identity}")
                with kb.loop(c, self.chunks):
                    kb.line(f"{a.scalar} = {a.combine(a.scalar, f'{a.part}[{c}]')}")
                continue
            target = f"{a.result}[{self.lv}]" if self.lane_kept else a.scalar
            if self.lane_kept:
                with kb.loop(self.lv, self.L):
                    kb.line(f"{target} = {a.identity}")
            else:
                kb.line(f"{target} = {a.identity}")
            with kb.loop(c, self.chunks), kb.loop(self.lv, self.L):
                kb.line(f"{target} = {a.combine(target, f'{a.part}[{c}, {self.lv}]')}")

    def _init(self, accs) -> None:
        kb = self.kb
        for a in accs:
            if a.direct:
                kb.line(f"{a.local} = {a.identity}")
        lanes = [a for a in accs if not a.direct]
        if lanes:
            with kb.loop(self.lv, self.L):
                for a in lanes:
                    kb.line(f"{a.lanes}[{self.lv}] = {a.identity}")
                    if a.kind == "sum":
                        kb.line(f"{a.total}[{self.lv}] = 0.0")

    def _rows(self, accs, lo: str, hi: str):
        """Rows lo..hi (flat indices over the row dims), the lane loop inside each
        (yields at the body).  The innermost row dim is a loop of its own, a sweep;
        the other row dims' indices are set once per sweep.  f32 lane sums fold into
        f64 after each sweep that brings a lane's count of terms to FOLD_ROWS (so
        that, a sweep taking at most FOLD_ROWS rows, the count stays below twice it)."""
        kb = self.kb
        sums = [a for a in accs if a.kind == "sum" and not a.direct]
        if not self.row_dims:
            self.row_index = "0"
            with kb.loop(self.lv, self.L):
                yield self.iv
            self._fold(sums)
            for a in accs:
                if a.buffered:
                    kb.line(f"{a.local} = fsum({a.terms}, {self.L})")
            return
        inner, outer = self.row_dims[-1], self.row_dims[:-1]
        ext = self.vdims[inner].extent
        r, q, j0, n, count = (kb.fresh(p) for p in ("r", "q", "j", "n", "k"))
        kb.line(f"{r} = {lo}")
        if sums:
            kb.line(f"{count} = 0")
        with kb.block(f"while {r} < {hi}:"):
            kb.line(f"{q} = {r} // {ext}")
            kb.line(f"{j0} = {r} - {q} * {ext}")
            if outer:
                self._decompose(q, outer)
            cap = f", {FOLD_ROWS}" if sums and ext > FOLD_ROWS else ""
            kb.line(f"{n} = min({ext} - {j0}, {hi} - {r}{cap})")
            j = self.names[inner]
            self.row_index = f"{r} + {j} - {j0}"
            with kb.loop(j, f"{j0}, {j0} + {n}"):
                with kb.loop(self.lv, self.L):
                    yield self.iv
            kb.line(f"{r} += {n}")
            if sums:
                kb.line(f"{count} += {n}")
                with kb.block(f"if {count} >= {FOLD_ROWS}:"):
                    self._fold(sums)
                    kb.line(f"{count} = 0")
        self._fold(sums)

    def _fold(self, sums) -> None:
        if sums:
            with self.kb.loop(self.lv, self.L):
                for a in sums:
                    self.kb.line(f"{a.total}[{self.lv}] += {a.lanes}[{self.lv}]")
                    self.kb.line(f"{a.lanes}[{self.lv}] = 0")

    def _group_results(self, accs) -> None:
        """Groups mode, reduced lane: each accumulator's scalar from its lanes."""
        kb = self.kb
        for a in accs:
            if a.direct:
                kb.line(f"{a.scalar} = {a.local}")
            elif not self.lane_kept:
                kb.line(f"{a.scalar} = {a.identity}")
                with kb.loop(self.lv, self.L):
                    kb.line(f"{a.scalar} = {a.combine(a.scalar, f'{a.lane_result}[{self.lv}]')}")

    @contextmanager
    def columns(self):
        """After ``groups``: a loop over the reduced positions, where column
        accumulators' ``value`` is their sum; yields the index expressions."""
        kb = self.kb
        c, w, r = kb.fresh("c"), kb.fresh("w"), kb.fresh("r")
        for col in self.cols:   # every chunk's sums into chunk 0's
            with kb.loop(c, f"1, {self.chunks}"), kb.loop(w, col.width):
                kb.line(f"{col.name}[0, {w}] += {col.name}[{c}, {w}]")
        self.row_index = r
        with kb.loop(r, self.R):
            if self.row_dims:
                self._decompose(r, self.row_dims)
            with _maybe(not self.lane_kept, lambda: kb.loop(self.lv, self.L)):
                yield self.iv


@contextmanager
def each_element(kb: KernelBuilder, ref):
    """A loop over every element of ``ref`` (nothing reduced); yields its index expressions."""
    nest = Nest(kb, tensor_vdims(ref, set(range(len(ref.shape)))))
    with nest.groups(), nest.pass_() as iv:
        yield iv


@contextmanager
def _maybe(cond: bool, make):
    if cond:
        with make():
            yield
    else:
        yield
