"""bf16 convolutions on graphc's bf16 tile (graphc.codegen.bf16_gemm: AMX's or AVX512-BF16's),
or on MKL's bf16 GEMM where it runs on AMX and graphc's tile is switched off:
when src and weights both hold bf16 values (bf16 tensors, or f32 ones rounded
to bf16 by fpmath_mode), the GEMM roads of graphc.codegen.conv keep their
operands as bf16 bits (copies of src as uint16, weights packed once per call
into the tile's panels) and multiply them in bf16 with f32 sums; dst rounds
once, on store.  Winograd stays an f32 road (its transforms of bf16 values
are not bf16 values)."""
from __future__ import annotations

from . import ir
from .blas_import import bf16_conv_gemm, bf16_tile_gemm
from .conv_views import Geometry, rounded
from .kernel import ArrayRef, worth_parallel
from .loops import unravel
from ..types import DataType


def _bf16_values(ref, rounding) -> bool:
    if rounding is not None:
        return getattr(rounding, "dtype", None) is DataType.bf16
    return getattr(ref, "dtype", None) is DataType.bf16


def bf16_operands(x, w, rounding) -> bool:
    """Do src ``x`` and weights ``w`` (views) both hold bf16 values, on a CPU whose
    bf16 GEMM multiplies them as they are (graphc's tile, or MKL's on AMX)?"""
    return bf16_conv_gemm() and _bf16_values(x.ref, rounding) and _bf16_values(w.ref, rounding)


def taps_in_tile(geo: Geometry) -> bool:
    """Do the bf16 shifted GEMMs sum all of a window's taps in AMX's tile
    registers (graphc.codegen.bf16_gemm.bf16_taps over virtual rows of one
    position each: conv_cols.VirtualLayout's ``every_tap``)?  On AMX's road,
    where each tap's A, Cg channels of a position, is whole steps of the tile
    read in place and one block of k (the rows bf16_gemm.row_stride apart)."""
    from .bf16_gemm import row_stride, taps_in_registers
    return bf16_tile_gemm() and taps_in_registers.py_func(geo.cg, row_stride(geo.cg))


def plain_bf16(ref) -> bool:
    """A bf16 kernel argument (its bits read in place)?"""
    return type(ref) is ArrayRef and ref.dtype is DataType.bf16


def bits(value):
    """A value known to be a bf16 number (loaded as f32) as its bf16 bits: a bf16
    load's own bits when it is one (a copy, not a conversion there and back; a
    signalling NaN stays signalling, which the tile's products make NaN all the
    same), else the value rounded (exact: it is a bf16 number)."""
    v = value
    while v.op == "cast" and v.args[0] == "f32":
        v = v.args[1]
    if v.op == "call" and v.args[0] == "bf16_to_f32":
        return v.args[1][0]
    return ir.call("f32_to_bf16", ir.f32(value))


#: input and output channels of a block of the weights' copy (bf16_weights)
WEIGHT_BLOCK = 16


class PackedWeights:
    """The weights as the B operands of bf16 GEMMs on graphc's tile: each (group,
    run of ``width`` rows) packed once into the tile's panels (``per`` elements
    each, ``npan`` panels wide) in ``buf``."""

    def __init__(self, buf, runs: int, per: int, npan: int):
        self.buf, self.runs, self.per, self.npan = buf, runs, per, npan

    def product(self, m, n, k, abuf, aoff, lda, g, run, beta, cbuf, coff, ldc) -> ir.Expr:
        """C[m, n] (+)= A[m, k] @ B of (group ``g``, run ``run``): the GEMM call."""
        return ir.call("gemm_bf16_packed", 0, m, n, k, abuf, aoff, lda, self.buf, (g * self.runs + run) * self.per,
                       self.npan, 0, beta, cbuf, coff, ldc)

    def taps(self, m, k, abuf, aoff, lda, aoffs, ap, g, jp, block) -> ir.Expr:
        """A tile of C (as :meth:`block`) = the sum over every run t (a tap) of
        A_t[m, k] @ B of (group ``g``, run t), A_t the rows of ``abuf`` from
        ``aoff + aoffs[t]``: the call (graphc.codegen.bf16_gemm.bf16_taps)."""
        return ir.call("bf16_taps", m, k, abuf, aoff, lda, aoffs, ap.buf, ap.at(0), self.buf, g * self.runs * self.per,
                       self.per, self.npan, jp, block.buf, block.at(0))

    def block(self, m, k, abuf, aoff, lda, ap, g, run, jp, acc: bool, block) -> ir.Expr:
        """A tile of C (``m`` <= MR rows x panel ``jp``'s 32 columns, float32, rows 32
        apart in the Scratch ``block``) (+)= A[m, k] @ B of (group ``g``, run
        ``run``), A packed into the Scratch ``ap`` where it must be: the call."""
        return ir.call("bf16_block", m, k, abuf, aoff, lda, ap.buf, ap.at(0), self.buf, (g * self.runs + run) * self.per,
                       self.npan, jp, int(acc), block.buf, block.at(0))


