"""Convolution kernels as GEMMs (im2col per tile), forward and both gradients.

Every convolution op reduces, as in graphc/ops/conv.py's reference, to one of
three computations on logical NCX data and (OC, C/G, *K) weights:

* ``forward``: per image and group, ``Y[P, OCg] = Cols[P, T*Cg] @ W[T*Cg, OCg]``
  where Cols holds, for each output position, the src values its window taps
  meet (im2col, zeros in the padding), packed a tile of positions at a time;
* ``backward_data``: ``Cols = dY[P, OCg] @ W^T``, scattered back onto the
  positions the taps met (col2im) in an f32 accumulator per image and group;
* ``backward_weights``: ``dW[T*Cg, OCg] += Cols^T @ dY`` over every image and
  tile, in per-thread f32 partial sums added up at the end.

Tensors are reached through views (:class:`Data`, :class:`Weights`) mapping
the logical indices to each tensor's own layout (NCX/NXC, OIX/XIO/IOX/XOI,
the transposed convolutions' swapped O and I, any strides), so the same code
serves all six ops; operands BLAS can read in place (f32, unit stride along
one matrix dim, the other dims flattening to one stride) are not copied.
"""
from __future__ import annotations

import math
import os
from contextlib import contextmanager
from dataclasses import dataclass

from . import ir
from .gemm import Matrix, direct
from .kernel import ArrayRef, worth_parallel
from .loops import linear, unravel
from ..types import DataType

#: rows of one im2col panel at most: a panel of (rows x T*Cg) f32 stays near L2's size
PANEL_ELEMS = 1 << 17
MIN_ROWS = 32


@dataclass
class Geometry:
    """Logical sizes of one convolution (the forward direction)."""

    n: int
    c: int                 # src channels (all groups)
    oc: int                # dst channels (all groups)
    groups: int
    big: tuple             # src spatial sizes
    small: tuple           # dst spatial sizes
    kernel: tuple
    strides: tuple
    dilations: tuple
    begin: tuple           # pads at the start of each spatial axis

    @property
    def cg(self):
        return self.c // self.groups

    @property
    def ocg(self):
        return self.oc // self.groups

    @property
    def taps(self):
        return math.prod(self.kernel)

    @property
    def kd(self):
        return self.taps * self.cg

    @property
    def positions(self):
        return math.prod(self.small)

    @property
    def big_size(self):
        return math.prod(self.big)


def _rounded(v, rounding):
    return rounding(v) if rounding is not None else v


def _plain(ref) -> bool:
    return type(ref) is ArrayRef and ref.dtype is DataType.f32


class Data:
    """An (N, C, *spatial) view of a src/dst/diff tensor in its data_format."""

    def __init__(self, ref, nxc: bool):
        self.ref, self.nxc = ref, nxc

    def ivars(self, n, c, sp) -> list:
        return [n, *sp, c] if self.nxc else [n, c, *sp]

    def load(self, n, c, sp):
        return self.ref.load_nd(self.ivars(n, c, sp))

    def store(self, n, c, sp, value):
        return self.ref.store_nd(self.ivars(n, c, sp), value)

    def strides(self):
        """(n, c, spatial...) element strides."""
        s = self.ref.strides
        return (s[0], s[-1], tuple(s[1:-1])) if self.nxc else (s[0], s[1], tuple(s[2:]))

    def rows(self, sizes):
        """The stride of a flat spatial position when the spatial dims (of ``sizes``)
        flatten to one stride, else None."""
        _, _, sp = self.strides()
        step = None
        for k in range(len(sizes) - 1, -1, -1):
            if sizes[k] == 1:
                continue
            if step is None:
                step = sp[k]
                expect = sp[k] * sizes[k]
            elif sp[k] != expect:
                return None
            else:
                expect = sp[k] * sizes[k]
        return step if step is not None else 0


