"""Lowering of the pooling ops (graphc/ops/pool.py) on the window loop nests
(graphc.codegen.window): window sums and maxima forward, gathers over the
windows covering each element backward."""
from __future__ import annotations

import math

import numpy as np

from .. import ir
from ..window import Geometry
from ...errors import RuntimeFault
from ...ops.conv import runtime_shape, split_data
from . import Rule

#: kernels sum in float32 up to this many terms (taps of a window, or windows
#: covering an element), in float64 beyond (the reference sums in float64)
F32_TERMS = 64


def _acc_type(terms: int) -> str:
    return "f32" if terms <= F32_TERMS else "f64"


def geometry(op, big, small, reads, written) -> Geometry:
    """The kernel's windows: ``big`` the src side (an input or diff_src), ``small``
    the dst side; loops follow the layouts of the ``reads`` and the ``written``."""
    n, c, sizes = split_data(op, big.shape)
    return Geometry(op.schema.window(op, sizes), op.attr("data_format") == "NXC", n, c, sizes,
                    split_data(op, small.shape)[2], reads, written)


class AvgPool(Rule):
    kinds = ("AvgPool",)

    def lower(self, op, kb, ins, outs, values):
        """Window sums (float32, float64 past F32_TERMS taps) divided by the kernel
        size or, with exclude_pad, by the number of taps meeting src."""
        src, dst = ins[0], outs[0]
        geo = geometry(op, src, dst, [src], dst)
        elem = _acc_type(math.prod(geo.win.kernel))

        def divided(total, o):
            div = geo.divisor(kb, o) if op.attr("exclude_pad") else math.prod(geo.win.kernel)
            return total / ir.cast(div, elem)

        if geo.direct_ok():
            geo.direct(kb, elem, 0.0, lambda n, c, i: src.load_nd(geo.index(n, c, i)), lambda a, x: a + x,
                       lambda total, n, c, o: kb.emit(dst.store_nd(geo.index(n, c, o), divided(total, o))))
            return

        def update(rows, v, n, c, o, i, tap):
            kb.store(rows[0], v, rows[0][v] + src.load_nd(geo.index(n, c, i)))

        def finish(rows, v, n, c, o):
            kb.emit(dst.store_nd(geo.index(n, c, o), divided(rows[0][v], o)))
        geo.windows(kb, [(elem, 0.0)], update, finish)


class AvgPoolBackward(Rule):
    kinds = ("AvgPoolBackward",)

    def lower(self, op, kb, ins, outs, values):
        """Each diff_src element gathers diff_dst / divisor (times a reciprocal) of the
        windows covering it.
        A src_shape input must hold diff_src's shape (else status: the first dim that differs)."""
        dy, dx = ins[0], outs[0]
        if op.input("src_shape") is not None:
            shape = ins[op.input_names.index("src_shape")]
            for k, dim in enumerate(dx.shape):
                with kb.if_(shape.load_nd([ir.const(k)]).ne(dim)):
                    kb.ret(k)
        geo = geometry(op, dx, dy, [dy], dx)
        elem = _acc_type(geo.overlap())

        def contribute(rows, v, n, c, i, o, tap):
            scale = geo.reciprocal(kb, o, elem) if op.attr("exclude_pad") else \
                ir.const(1.0 / math.prod(geo.win.kernel), elem)
            kb.store(rows[0], v, rows[0][v] + ir.cast(dy.load_nd(geo.index(n, c, o)), elem) * scale)

        def finish(rows, v, n, c, i):
            kb.emit(dx.store_nd(geo.index(n, c, i), rows[0][v]))
        geo.gather(kb, [(elem, 0.0)], contribute, finish)

    def kernel_fault(self, op, status, inputs_by_id):
        value = inputs_by_id[op.input("src_shape").id]
        dy = op.input("diff_dst")
        try:
            shape = runtime_shape(op, "src_shape", value, dy.ndim,
                                  lambda s: op.schema.backward_shape(op, s, dy.shape))
        except RuntimeFault as e:
            return e
        return RuntimeFault("input 'src_shape' differs from the diff_src shape the kernel was compiled for", op=op,
                            where="input 'src_shape'", expected=list(op.outputs[0].shape), found=list(shape))


class MaxPool(Rule):
    kinds = ("MaxPool",)

    def lower(self, op, kb, ins, outs, values):
        """Window maxima; NaN propagates (as np.maximum), a window only in the padding is -inf."""
        src, dst = ins[0], outs[0]
        geo = geometry(op, src, dst, [src], dst)

        def update(rows, v, n, c, o, i, tap):
            x, best = kb.let(src.load_nd(geo.index(n, c, i)), "x"), rows[0][v]
            kb.store(rows[0], v, ir.select((x > best) | x.ne(x), x, best))

        def finish(rows, v, n, c, o):
            kb.emit(dst.store_nd(geo.index(n, c, o), rows[0][v]))
        geo.windows(kb, [("f32", -np.inf)], update, finish)


class MaxPoolBackward(Rule):
    kinds = ("MaxPoolBackward",)

    def lower(self, op, kb, ins, outs, values):
        """Two passes: the first maximal tap of each window (C order; taps in the
        padding are -inf and never win, tap 0 when none is above -inf), into an int32
        scratch array; then each diff_src element gathers the diff_dst of the windows
        whose first maximum it is."""
        src, dy = ins
        dx = outs[0]
        geo = geometry(op, src, dy, [src, dy], dx)
        first = kb.alloc(geo.n * geo.c * math.prod(geo.small), "i32", prefix="argmax")

        def update(rows, v, n, c, o, i, tap):
            x = kb.let(src.load_nd(geo.index(n, c, i)), "x")
            better = kb.let(x > rows[0][v], "gt")
            kb.store(rows[0], v, ir.select(better, x, rows[0][v]))
            kb.store(rows[1], v, ir.select(better, tap, rows[1][v]))

        def keep(rows, v, n, c, o):
            kb.store(first, geo.small_flat(n, c, o), rows[1][v])
        geo.windows(kb, [("f32", -np.inf), ("i32", 0)], update, keep)
        elem = _acc_type(geo.overlap())

        def contribute(rows, v, n, c, i, o, tap):
            hit = first[geo.small_flat(n, c, o)].eq(tap)
            kb.store(rows[0], v, rows[0][v] + ir.select(hit, dy.load_nd(geo.index(n, c, o)), 0.0))

        def finish(rows, v, n, c, i):
            kb.emit(dx.store_nd(geo.index(n, c, i), rows[0][v]))
        geo.gather(kb, [(elem, 0.0)], contribute, finish)
