"""How the attention kernels (graphc/codegen/attention.py, the forward, and
graphc/codegen/attention_backward.py, the training backward) read their
operands and store their results.

* The reorders of the kernel's inputs (Q, K, V, mask, scale; gqa.md's 4-D GQA
  reshaped to 5-D) are views: the same buffer read with other strides
  (:func:`prologue_views`); of a computed (dequantized) K/V, a
  :class:`Reindexed` read of it.
* A GEMM operand is a :class:`~graphc.codegen.gemm.Matrix` (:func:`as_matrix`),
  a block of it read in place by BLAS or packed into an f32 panel
  (:func:`gemm_block`), multiplied by :func:`gemm`.
* A Dropout's keep mask over a row of a tile comes from the Philox words of
  its elements (:func:`dropout_kept`).
* A result is stored through the reorders and pointwise ops after it into the
  partition's output (:func:`output_store`).
"""
from __future__ import annotations

from dataclasses import replace

from . import ir, rules
from .fused_values import PrologueRef
from .blas_import import bf16_gemm
from .gemm import Matrix, bf16_valued, direct, fpmath_rounding, pack
from .kernel import ArrayRef, as_stored, is_narrow_float
from .loops import aligned, linear
from .rules.misc import dropout_keep, philox_words
from ..types import DataType, LogicalTensor, dense_strides
from ..views import view_strides

REORDERS = ("StaticReshape", "StaticTranspose")
#: an f32 zero (tiles, accumulators, dropped probabilities)
ZERO = ir.const(0.0, "f32")


# -- views of the inputs -------------------------------------------------------------------
def buffer_view(ref, lt, strides) -> ArrayRef:
    """``ref``'s buffer seen as tensor ``lt`` (its shape) with ``strides``."""
    return ArrayRef(ref.name, LogicalTensor(lt.id, ref.dtype, tuple(lt.shape), tuple(strides)))


class Reindexed:
    """A reorder's dst whose src is computed (a dequantized K/V: a PrologueRef of
    dense strides), read at a multi-index: ``strides`` (the view's, over the
    src's dense layout) map it to the src's multi-index, each src dim taken
    from the dst dim that walks it alone, else from the offset the dst dims
    make (a merged or split dim: a division and a remainder, each only where
    needed)."""

    def __init__(self, src, lt, strides):
        self.src, self.lt, self.strides = src, lt, tuple(strides)

    dtype = property(lambda self: self.lt.dtype)
    shape = property(lambda self: self.lt.shape)

    def load_nd(self, ivars):
        shape, dense = tuple(self.src.shape), dense_strides(tuple(self.src.shape))
        dims = [(v, n, s) for v, n, s in zip(ivars, self.shape, self.strides) if v is not None and n != 1 and s]
        out = []
        for n, st in zip(shape, dense):
            if n == 1:
                out.append(None)
                continue
            alone = [v for v, m, s in dims if m == n and s == st]
            if alone:
                out.append(alone[0])
                continue
            span = st * n   # dst dims stepping by multiples of it do not move this dim
            part = [(v, m, s) for v, m, s in dims if s % span]
            off = linear([v for v, _, _ in part], [s for _, _, s in part])
            top = sum((m - 1) * s for _, m, s in part)
            if any(s % st for _, _, s in part):
                off = off // st
                top //= st
            out.append(off % n if top >= n else off)
        return self.src.load_nd(out)


class IndexRef:
    """GenIndex's dst, read at a multi-index: the index along its axis."""

    def __init__(self, lt, axis):
        self.lt, self.axis = lt, axis

    dtype = property(lambda self: self.lt.dtype)
    shape = property(lambda self: self.lt.shape)

    def load_nd(self, ivars):
        v = ivars[self.axis]
        return v if v is not None else ir.const(0)


