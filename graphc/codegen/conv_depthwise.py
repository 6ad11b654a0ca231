"""The fused 1x1 -> depthwise convolution (a ``conv_depthwise`` plan,
passes/conv_depthwise_plan.py): oneDNN's conv + depthwise post-op, the block of
an inverted residual (MobileNet, EfficientNet) as one kernel.

Per work item (an image, a block of the depthwise dst's rows, a run of blocks
of its channels), in parallel:

1. the 1x1 convolution's src rows the block's windows meet, all channels,
   copied once into a panel laid out as the depthwise loop reads its src: each
   row padded as the window's pads ask, its columns split by phase modulo the
   stride (column P of a padded row at (P % s) * Wp + P // s);
2. per block of channels, one GEMM: tile (channels x rows of that layout) =
   W1 @ panel (a 1x1 convolution maps columns to columns, so the tile has the
   panel's layout);
3. its epilogue in place: the 1x1 convolution's bias and the pointwise ops up
   to the depthwise convolution's src (graphc.codegen.fused_values.Values),
   zeros in the pad columns and in rows above and below the image;
4. the depthwise convolution over the tile (each dst row a loop over its last
   index of the taps' products, every load contiguous and unconditional, summed
   in f32 in tap order), its bias and its epilogue stored as any anchor's
   (EpilogueRef).

The 1x1 convolution's dst never leaves the cache: unfused it was written and
read again whole (2x32x112x112 -> 64 channels: 6.4 MB each way), and the
unfused depthwise loop clamped and selected its loads in the padding (a
gather per tap at stride 2).  Blocks of dst rows overlap in the src rows their
windows meet: (k - s) rows of the 1x1 convolution are computed twice per block."""

from __future__ import annotations

from . import ir
from .conv import weights_operand
from .conv_views import Data, Geometry, Weights, rounded
from .fused_values import EpilogueRef, Values
from .gemm import fpmath_rounding
from .kernel import plan_threads, worth_parallel
from ..ops.conv import oix_axes, split_data, split_weights, window

#: f32 elements of an item's panel (the 1x1 convolution's src rows) at most, but one row
PANEL_ELEMS = 1 << 17
#: f32 elements of a block's tile (its dst rows) at most, but one channel
TILE_ELEMS = 1 << 16


def _geometry(op, x, y, w) -> Geometry:
    n, c, big = split_data(op, x.shape)
    _, oc, small = split_data(op, y.shape)
    kernel = split_weights(op, w.shape)[2]
    win = window(op, big, kernel)
    return Geometry(n, c, oc, op.attr("groups"), tuple(big), tuple(small), win.kernel, win.strides,
                    win.dilations, win.begin)


def _weights(op, ref) -> Weights:
    return Weights(ref, oix_axes(op.attr("weights_format"), len(ref.shape)), op.attr("groups"), False)


def _bias(op, refs):
    return refs[op.inputs[2].id] if len(op.inputs) > 2 else None


