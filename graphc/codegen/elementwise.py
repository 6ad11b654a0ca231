"""The loop nest shared by every elementwise kernel (and fused eltwise chains).

Outputs share one shape; inputs broadcast to it (numpy rules).  Loops run in
the first output's memory order (so NXC tensors stream like dense ones), and
dims that are contiguous in every array are merged, so dense tensors run as one
flat loop.
"""
from __future__ import annotations

from . import ir
from .kernel import ArrayRef, KernelBuilder, worth_parallel
from .loops import linear, unravel


def aligned_strides(ref: ArrayRef, shape) -> list[int]:
    """ref's strides right-aligned to ``shape``, 0 where ref broadcasts."""
    lead = len(shape) - len(ref.shape)
    out = [0] * lead
    for d_out, d, s in zip(shape[lead:], ref.shape, ref.strides):
        out.append(0 if (d == 1 and d_out != 1) else (0 if d == 1 else s))
    return out


def collapse(shape, strides_list):
    """Merge adjacent dims that are contiguous in every array; drop size-1 dims."""
    dims = []
    sl = [[] for _ in strides_list]
    for k, d in enumerate(shape):
        if d == 1:
            continue
        if dims and all(st[-1] == s[k] * d for s, st in zip(strides_list, sl)):
            # the previous dim steps exactly over this one in every array: merge
            dims[-1] *= d
            for s, st in zip(strides_list, sl):
                st[-1] = s[k]
            continue
        dims.append(d)
        for s, st in zip(strides_list, sl):
            st.append(s[k])
    return dims, sl


#: the side of the square tiles a transposing loop walks (32 x 32 f32: 4 KB a tensor)
TILE = 32
#: an inner-loop stride (elements) from which each step lands on another cache line
FAR = 16


def tile_dim(dims, in_strides):
    """The dim to walk in tiles with the innermost one, when an input reads the
    innermost dim far apart (a transpose) and another dim nearly contiguously;
    else None.  (Walking rows then would touch one cache line per element; a
    tile reuses each line for the next TILE elements.)"""
    if len(dims) < 2 or dims[-1] < TILE:
        return None
    for s in in_strides:
        if abs(s[-1]) >= FAR:
            near = [d for d in range(len(dims) - 1) if s[d] and abs(s[d]) < FAR and dims[d] >= TILE // 4]
            if near:
                return min(near, key=lambda d: abs(s[d]))
    return None


def _tiled(kb, dims, strides, k, par, body) -> None:
    """Loops over TILE x TILE tiles of dims ``k`` and the innermost (threads take
    tiles), the other dims outside."""
    others = [d for d in range(len(dims) - 1) if d != k]
    na, nb = -(-dims[k] // TILE), -(-dims[-1] // TILE)
    n = na * nb
    for d in others:
        n *= dims[d]
    with kb.for_(n, "tile", par) as t:
        idx = unravel(kb, t, [dims[d] for d in others] + [na, nb])
        a0 = kb.let((idx[-2] if idx[-2] is not None else 0) * TILE, "ta")
        b0 = kb.let((idx[-1] if idx[-1] is not None else 0) * TILE, "tb")
        with kb.for_(ir.call("min", a0 + TILE, dims[k]), "ia", start=a0) as a:
            with kb.for_(ir.call("min", b0 + TILE, dims[-1]), "ib", start=b0) as b:
                ivars = [None] * len(dims)
                for d, v in zip(others, idx):
                    ivars[d] = v
                ivars[k], ivars[-1] = a, b
                body([linear(ivars, s) for s in strides])


def _frame(outs, ins):
    """(dims, strides per array): the outputs' shape in the first output's memory
    order (largest stride outermost, stable for ties), contiguous dims merged."""
    shape = outs[0].shape
    all_strides = [aligned_strides(a, shape) for a in list(outs) + list(ins)]
    order = sorted(range(len(shape)), key=lambda k: -all_strides[0][k] if shape[k] > 1 else 0)
    return collapse([shape[k] for k in order], [[s[k] for k in order] for s in all_strides])


def transposes(outs, ins) -> bool:
    """Whether the elementwise loop over these arrays walks tiles (an input read
    across its layout: see :func:`tile_dim`)."""
    dims, strides = _frame(outs, ins)
    return tile_dim(dims, strides[len(outs):]) is not None


def emit_elementwise(kb: KernelBuilder, outs: list[ArrayRef], ins: list[ArrayRef], compute) -> None:
    """Emit a loop over the outputs' shape; ``compute(kb, values)`` returns one
    expression per output from the loaded input values (bound to names)."""
    arrs = list(outs) + list(ins)
    dims, strides = _frame(outs, ins)
    total = 1
    for d in dims:
        total *= d
    if total == 0:
        return
    if not dims:
        dims, strides = [1], [[0] for _ in arrs]
    par = worth_parallel(total)
    inner = dims[-1]
    outer = dims[:-1]
    rows = 1
    for d in outer:
        rows *= d

    def body(offsets):
        vals = [kb.let(a.load(off), "x") for a, off in zip(ins, offsets[len(outs):])]
        exprs = compute(kb, vals)
        for o, off, e in zip(outs, offsets, exprs):
            kb.emit(o.store(off, e))

    if not outer:
        with kb.for_(inner, "i", par) as i:
            body([linear([i], s) for s in strides])
        return
    k = tile_dim(dims, strides[len(outs):])
    if k is not None:
        _tiled(kb, dims, strides, k, par, body)
        return
    with kb.for_(rows, "r", par and rows > 1) as r:
        idx = unravel(kb, r, outer)
        bases = [kb.let(linear(idx, s[:-1]), "b") for s in strides]
        with kb.for_(inner, "j", par and rows == 1) as j:
            body([linear([j], s[-1:], b) for b, s in zip(bases, strides)])