def prologue_views(ops, local, values, prologue) -> None:
    """The reorders ``prologue`` of the kernel's inputs as views of their buffers in
    ``local`` (of a computed K/V: a Reindexed read of it)."""
    for o in ops:   # ops are in topological order
        if o.id in prologue:
            src = local.get(o.inputs[0].id) or PrologueRef(o.inputs[0], values)
            if isinstance(src, ArrayRef):
                local[o.outputs[0].id] = buffer_view(src, o.outputs[0], view_strides(o, src.shape, src.strides))
            else:   # a reorder of a computed K/V (or of such a reorder)
                base = src.src if isinstance(src, Reindexed) else src
                st = src.strides if isinstance(src, Reindexed) else dense_strides(tuple(src.shape))
                local[o.outputs[0].id] = Reindexed(base, o.outputs[0], view_strides(o, tuple(src.shape), st))


# -- GEMM operands -------------------------------------------------------------------------
def mm_rounding(mm, port):
    """How the MatMul's fpmath_mode rounds its input ``port`` (an f32 one), or None."""
    return fpmath_rounding(mm) if mm.inputs[port].dtype is DataType.f32 else None


def as_matrix(ref, transpose, batch, rounding=None) -> Matrix:
    """The matrix (rows x cols of the MatMul's view) of a >= 2-D operand, its batch
    dims broadcast into ``batch``; ``rounding``: fpmath_mode's, applied as it is packed."""
    shape, strides = ref.shape, ref.strides
    lead = tuple(shape[:-2])
    rows, cols = (shape[-1], shape[-2]) if transpose else (shape[-2], shape[-1])
    st = (strides[-1], strides[-2]) if transpose else (strides[-2], strides[-1])

    def index(bv, r, c):
        return aligned(bv, batch, lead) + ([c, r] if transpose else [r, c])

    def base(bv):
        return linear(aligned(bv, batch, lead), strides[:-2])
    return Matrix(ref, rows, cols, index, any(d != 1 for d in lead), st, base, rounding)


def gemm_block(kb, mat, bivars, r0, nr, c0, nc, size, parallel, bf16=False):
    """(buffer, offset, leading dim, transposed) of rows r0.. x cols c0.. of ``mat``:
    in place when BLAS can read it, else packed into an f32 panel (``bf16``: a
    panel of bf16 bits, for gemm_bf16; row-major, or column-major when the
    matrix's rows are its contiguous dim)."""
    d = direct(mat, DataType.bf16 if bf16 else DataType.f32)
    if d is not None:
        ta, ld = d
        rs, cs = mat.strides
        return mat.ref.buf, linear([r0, c0], [rs, cs], mat.base(bivars)), ld, ta
    rs, cs = mat.strides if mat.strides is not None else (1, 1)
    if abs(rs) < abs(cs):
        # the rows run along memory (K read as K^T, a dequantized one): packed by
        # columns, so that the loads (and the dequantization) go along memory
        swapped = replace(mat, rows=mat.cols, cols=mat.rows, index=lambda bv, r, c: mat.index(bv, c, r),
                          strides=(cs, rs))
        panel = pack(kb, swapped, bivars, c0, nc, r0, nr, size, parallel, bf16=bf16)
        return panel.buf, panel.at(0), nr, 1
    panel = pack(kb, mat, bivars, r0, nr, c0, nc, size, parallel, bf16=bf16)
    return panel.buf, panel.at(0), nc, 0


def pack_block(kb, mat, bivars, r0, nr, c0, nc, size, parallel, pan, at) -> None:
    """Rows r0.. x cols c0.. of ``mat`` (nr x nc, read as :func:`gemm_block` reads
    bf16 operands) packed as the B of a product on graphc's bf16 tile into its
    panels (graphc.codegen.bf16_gemm), in the scratch ``pan`` from element ``at``."""
    buf, off, ld, tr = gemm_block(kb, mat, bivars, r0, nr, c0, nc, size, parallel, True)
    kb.let(ir.call("pack_panels_bf16", tr, nc, nr, buf, off, ld, pan.buf, pan.at(at)), "st")


def tile_operand(tile, ld, transposed=0) -> tuple:
    """A scratch tile of leading dim ``ld`` as a GEMM operand (as :func:`gemm_block`'s)."""
    return tile.buf, tile.at(0), ld, transposed


