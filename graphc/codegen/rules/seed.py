"""Lowering of the seed ops (graphc/ops/seed.py): AddBackward sums diff_dst
to each operand's shape, Embedding and EmbeddingBackward check their indices
first (a failing index is the kernel's status: ``kernel_fault``), then copy rows
by index or sum rows into them, SwiGlu and SwiGluGrad loop over the halves of src
in float32."""
from __future__ import annotations

import math

import numpy as np

from .. import ir
from ..elementwise import collapse
from ..helpers import use_helper
from ..kernel import worth_parallel
from ..loops import index_nest, linear, unravel
from ..sum_to import sum_to
from . import Rule


class AddBackward(Rule):
    kinds = ("AddBackward",)

    def lower(self, op, kb, ins, outs, values):
        sum_to(kb, ins[0], outs)


class _RowsByIndex(Rule):
    """An op reading weight rows by index: its kernel checks every index, in
    logical order, before it reads or writes a row, and returns the flat position
    of the first one out of range (``kernel_fault`` names it)."""

    def kernel_fault(self, op, status, inputs_by_id):
        return op.schema.index_fault(op, np.asarray(inputs_by_id[op.input("indices").id]), status)

    def faults_before_writing(self, op) -> bool:
        return True

    def checked_indices(self, kb, idx, rows: int) -> ir.Expr:
        """A scratch array of the indices, each checked in [0, rows)."""
        n = idx.lt.nelems
        ids = kb.alloc(n, "int", prefix="ids")
        dims, (st,) = collapse(idx.shape, [idx.strides])
        with kb.for_(n, "i") as i:
            x = kb.let(idx.load(linear(unravel(kb, i, dims), st)), "x")
            with kb.if_((x < 0) | (x >= rows)):
                kb.ret(i)
            kb.store(ids, i, x)
        return ids


class Embedding(_RowsByIndex):
    kinds = ("Embedding",)

    def lower(self, op, kb, ins, outs, values):
        """Check every index first (nothing is written on a bad one); then each
        token copies its weight row into its dst row, bits as they are (weight
        and dst share a dtype), tokens in parallel when the copy is large."""
        idx, w = ins
        dst = outs[0]
        rows, dim = w.shape
        n = idx.lt.nelems
        ids = self.checked_indices(kb, idx, rows)
        lead, (sd,) = collapse(dst.shape[:-1], [dst.strides[:-1]])
        with kb.for_(n, "t", worth_parallel(n * dim) and n > 1) as t:
            bw = kb.let(ids[t] * w.strides[0], "bw")
            bd = kb.let(linear(unravel(kb, t, lead), sd), "bd")
            with kb.for_(dim, "j") as j:
                kb.emit(dst.store_int(linear([j], [dst.strides[-1]], bd), w.at(linear([j], [w.strides[1]], bw))))