class Weights:
    """Weights as the convolution sees them, W[g][oc, ic, *taps], over a tensor
    whose (O, I, *X) axes are ``axes`` (from its weights_format; see
    ops/conv.py's split_weights).  ``swapped``: a transposed convolution's
    weights, whose O and I swap inside each group (``swap_io`` in ops/conv.py):
    W[g][oc, ic] = w[O = g * O-per-group + ic, I = oc].  ``io_grouped``: IOX/XOI
    weights of a grouped transposed convolution, whose I axis holds the groups
    (``io_grouped`` in ops/conv.py)."""

    def __init__(self, ref, axes, groups, swapped: bool, io_grouped: bool = False):
        self.ref, self.axes, self.groups, self.swapped, self.io_grouped = ref, axes, groups, swapped, io_grouped
        o_dim, i_dim = ref.shape[axes[0]], ref.shape[axes[1]]
        self.o_per_group = o_dim if io_grouped else o_dim // groups
        self.i_per_group = i_dim // groups if io_grouped else i_dim

    def _oi(self, g, oc, ic):
        """The tensor's (O, I) indices of W[g][oc, ic]."""
        o, i = (ic, oc) if self.swapped else (oc, ic)      # O inside the group, I inside the group
        return (o, g * self.i_per_group + i) if self.io_grouped else (g * self.o_per_group + o, i)

    def ivars(self, g, oc, ic, taps) -> list:
        out = [None] * len(self.axes)
        for a, v in zip(self.axes, (*self._oi(g, oc, ic), *taps)):
            out[a] = v
        return out

    def load(self, g, oc, ic, taps):
        return self.ref.load_nd(self.ivars(g, oc, ic, taps))

    def store(self, g, oc, ic, taps, value):
        return self.ref.store_nd(self.ivars(g, oc, ic, taps), value)

    def matrix_strides(self, geo: Geometry):
        """(row stride, col stride, group stride) of the (T*Cg x OCg) matrix
        (rows: taps then ic; cols: oc) in the tensor, when rows flatten to one
        stride, else None."""
        s = self.ref.strides
        so, si = s[self.axes[0]], s[self.axes[1]]
        oc_s, ic_s = (si, so) if self.swapped else (so, si)
        g_s = self.i_per_group * si if self.io_grouped else self.o_per_group * so
        expect = ic_s * geo.cg
        for a, k in zip(reversed(self.axes[2:]), reversed(geo.kernel)):
            if k != 1 and s[a] != expect:
                return None
            expect *= k
        return ic_s, oc_s, g_s


def _tap_loops(kb, kernel):
    """Nested loops over the kernel taps; yields (tap indices, flat tap index)."""
    class _Nest:
        def __init__(self):
            self.stack = []

        def __enter__(self):
            taps = []
            flat = None
            for k in kernel:
                cm = kb.for_(k, "k")
                v = cm.__enter__()
                self.stack.append(cm)
                taps.append(v)
                flat = v if flat is None else flat * k + v
            return taps, (flat if flat is not None else ir.const(0))

        def __exit__(self, *exc):
            for cm in reversed(self.stack):
                cm.__exit__(*exc)
    return _Nest()


def _in_positions(kb, geo: Geometry, out_pos, taps):
    """Src spatial indices a tap meets from dst position ``out_pos``, and the
    condition that all are inside (None when no padding can be met)."""
    pos, inside = [], None
    for o, t, s, d, b, size in zip(out_pos, taps, geo.strides, geo.dilations, geo.begin, geo.big):
        p = kb.let(o * s + t * d - b, "ip")
        pos.append(p)
        c = (p >= 0) & (p < size)
        inside = c if inside is None else inside & c
    return pos, inside


def _im2col(kb, geo: Geometry, x: Data, n, g, p0, nrows, rounding):
    """A (nrows x T*Cg) f32 panel: row r holds, tap after tap, the Cg src channels
    of group g that the taps of dst position p0 + r meet (0 in the padding)."""
    kd, cg = geo.kd, geo.cg
    panel = kb.alloc(nrows * kd, "f32", prefix="cols")
    with _window_taps(kb, geo, p0, nrows) as (pos, inside, at):
        with kb.if_(inside) as st:
            with kb.for_(cg, "ci") as ci:
                kb.store(panel, at + ci, ir.f32(_rounded(x.load(n, g * cg + ci, pos), rounding)))
            with kb.else_(st):
                with kb.for_(cg, "ci") as ci:
                    kb.store(panel, at + ci, ir.const(0.0, "f32"))
    return panel


