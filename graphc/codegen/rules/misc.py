"""Lowering of GenIndex and Dropout (graphc/ops/misc.py), with Dropout's kernel
pieces (the Philox stream in a kernel) that the fused attention kernels use
too.  The markers End and Wildcard do not lower."""
from __future__ import annotations

from ...errors import RuntimeFault
from ...ops.schema import norm_axis
from .. import ir
from ..helpers import use_helper
from ..kernel import worth_parallel
from ..loops import index_nest, unravel
from . import Rule


class GenIndex(Rule):
    kinds = ("GenIndex",)

    def lower(self, op, kb, ins, outs, values):
        dst = outs[0]
        axis = norm_axis(op, op.attr("axis"), len(dst.shape))
        with index_nest(kb, dst.shape, worth_parallel(dst.lt.nelems)) as ivars:
            kb.emit(dst.store_nd(ivars, ivars[axis] if ivars[axis] is not None else ir.const(0)))


# ------------------------------------------------------------------------ Dropout
def _u64(v: int) -> ir.Expr:
    """An unsigned 64-bit constant (numba types a bare integer literal int64, and
    uint64 with int64 is float64 or int64)."""
    return ir.cast(ir.const(v), "u64")


#: pieces of work a parallel Dropout kernel is cut into, at the least
MIN_PIECES = 64


def dropout_params(kb, seed, offset, prob) -> tuple:
    """(p, scale, key, ctr) of a Dropout in a kernel, from its seed, offset and
    probability refs (one element each); the kernel returns 0 (kernel_fault) when
    p is outside [0, 1].  Also makes the Philox helper available."""
    p = kb.let(ir.f64(prob.load(0)), "p")
    with kb.if_(~((p >= 0.0) & (p <= 1.0))):
        kb.ret(0)
    scale = kb.let(ir.select(p < 1.0, 1.0 / (1.0 - p), 0.0), "scale")
    key = kb.let(ir.u64(seed.load(0)), "key")
    ctr = kb.let(ir.u64(offset.load(0)), "ctr")
    use_helper(kb, "philox4x32_10")
    return p, scale, key, ctr


def philox_words(kb, store, first, count, key, ctr) -> None:
    """``store(i, word)`` (a statement) for the 4 * ``count`` random words of the
    Philox blocks first.., as graphc.ops.misc.dropout_uniform numbers them:
    element e's word is word e % 4 of block e // 4."""
    low, bits = _u64(0xFFFFFFFF), _u64(32)
    with kb.for_(count, "k") as k:
        blk = ir.u64(first + k)
        w = kb.let(ir.call("philox4x32_10", blk & low, blk >> bits, ctr & low, ctr >> bits, key & low,
                           key >> bits, dt="arr:u64"), "pw")   # (four words: indexed like an array)
        for j in range(4):
            kb.emit(store(k * 4 + j, w[j]))


def dropout_keep(word, p) -> ir.Expr:
    """Whether the element of random ``word`` is kept at probability ``p`` (f64)."""
    return ir.f64(word) * 2.0 ** -32 > p


class Dropout(Rule):
    kinds = ("Dropout",)

    def lower(self, op, kb, ins, outs, values):
        """Philox blocks of 4 elements (row-major), as graphc.ops.misc.dropout_uniform:
        per row of the last dim, the words of the blocks covering it go to a scratch
        array (Philox is scalar work), then one loop over the row keeps or drops each
        element, a loop that vectorizes with whatever a fused prologue computes."""
        src, seed, offset, prob = ins
        p, scale, key, ctr = dropout_params(kb, seed, offset, prob)
        n = src.lt.nelems
        if n == 0:
            return
        shape = list(src.shape) or [1]
        width = shape[-1]
        rows = n // width
        par = worth_parallel(n)
        # a long row is cut into pieces, so that threads share the Philox work too
        split = max(1, min(-(-MIN_PIECES // rows), width // 256)) if par else 1
        piece = -(-width // split)
        with kb.for_(rows * split, "q", par and rows * split > 1) as q:
            r, c = (kb.let(q // split, "r"), kb.let(q % split, "c")) if split > 1 else (q, None)
            lead = unravel(kb, r, shape[:-1]) if len(src.shape) > 1 else []
            lo = kb.let(c * piece, "lo") if split > 1 else ir.const(0)
            hi = kb.let(ir.call("min", lo + piece, width), "hi") if split > 1 else ir.const(width)
            start = kb.let(r * width + lo, "e")
            first = kb.let(start // 4, "b")
            words = kb.alloc(4 * ((piece + 3) // 4 + 1), "u64", prefix="w")
            philox_words(kb, lambda i, w: ir.Store(words, i, w), first, (start + (hi - lo) + 3) // 4 - first,
                         key, ctr)
            skip = kb.let(start - first * 4 - lo, "o")
            with kb.for_(hi, "j", start=lo) as j:
                ivars = (lead + [j]) if src.shape else []
                keep = dropout_keep(words[ir.u64(skip + j)], p)
                kb.emit(outs[0].store_nd(ivars, ir.select(keep, src.load_nd(ivars) * scale, 0.0)))
                if len(outs) > 1:
                    kb.emit(outs[1].store_nd(ivars, ir.select(keep, 1, 0)))

    def kernel_fault(self, op, status, inputs_by_id):
        p = float(inputs_by_id[op.input("probability").id].reshape(-1)[0])
        return RuntimeFault("dropout probability out of range", op=op, where="input 'probability'",
                            expected="a value in [0, 1]", found=p)