class EmbeddingBackward(_RowsByIndex):
    kinds = ("EmbeddingBackward",)

    def lower(self, op, kb, ins, outs, values):
        """Validate every index first; then group the tokens by row (a counting
        sort) and let each row of diff_weight sum its tokens' diff_dst rows in a
        float64 accumulator, rows in parallel: every row is written once, no races.
        Sums round to float32, then to bf16/f16 (keeps the stores vectorized)."""
        idx, _, dy = ins
        dw = outs[0]
        rows, dim = dw.shape
        n = idx.lt.nelems
        # 1. indices, checked in logical order before anything is written
        ids = self.checked_indices(kb, idx, rows)
        # 2. tokens grouped by row: row r's tokens are order[first[r]:first[r + 1]]
        first = kb.alloc(rows + 1, "int", fill=0, prefix="first")
        with kb.for_(n, "i") as i:
            at = ids[i] + 1
            kb.store(first, at, first[at] + 1)
        with kb.for_(rows, "i") as i:
            kb.store(first, i + 1, first[i + 1] + first[i])
        fill = kb.alloc(rows, "int", prefix="fill")
        with kb.for_(rows, "i") as i:
            kb.store(fill, i, first[i])
        order = kb.alloc(n, "int", prefix="order")
        with kb.for_(n, "i") as i:
            row = ids[i]
            kb.store(order, fill[row], i)
            kb.store(fill, row, fill[row] + 1)
        # 3. rows of diff_weight
        lead, (sd,) = collapse(dy.shape[:-1], [dy.strides[:-1]])
        pad = op.attr("padding_idx")

        def dy_row(tok):
            """The offsets of token ``tok``'s diff_dst row, by column."""
            by = kb.let(linear(unravel(kb, tok, lead), sd), "by")
            return lambda j: linear([j], [dy.strides[-1]], by)
        with kb.for_(rows, "r", worth_parallel(rows * dim) and rows > 1) as r:
            lo = kb.let(first[r], "lo")
            cnt = kb.let(first[r + 1] - lo, "cnt")
            bw = kb.let(r * dw.strides[0], "bw")

            def out(j):
                return linear([j], [dw.strides[1]], bw)
            empty = cnt.eq(0) if pad is None else cnt.eq(0) | r.eq(int(pad))
            with kb.if_(empty) as none:
                with kb.for_(dim, "j") as j:
                    kb.emit(dw.store_int(out(j), 0))
            with kb.else_(none), kb.if_(cnt.eq(1)) as one:
                at = dy_row(order[lo])
                with kb.for_(dim, "j") as j:
                    kb.emit(dw.store(out(j), dy.load(at(j))))
                with kb.else_(one):
                    acc = kb.alloc(dim, "f64", fill=0, prefix="acc")
                    with kb.for_(lo + cnt, "k", start=lo) as k:
                        at = dy_row(order[k])
                        with kb.for_(dim, "j") as j:
                            kb.store(acc, ir.u64(j), acc[ir.u64(j)] + dy.load(at(j)))
                    with kb.for_(dim, "j") as j:
                        kb.emit(dw.store(out(j), ir.f32(acc[ir.u64(j)])))


class _SwiGluBase(Rule):
    """A loop over the halves A and B of src along the op's ``dim``."""

    def emit_halves(self, op, kb, shape, body) -> None:
        """A loop over ``shape`` (src's with dim halved); body(ia, ib) emits one
        element's code given the multi-indices of its A and B halves in src."""
        axis = op.schema.split_axis(op)

        use_helper(kb, "sigmoid_f32")
        with index_nest(kb, shape, worth_parallel(math.prod(shape))) as ivars:
            ib = list(ivars)
            ib[axis] = ir.const(shape[axis]) if ivars[axis] is None else ivars[axis] + shape[axis]
            body(ivars, ib)


class SwiGlu(_SwiGluBase):
    kinds = ("SwiGlu",)

    def lower(self, op, kb, ins, outs, values):
        """One loop over dst in float32 (prologues fuse into the loads of src,
        epilogues into the store of dst; their values are taken as float32)."""
        x, y = ins[0], outs[0]

        def element(ia, ib):
            a = kb.let(ir.f32(x.load_nd(ia)), "xa")  # (kernel arguments are a0, a1, ...)
            kb.emit(y.store_nd(ia, a * ir.call("sigmoid_f32", a) * ir.f32(x.load_nd(ib))))
        self.emit_halves(op, kb, y.shape, element)


class SwiGluGrad(_SwiGluBase):
    kinds = ("SwiGluGrad",)

    def lower(self, op, kb, ins, outs, values):
        """One loop over diff_dst in float32 writing both halves of diff_src."""
        dy, x = ins
        dx = outs[0]

        def element(ia, ib):
            g = kb.let(ir.f32(dy.load_nd(ia)), "dy")
            a = kb.let(ir.f32(x.load_nd(ia)), "xa")
            b = kb.let(ir.f32(x.load_nd(ib)), "xb")
            s = kb.let(ir.call("sigmoid_f32", a), "sig")
            kb.emit(dx.store_nd(ia, g * b * s * (1.0 + a * (1.0 - s))))
            kb.emit(dx.store_nd(ib, g * a * s))
        self.emit_halves(op, kb, dy.shape, element)