class MatrixWeights:
    """The weights as the B operands of MKL's bf16 GEMM (which packs B itself,
    on AMX): the bf16 matrix they are, ``buf`` with rows ``ld`` apart (``tb``:
    stored transposed), groups ``gs`` apart, runs of ``width`` rows."""

    def __init__(self, buf, ld: int, tb: int, gs: int, width: int):
        self.buf, self.ld, self.tb, self.gs, self.width = buf, ld, tb, gs, width

    def product(self, m, n, k, abuf, aoff, lda, g, run, beta, cbuf, coff, ldc) -> ir.Expr:
        """C[m, n] (+)= A[m, k] @ B of (group ``g``, run ``run``): the GEMM call."""
        first = run * (self.width * self.ld) if self.tb == 0 else run * self.width
        return ir.call("gemm_bf16", 0, self.tb, m, n, k, abuf, aoff, lda, self.buf, g * self.gs + first, self.ld,
                       beta, cbuf, coff, ldc)


def _matrix(kb, geo: Geometry, w, rounding, transposed: bool):
    """Each group's (T*Cg x OCg) weight matrix (rows: taps then input channels;
    ``transposed``: its (OCg x T*Cg) transpose) as bf16 bits: (buffer, ld, group
    stride, tb), element (r, c) of group g at ``g * gs + r * ld + c`` (``tb``:
    ``c * ld + r``).  The tensor itself where it is a plain bf16 one with a unit
    stride along one of the matrix's dims, else a copy into a workspace."""
    kd, cg, ocg, G = geo.kd, geo.cg, geo.ocg, geo.groups
    rows, cols = (ocg, kd) if transposed else (kd, ocg)      # of the matrix
    ms = w.matrix_strides(geo) if plain_bf16(w.ref) and rounding is None else None
    if ms is not None:
        rs, cs, gs = (ms[1], ms[0], ms[2]) if transposed else ms
    if ms is not None and cs == 1 and rs >= cols:
        return w.ref.buf, rs, gs, 0
    if ms is not None and rs == 1 and cs >= rows:
        return w.ref.buf, cs, gs, 1
    wbuf = kb.workspace(G * kd * ocg, "u16", prefix="wbits")
    # blocks of WEIGHT_BLOCK input x output channels of a tap, in parallel where large: a
    # block's lines read and written stay in L1 (OIX weights of 512 x 512 x 3 x 3 copied a
    # value at a time along ic, 9 apart in and 512 apart out: 16 ms of a 0.85 ms conv)
    T, nb, ob = geo.taps, -(-cg // WEIGHT_BLOCK), -(-ocg // WEIGHT_BLOCK)
    with kb.for_(G * T * nb, "wt", worth_parallel(G * kd * ocg)) as wt:
        g = kb.let(wt // (T * nb), "g")
        flat = kb.let((wt // nb) % T, "tf")
        taps = [v if v is not None else ir.const(0) for v in unravel(kb, flat, geo.kernel)]
        i0 = kb.let((wt % nb) * WEIGHT_BLOCK, "i0")
        with kb.for_(ob, "ob") as obk:
            o0 = kb.let(obk * WEIGHT_BLOCK, "o0")
            # (the inner loop along the copy's rows: ic for the transpose, oc else)
            spans = [(ir.call("min", WEIGHT_BLOCK, cg - i0), "i"), (ir.call("min", WEIGHT_BLOCK, ocg - o0), "o")]
            with kb.for_(*spans[1 if transposed else 0]) as a, kb.for_(*spans[0 if transposed else 1]) as b:
                i, o = (b, a) if transposed else (a, b)
                ic, oc = kb.let(i0 + i, "ic"), kb.let(o0 + o, "oc")
                r = kb.let(flat * cg + ic, "wr")
                at = g * (kd * ocg) + (oc * kd + r if transposed else r * ocg + oc)
                kb.store(wbuf, ir.u64(at), bits(rounded(w.load(g, oc, ic, taps), rounding)))
    return wbuf, cols, kd * ocg, 0


def bf16_weights(kb, geo: Geometry, w, rounding, width: int,
                 transposed: bool = False) -> PackedWeights | MatrixWeights:
    """The weights of each group and each run of ``width`` rows of its (T*Cg x OCg)
    matrix (rows: taps then input channels), as B matrices of bf16 GEMMs
    (:class:`PackedWeights` on graphc's tile, else :class:`MatrixWeights`); with ``transposed``, each group's whole (OCg x T*Cg)
    transpose (``width`` = OCg: the data gradient's dY @ W^T).  The matrix is
    read in place when it is a plain bf16 tensor with a unit stride along one
    of its dims, else first copied as bf16 bits (:func:`_matrix`); on graphc's
    tile it is then packed into the tile's panels."""
    kd, ocg, G = geo.kd, geo.ocg, geo.groups
    rows, cols = (ocg, kd) if transposed else (kd, ocg)      # of the matrix B
    wbuf, ld, gs, tb = _matrix(kb, geo, w, rounding, transposed)
    if not bf16_tile_gemm():
        return MatrixWeights(wbuf, ld, tb, gs, width)
    from .bf16_gemm import bf16_panels
    runs = rows // width
    per = bf16_panels(cols, width)
    npan = -(-cols // 32)
    bp = kb.workspace(G * runs * per, "u16", prefix="wpanels")
    with kb.for_(G * runs, "gr", G * runs > 1 and worth_parallel(G * kd * ocg)) as gr:
        g = kb.let(gr // runs, "g")
        r = kb.let(gr % runs, "r")
        first = r * (width * ld) if tb == 0 else r * width
        kb.let(ir.call("pack_b_bf16", tb, cols, width, wbuf, g * gs + first, ld, bp, gr * per, 0, npan), "st")
    return PackedWeights(bp, runs, per, npan)


class RowWeights:
    """The weights as the A operands of bf16 GEMMs on graphc's tile, each group's
    (m x k) matrix packed once per call as pack_a_bf16 packs an A, ``per``
    elements a group in ``buf``: W (OCg x T*Cg: the channels-first road's
    Y = W @ Cols) or its transpose (T*Cg x OCg: the data gradient's
    Cols = W^T @ dY); T*Cg runs channel after channel (each channel's taps)
    when ``channel_major``, else taps first."""

    def __init__(self, buf, per: int, m: int, k: int, channel_major: bool):
        self.buf, self.per, self.m, self.k, self.channel_major = buf, per, m, k, channel_major

    def product(self, g, n, bp, bp_off, npan, cbuf, coff, ldc, rows=None) -> ir.Expr:
        """C[m, n] = the matrix of group ``g`` @ B (n columns packed by pack_b_bf16,
        ``npan`` panels from ``bp_off``): the GEMM call; ``rows``: (count, first)
        of the matrix's rows only, the first a multiple of bf16_gemm.MR."""
        m, r0 = rows if rows is not None else (self.m, 0)
        return ir.call("gemm_bf16_prepacked", m, n, self.k, self.buf, g * self.per, self.m, r0, bp, bp_off,
                       npan, 0, 0.0, cbuf, coff, ldc)


def bf16_weight_rows(kb, geo: Geometry, w, rounding, transposed: bool = False) -> RowWeights:
    """The weights (bf16 values) as :class:`RowWeights` on graphc's tile: each
    group's (OCg x T*Cg) matrix (``transposed``: its transpose) packed, a
    block of MR rows per thread where large.  T*Cg runs channel after channel
    where the weights lie so (OIX: read in place), else taps first
    (:func:`_matrix`)."""
    kd, ocg, G = geo.kd, geo.ocg, geo.groups
    m, k = (kd, ocg) if transposed else (ocg, kd)
    ms = w.matrix_strides(geo, True) if plain_bf16(w.ref) and rounding is None else None
    # (channel-major, in place: element (oc, kk) of W at oc * ms[1] + kk, so W is an A in its
    # rows and W^T an A stored transposed)
    cm = ms is not None and ms[0] == 1 and ms[1] >= kd
    if cm:
        wbuf, ld, gs, ta = w.ref.buf, ms[1], ms[2], 1 if transposed else 0
    else:
        wbuf, ld, gs, ta = _matrix(kb, geo, w, rounding, transposed=not transposed)
    ap, per = packed_rows(kb, G, m, k, (ta, wbuf, gs, ld), worth_parallel(G * kd * ocg), "wrows")
    return RowWeights(ap, per, m, k, cm)


def packed_rows(kb, groups: int, m: int, k: int, a, parallel: bool, prefix: str):
    """Each of ``groups`` (m x k) matrices packed once as the tile's A
    (pack_a_bf16's layout) into a workspace, a block of MR rows per work item
    (in parallel when ``parallel``); ``a``: (ta, buffer, group stride, lda) of
    the bf16 bits.  Returns (the workspace, its elements a group)."""
    from .bf16_gemm import MR, bf16_a_panels
    ta, buf, gs, lda = a
    per = bf16_a_panels(m, k)
    ap = kb.workspace(groups * per, "u16", prefix=prefix)
    blocks = -(-m // MR)
    with kb.for_(groups * blocks, "ab", parallel and groups * blocks > 1) as ab:
        g = kb.let(ab // blocks, "g")
        r0 = kb.let((ab % blocks) * MR, "r0")
        kb.let(ir.call("pack_a_rows_bf16", ta, m, k, buf, g * gs, lda, r0, ir.call("min", MR, m - r0), ap,
                       g * per), "st")
    return ap, per


__all__ = ["MatrixWeights", "PackedWeights", "RowWeights", "bf16_weight_rows", "packed_rows", "bf16_operands", "bf16_weights", "bits", "plain_bf16", "taps_in_tile"]