class _Layout:
    """The depthwise convolution's tile: per channel, ``rows`` padded rows of
    ``width`` (= s * phase) elements, padded column P at (P % s) * phase + P // s."""

    def __init__(self, g: Geometry, rows: int):
        (_, W), (_, OW) = g.big, g.small
        s, d, k, pl = g.strides[1], g.dilations[1], g.kernel[1], g.begin[1]
        self.s, self.pl = s, pl
        self.padded = max(W + pl, (OW - 1) * s + (k - 1) * d + 1)
        self.phase = -(-self.padded // s)
        self.width = s * self.phase
        self.plane = rows * self.width
        #: row positions of the padded columns outside the image (zeros)
        self.zeros = sorted({self.column(P) for P in range(self.padded) if not pl <= P < pl + W})

    def column(self, P: int) -> int:
        return P % self.s * self.phase + P // self.s

    def tap_offset(self, kw: int, d: int) -> int:
        """Where dst column 0's tap ``kw`` lies in a row (dst column ow: + ow)."""
        return self.column(kw * d)


def _blocks(pw: Geometry, dw: Geometry):
    """(dst rows per item, channels per block, blocks per item, items): an item
    packs its panel once and runs its blocks of channels over it; rows as many
    as the panel's budget allows (each block of rows recomputes k - s rows of
    the 1x1 convolution), then, while items are fewer than two per thread,
    fewer channel blocks per item (each item packs its panel again), then
    fewer rows."""
    (H, W), (OH, _) = dw.big, dw.small
    k, s, d = dw.kernel[0], dw.strides[0], dw.dilations[0]
    wide = _Layout(dw, 1).width

    def rows(rb):
        return (rb - 1) * s + (k - 1) * d + 1

    rb = 1
    while rb < OH and rows(rb + 1) * wide * pw.c <= PANEL_ELEMS:
        rb += 1
    cb = max(1, min(pw.oc, TILE_ELEMS // (rows(rb) * wide)))
    ncb = -(-pw.oc // cb)
    cb = -(-pw.oc // ncb)                      # blocks of even size

    def balanced(rb):
        return -(-OH // -(-OH // rb))

    rb = balanced(rb)
    per = ncb
    need = 2 * plan_threads()
    while pw.n * -(-OH // rb) * -(-ncb // per) < need and (per > 1 or rb > 1):
        if per > 1:
            per = -(-per // 2)
        else:
            rb = balanced(-(-rb // 2))
    return rb, cb, per, pw.n * -(-OH // rb) * -(-ncb // per)


def lower_conv_depthwise(kb, ops, refs, plan) -> None:
    """Emit the partition ``ops`` (a 1x1 Convolution, pointwise ops, a depthwise
    Convolution, pointwise ops) as one kernel, following ``plan``."""
    kb.road("conv_depthwise")
    by_id = {o.id: o for o in ops}
    pw, dw = by_id[plan.anchors[0]], by_id[plan.anchors[1]]
    values = Values(ops, refs, kb, plan.anchors)
    x = Data(refs[pw.inputs[0].id], False)
    w1, w2 = _weights(pw, refs[pw.inputs[1].id]), _weights(dw, refs[dw.inputs[1].id])
    b1, b2 = _bias(pw, refs), _bias(dw, refs)
    r1, r2 = fpmath_rounding(pw), fpmath_rounding(dw)
    mid, src2, out = pw.outputs[0], dw.inputs[0], dw.outputs[0]
    g1 = _geometry(pw, pw.inputs[0], mid, pw.inputs[1])
    g2 = _geometry(dw, src2, out, dw.inputs[1])
    stored = [t for o in ops if o.id in plan.epilogue for t in o.outputs if t.id in refs]
    if out.id in refs:
        stored.insert(0, out)
    dst = Data(EpilogueRef(out, values, stored, kb) if plan.epilogue else refs[out.id], False)

    (H, W), (OH, OW) = g2.big, g2.small
    k, s, d, pt = g2.kernel[0], g2.strides[0], g2.dilations[0], g2.begin[0]
    C, OC = g1.c, g1.oc
    rb, cb, per, items = _blocks(g1, g2)
    nrb, ncb = -(-OH // rb), -(-OC // cb)
    ngr = -(-ncb // per)
    rows_max = (rb - 1) * s + (k - 1) * d + 1
    lay = _Layout(g2, rows_max)
    wbuf, woff, ldw, tw = weights_operand(kb, g1, w1, True, r1, True)
    oc_step = ldw if tw == 0 else 1
    par = items > 1 and worth_parallel(g1.n * g1.positions * (C * OC + OC * g2.taps) // 8)
    taps = [(kh, kw) for kh in range(k) for kw in range(g2.kernel[1])]
    sw, zeros = lay.s, lay.zeros
    phases = [(ph, (ph - lay.pl) % sw) for ph in range(sw) if (ph - lay.pl) % sw < W]

    def columns(kb, at, body):
        """body(image column w, row position) over a padded row's image columns,
        phase after phase (each phase's positions contiguous)."""
        for ph, w0 in phases:
            with kb.for_(-(-(W - w0) // sw), "i") as i:
                w = kb.let(i * sw + w0, "w") if sw > 1 or w0 else i
                body(w, kb.let(at + (ph * lay.phase + (w0 + lay.pl) // sw) + i, "q"))

    with kb.for_(items, "t", par) as t:
        panel = kb.scratch(C * lay.plane, "f32", par, prefix="cols")
        tile = kb.scratch(cb * lay.plane, "f32", par, prefix="tile")
        n = kb.let(t // (nrb * ngr), "n")
        o0 = kb.let((t // ngr) % nrb * rb, "o0")
        b0 = kb.let(t % ngr * per, "b0")
        cr = kb.let(ir.call("min", rb, OH - o0), "cr")
        top = kb.let(o0 * s - pt, "top")              # the image row of the tile's row 0
        used = kb.let((cr - 1) * s + (k - 1) * d + 1, "used")
        lo = kb.let(ir.call("max", 0, top), "lo")
        hi = kb.let(ir.call("min", H, top + used), "hi")
        cols = kb.let((hi - lo) * lay.width, "nc")
        # 1. the src rows, every channel, laid out as the tile's rows (pads 0)
        with kb.for_(C, "ci") as ci:
            with kb.for_(hi - lo, "rr") as rr:
                row = kb.let(ci * cols + rr * lay.width, "pr")
                for P in zeros:
                    kb.emit(panel.store(row + P, ir.const(0.0, "f32")))
                columns(kb, row, lambda w, q: kb.emit(
                    panel.store(q, ir.f32(rounded(x.load(n, ci, [lo + rr, w]), r1)))))
        with kb.for_(ir.call("min", per, ncb - b0), "cbk") as cbk:
            c0 = kb.let((b0 + cbk) * cb, "c0")
            cc = kb.let(ir.call("min", cb, OC - c0), "cc")
            # 2. the 1x1 convolution of the block's channels, into the tile's rows of the image
            kb.let(ir.call("gemm_f32", tw, 0, cc, cols, C, wbuf, woff(0) + c0 * oc_step, ldw,
                           panel.buf, panel.at(0), cols, 0.0, tile.buf, tile.at((lo - top) * lay.width), lay.plane),
                   "st")
            # 3. its bias and post-ops in place; zeros in the pads
            with kb.for_(cc, "j") as j:
                c = kb.let(c0 + j, "c")
                plane = kb.let(j * lay.plane, "pl")
                with kb.for_(used, "rr") as rr:
                    h = kb.let(top + rr, "h")
                    at = kb.let(plane + rr * lay.width, "pa")
                    with kb.if_((h >= 0) & (h < H)) as branch:
                        for P in zeros:
                            kb.emit(tile.store(at + P, ir.const(0.0, "f32")))
                        if b1 is not None or src2.id != mid.id:
                            def post(w, q):
                                v = kb.let(tile[q], "y")
                                if b1 is not None:
                                    v = v + b1.load_nd([c])
                                with values.binding({mid.id: v}):
                                    value = values.at(src2.id, src2, [n, c, h, w], tuple(src2.shape))
                                kb.emit(tile.store(q, ir.f32(value)))
                            columns(kb, at, post)
                        with kb.else_(branch):
                            with kb.for_(lay.width, "z") as z:
                                kb.emit(tile.store(at + z, ir.const(0.0, "f32")))
            # 4. the depthwise convolution over the padded tile
            with kb.for_(cc, "j") as j:
                c = kb.let(c0 + j, "c")
                wv = [kb.let(ir.f32(rounded(w2.load(c, ir.const(0), ir.const(0), [ir.const(a), ir.const(b)]), r2)),
                             "wt") for a, b in taps]
                with kb.for_(cr, "rr") as rr:
                    base = kb.let(j * lay.plane + rr * (s * lay.width), "rb")
                    with kb.for_(ir.call("hidden_int", OW, dt="int"), "ow") as ow:
                        acc = None
                        for (kh, kw), wt in zip(taps, wv):
                            at = base + (kh * d * lay.width + lay.tap_offset(kw, g2.dilations[1])) + ow
                            term = ir.f32(rounded(tile[at], r2)) * wt
                            acc = term if acc is None else acc + term
                        if b2 is not None:
                            acc = acc + b2.load_nd([c])
                        kb.emit(dst.store(n, c, [o0 + rr, ow], acc))
    kb.ret(-1)


__all__ = ["lower_conv_depthwise"]