@contextmanager
def _window_taps(kb, geo: Geometry, p0, nrows):
    """Loops over the dst positions p0 + r (r < nrows) and their window taps;
    yields (the src spatial indices the tap meets, whether they are inside the
    src, the offset of the tap's Cg values in a (nrows x T*Cg) panel)."""
    with kb.for_(nrows, "r") as r:
        out_pos = unravel(kb, p0 + r, geo.small)
        out_pos = [v if v is not None else ir.const(0) for v in out_pos]
        row = kb.let(r * geo.kd, "cr")
        with _tap_loops(kb, geo.kernel) as (taps, flat):
            pos, inside = _in_positions(kb, geo, out_pos, taps)
            yield pos, inside, kb.let(row + flat * geo.cg, "ca")


def _pack_weights(kb, geo: Geometry, w: Weights, transposed: bool, rounding):
    """All groups' weights as f32 matrices: (G, T*Cg, OCg), or (G, OCg, T*Cg) when ``transposed``."""
    kd, cg, ocg = geo.kd, geo.cg, geo.ocg
    panel = kb.alloc(geo.groups * kd * ocg, "f32", prefix="wp")
    with kb.for_(geo.groups, "g") as g:
        with kb.for_(ocg, "oc") as oc:
            with _tap_loops(kb, geo.kernel) as (taps, flat):
                with kb.for_(cg, "ic") as ic:
                    r = flat * cg + ic
                    at = g * (kd * ocg) + (oc * kd + r if transposed else r * ocg + oc)
                    kb.store(panel, at, ir.f32(_rounded(w.load(g, oc, ic, taps), rounding)))
    return panel


def _weights_operand(kb, geo, w: Weights, transposed: bool, rounding):
    """(buffer, group offset function, ld, BLAS transpose flag) of the weights matrix
    (T*Cg x OCg), or its transpose when ``transposed``."""
    ms = w.matrix_strides(geo) if _plain(w.ref) and rounding is None else None
    if ms is not None:
        rs, cs, gs = ms
        m = Matrix(w.ref, geo.ocg if transposed else geo.kd, geo.kd if transposed else geo.ocg, None, False,
                   (cs, rs) if transposed else (rs, cs), lambda bv: ir.const(0))
        d = direct(m)
        if d is not None:
            return w.ref.buf, (lambda g: g * gs), d[1], d[0]
    panel = _pack_weights(kb, geo, w, transposed, rounding)
    size = geo.kd * geo.ocg
    return panel, (lambda g: g * size), (geo.kd if transposed else geo.ocg), 0


def _data_operand(geo: Geometry, d: Data, channels_per_group, sizes, n, g, p0):
    """(buffer, offset, ld) of the (positions x channels-of-group) matrix of ``d``
    for image n, group g, from position p0, when BLAS can read it in place."""
    if not _plain(d.ref):
        return None
    ns, cs, _ = d.strides()
    ps = d.rows(sizes)
    if cs != 1 and channels_per_group > 1:
        return None
    if ps is None or (ps < channels_per_group and math.prod(sizes) > 1):
        return None
    ld = ps if math.prod(sizes) > 1 else channels_per_group
    return d.ref.buf, linear([n, g * channels_per_group, p0], [ns, cs, ps]), ld


def _dy_operand(kb, geo: Geometry, dy: Data, n, g, p0, m, tm, rounding):
    """(buffer, offset, ld) of the (m x OCg) matrix of dy for image n, group g from
    position p0: in place when BLAS can read it so, else packed to f32."""
    ocg = geo.ocg
    a = _data_operand(geo, dy, ocg, geo.small, n, g, p0) if rounding is None else None
    if a is not None:
        return a
    buf = kb.alloc(tm * ocg, "f32", prefix="dyp")
    with kb.for_(m, "r") as r:
        pos = unravel(kb, p0 + r, geo.small)
        with kb.for_(ocg, "oc") as oc:
            kb.store(buf, r * ocg + oc, ir.f32(_rounded(dy.load(n, g * ocg + oc, pos), rounding)))
    return buf, ir.const(0), ocg


