"""Loop nests of window ops (pooling): a reduction over each window (forward)
and a gather over the windows covering each big-side element (backward).

Coordinates are NCX, (n, c, spatial...); :meth:`Geometry.index` puts them in a
tensor's dim order (``data_format``).  The innermost loop runs over one row of
scratch accumulators, along the channel axis when it is the contiguous one
(NXC: loads and stores of consecutive channels vectorize), else along the
last spatial axis (NCX); the loops around it are independent, the outermost
of them spread over threads.  Windows are clipped to the big side: taps in
the padding are never visited (a max's pad is -inf, an average's 0, so
neither changes the result).

A window along spatial axis ``a`` of output position ``o`` holds the taps
``k`` in [0, K) at big-side index ``o * s + k * d - b`` (kernel K, stride s,
dilation d, pads_begin b).  Each gather accumulates into the big-side element
it owns, so threads never write the same place.
"""
from __future__ import annotations

import math
from contextlib import ExitStack, contextmanager

import numpy as np

from . import ir
from .kernel import worth_parallel
from .loops import unravel, window_index
from ..ops.pool import tap_counts

#: the most elements of a row that the channels-inner loops store along the spatial axis at its end
ROW_STORE_MAX = 1 << 18
#: taps of a window the direct nest (Geometry.direct) unrolls at most
DIRECT_TAPS = 32


def _z(v) -> ir.Expr:
    """An index from unravel (None for a size-1 dim: 0)."""
    return ir.const(0) if v is None else v


def _ceil_div(a, d: int):
    """ceil(a / d) for an integer expression ``a`` of any sign and d > 0 (floor division)."""
    return a if d == 1 else (a + (d - 1)) // d


def prefers_channels(nxc: bool, tensor) -> bool:
    """Whether ``tensor`` (an ArrayRef in data format NXC, else NCX) runs faster
    along the channels than along the last spatial axis."""
    shape, strides = tensor.shape, tensor.strides
    c_axis, w_axis = (-1, -2) if nxc else (1, -1)
    if shape[c_axis] == 1:
        return False
    if shape[w_axis] == 1:
        return True
    return strides[c_axis] < strides[w_axis]