def gemm(kb, a, b, m, n, k, beta, c, ldc, bf16=False, c0=0) -> None:
    """C (the scratch ``c`` from element ``c0``, leading dim ``ldc``) = A B + beta C of m x k operand
    ``a`` and k x n operand ``b``, each (buffer, offset, leading dim, transposed):
    f32 operands (``gemm_f32``), or with ``bf16`` bf16 bits (``gemm_bf16``: the
    products summed in f32)."""
    abuf, aoff, lda, ta = a
    bbuf, boff, ldb, tb = b
    kb.let(ir.call("gemm_bf16" if bf16 else "gemm_f32", ta, tb, m, n, k, abuf, aoff, lda, bbuf, boff, ldb, beta,
                   c.buf, c.at(c0), ldc), "st")


def bf16_pair(*mats) -> bool:
    """Whether a GEMM of these operands multiplies in bf16 (gemm_bf16): every
    operand's values are bf16 numbers (bf16 tensors, or f32 ones fpmath_mode
    rounds to bf16), so its f32 products are those of the f32 GEMM, and the
    library multiplies bf16 (graphc.codegen.blas_import.bf16_gemm)."""
    return bf16_gemm() and all(bf16_valued(m) for m in mats)


# -- dropout and results -------------------------------------------------------------------
def dropout_kept(kb, words, dparams, e0, n_):
    """keep(jj): whether a Dropout of params ``dparams`` keeps element e0 + jj of its
    src (row-major), for jj < n_: the Philox words of those elements go to the
    scratch ``words`` first (the Dropout op's own scheme, graphc/ops/misc.py)."""
    e0 = kb.let(e0, "e0")
    first = kb.let(e0 // 4, "fb")
    philox_words(kb, words.store, first, (e0 + n_ + 3) // 4 - first, dparams[2], dparams[3])
    skip = kb.let(e0 - first * 4, "sk")
    return lambda jj: dropout_keep(words[skip + jj], dparams[0])


def output_store(ops, local, epilogue, t):
    """store(ivars, value) of tensor ``t`` at its index, through the reorders and
    pointwise ops (TypeCasts, a Quantize) of ``epilogue`` after it into the
    partition's output."""
    chain = []
    while True:
        nxt = next((o for o in ops if o.id in epilogue and o.inputs[0].id == t.id), None)
        if nxt is None:
            break
        chain.append(nxt)
        t = nxt.outputs[0]
    first = chain[0].inputs[0] if chain else t
    final = t
    ref = local[final.id]
    shape, strides = tuple(final.shape), tuple(ref.strides)
    for o in reversed(chain):
        if o.kind in REORDERS:
            strides = view_strides(o, shape, strides, forward=False)
            shape = tuple(o.inputs[0].shape)
    out = buffer_view(ref, first, strides)
    pointwise = [o for o in chain if o.kind not in REORDERS]

    def store(ivars, value):
        if is_narrow_float(first.dtype):
            value = as_stored(value, first.dtype)
        for o in pointwise:   # TypeCasts, a Quantize: each value as its tensor holds it
            value = rules.source(o, value)
            if is_narrow_float(o.outputs[0].dtype):
                value = as_stored(value, o.outputs[0].dtype)
        return out.store_nd(ivars, value)
    return store


def inverse_sum(s, inf_as_zero):
    """1 / a row's sum of exps (SoftMax's ``inf_as_zero`` mode: 0 for a row all -inf, whose sum is 0)."""
    return ir.select(s.eq(0.0), ir.const(0.0, "f32"), 1.0 / s) if inf_as_zero else 1.0 / s


def stored(value, dtype):
    """``value`` as a tensor of ``dtype`` holds it (rounded when bf16/f16/f8)."""
    return as_stored(value, dtype) if is_narrow_float(dtype) else value


__all__ = ["REORDERS", "ZERO", "buffer_view", "Reindexed", "IndexRef", "prologue_views", "mm_rounding", "as_matrix",
           "gemm_block", "pack_block", "tile_operand", "gemm", "bf16_pair", "dropout_kept", "output_store", "inverse_sum",
           "stored"]