def _tile_rows(geo: Geometry, items: int, width: int) -> int:
    cpus = os.cpu_count() or 1
    rows = geo.positions
    if items < cpus:
        rows = -(-rows // -(-cpus // items))
    return max(1, min(rows, max(MIN_ROWS, PANEL_ELEMS // max(1, width))))


def emit_forward(kb, geo: Geometry, x: Data, w: Weights, store, rounding=None, out: Data | None = None):
    """dst = conv(x, w): ``store(n, o, spatial ivars, value)`` returns the statements
    storing one dst element (with bias and fused post-ops); ``out``, when the
    store only stores, is dst itself: BLAS then writes into it when it can."""
    G, P, kd, ocg, cg = geo.groups, geo.positions, geo.kd, geo.ocg, geo.cg
    one_by_one = geo.taps == 1 and geo.big == geo.small and all(s == 1 for s in geo.strides) and not any(geo.begin)
    wbuf, woff, ldw, tw = _weights_operand(kb, geo, w, False, rounding)
    tm = _tile_rows(geo, geo.n * G, kd)
    mt = -(-P // tm)
    items = geo.n * G * mt
    with kb.for_(items, "t", items > 1 and worth_parallel(geo.n * P * geo.oc * kd // 8)) as t:
        n = kb.let(t // (G * mt), "n")
        g = kb.let((t // mt) % G, "g")
        p0 = kb.let((t % mt) * tm, "p0")
        m = kb.let(ir.call("min", tm, P - p0), "m")
        a = _data_operand(geo, x, cg, geo.big, n, g, p0) if one_by_one and rounding is None else None
        if a is None:
            abuf, aoff, lda = _im2col(kb, geo, x, n, g, p0, m, rounding), ir.const(0), kd
        else:
            abuf, aoff, lda = a
        c = _data_operand(geo, out, ocg, geo.small, n, g, p0) if out is not None else None
        if c is not None:
            kb.let(ir.call("gemm_f32", 0, tw, m, ocg, kd, abuf, aoff, lda, wbuf, woff(g), ldw, 0.0, *c), "st")
        else:
            tile = kb.alloc(tm * ocg, "f32", prefix="tile")
            kb.let(ir.call("gemm_f32", 0, tw, m, ocg, kd, abuf, aoff, lda, wbuf, woff(g), ldw, 0.0, tile, 0, ocg),
                   "st")
            with kb.for_(m, "r") as r:
                pos = unravel(kb, p0 + r, geo.small)
                row = kb.let(r * ocg, "tr")
                with kb.for_(ocg, "oc") as oc:
                    kb.emit(store(n, g * ocg + oc, pos, tile[row + oc]))


#: rows of virtual positions one tile of the shifted-GEMM forward holds at least
SHIFTED_TILE_ROWS = 384


def shifted(geo: Geometry) -> bool:
    """Unit strides and a window of several taps: the forward convolution runs as
    one GEMM per tap over a padded copy of src (emit_forward_shifted), no im2col."""
    return geo.taps > 1 and all(s == 1 for s in geo.strides)


def emit_forward_shifted(kb, geo: Geometry, x: Data, w: Weights, store, rounding=None):
    """dst = conv(x, w) at unit strides, without im2col.  Each image (and group)
    is copied once, f32, channels last, into a zero-padded buffer whose spatial
    dims are the padded extents ``pd`` (dst size + dilated window - 1).  A dst
    position o then has the *virtual* row ``q = sum(o[t] * vs[t])`` (``vs`` the
    padded buffer's row strides), and tap k reads row ``q + off(k)`` of the
    buffer: for a run of consecutive virtual rows, every tap's operand is a plain
    (rows x Cg) matrix of the buffer.  The tile of dst is the sum over taps of
    those matrices times the tap's (Cg x OCg) weights: T GEMMs accumulating
    (beta 1), then a store loop skipping the virtual rows past dst's inner dims."""
    G, ocg, cg, T = geo.groups, geo.ocg, geo.cg, geo.taps
    pd = [o + (k - 1) * d for o, k, d in zip(geo.small, geo.kernel, geo.dilations)]
    vs = _dense(pd)
    inner = math.prod(pd[1:])
    rows = geo.small[0] * inner                     # virtual rows holding every dst position
    offs = [sum(t * d * v for t, d, v in zip(tap, geo.dilations, vs)) for tap in _taps(geo.kernel)]
    span = rows + max(offs)                          # rows a tap may read
    per = span * cg
    xp = kb.alloc(geo.n * G * per, "f32", fill=0, prefix="xp")
    # 1. the padded copies: (image, group, first src dim) in parallel
    big0 = geo.big[0]
    par = worth_parallel(geo.n * geo.c * geo.big_size)
    with kb.for_(geo.n * G * big0, "t", par and geo.n * G * big0 > 1) as t:
        n = kb.let(t // (G * big0), "n")
        g = kb.let((t // big0) % G, "g")
        i0 = kb.let(t % big0, "i")
        rest = geo.big[1:]
        with kb.for_(math.prod(rest), "b") as b:
            pos = [i0] + [v if v is not None else ir.const(0) for v in unravel(kb, b, rest)]
            vpos = [p + bb for p, bb in zip(pos, geo.begin)]
            inside = None
            for v, d in zip(vpos, pd):
                c = v < d
                inside = c if inside is None else inside & c
            base = kb.let((n * G + g) * per + linear(vpos, vs) * cg, "xb")
            with kb.if_(inside):
                with kb.for_(cg, "ci") as ci:
                    kb.store(xp, base + ci, ir.f32(_rounded(x.load(n, g * cg + ci, pos), rounding)))
    # 2. tiles of virtual rows: whole first-dim rows of dst, T accumulating GEMMs each
    wbuf, woff, ldw, tw = _weights_operand(kb, geo, w, False, rounding)
    wrow = ldw if tw == 0 else 1                    # one weights row (an input channel) further
    cpus = os.cpu_count() or 1
    rt = max(1, min(geo.small[0], -(-SHIFTED_TILE_ROWS // inner)))
    while rt > 1 and geo.n * G * -(-geo.small[0] // rt) < 2 * cpus:
        rt = -(-rt // 2)
    mt = -(-geo.small[0] // rt)
    tm = rt * inner
    items = geo.n * G * mt
    with kb.for_(items, "t", items > 1 and worth_parallel(geo.n * geo.positions * geo.oc * geo.kd // 8)) as t:
        n = kb.let(t // (G * mt), "n")
        g = kb.let((t // mt) % G, "g")
        q0 = kb.let((t % mt) * tm, "q0")
        m = kb.let(ir.call("min", tm, rows - q0), "m")
        tile = kb.alloc(tm * ocg, "f32", prefix="tile")
        base = kb.let((n * G + g) * per + q0 * cg, "xa")
        for k, off in enumerate(offs):
            kb.let(ir.call("gemm_f32", 0, tw, m, ocg, cg, xp, base + off * cg, cg, wbuf,
                           woff(g) + k * cg * wrow, ldw, 0.0 if k == 0 else 1.0, tile, 0, ocg), "st")
        with kb.for_(m, "r") as r:
            q = kb.let(q0 + r, "q")
            opos = [kb.let(q // inner, "o")] + [kb.let((q // v) % d, "o") for v, d in zip(vs[1:], pd[1:])]
            valid = None
            for o, size in zip(opos[1:], geo.small[1:]):
                c = o < size
                valid = c if valid is None else valid & c
            row = kb.let(r * ocg, "tr")
            with (kb.if_(valid) if valid is not None else _nothing()):
                with kb.for_(ocg, "oc") as oc:
                    kb.emit(store(n, g * ocg + oc, opos, tile[row + oc]))


@contextmanager
def _nothing():
    yield


def _taps(kernel):
    """Every tap of the kernel, C order."""
    out = [()]
    for k in kernel:
        out = [t + (i,) for t in out for i in range(k)]
    return out


def emit_backward_data(kb, geo: Geometry, dy: Data, w: Weights, store, rounding=None):
    """dx = the gradient of conv(x, w) w.r.t. x given dy (col2im of dY @ W^T);
    images and groups in parallel, each with its f32 accumulator;
    ``store(n, c, spatial ivars, value)`` stores one element of dx."""
    G, P, kd, ocg, cg = geo.groups, geo.positions, geo.kd, geo.ocg, geo.cg
    wbuf, woff, ldw, tw = _weights_operand(kb, geo, w, True, rounding)
    tm = max(1, min(P, max(MIN_ROWS, PANEL_ELEMS // max(1, kd))))
    mt = -(-P // tm)
    items = geo.n * G
    big = geo.big_size
    with kb.for_(items, "t", items > 1 and worth_parallel(geo.n * P * geo.oc * kd // 8)) as t:
        n = kb.let(t // G, "n")
        g = kb.let(t % G, "g")
        acc = kb.alloc(big * cg, "f32", fill=0, prefix="acc")
        cols = kb.alloc(tm * kd, "f32", prefix="cols")
        with kb.for_(mt, "pt") as pt:
            p0 = kb.let(pt * tm, "p0")
            m = kb.let(ir.call("min", tm, P - p0), "m")
            abuf, aoff, lda = _dy_operand(kb, geo, dy, n, g, p0, m, tm, rounding)
            kb.let(ir.call("gemm_f32", 0, tw, m, kd, ocg, abuf, aoff, lda, wbuf, woff(g), ldw, 0.0, cols, 0, kd),
                   "st")
            with _window_taps(kb, geo, p0, m) as (pos, inside, at):
                base = kb.let(linear(pos, _dense(geo.big)) * cg, "ab")
                with kb.if_(inside):
                    with kb.for_(cg, "ci") as ci:
                        kb.store(acc, base + ci, acc[base + ci] + cols[at + ci])
        with kb.for_(big, "b") as b:
            pos = unravel(kb, b, geo.big)
            row = kb.let(b * cg, "ar")
            with kb.for_(cg, "ci") as ci:
                kb.emit(store(n, g * cg + ci, pos, acc[row + ci]))


def _dense(sizes) -> list:
    out, step = [], 1
    for s in reversed(sizes):
        out.append(step)
        step *= s
    return out[::-1]


def emit_backward_weights(kb, geo: Geometry, x: Data, dy: Data, store, rounding=None):
    """dw = the gradient of conv(x, w) w.r.t. w: per-thread f32 partial sums of
    Cols^T @ dY over (image, group, tile) work items, added up at the end;
    ``store(g, oc, ic, taps, value)`` stores one element of dw."""
    G, P, kd, ocg, cg = geo.groups, geo.positions, geo.kd, geo.ocg, geo.cg
    tm = max(1, min(P, max(MIN_ROWS, PANEL_ELEMS // max(1, kd))))
    mt = -(-P // tm)
    items = geo.n * G * mt
    chunks = max(1, min(items, os.cpu_count() or 1)) if worth_parallel(geo.n * P * geo.oc * kd // 8) else 1
    size = G * kd * ocg
    part = kb.alloc(chunks * size, "f32", fill=0, prefix="part")
    with kb.for_(chunks, "ch", chunks > 1) as ch:
        with kb.for_((items - ch + (chunks - 1)) // chunks, "k") as k:
            t = kb.let(ch + k * chunks, "t")
            n = kb.let(t // (G * mt), "n")
            g = kb.let((t // mt) % G, "g")
            p0 = kb.let((t % mt) * tm, "p0")
            m = kb.let(ir.call("min", tm, P - p0), "m")
            cols = _im2col(kb, geo, x, n, g, p0, m, rounding)
            bbuf, boff, ldb = _dy_operand(kb, geo, dy, n, g, p0, m, tm, rounding)
            kb.let(ir.call("gemm_f32", 1, 0, kd, ocg, m, cols, 0, kd, bbuf, boff, ldb, 1.0, part,
                           ch * size + g * (kd * ocg), ocg), "st")
    with kb.for_(G * ocg, "go", worth_parallel(size * chunks)) as go:
        g = kb.let(go // ocg, "g")
        oc = kb.let(go % ocg, "oc")
        with _tap_loops(kb, geo.kernel) as (taps, flat):
            with kb.for_(cg, "ic") as ic:
                at = kb.let(g * (kd * ocg) + (flat * cg + ic) * ocg + oc, "pa")
                total = part[at]
                for c in range(1, chunks):
                    total = total + part[at + c * size]
                kb.emit(store(g, oc, ic, taps, total))
