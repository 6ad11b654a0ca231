"""What the reduction planner's passes compute (see graphc.codegen.grouped):
reductions over a group's reduced dims (:class:`Acc`), values per group
(:class:`Stat`) and sums over the groups at each reduced position
(:class:`ColumnAcc`).

Accumulators (:class:`Acc`) are sums, products, or maxima / minima.  Sums
accumulate in f32 lane arrays (which vectorize) folded into f64 every
``FOLD_ROWS`` rows or so: a lane never sums 2 * FOLD_ROWS f32 terms (a pass
sweeping at most FOLD_ROWS rows per chunk needs no fold), each times
``LANE_SCALE``, so that a lane cannot overflow where the f64 sum does not.  A
sum over the lane alone (no rows: LayerNorm or SoftMax along the last dim)
stores its terms in a buffer (float32 for float32 terms, else float64), which
the ``fsum32`` helper adds up in f32 runs of 1024 terms and those in float64 (a
run whose f32 sum is not finite again in float64; ``fsum``: float64 terms in
float64), vectorized.  A sum over a short lane (Nest.short_lane) may be a
reassociating helper over the lane (Nest._looped_pass), its f32 terms scaled as
the lanes'.  A sum may take f64 lanes (``lane_dt``: ReduceL2's f64 squares).
Products run in f64; maxima and minima in the lanes' f32.  A direct maximum
(reduced lane, no rows) runs on int32 keys ordered as the floats are
(fastmath.key_f32): LLVM vectorizes an integer max reduction, not a float one
with NaN semantics (about 7x faster over a 1024-float row)."""
from __future__ import annotations

import math

from . import ir
from .helpers import use_helper
from .loops import clamp

#: rows a lane sums in f32 before folding into its f64 total
FOLD_ROWS = 128
#: f32 lanes of a sum hold each term times LANE_SCALE, a power of two (exact, but for
#: terms under 2^-117, which keep an absolute error under 2^-141): a lane adds fewer
#: than 2 * FOLD_ROWS finite terms, so that its partial sum stays under half the f32
#: maximum (unscaled, the sum of 3e38 and 3e38 would overflow a lane)
LANE_SCALE = 2.0 ** -9
#: shortest reduced lane whose direct sum goes through a buffer and fsum; shorter ones
#: (in groups mode) are short lanes (see graphc.codegen.grouped), or with few groups, when
#: declared short_scalar, an f64 scalar sum (over rows of 1024 the buffer is faster)
SHORT_LANE = 64


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

    def __init__(self, nest: "Nest", kind: str, short_scalar: bool = False, lane_dt: str | None = None):
        if kind not in KINDS:
            raise ValueError(f"no such reduction: {kind}")
        self.nest, self.kind = nest, kind
        self.short_scalar = short_scalar
        self.ident, kind_dt = KINDS[kind]
        self.lane_dt = lane_dt or kind_dt
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
            term = self._term(expr)
            kb.store(self.lanes, lv, combine(self.kind, self.lanes[lv], term * LANE_SCALE if self.scaled else term))

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
        return self.scaled and not self.direct and self.nest.sweep_rows > FOLD_ROWS

    @property
    def scaled(self) -> bool:
        """Lanes holding terms times LANE_SCALE: a sum's f32 lanes."""
        return self.kind == "sum" and self.lane_dt == "f32"

    def unscaled(self, value: ir.Expr) -> ir.Expr:
        """``value``, read from this sum's lanes (or summed from them), as f64 and
        without the lanes' LANE_SCALE."""
        return ir.f64(value) * (1 / LANE_SCALE) if self.scaled else value

    def lane_result(self) -> ir.Expr:
        """The current lane's result inside a pass's chunk (a sum: f64)."""
        lv = self.nest.lv
        if self.folds:
            return self.total[lv]
        return self.unscaled(self.lanes[lv]) if self.kind == "sum" else self.lanes[lv]

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
