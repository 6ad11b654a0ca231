"""GenIndex, Dropout and the graph-building markers End and Wildcard
(docs: GenIndex.md, Dropout.md, End.md, Wildcard.md)."""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np

from ..codegen import ir
from ..codegen.kernel import worth_parallel
from ..codegen.loops import index_nest, unravel
from ..errors import InvalidDataType, RuntimeFault, Unimplemented
from .schema import Attr, DtypeTable, In, OpSchema, Out, bad_shape, norm_axis, same_dtype

ANY_COUNT = 10 ** 6


class GenIndex(OpSchema):
    kind = "GenIndex"
    family = "misc"
    doc = "dst[..., i, ...] = i, the index along axis, in src's shape"
    inputs = (In("src"),)
    outputs = (Out("dst"),)
    attrs = (Attr("axis", "s64"),)
    dtypes = DtypeTable(["src", "dst"], [("f32", "s32"), ("bf16", "s32"), ("f16", "s32")])

    def infer(self, op):
        src = op.inputs[0].shape
        norm_axis(op, op.attr("axis"), len(src))
        return [src]

    def reference(self, op, src):
        axis = norm_axis(op, op.attr("axis"), src.ndim)
        index = np.arange(src.shape[axis]).reshape([-1 if i == axis else 1 for i in range(src.ndim)])
        return (np.broadcast_to(index, src.shape),)

    def lower(self, op, kb, ins, outs):
        dst = outs[0]
        axis = norm_axis(op, op.attr("axis"), len(dst.shape))
        with index_nest(kb, dst.shape, worth_parallel(dst.lt.nelems)) as ivars:
            kb.emit(dst.store_nd(ivars, ivars[axis] if ivars[axis] is not None else ir.const(0)))


# ------------------------------------------------------------------------ Dropout
_MASK32 = np.uint64(0xFFFFFFFF)
_PHILOX_M = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)


