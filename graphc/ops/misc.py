"""GenIndex, Dropout and the graph-building markers End and Wildcard
(docs: GenIndex.md, Dropout.md, End.md, Wildcard.md); the lowering of GenIndex
and Dropout is graphc/codegen/rules/misc.py."""
from __future__ import annotations

import numpy as np

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

    grad_outputs = ("dst",)
    grad_inputs = ("src",)

    def vjp(self, op, em):
        """The same op on diff_dst: the same seed and offset drop the same elements."""
        return em.op("Dropout", [em.grad(op.outputs[0])] + op.inputs[1:])[:1] + [None] * 3


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