class Geometry:
    """The windows of one op: ``n`` batches, ``c`` channels, ``big`` and ``small``
    spatial sizes (src and dst of a forward pooling) and ``win`` (conv.Window).

    The loops follow the layouts of the op's tensors (``reads``, and ``written``,
    the output): the inner axis is the channels when most bytes run faster along
    them.  When a tensor disagrees, its accesses still reuse cache lines: with
    the channels inner, a whole row (every channel at every position along the
    last spatial axis) is accumulated and then stored along the spatial axis if
    the output prefers it; with the spatial axis inner, consecutive rows are
    consecutive channels when an input prefers the channels."""

    def __init__(self, win, nxc: bool, n: int, c: int, big, small, reads, written):
        self.win, self.nxc, self.n, self.c = win, nxc, n, c
        self.big, self.small = tuple(big), tuple(small)
        self.nsp = len(self.big)
        votes = [(prefers_channels(nxc, t), math.prod(t.shape)) for t in [*reads, written]]
        self.channel_inner = 2 * sum(w for p, w in votes if p) >= sum(w for _, w in votes) > 0
        #: channels inner: store a whole row along the spatial axis after computing it
        #: (rows of up to ROW_STORE_MAX elements)
        self.row_store = self.channel_inner and not prefers_channels(nxc, written)
        #: spatial axis inner: consecutive rows are consecutive channels
        self.channel_rows = not self.channel_inner and any(prefers_channels(nxc, t) for t in reads)
        self._counts = self._inverses = None

    def index(self, n, c, sp) -> list:
        """The multi-index of (n, c, spatial) in the tensor's dim order."""
        return [n, *sp, c] if self.nxc else [n, c, *sp]

    def _axis(self, a):
        w = self.win
        return w.kernel[a], w.strides[a], w.dilations[a], w.begin[a], self.big[a], self.small[a]

    def _inside(self, a) -> bool:
        """Every window along axis ``a`` lies on the big side (no clipping needed)."""
        k, s, d, b, i, o = self._axis(a)
        return b == 0 and (o - 1) * s + (k - 1) * d + 1 <= i

    def overlap(self) -> int:
        """The most windows one big-side element can be in."""
        return math.prod(-(-k // s) if d == 1 else k for k, s, d in
                         zip(self.win.kernel, self.win.strides, self.win.dilations))

    def tap(self, ks) -> ir.Expr:
        """The C-order number of the tap ``ks`` (one per spatial axis) in its window."""
        total = None
        for a, k in enumerate(ks):
            t = k * math.prod(self.win.kernel[a + 1:])
            total = t if total is None else total + t
        return total

    def _per_axis(self, kb, values, elem):
        """Constant arrays of ``values(counts)`` per spatial axis (None where every
        window lies on the big side) from the tap counts of each output position."""
        return [None if self._inside(a) else kb.const_array(values(c), elem, prefix="taps")
                for a, c in enumerate(tap_counts(self.win, self.big, self.small))]

    def divisor(self, kb, o) -> ir.Expr:
        """How many taps of the window at output position ``o`` meet the big side."""
        if self._counts is None:
            self._counts = self._per_axis(kb, lambda c: c, "int")
        total = ir.const(math.prod(k for k, c in zip(self.win.kernel, self._counts) if c is None))
        for arr, v in zip(self._counts, o):
            if arr is not None:
                total = total * arr[_z(v)]
        return total

    def reciprocal(self, kb, o, elem) -> ir.Expr:
        """1 / divisor(o) in ``elem``, a product of per-axis reciprocals (a few roundings)."""
        if self._inverses is None:
            self._inverses = self._per_axis(kb, lambda c: 1.0 / np.maximum(c, 1), elem)
        total = ir.const(1.0 / math.prod(k for k, c in zip(self.win.kernel, self._inverses) if c is None), elem)
        for arr, v in zip(self._inverses, o):
            if arr is not None:
                total = total * arr[_z(v)]
        return total

    def small_flat(self, n, c, o) -> ir.Expr:
        """The row-major offset of small-side (n, c, o) in a dense scratch array laid
        out in loop order: (N, O..., C) with the channels inner, else (N, C, O...)."""
        dims = [self.n, *self.small, self.c] if self.channel_inner else [self.n, self.c, *self.small]
        ivars = [n, *o, c] if self.channel_inner else [n, c, *o]
        total = ivars[0]
        for d, v in zip(dims[1:], ivars[1:]):
            total = total * d + v
        return total

    # -- window pieces ---------------------------------------------------------------------
    def _tap_range(self, kb, a, o):
        """[lo, hi) of the taps along axis ``a`` of output ``o`` meeting the big side."""
        k, s, d, b, i, _ = self._axis(a)
        if self._inside(a):
            return ir.const(0), ir.const(k)
        start = kb.let(_z(o) * s - b, "st")
        lo = kb.let(ir.call("max", ir.const(0), _ceil_div(-start, d)), "klo")
        hi = kb.let(ir.call("min", ir.const(k), _ceil_div(i - start, d)), "khi")
        return lo, hi

    def _out_range(self, kb, a, k):
        """[lo, hi) of the output positions along axis ``a`` whose tap ``k`` meets the big side."""
        _, s, d, b, i, o = self._axis(a)
        if self._inside(a):
            return ir.const(0), ir.const(o)
        lo = kb.let(ir.call("max", ir.const(0), _ceil_div(b - k * d, s)), "olo")
        hi = kb.let(ir.call("min", ir.const(o), _ceil_div(i + b - k * d, s)), "ohi")
        return lo, hi

    @contextmanager
    def _taps(self, kb, o, axes):
        """Nested loops over the taps (C order) of the window at ``o`` along ``axes``
        that meet the big side; yields (big-side indices, taps)."""
        ivars, ks = [], []
        with ExitStack() as stack:
            for a in axes:
                lo, hi = self._tap_range(kb, a, o[a])
                k = stack.enter_context(kb.for_(hi, "k", start=lo))
                _, s, d, b, _, _ = self._axis(a)
                ivars.append(kb.let(_z(o[a]) * s + k * d - b, "x"))
                ks.append(k)
            yield ivars, ks

    @contextmanager
    def _covering(self, kb, i, axes):
        """Nested loops over the windows covering big-side ``i`` along ``axes``;
        yields (output positions, the taps at which they meet ``i``)."""
        os_, ks = [], []
        with ExitStack() as stack:
            for a in axes:
                k, s, d, b, _, o = self._axis(a)
                at = kb.let(_z(i[a]) + b, "ib")
                if d == 1:
                    lo = kb.let(ir.call("max", ir.const(0), (at - (k - s)) // s), "olo")
                    hi = kb.let(ir.call("min", ir.const(o), at // s + 1), "ohi")
                    ov = stack.enter_context(kb.for_(hi, "o", start=lo))
                    kv = kb.let(at - ov * s, "k")
                else:
                    kv = stack.enter_context(kb.for_(k, "k"))
                    t = kb.let(at - kv * d, "t")
                    cond = (t >= 0) & (t < o * s)
                    stack.enter_context(kb.if_(cond if s == 1 else cond & (t % s).eq(0)))
                    ov = kb.let(t // s, "o") if s > 1 else t
                os_.append(ov)
                ks.append(kv)
            yield os_, ks

    # -- loop nests ------------------------------------------------------------------------
    @contextmanager
    def _rows(self, kb, lead, accs, length, work):
        """A loop over the multi-indices of ``lead`` (parallel when ``work`` is worth
        it) with one scratch row of ``length`` per accumulator (elem, init); yields
        (indices, rows).  The rows are workspaces (a part per thread when the loop is
        parallel): an array allocated per row cost more than a small row's work."""
        count = math.prod(lead)
        parallel = worth_parallel(work) and count > 1
        with kb.for_(count, "r", parallel) as r:
            idx = unravel(kb, r, lead)
            yield idx, [kb.scratch(length, elem, parallel, prefix="acc") for elem, _ in accs]

    def windows(self, kb, accs, update, finish):
        """For each output position o: accumulators (elem, init) start at init;
        ``update(rows, v, n, c, o, i, tap)`` for each tap meeting the big side (i: its
        big-side indices, tap: its C-order number); then ``finish(rows, v, n, c, o)``.
        ``rows[j][v]`` is accumulator j of that position."""
        self._nest(kb, accs, False, update, finish)

    def gather(self, kb, accs, contribute, finish):
        """For each big-side position i: accumulators (elem, init) start at init;
        ``contribute(rows, v, n, c, i, o, tap)`` for each window (output position o)
        covering it, ``tap`` the C-order number of the tap at which it does; then
        ``finish(rows, v, n, c, i)``."""
        self._nest(kb, accs, True, contribute, finish)

    def direct_ok(self) -> bool:
        """Whether :meth:`direct` takes the windows: the last spatial axis inner (NCX
        loops) and windows of at most DIRECT_TAPS taps."""
        return not self.channel_inner and math.prod(self.win.kernel) <= DIRECT_TAPS

    def direct(self, kb, elem, init, load, combine, finish):
        """For each output position o, the value of its window in registers: the
        taps' values (``load(n, c, i)`` at big-side indices i, as ``elem``; ``init``
        for a tap in the padding) combined by ``combine(acc, value)`` in C order,
        then ``finish(value, n, c, o)``.
        The innermost loop runs along the last spatial axis with every tap
        unrolled, its loads clamped into the big side and selected (no branch: it
        vectorizes); no accumulator row goes through memory per tap (pooling
        windows of 24 taps).  Window sums take it (op/f32/avgpool.json 3.27 -> 2.86 ms,
        avgpool_3d_chain 0.34 -> 0.235); maxima do not: their chain of NaN-aware
        selects per output ran 600x600 3x3/2 at 7.3 ms (5.0 combined pairwise)
        against 3.9 a tap at a time over an accumulator row."""
        last = self.nsp - 1
        lead_dims = [self.n, *self.small[:-1], self.c] if self.channel_rows else [self.n, self.c, *self.small[:-1]]
        work = self.n * self.c * math.prod(self.small) * math.prod(self.win.kernel)
        count = math.prod(lead_dims)
        with kb.for_(count, "r", worth_parallel(work) and count > 1) as r:
            idx = [_z(v) for v in unravel(kb, r, lead_dims)]
            n, c, lead = (idx[0], idx[-1], idx[1:-1]) if self.channel_rows else (idx[0], idx[1], idx[2:])
            # the outputs whose windows lie inside the big side along the last axis take
            # no clamp there (clamped indexes are gathers); the others, at either end, do
            k, s, d, b, size, osize = self._axis(last)
            olo = min(osize, -(-b // s))
            ohi = max(olo, min(osize, (size - 1 - (k - 1) * d + b) // s + 1))
            for start, stop, inner in ((0, olo, False), (olo, ohi, True), (ohi, osize, False)):
                if stop <= start:
                    continue
                trip = ir.call("hidden_int", stop - start, dt="int")
                with kb.for_(trip if not start else trip + start, "o", start=start) as ol:
                    o = lead + [ol]
                    acc = None
                    for ks in np.ndindex(*self.win.kernel):
                        value = self._clamped_tap(kb, elem, init, load, n, c, o, ks, inner)
                        acc = value if acc is None else combine(acc, value)
                    finish(acc, n, c, o)

    def _clamped_tap(self, kb, elem, init, load, n, c, o, ks, inner):
        """Tap ``ks`` of the window at output ``o``: loaded at its big-side index
        clamped into the big side (always a valid load) and selected, ``init``
        where the tap lies in the padding (decided per axis once for every
        output where it can be; ``inner``: inside along the last axis)."""
        pos, inside = [], None
        for a, k in enumerate(ks):
            kk, s, d, b, size, osize = self._axis(a)
            p, ok = window_index(o[a], k, s, d, b, size, osize, inner and a == self.nsp - 1)
            pos.append(p)
            if ok is not None:
                inside = ok if inside is None else inside & ok
        x = kb.let(ir.cast(load(n, c, pos), elem), "x")
        return x if inside is None else ir.select(inside, x, ir.const(init, elem))

    def _nest(self, kb, accs, gather, visit, finish):
        """The loops of :meth:`windows` (over output positions and their taps) or, with
        ``gather``, of :meth:`gather` (over big-side positions and their windows)."""
        nsp, last = self.nsp, self.nsp - 1
        sizes, pairs = (self.big, self._covering) if gather else (self.small, self._taps)
        work = self.n * self.c * math.prod(sizes) * (self.overlap() if gather else math.prod(self.win.kernel))
        if self.channel_inner:
            self._channel_nest(kb, accs, sizes, pairs, work, visit, finish)
            return
        # along the last spatial axis: its taps outside, output positions inside
        k, s, d, b, _, _ = self._axis(last)
        width = sizes[-1]
        lead_dims = [self.n, *sizes[:-1], self.c] if self.channel_rows else [self.n, self.c, *sizes[:-1]]
        with self._rows(kb, lead_dims, accs, width, work) as (idx, rows):
            idx = [_z(v) for v in idx]
            n, c, lead = (idx[0], idx[-1], idx[1:-1]) if self.channel_rows else (idx[0], idx[1], idx[2:])
            _init(kb, rows, accs, width)
            with pairs(kb, lead, range(last)) as (other, ks):
                with kb.for_(k, "k") as kl:
                    tap = kb.let(self.tap(ks + [kl]), "tap")
                    lo, hi = self._out_range(kb, last, kl)
                    with kb.for_(hi, "o", start=lo) as ol:
                        il = kb.let(ol * s + kl * d - b, "x")
                        v, w = (il, ol) if gather else (ol, il)
                        visit(rows, v, n, c, lead + [v], other + [w], tap)
            with kb.for_(width, "p") as pl:
                finish(rows, pl, n, c, lead + [pl])

    def _channel_nest(self, kb, accs, sizes, pairs, work, visit, finish):
        """:meth:`_nest` with the channels inner: per position along the last spatial
        axis (of ``sizes``), the windows or taps ``pairs`` gives, then the channels."""
        nsp, cn, width = self.nsp, self.c, sizes[-1]
        row_store = self.row_store and cn * width <= ROW_STORE_MAX
        with self._rows(kb, [self.n, *sizes[:-1]], accs, cn * width if row_store else cn, work) as (idx, rows):
            n, lead = _z(idx[0]), [_z(v) for v in idx[1:]]
            with kb.for_(width, "p") as pl:
                at = lead + [pl]
                base = kb.let(pl * cn, "b") if row_store else ir.const(0)
                _init(kb, rows, accs, cn, base)
                with pairs(kb, at, range(nsp)) as (other, ks):
                    tap = kb.let(self.tap(ks), "tap")
                    with kb.for_(cn, "c") as c:
                        visit(rows, base + c, n, c, at, other, tap)
                if not row_store:
                    with kb.for_(cn, "c") as c:
                        finish(rows, c, n, c, at)
            if row_store:
                with kb.for_(cn, "c") as c, kb.for_(width, "p") as pl:
                    finish(rows, pl * cn + c, n, c, lead + [pl])


def _init(kb, rows, accs, length, base=None) -> None:
    with kb.for_(length, "v") as v:
        for row, (elem, init) in zip(rows, accs):
            kb.store(row, v if base is None else base + v, ir.const(init, elem) if elem in ir.FLOATS else ir.const(int(init)))