def philox4x32_10(counter, key):
    """Philox4x32-10 (Salmon et al., SC'11; Random123's philox4x32): four arrays
    of 32-bit counter words (held in uint64) and two 32-bit key ints -> four
    arrays of 32-bit random words."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) for c in counter)
    k0, k1 = key
    for _ in range(10):
        p0, p1 = _PHILOX_M[0] * c0, _PHILOX_M[1] * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), p1 & _MASK32,
                          (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1), p0 & _MASK32)
        k0, k1 = (k0 + _PHILOX_W[0]) & 0xFFFFFFFF, (k1 + _PHILOX_W[1]) & 0xFFFFFFFF
    return c0, c1, c2, c3


def dropout_uniform(shape, seed: int, offset: int) -> np.ndarray:
    """Uniform [0, 1) numbers, one per element of ``shape``: element i (row-major)
    is word i % 4 of philox4x32_10(counter=(lo(i // 4), hi(i // 4), lo(offset),
    hi(offset)), key=(lo(seed), hi(seed))), times 2^-32."""
    n = int(np.prod(shape))
    block = np.arange((n + 3) // 4, dtype=np.uint64)
    seed, offset = seed & (2 ** 64 - 1), offset & (2 ** 64 - 1)
    counter = (block & _MASK32, block >> np.uint64(32),
               np.full_like(block, offset & 0xFFFFFFFF), np.full_like(block, offset >> 32))
    words = np.stack(philox4x32_10(counter, (seed & 0xFFFFFFFF, seed >> 32)), axis=1).reshape(-1)[:n]
    return (words.astype(np.float64) * 2.0 ** -32).reshape(shape)


def _u64(v: int) -> ir.Expr:
    """An unsigned 64-bit constant (numba types a bare integer literal int64, and
    uint64 with int64 is float64 or int64)."""
    return ir.cast(ir.const(v), "u64")


#: philox4x32_10 for kernels: the same rounds on uint64-held 32-bit words
PHILOX_KERNEL_SOURCE = """\
@njit(cache=True, inline="always", nogil=True)
def philox4x32_10(c0, c1, c2, c3, k0, k1):
    lo = np.uint64(0xFFFFFFFF)
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & lo,
                          (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & lo)
        k0 = (k0 + np.uint64(0x9E3779B9)) & lo
        k1 = (k1 + np.uint64(0xBB67AE85)) & lo
    return c0, c1, c2, c3"""


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
    if PHILOX_KERNEL_SOURCE not in kb.helpers:
        kb.helpers.append(PHILOX_KERNEL_SOURCE)
    return p, scale, key, ctr


def philox_words(kb, store, first, count, key, ctr) -> None:
    """``store(i, word)`` (a statement) for the 4 * ``count`` random words of the
    Philox blocks first.., as :func:`dropout_uniform` numbers them: element e's
    word is word e % 4 of block e // 4."""
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


class Dropout(OpSchema):
    """mask = U(seed, offset) > probability; dst = mask * src / (1 - probability).

    The reference is deterministic in (src shape, seed, offset): U is the
    counter-based Philox4x32-10 stream of :func:`dropout_uniform`.  oneDNN uses
    "a variation of Philox", so masks match oneDNN's in distribution, not bit
    for bit.  Backward is the same op applied to diff_dst with the same seed
    and offset.  With probability 1 every element drops and dst is 0.
    """

    kind = "Dropout"
    family = "misc"
    doc = "randomly zeroes src elements with a given probability, scaling the rest by 1/(1-p)"
    inputs = (In("src"), In("seed", doc="one integer (u64 in oneDNN)"), In("offset", doc="one integer (u64 in oneDNN)"),
              In("probability", doc="one f32 in [0, 1]"))
    outputs = (Out("dst"), Out("mask", optional=True, doc="u8: 1 where src was kept, 0 where dropped"))
    # seed and offset are u64 in oneDNN; graphc has no u64, so check() takes any integer type
    dtypes = DtypeTable(["src|dst", "mask", "probability"],
                        [("f32", "u8", "f32"), ("bf16", "u8", "f32"), ("f16", "u8", "f32")])

    def check(self, op):
        for name in ("seed", "offset", "probability"):
            t = op.input(name)
            if name != "probability" and not t.dtype.is_int:
                raise InvalidDataType("seed and offset must be integers", op=op, where=f"port '{name}'",
                                      expected="an integer type (u64 in oneDNN)", found=str(t.dtype))
            if t.nelems not in (1, -1):
                raise bad_shape(op, "must hold one value", where=f"port '{name}'", expected="one element",
                                found=list(t.shape))

    def infer(self, op):
        return [op.inputs[0].shape] * len(op.outputs)

    def reference(self, op, src, seed, offset, probability):
        for name, v in (("seed", seed), ("offset", offset), ("probability", probability)):
            if v.size != 1:
                raise RuntimeFault("must hold one value", op=op, where=f"input '{name}'", found=list(v.shape))
        p = float(probability.reshape(-1)[0])
        if not 0.0 <= p <= 1.0:
            raise RuntimeFault("dropout probability out of range", op=op, where="input 'probability'",
                               expected="a value in [0, 1]", found=p)
        mask = dropout_uniform(src.shape, int(seed.reshape(-1)[0]), int(offset.reshape(-1)[0])) > p
        dst = np.where(mask, src * (1.0 / (1.0 - p) if p < 1.0 else 0.0), 0.0)
        return (dst, mask.astype(np.uint8))[:len(op.outputs)]

    def lower(self, op, kb, ins, outs):
        """Philox blocks of 4 elements (row-major), as :func:`dropout_uniform`: per row
        of the last dim, the words of the blocks covering it go to a scratch array
        (Philox is scalar work), then one loop over the row keeps or drops each
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


# ------------------------------------------------------------------------ markers
class End(OpSchema):
    """Marks a tensor as used (e.g. a graph output); no data semantics."""

    kind = "End"
    family = "misc"
    doc = "consumes one tensor, produces nothing"
    executable = False
    inputs = (In("src"),)
    outputs = ()
    dtypes = same_dtype("src", "f32,f16,bf16")

    def reference(self, op, src):
        return ()


class Wildcard(OpSchema):
    """Stands for any framework op graphc does not implement; it can be built
    and partitioned around, not run."""

    kind = "Wildcard"
    family = "misc"
    doc = "any compute, any number of inputs and outputs of any dtypes; not executable"
    executable = False
    inputs = (In("src", optional=True, variadic=True, min_count=0, max_count=ANY_COUNT),)
    outputs = (Out("dst", optional=True, variadic=True, min_count=0, max_count=ANY_COUNT),)

    def reference(self, op, *inputs):
        raise Unimplemented("Wildcard stands for unknown compute and cannot be run", op=op)
